"""`cyclejepa prepare` at corpus scale: records/s and peak resident memory against the corpus size.

For each size a synthetic corpus in the PTB-XL layout is written once (`cyclejepa synth`, not
timed), then each (size, workers) is prepared from scratch in a fresh process, which reports its
wall time and its peak resident set size (``ru_maxrss`` of itself and, separately, the largest of
its worker processes). Prints a Markdown table; ``--json`` writes the rows.

    python benchmarks/prepare_scaling.py --sizes 6000 20000 --workers 1 2 --corpora /tmp/corpora
    python benchmarks/prepare_scaling.py --sizes 1500 --workers 1 --shards 2 --corpora /tmp/corpora
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cyclejepa.bench.report import markdown_rows
from cyclejepa.jsonio import write_json

CHILD = """
import json, os, resource, sys, threading, time
from cyclejepa.config import parse_config
from cyclejepa.bench.timing import peak_rss_bytes
from cyclejepa.pipeline.preparation import prepare

def rss_kib(pid):
    try:
        return int(open(f"/proc/{pid}/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except (OSError, ValueError):
        return 0

def descendants(root):
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                parents[int(name)] = int(open(f"/proc/{name}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    found, frontier = [], [root]
    while frontier:
        children = [p for p, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found

peak = {"worker": 0, "total": 0}
def sample(stop):
    while not stop.wait(0.25):
        sizes = [rss_kib(p) for p in descendants(os.getpid())]
        peak["worker"] = max(peak["worker"], *sizes, 0)
        peak["total"] = max(peak["total"], rss_kib(os.getpid()) + sum(sizes))

cfg, step = parse_config(json.loads(sys.argv[1])), sys.argv[2]
stop = threading.Event()
threading.Thread(target=sample, args=(stop,), daemon=True).start()
start = time.perf_counter()
if step.startswith("shard "):
    from cyclejepa.pipeline.preparation import prepare_shard_stage as prepare_shard
    index, count = map(int, step.split()[1].split("/"))
    info = prepare_shard(cfg, index, count, progress=False)
    counts = {"kept": info["counts"]["windows"], "records": info["counts"]["records"]}
    cache = None
else:
    cache = prepare(cfg, progress=False, merge=step == "merge")
    counts = cache.manifest["counts"]
seconds = time.perf_counter() - start
stop.set()
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"seconds": seconds, "cpu_seconds": usage.ru_utime + usage.ru_stime, "peak_kib": peak_rss_bytes() // 1024,
                  "worker_peak_kib": peak["worker"], "total_peak_kib": peak["total"],
                  "windows": counts["kept"], "records": counts["records"],
                  "cache_bytes": sum(p.stat().st_size for p in cache.path.iterdir() if p.is_file()) if cache else 0}))
"""
"""The measured process: prepares the config given as JSON and prints its figures; a thread samples
the resident memory of its descendants (the worker processes and the forkserver that forks them,
which ``getrusage`` of this process does not see) every 0.25 s."""


def corpus(folder: Path, records: int) -> Path:
    """A synthetic corpus of ``records`` records (seed 0) in ``folder``, written when missing."""
    root = folder / f"synthetic-{records}"
    if not (root / "ptbxl_database.csv").is_file():
        subprocess.run([sys.executable, "-m", "cyclejepa", "synth", "--out", str(root), "--records", str(records),
                        "--seed", "0", "--overwrite"], check=True)  # fmt: skip
    return root


def measure(root: Path, records: int, workers: int, scratch: Path, shards: int = 1) -> list[dict]:
    """Prepare ``root`` with ``workers`` in a fresh interpreter (with ``shards`` > 1: each shard,
    then the merge, in a fresh interpreter each); the cache is removed afterwards."""
    out = scratch / f"run-{records}-{workers}"
    config = {"name": f"scaling-{records}-{workers}", "output_dir": str(out),
              "data": {"dataset": "synthetic", "root": str(root), "options": {"records": records, "seed": 0},
                       "train_folds": list(range(1, 9)), "eval_folds": [9], "workers": workers}}  # fmt: skip
    steps = ["one step"] if shards == 1 else [f"shard {i}/{shards}" for i in range(shards)] + ["merge"]
    rows = []
    for step in steps:
        done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(config), step], check=True, capture_output=True, text=True)
        rows.append({"corpus": records, "workers": workers, "step": step, **json.loads(done.stdout.strip().splitlines()[-1])})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    shutil.rmtree(out, ignore_errors=True)
    return rows


def table(rows: list[dict]) -> str:
    header = ["corpus", "step", "workers", "wall time (s)", "records/s", "peak RSS, main process (GB)", "largest worker (GB)",
              "all processes (GB)", "cache (GB)"]  # fmt: skip
    cells = [[f"{r['corpus']:,}", r["step"], r["workers"], f"{r['seconds']:.0f}", f"{r['records'] / r['seconds']:.1f}",
              f"{r['peak_kib'] / 1e6:.2f}", f"{r['worker_peak_kib'] / 1e6:.2f}" if r["workers"] > 1 else "–",
              f"{r['total_peak_kib'] / 1e6:.2f}", f"{r['cache_bytes'] / 1e9:.2f}"] for r in rows]  # fmt: skip
    return "\n".join(markdown_rows(header, cells, align="rlrrrrrrr"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[6000, 20000], help="corpus sizes (records; at most 99,999)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--corpora", type=Path, required=True, help="folder of the synthetic corpora (kept between runs)")
    parser.add_argument("--shards", type=int, default=1, help="N > 1: prepare N shards (--shard I/N), then --merge")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="prepare-scaling-") as scratch:
        for records in args.sizes:
            root = corpus(args.corpora, records)
            for workers in args.workers:
                rows += measure(root, records, workers, Path(scratch), args.shards)
    print(table(rows))
    if args.json:
        write_json(args.json, rows)


if __name__ == "__main__":
    main()
