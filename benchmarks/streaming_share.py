"""Streamed training against training from memory: the data path's share of a step, and peak RSS.

    python benchmarks/streaming_share.py share --cache CACHE --config examples/quickstart.yaml
                                         [--records 480] [--steps 200] [--set key=value ...]
    python benchmarks/streaming_share.py rss --cache CACHE --config CONFIG [--budget-gb 0]
                                         [--steps 10] [--set key=value ...]

``share``: the model and recipe of ``--config`` train ``steps`` steps (after 20 untimed ones) on
the first ``records`` training rows of the prepared cache ``CACHE``, from memory (`BatchSampler`)
and streamed from shards (`StreamBatches`), the two taking turns every 10 steps (so that the
machine's load drifts hit both); each step and each call of the data path (``batches.next``) is
timed on its own. Prints per path the median step and data-path
times (ms) and the data path's share of the step, and the streamed step's excess over the
in-memory one.

``rss``: one fresh process trains ``steps`` steps on the whole training set of ``CACHE``
(`train_run`, with ``training.memory_budget_gb`` = ``--budget-gb``; 0 streams) and prints its
peak resident memory (``ru_maxrss``) after building the model and, separately, after training;
shards are written on the first run and reused after (``--fresh`` deletes them first).

``--config`` and ``--set`` give the experiment whose ``data`` section built ``CACHE`` (so the
cache opens as that experiment's), its model and recipe.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from cyclejepa.bench.timing import peak_rss_bytes, time_calls

WARMUP = 20
BLOCK = 10  # steps each path takes in turn


def load(config: Path, sets: list[str], cache: Path):
    from cyclejepa.config import load_config
    from cyclejepa.pipeline.preparation import configured_cache

    cfg = load_config(config, [*sets, f"data.cache_dir={cache}"])
    return cfg, configured_cache(cfg, corpus=False)


def timed_data_path(trainer) -> list[float]:
    """Wrap ``trainer.batches.next`` so that each call's milliseconds are appended to the list returned."""
    data_ms: list[float] = []
    fetch = trainer.batches.next

    def timed_next():
        start = time.perf_counter()
        batch = fetch()
        data_ms.append((time.perf_counter() - start) * 1e3)
        return batch

    trainer.batches.next = timed_next
    return data_ms


def share(args) -> dict:
    from cyclejepa.pipeline import training_spec
    from cyclejepa.pipeline.pretraining import training_blocks, training_phases
    from cyclejepa.training import Trainer
    from cyclejepa.training.shards import write_shards

    cfg, cache = load(args.config, args.set, args.cache)
    rows = cache.select(cfg.data.train_folds)[: args.records]
    folder = Path(tempfile.mkdtemp(prefix="streaming-share-"))
    try:
        shards = write_shards(training_blocks(cache, rows, cfg.phase.convention), folder / "shards")
        signals, phases = np.asarray(cache.signals[rows]), training_phases(cache, rows, cfg.phase.convention)
        result: dict = {"records": len(rows), "steps": args.steps, "batch_size": cfg.training.batch_size}
        trainers = {
            "memory": Trainer(training_spec(cfg, folder / "memory", seed=0, transport_weight=1.0), signals, phases,
                              model_fs=cache.model_fs),
            "streamed": Trainer(training_spec(cfg, folder / "streamed", seed=0, transport_weight=1.0), None, None,
                                model_fs=cache.model_fs, shards=shards),
        }  # fmt: skip
        data_ms = {path: timed_data_path(trainer) for path, trainer in trainers.items()}
        step_ms: dict[str, list[float]] = {path: [] for path in trainers}
        for _ in range((WARMUP + args.steps) // BLOCK):  # the paths take turns, so that load drifts hit both
            for path, trainer in trainers.items():
                step_ms[path] += [1e3 * seconds for seconds in time_calls(trainer.train_step, warmup=0, repeats=BLOCK)]
        for path in trainers:
            steps, data = step_ms[path][WARMUP:], data_ms[path][WARMUP:]
            result[path] = {"step_ms": round(statistics.median(steps), 3), "data_ms": round(statistics.median(data), 4),
                            "data_ms_mean": round(statistics.mean(data), 4),
                            "data_share": round(statistics.median(data) / statistics.median(steps), 4),
                            "data_share_of_mean": round(statistics.mean(data) / statistics.mean(steps), 4)}  # fmt: skip
        memory, streamed = result["memory"], result["streamed"]
        result["streamed_data_share_of_memory_step"] = round(streamed["data_ms"] / memory["step_ms"], 4)
        result["streamed_step_excess"] = round(streamed["step_ms"] / memory["step_ms"] - 1, 4)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return result


def rss_child(args) -> dict:
    """In this process: train ``steps`` steps on the cache's training set; peak RSS in MB."""
    from cyclejepa.pipeline.pretraining import streams, train_run

    cfg, cache = load(args.config, [*args.set, f"training.steps={args.steps}", f"training.memory_budget_gb={args.budget_gb}",
                                    f"training.checkpoint_every={args.steps}", "evaluation.steps=[1]"], args.cache)  # fmt: skip
    rows = cache.select(cfg.data.train_folds)
    if args.fresh:
        shutil.rmtree(cache.path.with_name(f"{cache.path.name}-shards"), ignore_errors=True)
    folder = Path(tempfile.mkdtemp(prefix="streaming-rss-"))
    try:
        start = time.perf_counter()
        train_run(cfg, cache, folder / "run", seed=0, transport_weight=1.0, progress=False)
        seconds = time.perf_counter() - start
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    peak = peak_rss_bytes() / 2**20
    return {"cache": str(args.cache), "records": len(cache), "training_rows": len(rows), "streamed": bool(streams(cfg, cache, rows)),
            "budget_gb": args.budget_gb, "steps": args.steps, "fresh_shards": args.fresh, "peak_rss_mb": round(peak, 1),
            "seconds": round(seconds, 1)}  # fmt: skip


def rss(args) -> dict:
    """`rss_child` in a fresh interpreter, so that nothing of this one counts."""
    words = [sys.executable, __file__, "rss-child", "--cache", str(args.cache), "--config", str(args.config),
             "--steps", str(args.steps), "--budget-gb", str(args.budget_gb), *(["--fresh"] if args.fresh else []),
             *[w for value in args.set for w in ("--set", value)]]  # fmt: skip
    out = subprocess.run(words, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["share", "rss", "rss-child"])
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--config", type=Path, default=Path("examples/quickstart.yaml"))
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--records", type=int, default=480)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--budget-gb", type=float, default=0.0)
    parser.add_argument("--fresh", action="store_true")
    args = parser.parse_args()
    if args.steps is None:
        args.steps = 200 if args.what == "share" else 10
    result = {"share": share, "rss": rss, "rss-child": rss_child}[args.what](args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
