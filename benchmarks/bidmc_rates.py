"""Rates and cycle quality of ``pulse`` (PLETH) and ``breath`` (RESP) on the shared BIDMC records,
against the ECG's beats, the monitor's heart rate and the two annotators' breaths; and the same
quality control on generated noise.

    python benchmarks/bidmc_rates.py [--data DIR] [--seeds N] [--json PATH]

Per record (``bidmc-samples``, 8 min at 125 Hz): record QC of the PLETH pulses and of the RESP
breaths, with the share of good cycles; the pulse count against the R-peaks of lead II
(``ecg-rpeak`` on that lead alone), within 5 % or not; the mean pulse rate over the good cycles
(`PhaseTrack.mean_rate`, from `PhaseTrack.rates`) against the mean of the monitor's 1 Hz HR
numerics (``bidmcNNn``); breaths against each annotator (``bidmcNN.breath``, ±0.5 s, one to one:
F1 = 2 TP / (detected + annotated)); the mean breathing rate against the mean over both annotators
of 60 / their breath intervals. Then the verdict on N seeds of each generated signal (125 Hz,
8 min: white noise, a flat line with 1e-12 jitter, quantised noise, a random walk, a chirp from 3 to
240 per minute, a 45/min sine): the number of seeds that fail; the range of each quality measure
over real channels and generated ones, beside its threshold; and the windows that pass QC (10 s
of PLETH, 60 s of RESP) per record and on white noise. Prints Markdown tables.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from cyclejepa.bench.report import markdown_rows
from cyclejepa.data.samples import read_record
from cyclejepa.jsonio import write_json
from cyclejepa.phase import BreathProvider, EcgRPeakProvider, PulseProvider, channel_indices, match_events
from cyclejepa.phase.ecg.reference_sets import shared_data_dir
from cyclejepa.phase.provider import (
    MIN_CYCLE_QUALITY,
    MIN_FUNDAMENTAL_SHARE,
    MIN_GOOD_SHARE,
    MIN_PERIODICITY,
    MIN_TEMPLATE_SHARE,
)

RECORDS = tuple(f"bidmc{n}" for n in range(44, 54))
OTHER_CHANNELS = (
    ("physionet-samples/v102s", "pulse", "PLETH"), ("physionet-samples/v102s", "breath", "RESP"),
    ("physionet-samples/03700181", "pulse", "ABP"), ("physionet-samples/03700181", "breath", "RESP"),
    ("physionet-samples/mixedsignals", "pulse", "ABP"), ("physionet-samples/mixedsignals", "pulse", "Pleth"),
    ("physionet-samples/mixedsignals", "breath", "Resp"), ("physionet-samples/a103l", "pulse", "PLETH"),
    ("bidmc-samples/bidmc47", "pulse", "ABP"),
)  # fmt: skip
"""Real channels beyond the BIDMC PLETH and RESP whose measures the threshold table also spans."""
MEASURES = {
    "cycle_quality_median": MIN_CYCLE_QUALITY, "good_cycle_share": MIN_GOOD_SHARE,
    "template_share": MIN_TEMPLATE_SHARE, "periodicity": MIN_PERIODICITY, "fundamental_share": MIN_FUNDAMENTAL_SHARE,
}  # fmt: skip
"""QC metrics of the cycle quality control and their thresholds (the median cycle against the
cycle threshold)."""
BREATH_TOLERANCE_S = 0.5
COUNT_TOLERANCE = 0.05
FS, SECONDS = 125.0, 480


def generated(seed: int) -> dict[str, np.ndarray]:
    """The generated signals of one seed (`FS` Hz, `SECONDS` s)."""
    rng = np.random.default_rng(seed)
    n = int(FS * SECONDS)
    t = np.arange(n) / FS
    return {
        "white noise": rng.standard_normal(n),
        "flat line + 1e-12 jitter": 1.0 + 1e-12 * rng.standard_normal(n),
        "quantised noise": np.round(0.7 * rng.standard_normal(n)),
        "random walk": np.cumsum(rng.standard_normal(n)),
        "chirp 3-240/min": np.sin(2 * np.pi * np.cumsum(np.linspace(0.05, 4.0, n)) / FS),
        "45/min sine + 10 % noise": np.sin(2 * np.pi * 0.75 * t) + 0.1 * rng.standard_normal(n),
    }


def f1(detected: np.ndarray, reference: np.ndarray, fs: float) -> float:
    """F1 of one-to-one matches within `BREATH_TOLERANCE_S`."""
    matched = len(match_events(detected, reference, BREATH_TOLERANCE_S * fs)[0])
    return 2 * matched / (len(detected) + len(reference)) if len(detected) + len(reference) else float("nan")


def record_row(path: Path) -> dict:
    """The figures of one BIDMC record."""
    import wfdb

    record = read_record(path)
    numerics = read_record(path.with_name(path.name + "n"))
    ecg_row = channel_indices(record.names, "II")[0]
    beats = EcgRPeakProvider(lead="II", detection_leads=["II"]).phase(record.signal[[ecg_row]], record.fs, ["II"]).events
    pulse = PulseProvider(lead="PLETH").phase(record.signal, record.fs, record.names)
    breath = BreathProvider(lead="RESP").phase(record.signal, record.fs, record.names)
    annotation = wfdb.rdann(str(path), "breath")
    notes = np.array(annotation.aux_note)
    annotators = [np.sort(annotation.sample[notes == name]) for name in ("ann1", "ann2")]
    hr = numerics.signal[channel_indices(numerics.names, "HR")[0]]
    pulse_rate, breath_rate = pulse.mean_rate(), breath.mean_rate()
    annotated_rate = float(np.mean([np.mean(60.0 * record.fs / np.diff(a)) for a in annotators]))
    return {
        "record": path.name,
        "pulse_qc": ";".join(pulse.qc.reasons) or "ok",
        "pulse_good_share": float(np.mean(pulse.cycle_ok)),
        "pulses": len(pulse.events),
        "beats": len(beats),
        "count_within_5pct": bool(abs(len(pulse.events) - len(beats)) <= COUNT_TOLERANCE * len(beats)),
        "pulse_rate": pulse_rate,
        "monitor_hr": float(np.nanmean(hr)),
        "pulse_rate_error": pulse_rate - float(np.nanmean(hr)),
        "breath_qc": ";".join(breath.qc.reasons) or "ok",
        "breath_good_share": float(np.mean(breath.cycle_ok)),
        "breaths": len(breath.events),
        "f1_ann1": f1(breath.events, annotators[0], record.fs),
        "f1_ann2": f1(breath.events, annotators[1], record.fs),
        "breath_rate": breath_rate,
        "annotated_rate": annotated_rate,
        "breath_rate_error": breath_rate - annotated_rate,
    }


def noise_rows(seeds: int) -> list[dict]:
    """For each generated signal and provider: seeds that fail QC, and the reasons seen."""
    rows = []
    providers = {"pulse": PulseProvider(lead="PLETH"), "breath": BreathProvider(lead="RESP")}
    for name in generated(0):
        for label, provider in providers.items():
            verdicts = [provider.phase(generated(seed)[name][None], FS, [provider.lead]).qc for seed in range(seeds)]
            reasons = sorted({reason for verdict in verdicts for reason in verdict.reasons})
            rows.append({"signal": name, "provider": label, "failed": sum(not v.ok for v in verdicts), "seeds": seeds,
                         "reasons": ", ".join(reasons)})  # fmt: skip
    return rows


WINDOWS_S = {"pulse": 10.0, "breath": 60.0}
"""Window lengths of the window-level check: 10 s (a wfdb corpus's default window) for pulses, 60 s
(about 15 breaths) for breathing."""


def window_rows(data: Path, seeds: int) -> list[dict]:
    """Windows passing QC (`WINDOWS_S`, back to back) per BIDMC record and channel, and on white
    noise (`seeds` seeds of `SECONDS`)."""
    providers = {"pulse": PulseProvider(lead="PLETH"), "breath": BreathProvider(lead="RESP")}

    def passed(kind: str, x: np.ndarray, fs: float) -> tuple[int, int]:
        length = int(WINDOWS_S[kind] * fs)
        verdicts = [providers[kind].phase(x[None, s : s + length], fs, [providers[kind].lead]).qc.ok
                    for s in range(0, len(x) - length + 1, length)]  # fmt: skip
        return sum(verdicts), len(verdicts)

    rows = []
    for name in RECORDS:
        record = read_record(data / "bidmc-samples" / name)
        for kind, provider in providers.items():
            x = record.signal[channel_indices(record.names, provider.lead)[0]]
            rows.append(
                {"source": name, "provider": kind, **dict(zip(("passed", "windows"), passed(kind, x, record.fs), strict=True))}
            )
    for kind in providers:
        counts = [passed(kind, generated(seed)["white noise"], FS) for seed in range(seeds)]
        rows.append({"source": f"white noise ({seeds} seeds)", "provider": kind,
                     "passed": sum(c[0] for c in counts), "windows": sum(c[1] for c in counts)})  # fmt: skip
    return rows


def measure_ranges(data: Path, seeds: int) -> list[dict]:
    """Per provider and measure of `MEASURES`: the range over the real channels (BIDMC PLETH or
    RESP and `OTHER_CHANNELS`), over the generated noises and random walk, over the chirp, and the
    threshold."""
    providers = {"pulse": PulseProvider, "breath": BreathProvider}
    real: dict[str, list] = {"pulse": [], "breath": []}
    for name in RECORDS:
        record = read_record(data / "bidmc-samples" / name)
        for kind, lead in (("pulse", "PLETH"), ("breath", "RESP")):
            real[kind].append(providers[kind](lead=lead).phase(record.signal, record.fs, record.names).qc.metrics)
    for path, kind, lead in OTHER_CHANNELS:
        record = read_record(data / path)
        real[kind].append(providers[kind](lead=lead).phase(record.signal, record.fs, record.names).qc.metrics)
    rows = []
    for kind, provider in providers.items():
        made = [(name, provider(lead="X").phase(x[None], FS, ["X"]).qc.metrics) for seed in range(seeds)
                for name, x in generated(seed).items() if "sine" not in name]  # fmt: skip
        noise = [metrics for name, metrics in made if "chirp" not in name]
        chirp = [metrics for name, metrics in made if "chirp" in name]
        for measure, threshold in MEASURES.items():
            seen = {group: [m[measure] for m in metrics if m[measure] is not None]
                    for group, metrics in (("real", real[kind]), ("noise", noise), ("chirp", chirp))}  # fmt: skip
            rows.append({"provider": kind, "measure": measure, "threshold": threshold,
                         **{f"{group}_{end}": f(values) for group, values in seen.items()
                            for end, f in (("min", min), ("max", max))}})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=shared_data_dir(), help="the shared data folder")
    parser.add_argument("--seeds", type=int, default=5, help="seeds of each generated signal")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    folder = args.data / "bidmc-samples"
    if not (folder / "bidmc44.hea").is_file():
        raise SystemExit(f"the shared BIDMC records are not in {folder}")
    rows = [record_row(folder / name) for name in RECORDS]
    header = ["record", "pulse QC", "good cycles", "pulses", "ECG beats", "within 5 %", "pulse rate /min", "monitor HR",
              "difference", "breath QC", "good cycles", "breaths", "F1 ann1", "F1 ann2", "breath rate /min", "annotators",
              "difference"]  # fmt: skip
    cells = [[r["record"], r["pulse_qc"], f"{r['pulse_good_share']:.1%}", r["pulses"], r["beats"],
              "yes" if r["count_within_5pct"] else "no", f"{r['pulse_rate']:.1f}", f"{r['monitor_hr']:.1f}",
              f"{r['pulse_rate_error']:+.1f}", r["breath_qc"], f"{r['breath_good_share']:.1%}", r["breaths"],
              f"{r['f1_ann1']:.3f}", f"{r['f1_ann2']:.3f}", f"{r['breath_rate']:.1f}", f"{r['annotated_rate']:.1f}",
              f"{r['breath_rate_error']:+.1f}"] for r in rows]  # fmt: skip
    print(*markdown_rows(header, cells, align="l" * 17), sep="\n")
    passed = sum(r["pulse_qc"] == "ok" for r in rows), sum(r["breath_qc"] == "ok" for r in rows)
    within = sum(r["count_within_5pct"] for r in rows)
    pulse_close = sum(abs(r["pulse_rate_error"]) <= 3 for r in rows)
    breath_close = sum(abs(r["breath_rate_error"]) <= 1 for r in rows)
    f1s = [max(r["f1_ann1"], r["f1_ann2"]) for r in rows]
    print(f"\nrecord QC passed: PLETH {passed[0]}/{len(rows)}, RESP {passed[1]}/{len(rows)}; pulse count within 5 %: "
          f"{within}/{len(rows)}; pulse rate within 3/min of the monitor: {pulse_close}/{len(rows)}; breath rate within "
          f"1/min of the annotators: {breath_close}/{len(rows)}; median F1 against the closer annotator: "
          f"{np.median(f1s):.3f}")  # fmt: skip
    noise = noise_rows(args.seeds)
    cells = [[r["signal"], r["provider"], f"{r['failed']}/{r['seeds']}", r["reasons"]] for r in noise]
    print("", *markdown_rows(["generated signal", "provider", "seeds failing QC", "reasons"], cells, align="llll"), sep="\n")
    ranges = measure_ranges(args.data, args.seeds)
    header = ["provider", "measure", "real channels", "noises and random walk", "chirp", "threshold"]
    spans = [[f"{r[f'{group}_min']:.2f} to {r[f'{group}_max']:.2f}" for group in ("real", "noise", "chirp")] for r in ranges]
    cells = [[r["provider"], r["measure"], *span, f"{r['threshold']:g}"] for r, span in zip(ranges, spans, strict=True)]
    print("", *markdown_rows(header, cells, align="l" * 6), sep="\n")
    windows = window_rows(args.data, args.seeds)
    header = ["windows passing QC", f"pulse (PLETH, {WINDOWS_S['pulse']:g} s)", f"breath (RESP, {WINDOWS_S['breath']:g} s)"]
    passed = {(r["source"], r["provider"]): f"{r['passed']}/{r['windows']}" for r in windows}
    cells = [
        [source, passed[source, "pulse"], passed[source, "breath"]] for source in dict.fromkeys(r["source"] for r in windows)
    ]
    print("", *markdown_rows(header, cells, align="lll"), sep="\n")
    if args.json:
        write_json(args.json, {"records": rows, "generated": noise, "ranges": ranges, "windows": windows})


if __name__ == "__main__":
    main()
