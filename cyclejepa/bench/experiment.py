"""Wall time of every stage of a whole experiment (``benchmarks/experiment_time.py`` runs it).

`cyclejepa.bench.commands.time_experiment` runs an experiment config end to end on a
synthetic corpus in the PTB-XL layout (the stand-in for PTB-XL's 21,799 records) and times each
stage with a `StageClock`: writing the corpus (not part of the experiment: PTB-XL is on disk),
prepare, pre-training of every arm × seed, evaluation of the grid, and the report. The stage
times go to ``stages.json`` and ``stages.md`` in ``--out``, rewritten after every stage, so an
interrupted run leaves what it measured::

    python benchmarks/experiment_time.py --config examples/winder_ptbxl.yaml --unseal \\
        --records 21799 --out runs/experiment_time
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cyclejepa.bench.report import markdown_rows
from cyclejepa.jsonio import write_json

PTBXL_RECORDS = 21_799
EXPERIMENT_STAGES = ("prepare", "pre-train", "evaluate", "report")
"""The stages of `cyclejepa run`; their sum is the experiment's wall time."""


def stand_in_overrides(root: Path, records: int) -> list[str]:
    """The ``--set`` overrides that point a config at the stand-in corpus of ``records`` records
    at ``root`` (seed 0; `write_stand_in_corpus` writes it)."""
    return [f"data.root={root}", "data.dataset=synthetic", f"data.options={{records: {records}, seed: 0}}"]


def write_stand_in_corpus(root: Path, records: int, seed: int, workers: int) -> None:
    """The synthetic PTB-XL corpus of ``records`` records at ``root``, unless one is there."""
    from cyclejepa.data.synthetic import write_synthetic_corpus
    from cyclejepa.data.synthetic.dataset import DATABASE_CSV

    if not (root / DATABASE_CSV).exists():
        write_synthetic_corpus(root, records, seed=seed, workers=workers, progress=False)


class StageClock:
    """Times named stages into ``result["stages"]`` (seconds) and ``result["experiment_s"]`` (the
    sum over `EXPERIMENT_STAGES`), rewriting ``out/stages.json`` and ``out/stages.md`` after each."""

    def __init__(self, out: Path, log: Callable[[str], None], result: dict[str, Any]):
        self.out, self.log, self.result = Path(out), log, result

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self.log(f"[experiment] {name} ...")
        began = time.perf_counter()
        yield
        stages = self.result["stages"]
        stages[name] = time.perf_counter() - began
        self.result["experiment_s"] = sum(stages.get(s, 0.0) for s in EXPERIMENT_STAGES)
        self.log(f"[experiment] {name}: {stages[name]:.1f} s")
        self.write()

    def write(self) -> None:
        """``stages.json`` (the result) and ``stages.md`` (its table) in ``out``."""
        result = self.result
        write_json(self.out / "stages.json", result)
        total = result.get("experiment_s", 0.0)
        rows = [[name, f"{seconds:.1f}"] for name, seconds in result["stages"].items()]
        rows.append(["**experiment (prepare → report)**", f"**{total:.1f}** ({total / 60:.1f} min)"])
        (self.out / "stages.md").write_text(
            f"Experiment `{result['config']}` on {result['records']:,} synthetic records, runs "
            f"{', '.join(result['runs'])}, {result['steps']:,} steps each, runs.at_once = {result['at_once']}.\n\n"
            + "\n".join(markdown_rows(["stage", "wall time (s)"], rows, align="ll"))
            + "\n"
        )
