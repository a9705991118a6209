"""Checksums of the evaluation's results, so that none goes into a report changed.

Every JSON file the evaluation stage writes (``evaluation/<run>-stepNNNNNN.json``,
``protocol.json``, ``hr-strata-stepNNNNNN.json``) and the report's ``report.json`` carry
``checksum``: the sha256 of their own content, taken over the canonical JSON of every other key,

    checksum = sha256( json.dumps(value without "checksum", sort_keys=True, separators=(",", ":")) ),

with the value as it reads back from the file (numpy values as plain numbers, keys as strings).
A checkpoint's result also carries ``checkpoint``: the checkpoint file it was computed from and
``model_sha256``, the digest of the model weights in it (`model_digest`: every tensor, by name,
so an exact resume that writes the same weights into a new file keeps it).
`cyclejepa.evaluation.results.read_result` refuses a file whose content checksum does not hold
(`ResultAltered`). A result's arrays
(``<run>-stepNNNNNN.npz``: per-record scores and heart rates) are covered by its ``scores_sha256``,
the sha256 of the file's bytes, which `read_scores` checks before using them.
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
"""The key holding a result's content checksum."""
SCORES_DIGEST = "scores_sha256"
"""The key of a checkpoint's result holding the sha256 of its ``.npz`` arrays."""


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
    """The arrays of the ``.npz`` file ``path`` of a checkpoint's ``result``, refused
    (`ResultAltered`, naming the file) unless its sha256 is the result's ``scores_sha256``."""
    import numpy as np

    from cyclejepa.data.datasets import sha256_file

    expected = result.get(SCORES_DIGEST)
    if expected is None or sha256_file(Path(path)) != expected:
        why = "its result records no digest of it" if expected is None else "its bytes do not match the digest its result records"
        raise ResultAltered(f"{path} cannot be trusted: {why} (re-run `cyclejepa evaluate CONFIG` to recompute it)")
    with np.load(path) as arrays:
        return dict(arrays)


def model_digest(checkpoint: str | Path) -> str:
    """sha256 of the model weights of a checkpoint: over the tensors of its ``model`` state in
    name order, each as its name, dtype, shape and raw bytes (`state_digest`)."""
    from cyclejepa.training.checkpoint import load_checkpoint

    return state_digest(load_checkpoint(checkpoint)["model"])


def state_digest(state) -> str:
    """sha256 of a model state (name → tensor): each tensor in name order as its name, dtype,
    shape and raw bytes (`model_digest` of a checkpoint's ``model`` state)."""
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
