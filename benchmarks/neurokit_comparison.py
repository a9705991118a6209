"""The ``pulse`` and ``breath`` providers beside NeuroKit2's PPG and respiration methods on the
shared records.

    python benchmarks/neurokit_comparison.py [--data DIR] [--records N] [--methods a,b,...] [--sets bidmc,physionet]
                                             [--span-s S] [--json PATH]

``bidmc-samples`` (ten ICU recordings, 125 Hz): each method's pulses on PLETH against the beats
that the library's R-peak detector (``ecg-rpeak``, lead II alone) finds on the same record's ECG:
the count (within 5 % of the beats or not) and, matched one to one within the record's QRS-to-pulse
delay ± 150 ms (`cyclejepa.phase.crosscheck.score_pulses`), sensitivity and PPV. Each method's
breaths on RESP against each annotator's breaths (``bidmcNN.breath``, ``aux_note`` ann1 / ann2):
matched one to one within ± 0.5 s (`breath_f1`), F1 = 2 TP / (detected + annotated), detections
outside the annotated span (± 0.5 s) left out; a record's F1 is the better of its two
annotators' (they mark different points of the breath on some recordings: their own F1 against
each other is shown).

``physionet-samples``: the pulse channels of `cyclejepa.phase.crosscheck.PAIRS` (PLETH, ABP)
against their ECG's beats as above; the respiration channels against the independent
zero-crossing count (`zero_crossing_breaths`, `score_breaths`: cycles holding a breath, breaths
first in their cycle; no annotator there).

Methods (`PULSE_METHODS`, `BREATH_METHODS`): cyclejepa's ``pulse`` and ``breath`` with their
defaults; NeuroKit2's ``ppg_clean`` + ``ppg_findpeaks`` with ``elgendi`` and with ``bishop``
(on overlapping 12 s pieces: its cost grows with the square of the samples, see `bishop_peaks`),
``rsp_clean`` + ``rsp_findpeaks`` with ``khodadad2018``, ``biosppy`` and ``scipy`` (cleaned as
``khodadad2018``, NeuroKit2's default: ``rsp_clean`` has no ``scipy`` method). A method that
raises on a record is reported as crashed there, with its error, and counted as such.

``--span-s S`` scores the first S seconds of every channel only (the beats and annotated breaths
in them): ``bishop`` over a whole 8-minute BIDMC record takes about 3 minutes of one core.

Prints Markdown tables (per record, then a summary: pulse counts within 5 % of the ECG's beats;
breath F1 median and the records with F1 ≥ 0.9); ``--json`` writes every figure.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from cyclejepa.bench.report import markdown_rows
from cyclejepa.jsonio import write_json
from cyclejepa.phase import BreathProvider, EcgRPeakProvider, PulseProvider
from cyclejepa.phase.crosscheck import PAIRS, Channel, read_channel, score_breaths, score_pulses, zero_crossing_breaths
from cyclejepa.phase.ecg.reference_sets import shared_data_dir
from cyclejepa.phase.track import match_events

COUNT_TOLERANCE = 0.05
"""A method's pulse count agrees with the ECG when within 5 % of its beats."""
BREATH_TOLERANCE_S = 0.5
"""Half-width of the window in which a breath matches an annotated one."""
GOOD_F1 = 0.9
"""The breath F1 a record counts as well detected at."""
BISHOP_PIECE_S, BISHOP_MARGIN_S = 12.0, 1.0
"""NeuroKit2's ``bishop`` runs on pieces of 12 s overlapping by 2 s, each keeping the peaks of its
central 10 s (`bishop_peaks`): on a whole 8-minute record at 125 Hz its scalogram needs about
3.7 GB, and its time grows with the square of the samples (about 3.7 s of one core for a 12 s
piece at 125 Hz, a quarter of that for 6 s)."""
BREATH_CHANNELS = (("v102s", "RESP"), ("03700181", "RESP"), ("mixedsignals", "Resp"))
"""(record, respiration channel) of ``physionet-samples``."""


