"""The multi-coordinate cache, the spectrum-rank check, and the respiration and cardio-respiratory
examples (plugins through a real cyclejepa.plugins entry point) on the shared multiparameter records."""

import io
from pathlib import Path

import numpy as np
import pytest

from conftest import SAMPLES
from cyclejepa import registry, pipeline
from cyclejepa.config import ConfigError, load_config
from cyclejepa.registry import DATASETS, PHASE_PROVIDERS

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TINY = ["training.steps=3", "training.checkpoint_every=3", "evaluation.steps=[3]", "evaluation.bootstrap=10"]
pytestmark = pytest.mark.skipif(not (SAMPLES / "v102s.hea").is_file(), reason="shared multiparameter records absent")


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """The two example modules installed as a distribution with cyclejepa.plugins entry points."""
    info = tmp_path / "site" / "cyclejepa_examples-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cyclejepa-examples\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[cyclejepa.plugins]\nresp = custom_phase_provider\nmultiparameter = multiparameter_dataset\n"
    )
    registry.load_builtins()  # before the copies below: the built-ins stay registered after the test
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.syspath_prepend(str(EXAMPLES))
    # Registries as the built-ins leave them: another test may have imported the example provider.
    monkeypatch.setattr(DATASETS, "_entries", {k: v for k, v in DATASETS._entries.items() if k != "multiparameter"})
    monkeypatch.setattr(PHASE_PROVIDERS, "_entries", {k: v for k, v in PHASE_PROVIDERS._entries.items() if k != "resp-breath"})
    for name in ("custom_phase_provider", "multiparameter_dataset"):
        monkeypatch.delitem(__import__("sys").modules, name, raising=False)
    assert {"resp", "multiparameter"} <= set(registry.load_plugins())
    return tmp_path


def config(name, out, *extra):
    return load_config(EXAMPLES / name, [f"output_dir={out}", f"data.root={SAMPLES}", *TINY, *extra])


def test_two_coordinate_cache_round_trips_against_the_composite_provider(plugins):
    cfg = config("cardio_respiratory.yaml", plugins / "cr")
    cache = pipeline.prepare(cfg, progress=False)
    assert cache.coordinates == ("cardiac", "respiratory") and cache.phase_centre.shape == (len(cache), 200, 2)
    without_resp = {p.stem for p in SAMPLES.glob("*.hea") if "resp" not in p.read_text().lower()}  # 100, a103l, s0010_re
    found = {(str(r.record_id), r.check) for r in cache.rejections}
    assert {(name, "channel_order") for name in without_resp} <= found
    others = [r for r in cache.rejections if str(r.record_id) not in without_resp]
    assert [(r.record_id, r.check, r.detail) for r in others] == [  # mixedsignals' Resp is in Ohm, not the declared NU
        (f"mixedsignals/{k}", "units", "channel Resp is in Ohm, but the dataset declares NU") for k in range(3)
    ]
    dataset = pipeline.build_dataset(cfg)
    provider = PHASE_PROVIDERS.build("composite", cfg.phase.options)
    from cyclejepa.data.cache import record_windows

    entry = dataset.entries()[0]
    window = record_windows(dataset, entry, dataset.channels, 500.0, 8000)[1]
    track = provider.phase(window.astype(np.float64), 500.0, dataset.channels)
    row = 1  # the second window of the first entry
    for convention in ("centre", "causal"):
        expected = track.at_tokens(patch=8, fs_out=100.0, convention=convention).astype(np.float32)
        np.testing.assert_array_equal(cache.phases(convention)[row], expected)
    for c in range(2):
        np.testing.assert_array_equal(cache.events(row, c), track.tracks[c].events)
    assert cache.columns["qc_ok"][row] == track.qc.ok and cache.columns["qc_reason"][row] == ";".join(track.qc.reasons)


