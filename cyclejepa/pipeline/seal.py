"""The sealed test fold (`FoldProtocol.sealed`; PTB-XL: fold 10): the gate every stage passes
before it reads the folds it uses (`use_folds`). A sealed fold is refused unless
``evaluation.unseal`` is set; each unsealed use is audited in ``unseal_audit.jsonl`` and every use
recorded in ``folds_used.jsonl``, from which the report states what each stage used.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from cyclejepa import registry
from cyclejepa.config import ExperimentConfig
from cyclejepa.pipeline.identity import config_hash
from cyclejepa.version import __version__

FOLD_KEYS = ("data.train_folds", "data.eval_folds")
AUDIT_FILE = "unseal_audit.jsonl"
FOLDS_FILE = "folds_used.jsonl"


class SealedFoldError(PermissionError):
    """A stage would read the sealed test fold without an explicit, audited unseal."""


def folds_of(cfg: ExperimentConfig, key: str) -> list[int]:
    """The folds at ``key`` (one of `FOLD_KEYS`)."""
    if key not in FOLD_KEYS:
        raise ValueError(f"unknown fold key {key!r}; one of {', '.join(FOLD_KEYS)}")
    return list(getattr(cfg.data, key.removeprefix("data.")))


def sealed_folds(cfg: ExperimentConfig) -> list[int]:
    """The folds the configured dataset seals."""
    return sorted(registry.DATASETS.get(cfg.data.dataset).folds.sealed)


def require_unsealed(cfg: ExperimentConfig) -> None:
    """`refuse_sealed` of every fold key, before any work."""
    for key in FOLD_KEYS:
        refuse_sealed(cfg, "this experiment", key)


def refuse_sealed(cfg: ExperimentConfig, stage: str, key: str) -> list[int]:
    """The folds at ``key``; `SealedFoldError` naming ``stage`` when they hold a sealed fold
    without unseal (recording nothing)."""
    folds = folds_of(cfg, key)
    sealed = sorted(set(folds) & set(sealed_folds(cfg)))
    if sealed and not cfg.evaluation.unseal:
        raise SealedFoldError(
            f"{stage}: {key} {folds} includes the sealed fold {', '.join(map(str, sealed))} of dataset "
            f"{cfg.data.dataset!r}; "
            "pass --unseal (or set evaluation.unseal: true) to use it — it is audited"
        )
    return folds


def use_folds(cfg: ExperimentConfig, stage: str, key: str) -> list[int]:
    """`refuse_sealed`, then the use audited (if unsealed) and recorded."""
    folds = refuse_sealed(cfg, stage, key)
    sealed = sealed_folds(cfg)
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "stage": stage, "key": key, "folds": folds, "sealed": sealed}
    out = Path(cfg.output_dir)
    if set(folds) & set(sealed):
        audit = {**entry, "config_hash": config_hash(cfg), "git_revision": _git_revision(), "cyclejepa": __version__}
        _append(out / AUDIT_FILE, audit)
    _append(out / FOLDS_FILE, entry)
    return folds


def use_folds_in_turn(cfg: ExperimentConfig, uses: list[tuple[str, str]]) -> list[list[int]]:
    """`use_folds` of every (stage, key) of ``uses``, in order."""
    return [use_folds(cfg, stage, key) for stage, key in uses]


def _append(path: Path, entry: dict[str, Any]) -> None:
    """One JSON line, appended in one write (concurrent writers add whole lines)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as stream:
        stream.write(json.dumps(entry) + "\n")


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The entries of a JSON-lines log (none when it does not exist)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _git_revision() -> str:
    try:
        found = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=Path(__file__).parent
        )
        return found.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
