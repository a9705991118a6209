"""Checksums of the evaluation's results, so that none goes into a report changed.

Every JSON result of the evaluation and the report's ``report.json`` carry

    checksum = sha256( json.dumps(value without "checksum", sort_keys=True, separators=(",", ":")) ),

over the value as it reads back from the file; `cyclejepa.evaluation.results.read_result` refuses
a file whose checksum does not hold (`ResultAltered`). A checkpoint's result also carries
``model_sha256`` (`model_digest`) and ``scores_sha256``, the sha256 of its ``.npz`` arrays.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from cyclejepa.jsonio import json_sha256

__all__ = [
    "CHECKSUM",
    "SCORES_DIGEST",
    "ResultAltered",
    "content_checksum",
    "model_digest",
    "state_digest",
    "read_scores",
    "with_checksum",
]

CHECKSUM = "checksum"
SCORES_DIGEST = "scores_sha256"


class ResultAltered(ValueError):
    """A result file whose content, or whose checkpoint, no longer matches its checksum."""


def content_checksum(value: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of ``value`` without its ``checksum`` key."""
    rest = {key: item for key, item in value.items() if key != CHECKSUM}
    return json_sha256(rest, compact=True, default=_plain)


def with_checksum(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` as it will read back from JSON, with its ``checksum`` added (`content_checksum`)."""
    plain = json.loads(json.dumps(value, default=_plain))
    return {**plain, CHECKSUM: content_checksum(plain)}


def read_scores(path: str | Path, result: dict[str, Any]) -> dict[str, Any]:
    """The arrays of ``path``; `ResultAltered` unless its sha256 is ``result``'s ``scores_sha256``."""
    import numpy as np

    from cyclejepa.data.datasets import sha256_file

    expected = result.get(SCORES_DIGEST)
    if expected is None or sha256_file(Path(path)) != expected:
        why = "its result records no digest of it" if expected is None else "its bytes do not match the digest its result records"
        raise ResultAltered(f"{path} cannot be trusted: {why} (re-run `cyclejepa evaluate CONFIG` to recompute it)")
    with np.load(path) as arrays:
        return dict(arrays)


def model_digest(checkpoint: str | Path) -> str:
    """`state_digest` of a checkpoint's ``model`` state."""
    from cyclejepa.training.checkpoint import load_checkpoint

    return state_digest(load_checkpoint(checkpoint)["model"])


def state_digest(state) -> str:
    """sha256 of a model state over each tensor, in name order, as its name, dtype, shape and bytes."""
    import torch

    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _plain(value: Any) -> Any:
    """numpy arrays and scalars as lists and numbers, anything else (a path) as text."""
    return value.tolist() if hasattr(value, "tolist") else str(value)