def test_one_coordinate_cache_keeps_the_single_phase_layout(plugins):
    cfg = config("respiration.yaml", plugins / "resp")
    cache = pipeline.prepare(cfg, progress=False)
    fs, per_token = cfg.data.cache_fs, cfg.data.decimation * cfg.data.token_patch  # breathing's own rates: 50 Hz, 1 s tokens
    assert (fs, cache.model_fs, cache.token_patch) == (50.0, 10.0, 10)
    samples = round(cfg.data.window_s * fs)
    assert cache.coordinates == () and cache.phase_centre.shape == (len(cache), samples // per_token) == (len(cache), 32)
    assert "phase_coordinates" not in cache.manifest
    with np.load(cache.path / "events.npz") as f:
        assert sorted(f.files) == ["indices", "offsets"]
    dataset, provider = pipeline.build_dataset(cfg), PHASE_PROVIDERS.build("breath", lead="RESP")
    from cyclejepa.data.cache import record_windows

    stack = []
    rejected = {r.record_id for r in cache.rejections}
    for entry in dataset.entries():
        if entry.name in rejected:
            continue
        for window in record_windows(dataset, entry, dataset.channels, fs, samples):
            track = provider.phase(window.astype(np.float64), fs, dataset.channels)
            tokens = track.at_tokens(patch=cfg.data.token_patch, fs_out=fs / cfg.data.decimation, convention="centre")
            stack.append(np.asarray(tokens, dtype=np.float32))
    buffer = io.BytesIO()
    np.save(buffer, np.stack(stack))
    assert (cache.path / "phase_centre.npy").read_bytes() == buffer.getvalue()  # byte for byte the (N, T) layout


def test_validate_checks_spectrum_rank_against_phase_coordinates(plugins):
    with pytest.raises(ConfigError, match=r"has rank 1 \(torus coordinates\), but phase.provider 'composite' gives 2"):
        pipeline.preflight(config("cardio_respiratory.yaml", plugins / "a", "symmetry.name=u1",
                                'symmetry.spectrum="4x0+8x1+4x2"'))  # fmt: skip
    with pytest.raises(ConfigError, match=r"has rank 2 \(torus coordinates\), but phase.provider 'breath' gives 1"):
        pipeline.preflight(config("respiration.yaml", plugins / "b", "symmetry.name=torus",
                                'symmetry.spectrum="4x(0,0)+4x(1,0)+4x(0,1)+2x(1,1)"'))  # fmt: skip


@pytest.mark.parametrize("example", ["respiration.yaml", "cardio_respiratory.yaml"])
def test_example_runs_and_reports(plugins, example):
    import json

    cfg = config(example, plugins / "run")
    pipeline.run_experiment(cfg, progress=False)
    text = (plugins / "run" / "report" / "report.md").read_text()
    assert "G1 shuffled-φ gate" in text
    bottom_line = text.split("## Bottom line", 1)[1].split("\n## ", 1)[0]
    assert "| `part` macro-AUROC ↑ |" in bottom_line and "Superclass" not in bottom_line  # the dataset's own task
    per_coordinate = "## Mechanism per cyclic coordinate" in text
    assert per_coordinate == (example == "cardio_respiratory.yaml")
    if per_coordinate:
        assert "| winder | cardiac |" in text and "| winder | respiratory |" in text
        result = json.loads((plugins / "run" / "evaluation" / "winder-seed0-step000003.json").read_text())
        few = result["validity"]["too_few"]  # a few windows of the example's records: each coordinate's figure says so
        words = f"few data: {few['windows']} windows, {few['patients']} {few['subject']}{'s' if few['patients'] != 1 else ''}"
        gain = result["coordinates"]["cardiac"]["mechanism"]["true"]["gain_fraction"]
        assert f"| winder | cardiac | {gain:.4f} ({words}) |" in text
        figures = sorted(p.name for p in (plugins / "run" / "report" / "figures").glob("*.png"))
        assert figures == ["phase-ring-cardiac-step000003.png", "phase-ring-respiratory-step000003.png"]
        check_coordinate_gains(cfg, plugins / "run")


def check_coordinate_gains(cfg, out):
    """The evaluation's per-coordinate gain fractions: each coordinate's own terms, recomputed
    from the checkpoint on the evaluation fold's QC-passing windows."""
    import json

    from cyclejepa.data.cache import PreparedCache
    from cyclejepa.evaluation.embeddings import extract_tokens
    from cyclejepa.evaluation.mechanism import coordinate_view, transport_gain
    from cyclejepa.training import load_trained

    cache = PreparedCache(out / "cache")
    rows = cache.select(cfg.data.eval_folds)
    rows = rows[cache.columns["qc_ok"][rows]]
    objective = load_trained(pipeline.objective_spec(cfg), out / "runs" / "winder-seed0" / "checkpoints" / "step_000003.pt")
    tokens, phases = extract_tokens(objective.model, cache.signals[rows]), cache.phases("centre")[rows]
    reported = json.loads((out / "evaluation" / "winder-seed0-step000003.json").read_text())["coordinates"]
    assert list(reported) == ["cardiac", "respiratory"]
    for c, name in enumerate(reported):
        view = coordinate_view(tokens, phases, objective.symmetry, c)
        expected = transport_gain(view.tokens, view.phases, view.symmetry).gain_fraction
        assert reported[name]["mechanism"]["true"]["gain_fraction"] == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_examples_pyproject_declares_every_plugin():
    import tomllib

    project = tomllib.loads((EXAMPLES / "pyproject.toml").read_text())
    entries = project["project"]["entry-points"]["cyclejepa.plugins"]
    assert entries == {"resp": "custom_phase_provider", "multiparameter": "multiparameter_dataset",
                       "pulse-wave": "pulse_wave_dataset"}  # fmt: skip
    assert all((EXAMPLES / f"{module}.py").is_file() for module in project["tool"]["setuptools"]["py-modules"])


def write_record(folder, name, signal, channels, fs=100.0):
    import wfdb

    units = ["NU" if c.lower() == "resp" else "mV" for c in channels]
    wfdb.wrsamp(name, fs=fs, units=units, sig_name=list(channels), p_signal=signal.T, fmt=["16"] * len(channels),
                adc_gain=[1000.0] * len(channels), baseline=[0] * len(channels), write_dir=str(folder))  # fmt: skip


def test_multiparameter_dataset_segments_folds_gaps_and_rejections(plugins):
    from cyclejepa.data.datasets import RecordRejected, hash_fold

    folder = plugins / "records"
    folder.mkdir()
    t = np.arange(4500) / 100.0  # 45 s at 100 Hz: two 20 s segments, a 5 s tail
    ecg, resp = np.sin(2 * np.pi * 1.2 * t), np.sin(2 * np.pi * 0.25 * t)
    gappy = resp.copy()
    gappy[100:130] = np.nan  # 0.3 s: filled
    gappy[2500:2600] = np.nan  # 1 s in the second segment: rejected
    write_record(folder, "subj_a", np.stack([resp, ecg]), ("Resp", "MCL1"))
    write_record(folder, "subj_b", np.stack([ecg, gappy]), ("II", "RESP"))
    write_record(folder, "no_resp", np.stack([ecg, ecg]), ("II", "V"))
    write_record(folder, "short", np.stack([ecg[:1500], resp[:1500]]), ("II", "RESP"))
    dataset = DATASETS.build("multiparameter", root=folder, segment_s=20.0)
    assert [(r.record_id, r.check) for r in dataset.rejected()] == [("no_resp", "channel_order"), ("short", "extent")]
    entries = dataset.entries()
    # patients are ranks of the header paths: no_resp 1, short 2, subj_a 3, subj_b 4
    assert [(e.name, e.patient_id, e.fold, sorted(e.labels["part"])) for e in entries] == [
        ("subj_a/0", 3, hash_fold("subj_a"), ["early"]), ("subj_a/1", 3, hash_fold("subj_a"), ["late"]),
        ("subj_b/0", 4, hash_fold("subj_b"), ["early"]), ("subj_b/1", 4, hash_fold("subj_b"), ["late"]),
    ]  # fmt: skip
    record = dataset.read(entries[1])  # channels reordered to (ECG, RESP), the second segment
    assert record.channels == ("ECG", "RESP") and record.fs == 100.0
    np.testing.assert_allclose(record.signal, np.stack([ecg, resp])[:, 2000:4000], atol=1e-3)
    filled = dataset.read(entries[2]).signal[1]
    np.testing.assert_allclose(filled[100:130], np.interp(np.arange(100, 130), [99, 130], resp[[99, 130]]), atol=2e-3)
    with pytest.raises(RecordRejected, match=r"subj_b/1 rejected \(non_finite\): 100 missing samples in a row"):
        dataset.read(entries[3])
    by_segment = DATASETS.build("multiparameter", root=folder, segment_s=20.0, split="segment")
    assert [e.fold for e in by_segment.entries()] == [hash_fold(e.name) for e in entries]
    with pytest.raises(ValueError, match="split must be 'subject' or 'segment'"):
        DATASETS.build("multiparameter", root=folder, split="patient")


def test_embed_reads_a_training_record_through_the_run_dataset(plugins, tmp_path):
    """v102s (RESP in NU, gaps filled by the dataset) embedded from its file, by the run and by its
    exported package, gives the evaluation's windows: the same token phases, QC and per-window
    representations; a record in another unit is refused naming both units."""
    import json

    import torch
    from typer.testing import CliRunner

    import cyclejepa
    from cyclejepa.cli import app
    from cyclejepa.data.wfdb_format import read_record
    from cyclejepa.evaluation.checkpoint_evaluation import record_embeddings
    from cyclejepa.pipeline.evaluation import evaluation_spec

    assert not np.isfinite(read_record(SAMPLES / "v102s").signal).all()  # the file has gaps
    cfg = config("respiration.yaml", plugins / "run", "data.options.segment_s=300")  # v102s: one 300 s entry
    pipeline.write_resolved_config(cfg)
    cache = pipeline.prepare(cfg, progress=False)
    pipeline.pretrain(cfg, cache, pipeline.plan_runs(cfg)[0], progress=False)
    rows = np.flatnonzero(cache.columns["record"] == "v102s/0")
    encoder = cyclejepa.load_encoder(cfg.output_dir, device="cpu")
    reps = record_embeddings(evaluation_spec(cfg, cache), cache, encoder.model, torch.device("cpu"))
    expected = reps.features[np.isin(reps.rows, rows)]  # the evaluation's windows of v102s that pass QC

    out = tmp_path / "v102s.npz"
    paths = [str(SAMPLES / "v102s"), str(SAMPLES / "mixedsignals")]
    result = CliRunner().invoke(app, ["embed", str(cfg.output_dir), *paths, "--out", str(out), "--device", "cpu"])
    assert result.exit_code == 1 and "1 records embedded" in result.output, result.output
    saved = np.load(out)
    assert json.loads(str(saved["failed"])) == {paths[1]: "channel Resp is in Ohm, but the dataset declares NU"}
    np.testing.assert_array_equal(saved["token_phases"], cache.phases("centre")[rows])
    np.testing.assert_array_equal(saved["window_qc_ok"], cache.columns["qc_ok"][rows])
    valid = ~np.isnan(saved["token_phases"]) & saved["window_qc_ok"][:, None]
    windows = [saved["tokens"][w][valid[w]].mean(axis=0) for w in range(len(rows)) if valid[w].any()]
    assert len(windows) == len(expected) > 0
    np.testing.assert_allclose(np.stack(windows), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(saved["embeddings"][0], saved["tokens"][valid].mean(axis=0), rtol=1e-5, atol=1e-6)

    pytest.importorskip("safetensors")
    from cyclejepa.pipeline import export_run

    package = export_run(cfg.output_dir, tmp_path / "package")
    exported = cyclejepa.load_pretrained(package).embed_files([paths[0]])  # no root, the same dataset's reading
    np.testing.assert_allclose(exported.tokens, saved["tokens"], rtol=0, atol=1e-6)