def cyclejepa_pulses(wave: np.ndarray, fs: float) -> np.ndarray:
    return PulseProvider(lead="wave").phase(wave[None], fs, ["wave"]).events


def cyclejepa_breaths(resp: np.ndarray, fs: float) -> np.ndarray:
    return BreathProvider(lead="resp").phase(resp[None], fs, ["resp"]).events


def elgendi_peaks(wave: np.ndarray, fs: float) -> np.ndarray:
    import neurokit2 as nk

    cleaned = nk.ppg_clean(wave, sampling_rate=fs, method="elgendi")
    return np.asarray(nk.ppg_findpeaks(cleaned, sampling_rate=fs, method="elgendi")["PPG_Peaks"], dtype=np.int64)


def bishop_peaks(wave: np.ndarray, fs: float, piece_s: float = BISHOP_PIECE_S, margin_s: float = BISHOP_MARGIN_S) -> np.ndarray:
    """``bishop`` on pieces of the ``elgendi``-cleaned wave: each ``piece_s`` long, each keeping
    the peaks of its central ``piece_s`` − 2 ``margin_s`` seconds (the first and last piece also
    their outer margin), so that a pulse at a piece's edge is found once."""
    import neurokit2 as nk

    cleaned = nk.ppg_clean(wave, sampling_rate=fs, method="elgendi")
    step, margin, length = (int(round(seconds * fs)) for seconds in (piece_s - 2 * margin_s, margin_s, piece_s))
    peaks = []
    for start in range(0, len(cleaned), step):
        low = max(min(start - margin, len(cleaned) - length), 0)  # the last piece reaches back to a whole length
        found = low + np.asarray(nk.ppg_findpeaks(cleaned[low : low + length], sampling_rate=fs, method="bishop")["PPG_Peaks"])
        peaks.append(found[(found >= start) & (found < start + step)].astype(np.int64))
    return np.concatenate(peaks) if peaks else np.zeros(0, np.int64)


def rsp_peaks(method: str, cleaning: str | None = None) -> Callable[[np.ndarray, float], np.ndarray]:
    """NeuroKit2's breaths by ``method``: ``rsp_clean`` (``cleaning``, default ``method``), then
    the ``RSP_Peaks`` of ``rsp_findpeaks`` (the end of inspiration, as ``breath``'s default
    fiducial)."""

    def peaks(resp: np.ndarray, fs: float) -> np.ndarray:
        import neurokit2 as nk

        cleaned = nk.rsp_clean(resp, sampling_rate=fs, method=cleaning or method)
        return np.asarray(nk.rsp_findpeaks(cleaned, sampling_rate=fs, method=method)["RSP_Peaks"], dtype=np.int64)

    return peaks


PULSE_METHODS: dict[str, Callable[[np.ndarray, float], np.ndarray]] = {
    "pulse": cyclejepa_pulses,
    "neurokit2:elgendi": elgendi_peaks,
    "neurokit2:bishop": bishop_peaks,
}
BREATH_METHODS: dict[str, Callable[[np.ndarray, float], np.ndarray]] = {
    "breath": cyclejepa_breaths,
    "neurokit2:khodadad2018": rsp_peaks("khodadad2018"),
    "neurokit2:biosppy": rsp_peaks("biosppy"),
    "neurokit2:scipy": rsp_peaks("scipy", cleaning="khodadad2018"),
}


def detect(method: Callable[[np.ndarray, float], np.ndarray], channel: Channel) -> tuple[np.ndarray | None, str | None, float]:
    """(event times in record seconds, None, seconds taken), or (None, the error, seconds) for
    a method that raises."""
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            events = method(channel.samples, channel.fs)
    except Exception as error:  # a peer's crash is a result to report, not to hide
        return None, f"{type(error).__name__}: {str(error).splitlines()[0][:120]}", time.perf_counter() - start
    return channel.times(np.asarray(events)), None, time.perf_counter() - start


