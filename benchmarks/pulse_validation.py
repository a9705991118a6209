"""The ``pulse`` and ``breath`` providers on the shared multiparameter records, against references
that are not synthetic.

    python benchmarks/pulse_validation.py [--data DIR] [--json PATH]

Pulses (`cyclejepa.phase.crosscheck`): each record's pulse wave (PLETH or ABP) against the
R-peaks that the library's detector (``ecg-rpeak``, one lead) finds on the same record's ECG
channel, matched one to one within the record's QRS-to-pulse delay ± 150 ms, over the whole
record and over the 10 s windows where the ECG passes its own QC (`reference_windows`); as recorded,
inverted (-x), with a constant offset of 1000 times the wave's range, and time-stretched to
50 beats per minute. Breaths: each respiration channel against an independent count, the upward
zero crossings of the 0.1–1 Hz band-passed signal with ±0.2 SD hysteresis
(`zero_crossing_breaths`); sensitivity = reference cycles holding a breath, PPV = breaths that
are the first of their cycle. Prints Markdown tables; ``--json`` writes every figure.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cyclejepa.bench.report import markdown_rows
from cyclejepa.jsonio import write_json
from cyclejepa.phase import BreathProvider
from cyclejepa.phase.crosscheck import PAIRS, check_pulses, read_channel, score_breaths, zero_crossing_breaths
from cyclejepa.phase.ecg.reference_sets import shared_data_dir

BREATH_CHANNELS = (("v102s", "RESP"), ("03700181", "RESP"), ("mixedsignals", "Resp"))


def breath_rows(samples: Path) -> list[dict]:
    """One row per respiration channel."""
    rows = []
    for record, name in BREATH_CHANNELS:
        resp = read_channel(samples / record, name)
        track = BreathProvider(lead=name).phase(resp.samples[None], resp.fs, [name])
        scores = score_breaths(zero_crossing_breaths(resp.samples, resp.fs), track.events)
        rate = track.qc.metrics["rate_per_min"]
        rows.append({"record": record, "channel": name, "rate_per_min": None if rate is None else round(rate, 1),
                     "breath_qc": ";".join(track.qc.reasons) or "ok", **scores})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=shared_data_dir(), help="the shared data folder")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    samples = args.data / "physionet-samples"
    if not (samples / "v102s.hea").is_file():
        raise SystemExit(f"the shared multiparameter records are not in {samples}")
    pulses = [row for record, ecg, wave in PAIRS for row in check_pulses(samples / record, ecg, wave)]
    breaths = breath_rows(samples)
    header = ["record", "channels", "variant", "rate /min", "QRS", "pulses", "Se", "PPV", "delay ms", "ECG QC", "pulse QC",
              "QRS in reliable windows", "Se there", "PPV there"]  # fmt: skip
    print(*markdown_rows(header, [[r["record"], r["channels"], r["variant"], r["rate_per_min"], r["qrs"], r["pulses"],
                                   f"{r['sensitivity']:.3f}", f"{r['ppv']:.3f}", f"{r['delay_ms']:.0f}", r["reference_qc"],
                                   r["pulse_qc"], r["reliable_qrs"], f"{r['reliable_sensitivity']:.3f}",
                                   f"{r['reliable_ppv']:.3f}"] for r in pulses], align="l" * 14), sep="\n")  # fmt: skip
    header = ["record", "channel", "reference cycles", "breaths", "Se", "PPV", "rate /min", "breath QC"]
    print("", *markdown_rows(header, [[r["record"], r["channel"], r["cycles"], r["breaths"], f"{r['sensitivity']:.3f}",
                                       f"{r['ppv']:.3f}", r["rate_per_min"], r["breath_qc"]] for r in breaths],
                             align="l" * 8), sep="\n")  # fmt: skip
    if args.json:
        write_json(args.json, {"pulses": pulses, "breaths": breaths})


if __name__ == "__main__":
    main()
