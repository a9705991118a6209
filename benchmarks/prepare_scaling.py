"""`cyclejepa prepare` at corpus scale: records/s and peak resident memory against the corpus size.

For each size a synthetic corpus in the PTB-XL layout is written once (`cyclejepa synth`, not
timed), then each (size, workers) is prepared from scratch in a fresh process, which reports its
wall time and its peak resident set size (``ru_maxrss`` of itself and, separately, the largest of
its worker processes). Prints a Markdown table; ``--json`` writes the rows.

    python benchmarks/prepare_scaling.py --sizes 6000 20000 --workers 1 2 --corpora /tmp/corpora
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, resource, sys, time
from cyclejepa.config import parse_config
from cyclejepa.pipeline.preparation import prepare
cfg = parse_config(json.loads(sys.argv[1]))
start = time.perf_counter()
cache = prepare(cfg, progress=False)
seconds = time.perf_counter() - start
kib = lambda who: resource.getrusage(who).ru_maxrss
print(json.dumps({"seconds": seconds, "peak_kib": kib(resource.RUSAGE_SELF), "worker_peak_kib": kib(resource.RUSAGE_CHILDREN),
                  "windows": cache.manifest["counts"]["kept"], "records": cache.manifest["counts"]["records"],
                  "parts": len(cache.manifest["signal_parts"]),
                  "cache_bytes": sum(p.stat().st_size for p in cache.path.iterdir() if p.is_file())}))
"""


def corpus(folder: Path, records: int) -> Path:
    """A synthetic corpus of ``records`` records (seed 0) in ``folder``, written when missing."""
    root = folder / f"synthetic-{records}"
    if not (root / "ptbxl_database.csv").is_file():
        subprocess.run([sys.executable, "-m", "cyclejepa", "synth", "--out", str(root), "--records", str(records),
                        "--seed", "0", "--overwrite"], check=True)  # fmt: skip
    return root


def measure(root: Path, records: int, workers: int, scratch: Path) -> dict:
    """Prepare ``root`` with ``workers`` in a fresh interpreter; the cache is removed afterwards."""
    out = scratch / f"run-{records}-{workers}"
    config = {"name": f"scaling-{records}-{workers}", "output_dir": str(out),
              "data": {"dataset": "synthetic", "root": str(root), "options": {"records": records, "seed": 0},
                       "train_folds": list(range(1, 9)), "eval_folds": [9], "workers": workers}}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(config)], check=True, capture_output=True, text=True)
    shutil.rmtree(out, ignore_errors=True)
    row = json.loads(done.stdout.strip().splitlines()[-1])
    return {"records": records, "workers": workers, **row}


def table(rows: list[dict]) -> str:
    lines = ["| records | workers | wall time (s) | records/s | peak RSS main (GB) | peak RSS worker (GB) | cache (GB) |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for r in rows:
        worker = f"{r['worker_peak_kib'] / 1e6:.2f}" if r["workers"] > 1 else "–"
        lines.append(f"| {r['records']:,} | {r['workers']} | {r['seconds']:.0f} | {r['records'] / r['seconds']:.1f} | "
                     f"{r['peak_kib'] / 1e6:.2f} | {worker} | {r['cache_bytes'] / 1e9:.2f} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[6000, 20000], help="corpus sizes (records; at most 99,999)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--corpora", type=Path, required=True, help="folder of the synthetic corpora (kept between runs)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="prepare-scaling-") as scratch:
        for records in args.sizes:
            root = corpus(args.corpora, records)
            for workers in args.workers:
                rows.append(measure(root, records, workers, Path(scratch)))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