def count_agrees(count: int, reference: int, tolerance: float = COUNT_TOLERANCE) -> bool:
    """|count − reference| ≤ ``tolerance`` × reference."""
    return abs(count - reference) <= tolerance * reference


def breath_f1(detected_s: np.ndarray, annotated_s: np.ndarray, tolerance_s: float = BREATH_TOLERANCE_S) -> dict:
    """Breaths against annotated ones (record seconds), matched one to one within ± ``tolerance_s``
    (`match_events`), detections outside the annotated span ± ``tolerance_s`` left out:
    ``tp``, ``detected``, ``annotated`` and ``f1`` = 2 TP / (detected + annotated)."""
    inside = detected_s[(detected_s >= annotated_s[0] - tolerance_s) & (detected_s <= annotated_s[-1] + tolerance_s)]
    tp = len(match_events(inside, annotated_s, tolerance_s)[0])
    total = len(inside) + len(annotated_s)
    return {"tp": tp, "detected": len(inside), "annotated": len(annotated_s), "f1": 2 * tp / total if total else float("nan")}


def annotated_breaths(path: Path) -> dict[str, np.ndarray]:
    """Each annotator's breaths of a BIDMC record (``path.breath``), in record seconds."""
    import wfdb

    annotation = wfdb.rdann(str(path), "breath")
    notes = np.asarray(annotation.aux_note)
    return {name: np.sort(annotation.sample[notes == name]) / annotation.fs for name in ("ann1", "ann2")}


def ecg_beats(path: Path, lead: str, within: Channel) -> np.ndarray:
    """Record times of the R-peaks ``ecg-rpeak`` finds on ``lead`` alone, inside ``within``'s span."""
    ecg = read_channel(path, lead)
    beats = ecg.times(EcgRPeakProvider(lead=lead, detection_leads=[lead]).phase(ecg.samples[None], ecg.fs, [lead]).events)
    return beats[(beats >= within.start_s) & (beats <= within.end_s)]


def first_seconds(channel: Channel, span_s: float | None) -> Channel:
    """``channel`` cut to its first ``span_s`` seconds (all of it for None)."""
    if span_s is None:
        return channel
    return Channel(channel.samples[: int(round(span_s * channel.fs))], channel.fs, channel.start_s)


def pulse_row(path: Path, lead: str, wave_name: str, methods: dict, span_s: float | None = None) -> dict:
    """Every pulse method on ``wave_name`` of record ``path`` (its first ``span_s`` seconds)
    against the beats of ``lead`` there."""
    wave = first_seconds(read_channel(path, wave_name), span_s)
    beats = ecg_beats(path, lead, wave)
    row: dict = {
        "record": path.name,
        "channels": f"{lead.rstrip(',')} + {wave_name.rstrip(',')}",
        "beats": len(beats),
        "methods": {},
    }
    for name, method in methods.items():
        times, error, seconds = detect(method, wave)
        if times is None:
            row["methods"][name] = {"crashed": error, "seconds": seconds}
            continue
        scores = score_pulses(beats, times)
        row["methods"][name] = {"count": len(times), "within_5pct": count_agrees(len(times), len(beats)),
                                "sensitivity": scores["sensitivity"], "ppv": scores["ppv"], "seconds": seconds}  # fmt: skip
    return row


def bidmc_breath_row(path: Path, methods: dict, span_s: float | None = None) -> dict:
    """Every breath method on RESP of BIDMC record ``path`` (its first ``span_s`` seconds)
    against both annotators there."""
    resp = first_seconds(read_channel(path, "RESP,"), span_s)
    annotators = {name: marks[marks <= resp.end_s] for name, marks in annotated_breaths(path).items()}
    agreement = breath_f1(annotators["ann2"], annotators["ann1"])["f1"]
    row: dict = {"record": path.name, **{name: len(times) for name, times in annotators.items()},
                 "annotators_f1": agreement, "methods": {}}  # fmt: skip
    for name, method in methods.items():
        times, error, seconds = detect(method, resp)
        if times is None:
            row["methods"][name] = {"crashed": error, "seconds": seconds}
            continue
        per_annotator = {annotator: breath_f1(times, marks) for annotator, marks in annotators.items()}
        row["methods"][name] = {"count": len(times), "f1": max(s["f1"] for s in per_annotator.values()),
                                "per_annotator": per_annotator, "seconds": seconds}  # fmt: skip
    return row


