"""Wall time of every stage of a whole experiment on a synthetic PTB-XL-size corpus.

    python benchmarks/experiment_time.py --config examples/winder_ptbxl.yaml --unseal --out runs/experiment_time

`cyclejepa.bench.commands.time_experiment` runs the config on a synthetic corpus in the PTB-XL
layout of ``--records`` records and times each stage (`cyclejepa.bench.experiment`); the stage
table goes to ``stages.json`` and ``stages.md`` in ``--out``, rewritten after every stage.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from cyclejepa.bench.commands import time_experiment
from cyclejepa.bench.experiment import PTBXL_RECORDS


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="examples/winder_ptbxl.yaml")
    parser.add_argument("--out", default="runs/experiment_time")
    parser.add_argument("--records", type=int, default=PTBXL_RECORDS)
    parser.add_argument("--workers", type=int, default=8, help="processes writing the synthetic corpus")
    parser.add_argument("--unseal", action="store_true", help="evaluate the sealed fold 10 (audited)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    result = time_experiment(
        args.config, args.out, records=args.records, overrides=args.overrides, unseal=args.unseal, workers=args.workers
    )
    print((Path(args.out) / "stages.md").read_text())
    print(f"report: {result['report']}")


if __name__ == "__main__":
    main()
