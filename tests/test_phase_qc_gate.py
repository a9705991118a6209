"""A corpus whose windows fail phase QC: refused or flagged after prepare, before any training
(``data.phase_qc``, `cyclejepa.pipeline.checks.phase_qc_verdict`), and a flagged run's report
marks no figure best (`cyclejepa.evaluation.report`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from cyclejepa.config import ConfigError, parse_config
from cyclejepa.data.datasets import hash_fold
from cyclejepa.pipeline.checks import phase_qc_verdict
from test_pulse import pulse_train

FS = 125.0


def write_pleth(folder: Path, name: str, wave: np.ndarray) -> None:
    """``wave`` as a one-channel PLETH WFDB record (format 16, NU) at `FS`."""
    import wfdb

    folder.mkdir(parents=True, exist_ok=True)
    wfdb.wrsamp(name, fs=FS, units=["NU"], sig_name=["PLETH"], p_signal=wave[:, None], fmt=["16"], write_dir=str(folder))


def slow_sine(seconds: float, phase: float) -> np.ndarray:
    """A clean 0.2 Hz sine: one cycle per 5 s, far slower than any pulse (the ``pulse``
    provider's intervals lie within 0.25-2 s), so its windows fail phase QC."""
    return np.sin(2 * np.pi * 0.2 * np.arange(round(seconds * FS)) / FS + phase)


def white_noise(seconds: float, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(round(seconds * FS))


def config(tmp_path: Path, root: Path, train_folds: list[int], eval_folds: list[int], **overrides) -> Path:
    """A tiny `wfdb` + `pulse` experiment on the PLETH folder ``root``: 2 steps, one seed."""
    raw = {
        "name": "phase-qc",
        "output_dir": str(tmp_path / "out"),
        "data": {"dataset": "wfdb", "root": str(root), "options": {"channels": ["PLETH"]},
                 "train_folds": train_folds, "eval_folds": eval_folds, **overrides},
        "phase": {"provider": "pulse"},
        "symmetry": {"spectrum": "2x0+2x1"},
        "model": {"encoder": {"width": 8, "hidden": 8}, "projector": {"hidden": 8, "dim": 6},
                  "predictor": {"depth": 1, "heads": 1, "ffn": 8}},
        "objectives": {"regulariser": {"weight": 1.0, "options": {"num_directions": 8, "sample_size": "records"}}},
        "training": {"steps": 2, "batch_size": 4, "checkpoint_every": 2, "device": "cpu"},
        "augmentations": [],
        "runs": {"seeds": [0]},
        "evaluation": {"steps": [2], "bootstrap": 20, "families": ["attenuation"], "severities": [0.0, 1.0],
                       "anomaly_records": 2, "umap": False, "device": "cpu", "random_baseline": False},
    }  # fmt: skip
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def cyclejepa(*words: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cyclejepa", *words], capture_output=True, text=True, timeout=600)


def counts(windows: int, passed: int, reasons: dict[str, int] | None = None) -> dict:
    return {"windows": windows, "passed": passed, "reasons": reasons or {}}


def test_the_verdict_refuses_below_refuse_below_of_the_training_windows_and_flags_below_flag_below():
    """The rule against its thresholds (defaults 0.5 and 0.8), on counts as the cache gives them:
    a share exactly at a threshold passes it; only the training windows refuse; both fold sets
    flag; a refused share is flagged too; a fold set without windows is left to the fold check."""
    cfg = parse_config({"data": {"dataset": "synthetic"}})
    verdict = lambda train, evaluation: phase_qc_verdict(cfg, {"event": "pulse", "train": train, "eval": evaluation})  # noqa: E731
    assert verdict(counts(10, 8), counts(5, 4)) == ([], [])
    refusals, flags = verdict(counts(650, 299, {"implausible_pulse_interval": 300, "too_few_pulses": 51}), counts(10, 10))
    assert refusals == [
        "data.phase_qc.refuse_below: no pulse found in 351 of 650 training windows (46 % pass phase QC; failed for: "
        "implausible_pulse_interval ×300, too_few_pulses ×51), below data.phase_qc.refuse_below = 0.5: most windows "
        "would train without a pulse phase. Check with `cyclejepa phase RECORD` that the phase provider finds its cycles "
        "on the channel it reads (phase.provider, phase.options.lead), or lower data.phase_qc.refuse_below to train anyway"
    ]
    assert flags == [
        "no pulse found in 351 of 650 training windows (46 % pass phase QC; failed for: implausible_pulse_interval ×300, "
        "too_few_pulses ×51), below data.phase_qc.flag_below = 0.8"
    ]
    refusals, flags = verdict(counts(10, 5), counts(10, 0))  # half the training windows: flagged, not refused
    assert refusals == []
    assert flags == [
        "no pulse found in 5 of 10 training windows (50 % pass phase QC), below data.phase_qc.flag_below = 0.8",
        "no pulse found in 10 of 10 evaluation windows (0 % pass phase QC), below data.phase_qc.flag_below = 0.8",
    ]
    assert verdict(counts(0, 0), counts(0, 0)) == ([], [])
    off = parse_config({"data": {"dataset": "synthetic", "phase_qc": {"refuse_below": 0, "flag_below": 0}}})
    assert phase_qc_verdict(off, {"event": "beat", "train": counts(10, 0), "eval": counts(10, 0)}) == ([], [])


def test_thresholds_are_shares_and_refuse_below_may_not_exceed_flag_below():
    with pytest.raises(ConfigError, match=r"data\.phase_qc\.flag_below: Input should be less than or equal to 1"):
        parse_config({"data": {"phase_qc": {"flag_below": 1.5}}})
    with pytest.raises(ConfigError, match=r"data\.phase_qc: refuse_below 0\.9 is above flag_below 0\.8"):
        parse_config({"data": {"phase_qc": {"refuse_below": 0.9}}})


def mechanism_result(arm: str, transport_weight: float, gain: float) -> dict:
    """A saved evaluation of one arm, as `write_checkpoint_evaluation` writes it, on enough
    windows (40 of 12 recordings) and not collapsed: only its figures differ between arms."""
    interval = {"point": gain, "low": gain - 0.05, "high": gain + 0.05, "replicates": 20, "level": 0.95}
    condition = {"mean_gain": gain / 2, "gain_fraction": gain, "mean_c_r": 0.5, "mean_c_i": 0.3, "records": 40,
                 "records_without_pairs": 0, "pairs": 9000, "collapsed": False}  # fmt: skip
    return {
        "data": {"dataset": "wfdb", "subjects_known": False, "channels": ["PLETH"], "units": ["NU"],
                 "channel_word": "channel", "signal": "pulse", "event": "pulse"},
        "not_run": {"probes": "dataset 'wfdb' has no labels (label_levels is empty)"}, "diagnostic": {},
        "mechanism": {"true": condition, "shuffled": {**condition, "gain_fraction": 0.0}, "paired_difference": interval,
                      "mean_gain": interval, "interval_excludes_zero": True, "shuffled_fraction_within_tolerance": True,
                      "passed": True, "tolerance": 0.02, "replicates": 20, "seed": 0, "patients": 12, "not_testable": None},
        "geometry": {"effective_rank": 3.0 + gain, "amplitude": gain,
                     "coherence": {"bins": 2, "kappa": [1.0, gain], "cosine": [1.0, gain], "sine": [0.0, 0.0],
                                   "norms": [1.0, 1.0], "tokens": [20, 20], "mean_kappa": gain}},
        "validity": {"collapsed": False, "token_similarity": 0.3, "collapse_similarity": 0.9, "degenerate_probes": {},
                     "too_few": None, "meaningful": True},
        "phase_records": {"evaluated": 40, "qc_failed": 60}, "anomaly": [], "anomaly_skipped": {},
        "run": f"{arm}-seed0", "arm": arm, "seed": 0, "step": 2, "transport_weight": transport_weight,
        "evaluation_hash": "e0",
    }  # fmt: skip


def report_of(tmp_path: Path, phase_qc: dict) -> tuple[str, dict]:
    """`report_experiment` of an output directory holding two arms' results (the transport
    arm's figures the larger) and a protocol.json whose ``phase_qc`` counts are ``phase_qc``."""
    from cyclejepa.evaluation.results import CheckpointResult, ProtocolResult, write_result
    from cyclejepa.pipeline.plans import write_resolved_config
    from cyclejepa.pipeline.reporting import report_experiment

    cfg = parse_config({"name": "flagged", "output_dir": str(tmp_path), "data": {"dataset": "wfdb", "root": str(tmp_path)},
                        "phase": {"provider": "pulse"}, "runs": {"seeds": [0]}, "evaluation": {"steps": [2]}})  # fmt: skip
    write_resolved_config(cfg)
    evaluation = tmp_path / "evaluation"
    evaluation.mkdir()
    for arm, weight, gain in (("winder", 1.0, 0.8), ("control", 0.0, 0.1)):
        write_result(evaluation / f"{arm}-seed0-step000002.json", CheckpointResult(**mechanism_result(arm, weight, gain)))
    protocol = ProtocolResult(**{"cache": "cache", "counts": {"records": 4, "records_kept": 4, "kept": 100, "rejected": 0, "qc_failed": 60},
                "rejections": [], "cohort_markdown": "", "phase_qc": phase_qc, "evaluation_hash": "e0"})  # fmt: skip
    write_result(evaluation / "protocol.json", protocol)
    report = report_experiment(tmp_path)
    return report.read_text(), json.loads((report.parent / "report.json").read_text())


def bottom_line_figures(text: str) -> list[str]:
    """The rows of the report's bottom line that hold figures (section rows are bold)."""
    rows = text.split("## Bottom line", 1)[1].split("\n\n")[1].splitlines()[2:]
    return [row for row in rows if not row.startswith("| **")]


def test_a_report_of_a_run_whose_windows_mostly_fail_phase_qc_says_so_first_and_bolds_nothing(tmp_path):
    """The same two arms' results: with the windows passing, the transport arm's larger figures
    are bold; with 40 of 100 passing (below ``flag_below`` 0.8), the report's first lines say
    how many windows have no pulse and no figure is bold, the numbers themselves unchanged."""
    passing = {"event": "pulse", "train": counts(60, 60), "eval": counts(40, 40)}
    plain, plain_json = report_of(tmp_path / "passing", passing)
    assert any("**" in row for row in bottom_line_figures(plain)) and "Warning: the phase" not in plain
    assert plain_json["phase_qc_flags"] == []
    failing = {"event": "pulse", "train": counts(60, 24, {"implausible_pulse_interval": 36}), "eval": counts(40, 16)}
    text, summary = report_of(tmp_path / "failing", failing)
    first = text.split("## Bottom line")[0]
    flags = [
        "no pulse found in 36 of 60 training windows (40 % pass phase QC; failed for: implausible_pulse_interval ×36), "
        "below data.phase_qc.flag_below = 0.8",
        "no pulse found in 24 of 40 evaluation windows (40 % pass phase QC), below data.phase_qc.flag_below = 0.8",
    ]
    assert f"> **Warning: the phase is mostly missing.** N{flags[0][1:]}. N{flags[1][1:]}. The figures below" in first
    figures = bottom_line_figures(text)
    assert len(figures) == len(bottom_line_figures(plain)) > 5 and not any("**" in row for row in figures)
    assert figures == [row.replace("**", "") for row in bottom_line_figures(plain)]
    assert summary["phase_qc_flags"] == flags


@pytest.mark.slow
def test_run_refuses_a_corpus_whose_windows_fail_phase_qc_before_any_training(tmp_path):
    """Six PLETH records of a clean 0.2 Hz sine (one cycle per 5 s): most windows fail the
    ``pulse`` provider's QC (a few high-passed and quantised windows pass the periodicity QC),
    so the test does not hang on how QC judges white noise. `run`
    stops after prepare, naming the provider's event, the counts and the key that lowers the
    threshold; no run folder is trained."""
    root = tmp_path / "sine"
    for index in range(6):
        write_pleth(root, f"sine{index}", slow_sine(40.0, index))
    folds = sorted({hash_fold(f"sine{index}") for index in range(6)})
    result = cyclejepa("run", str(config(tmp_path, root, folds[:-1], folds[-1:])))
    assert result.returncode != 0
    error = result.stderr.replace("\n", " ")
    assert "data.phase_qc.refuse_below: no pulse found in" in error
    passing = re.search(r"training windows \((\d+) % pass phase QC", error)
    assert passing and int(passing[1]) < 50, error  # below refuse_below (a few high-passed windows may pass)
    assert "lower data.phase_qc.refuse_below to train anyway" in error
    assert (tmp_path / "out" / "cache" / "meta.csv").is_file() and not list((tmp_path / "out").glob("runs/*/checkpoints/*"))


@pytest.mark.slow
def test_a_run_on_mostly_noise_is_flagged_and_its_report_bolds_nothing(tmp_path):
    """Four PLETH records, each half white noise and half a synthetic pulse wave (cut into 10 s
    windows), with ``refuse_below`` 0: the run trains, prepare and run warn, and the report says
    at its top that the phase is mostly missing, with the counts of the cache, and bolds no
    figure. White noise fails some windows' QC today and every window's with a QC that measures
    periodicity: the run is flagged either way."""
    root = tmp_path / "mixed"
    names = ["mix0", "mix1", "mix2", "mix3"]
    for index, name in enumerate(names):
        write_pleth(root, name, np.concatenate([pulse_train(seconds=40.0, seed=index)[0], white_noise(60.0, index)]))
    folds = sorted({hash_fold(name) for name in names})
    path = config(tmp_path, root, folds[:-1], folds[-1:], phase_qc={"refuse_below": 0.0, "flag_below": 0.8})
    result = cyclejepa("run", str(path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "phase QC: no pulse found in" in result.stderr and "the report will mark no figure best" in result.stderr
    out = tmp_path / "out"
    protocol = json.loads((out / "evaluation" / "protocol.json").read_text())["phase_qc"]
    meta = np.genfromtxt(out / "cache" / "meta.csv", delimiter=",", names=True, dtype=None, encoding="utf-8")
    training = np.isin(meta["fold"], folds[:-1])
    assert protocol["train"]["windows"] == training.sum() and protocol["train"]["passed"] == meta["qc_ok"][training].sum()
    assert (
        protocol["train"]["passed"] < 0.8 * protocol["train"]["windows"]
        or protocol["eval"]["passed"] < 0.8 * protocol["eval"]["windows"]
    )
    text = (out / "report" / "report.md").read_text()
    head = text.split("## Bottom line")[0]
    assert "**Warning: the phase is mostly missing.** No pulse found in" in head
    bottom = text.split("## Bottom line", 1)[1].split("\n\n")[1].splitlines()[2:]
    figures = [row for row in bottom if not row.startswith("| **")]  # section rows are bold
    assert len(figures) > 5 and not any("**" in row for row in figures)
    assert "**No figure is bold:**" in text
    assert json.loads((out / "report" / "report.json").read_text())["phase_qc_flags"]
