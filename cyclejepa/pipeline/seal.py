"""The sealed test fold: the one gate every stage passes before it reads the folds it uses.

The sealed folds are the dataset's (`FoldProtocol.sealed`; PTB-XL: fold 10, the paper's sealed
test fold). `use_folds` is asked by every stage that reads records of configured folds
(normalisation statistics, pre-training, probe fitting, evaluation, figures, benchmarks; grids
through their cells). It refuses a sealed fold unless
``evaluation.unseal`` is set (``--unseal``), appends one line per unsealed use to
``<output_dir>/unseal_audit.jsonl``, and records every use (stage, key, folds) in
``<output_dir>/folds_used.jsonl``, from which the report states what each stage used.
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
    """The folds at ``key`` (``data.train_folds`` or ``data.eval_folds``)."""
    if key not in FOLD_KEYS:
        raise ValueError(f"unknown fold key {key!r}; one of {', '.join(FOLD_KEYS)}")
    return list(getattr(cfg.data, key.removeprefix("data.")))


def sealed_folds(cfg: ExperimentConfig) -> list[int]:
    """The folds the configured dataset seals (`FoldProtocol.sealed`)."""
    return sorted(registry.DATASETS.get(cfg.data.dataset).folds.sealed)


def require_unsealed(cfg: ExperimentConfig) -> None:
    """Before any work: raise `SealedFoldError` when a fold key holds the sealed fold without unseal."""
    for key in FOLD_KEYS:
        refuse_sealed(cfg, "this experiment", key)


def refuse_sealed(cfg: ExperimentConfig, stage: str, key: str) -> list[int]:
    """The folds at ``key``; raises `SealedFoldError` naming ``stage`` when they hold a sealed
    fold without unseal. Records nothing (`use_folds` does, when the stage reads them)."""
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
    """The folds at ``key`` that ``stage`` may read: refuses the sealed fold unless unsealed,
    audits an unsealed use, and records the use in ``folds_used.jsonl``."""
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
    """`use_folds` of every (stage, key) of ``uses``, in that order: a stage's uses gathered
    where it starts reading folds."""
    return [use_folds(cfg, stage, key) for stage, key in uses]


def _append(path: Path, entry: dict[str, Any]) -> None:
    """One JSON line, appended in one write (concurrent stages each add whole lines)."""
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