def zero_crossing_row(path: Path, channel: str, methods: dict, span_s: float | None = None) -> dict:
    """Every breath method on ``channel`` of ``path`` (its first ``span_s`` seconds) against
    the zero-crossing cycles."""
    resp = first_seconds(read_channel(path, channel), span_s)
    reference = zero_crossing_breaths(resp.samples, resp.fs)
    row: dict = {"record": path.name, "channel": channel, "cycles": len(reference) - 1, "methods": {}}
    for name, method in methods.items():
        times, error, seconds = detect(method, resp)
        if times is None:
            row["methods"][name] = {"crashed": error, "seconds": seconds}
            continue
        indices = np.round((times - resp.start_s) * resp.fs).astype(np.int64)
        row["methods"][name] = {**score_breaths(reference, indices), "seconds": seconds}
    return row


def summary(pulses: list[dict], breaths: list[dict]) -> dict:
    """Per method: pulse counts within 5 % of the beats, breath F1 median and records ≥ `GOOD_F1`,
    and crashes, over the rows given."""
    out: dict = {"pulse": {}, "breath": {}}
    for name in dict.fromkeys(m for row in pulses for m in row["methods"]):
        results = [row["methods"][name] for row in pulses]
        out["pulse"][name] = {"within_5pct": sum(bool(r.get("within_5pct")) for r in results), "records": len(results),
                              "crashed": sum("crashed" in r for r in results)}  # fmt: skip
    for name in dict.fromkeys(m for row in breaths for m in row["methods"]):
        results = [row["methods"][name] for row in breaths]
        scores = [r["f1"] for r in results if "f1" in r]
        out["breath"][name] = {"median_f1": float(np.median(scores)) if scores else float("nan"),
                               "f1_at_least_0.9": sum(s >= GOOD_F1 for s in scores), "records": len(results),
                               "crashed": sum("crashed" in r for r in results)}  # fmt: skip
    return out


def _cell(result: dict, text: Callable[[dict], str]) -> str:
    return "crashed" if "crashed" in result else text(result)


def print_tables(result: dict) -> None:
    """The per-record tables, then the summary, as Markdown."""
    pulse_names = list(result["summary"]["pulse"])
    breath_names = list(result["summary"]["breath"])
    for title, rows in (("bidmc-samples", result["bidmc"]["pulses"]), ("physionet-samples", result["physionet"]["pulses"])):
        if not rows:
            continue
        cells = [[row["record"], row["channels"], row["beats"], *(_pulse_cell(row["methods"].get(n)) for n in pulse_names)]
                 for row in rows]  # fmt: skip
        _print_table(f"**Pulses, {title}** (count, within 5 % of the ECG's beats ✓; Se / PPV against them)",
                     ["record", "channels", "ECG beats", *pulse_names], cells, "llr" + "l" * len(pulse_names))  # fmt: skip
    if result["bidmc"]["breaths"] and breath_names:
        print_bidmc_breaths(result["bidmc"]["breaths"], breath_names)
    if result["physionet"]["breaths"] and breath_names:
        print_zero_crossing_breaths(result["physionet"]["breaths"], breath_names)
    print_summary(result["summary"])


def _pulse_cell(result: dict | None) -> str:
    if result is None:
        return "not run"
    return _cell(result, lambda r: f"{r['count']} {'✓' if r['within_5pct'] else '✗'} ({r['sensitivity']:.3f} / {r['ppv']:.3f})")


def _print_table(title: str, header: list[str], rows: list[list], align: str) -> None:
    print(f"\n{title}\n", *markdown_rows(header, rows, align), sep="\n")


