"""Wall time of every stage of a whole experiment (``benchmarks/experiment_time.py``).

Runs an experiment config end to end on a synthetic corpus in the PTB-XL layout (the stand-in
for PTB-XL's 21,799 records) and times each stage: writing the corpus (not part of the
experiment: PTB-XL is on disk), prepare, pre-training of every arm × seed, evaluation of the
grid, and the report. The stage times go to ``stages.json`` and ``stages.md`` in ``--out``,
rewritten after every stage, so an interrupted run leaves what it measured::

    python benchmarks/experiment_time.py --config examples/winder_ptbxl.yaml --unseal \\
        --records 21799 --out runs/experiment_time
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cyclejepa.bench.timing import machine_info, versions
from cyclejepa.config import load_config
from cyclejepa.devices import resolve_device
from cyclejepa.jsonio import write_json

PTBXL_RECORDS = 21_799
EXPERIMENT_STAGES = ("prepare", "pre-train", "evaluate", "report")
"""The stages of `cyclejepa run`; their sum is the experiment's wall time."""


def time_experiment(
    config: str | Path,
    out: str | Path,
    *,
    records: int = PTBXL_RECORDS,
    overrides: list[str] = (),
    unseal: bool = False,
    workers: int = 8,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run ``config`` on a synthetic corpus of ``records`` records under ``out``, stage by stage.

    Returns the stage table: ``{"stages": {name: seconds}, "experiment_s": Σ of the
    experiment's stages, ...}``; also written to ``out/stages.json`` and ``out/stages.md``.
    """
    from cyclejepa import pipeline
    from cyclejepa.data.synthetic import write_synthetic_corpus

    out = Path(out)
    corpus = out / "corpus"
    sets = [f"data.root={corpus}", "data.dataset=synthetic", f"data.options={{records: {records}, seed: 0}}",
            f"output_dir={out / 'run'}", *overrides]
    cfg = load_config(config, sets + (["evaluation.unseal=true"] if unseal else []))
    result: dict[str, Any] = {
        "config": str(config), "overrides": list(overrides), "records": records,
        "runs": [plan.name for plan in pipeline.plan_runs(cfg)], "steps": cfg.training.steps,
        "at_once": cfg.runs.at_once, "machine": machine_info(resolve_device(cfg.training.device)),
        "versions": versions(), "stages": {},
    }

    @contextmanager
    def stage(name: str):
        log(f"[experiment] {name} ...")
        began = time.perf_counter()
        yield
        result["stages"][name] = time.perf_counter() - began
        result["experiment_s"] = sum(result["stages"].get(s, 0.0) for s in EXPERIMENT_STAGES)
        log(f"[experiment] {name}: {result['stages'][name]:.1f} s")
        _write(result, out)

    with stage("synthetic corpus (stand-in, not timed in the experiment)"):
        if not (corpus / "ptbxl_database.csv").exists():
            write_synthetic_corpus(corpus, records, seed=cfg.data.options["seed"], workers=workers, progress=False)
    pipeline.require_unsealed(cfg)
    config_file = pipeline.write_resolved_config(cfg)
    with stage("prepare"):
        cache = pipeline.prepare(cfg, progress=False)
    with stage("pre-train"):
        pipeline.pretrain_all(cfg, cache, config_file, progress=False)
    with stage("evaluate"):
        pipeline.evaluate_grid(cfg, cache, pipeline.plan_runs(cfg), pipeline.evaluation_steps(cfg), progress=False)
    with stage("report"):
        result["report"] = str(pipeline.report_experiment(cfg.output_dir))
    _write(result, out)
    return result


def _write(result: dict[str, Any], out: Path) -> None:
    write_json(out / "stages.json", result)
    rows = [f"| {name} | {seconds:.1f} |" for name, seconds in result["stages"].items()]
    total = result.get("experiment_s", 0.0)
    (out / "stages.md").write_text(
        f"Experiment `{result['config']}` on {result['records']:,} synthetic records, runs "
        f"{', '.join(result['runs'])}, {result['steps']:,} steps each, runs.at_once = {result['at_once']}.\n\n"
        "| stage | wall time (s) |\n| --- | --- |\n" + "\n".join(rows)
        + f"\n| **experiment (prepare → report)** | **{total:.1f}** ({total / 60:.1f} min) |\n"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="examples/winder_ptbxl.yaml")
    parser.add_argument("--out", default="runs/experiment_time")
    parser.add_argument("--records", type=int, default=PTBXL_RECORDS)
    parser.add_argument("--workers", type=int, default=8, help="processes writing the synthetic corpus")
    parser.add_argument("--unseal", action="store_true", help="evaluate the sealed fold 10 (audited)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    result = time_experiment(
        args.config, args.out, records=args.records, overrides=args.overrides, unseal=args.unseal,
        workers=args.workers,
    )
    print((Path(args.out) / "stages.md").read_text())
    print(f"report: {result['report']}")