def print_bidmc_breaths(rows: list[dict], breath_names: list[str]) -> None:
    cells = [[row["record"], row["ann1"], row["ann2"], f"{row['annotators_f1']:.3f}",
              *(_cell(row["methods"][n], lambda r: f"{r['f1']:.3f}") for n in breath_names)] for row in rows]  # fmt: skip
    _print_table("**Breaths, bidmc-samples** (F1 within ±0.5 s, the better of the two annotators)",
                 ["record", "ann1", "ann2", "ann1 vs ann2", *breath_names], cells, "l" + "r" * (3 + len(breath_names)))  # fmt: skip


def print_zero_crossing_breaths(rows: list[dict], breath_names: list[str]) -> None:
    cells = [[row["record"], row["channel"], row["cycles"],
              *(_cell(row["methods"][n], lambda r: f"{r['sensitivity']:.3f} / {r['ppv']:.3f}") for n in breath_names)]
             for row in rows]  # fmt: skip
    _print_table("**Breaths, physionet-samples** (Se / PPV against the zero-crossing cycles)",
                 ["record", "channel", "cycles", *breath_names], cells, "llr" + "l" * len(breath_names))  # fmt: skip


def print_summary(summary: dict) -> None:
    cells = [[name, f"{s['within_5pct']}/{s['records']}", "", "", s["crashed"]] for name, s in summary["pulse"].items()]
    cells += [[name, "", f"{s['median_f1']:.3f}", f"{s['f1_at_least_0.9']}/{s['records']}", s["crashed"]]
              for name, s in summary["breath"].items()]  # fmt: skip
    header = ["method", "pulse counts within 5 % of the ECG's beats", "breath F1 median", "records with F1 ≥ 0.9", "crashed"]
    _print_table("**Summary, bidmc-samples**", header, cells, "lrrrr")


def chosen(methods: dict, names: list[str] | None) -> dict:
    return {name: method for name, method in methods.items() if names is None or name in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=shared_data_dir(), help="the shared data folder")
    parser.add_argument("--records", type=int, default=None, help="the first N BIDMC records only")
    parser.add_argument("--methods", default=None, help="comma-separated method names (default: all)")
    parser.add_argument("--sets", default="bidmc,physionet", help="bidmc, physionet or both (default)")
    parser.add_argument("--span-s", type=float, default=None, help="score the first S seconds of each channel only")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    names = args.methods.split(",") if args.methods else None
    unknown = sorted(set(names or ()) - set(PULSE_METHODS) - set(BREATH_METHODS))
    if unknown:
        raise SystemExit(f"unknown methods {unknown}; known: {', '.join([*PULSE_METHODS, *BREATH_METHODS])}")
    pulse_methods, breath_methods = chosen(PULSE_METHODS, names), chosen(BREATH_METHODS, names)
    bidmc, samples = args.data / "bidmc-samples", args.data / "physionet-samples"
    if not (bidmc / "bidmc44.hea").is_file() or not (samples / "v102s.hea").is_file():
        raise SystemExit(f"the shared records are not in {args.data} (bidmc-samples, physionet-samples)")
    sets, span = args.sets.split(","), args.span_s
    records = sorted(p.with_suffix("") for p in bidmc.glob("bidmc[0-9][0-9].hea"))[: args.records] if "bidmc" in sets else []
    pairs, channels = (PAIRS, BREATH_CHANNELS) if "physionet" in sets else ((), ())
    result = {
        "span_s": span,
        "bidmc": {"pulses": [pulse_row(path, "II,", "PLETH,", pulse_methods, span) for path in records],
                  "breaths": [bidmc_breath_row(path, breath_methods, span) for path in records]},
        "physionet": {"pulses": [pulse_row(samples / record, lead, wave, pulse_methods, span) for record, lead, wave in pairs],
                      "breaths": [zero_crossing_row(samples / record, channel, breath_methods, span) for record, channel in channels]},
    }  # fmt: skip
    result["summary"] = summary(result["bidmc"]["pulses"], result["bidmc"]["breaths"])
    print_tables(result)
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()
