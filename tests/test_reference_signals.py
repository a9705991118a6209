"""The package's reference.py for every signal: packages trained with the default preparation of
the ``wfdb`` dataset (leading seconds dropped, zero-phase high-pass, normalisation scope) on real
pulse, breath and ECG records give `embed`'s tokens, run as the shipped script in a process that
cannot import torch, scipy or cyclejepa; its numpy high-pass is scipy's; a preparation it cannot
apply is refused by name."""

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.signal import butter, sosfiltfilt, sosfilt_zi

import cyclejepa
from conftest import SHARED, TINY_MODEL
from cyclejepa import pipeline
from cyclejepa.config import parse_config
from cyclejepa.data.datasets import hash_fold
from cyclejepa.data.preprocess import highpass, highpass_sos
from cyclejepa.export import reference as script
from cyclejepa.export.package import _config_digest
from cyclejepa.pipeline import export_run
from test_export import reference, refused

BIDMC = SHARED / "data" / "bidmc-samples"
SAMPLES = SHARED / "data" / "physionet-samples"
SIGNALS = {  # kind: provider, training folder and records, channels, test record, its rows, seconds given
    "pulse": ("pulse", BIDMC, ["bidmc44"], ["PLETH"], "bidmc45", ["PLETH,", "RESP,"], 63),
    "breath": ("breath", BIDMC, ["bidmc44", "bidmc47"], ["RESP"], "bidmc45", ["RESP,"], 125),
    "ecg": ("ecg-rpeak", SAMPLES, ["100"], ["MLII", "V5"], "100", ["MLII", "V5"], 30),
}


def train_and_export(folder: Path, kind: str) -> Path:
    """A tiny model of ``kind`` trained two steps on real records as released, with the ``wfdb``
    dataset's default preparation for its provider; its package with the ONNX graphs."""
    provider, source, names, channels, *_ = SIGNALS[kind]
    if not (source / f"{names[0]}.hea").is_file():
        pytest.skip(f"shared records not found in {source}")
    root = folder / "records"
    root.mkdir(parents=True)
    for name in names:
        for suffix in (".hea", ".dat"):
            shutil.copy(source / f"{name}{suffix}", root)
    folds = sorted({hash_fold(name) for name in names})
    cfg = parse_config({
        "name": kind, "output_dir": str(folder / "run"), "phase": {"provider": provider}, **TINY_MODEL,
        "data": {"dataset": "wfdb", "root": str(root), "options": {"channels": channels}, "train_folds": folds,
                 "eval_folds": [min(set(range(1, 11)) - set(folds))]},
        "training": {"steps": 2, "batch_size": 4, "checkpoint_every": 2},
        "runs": {"seeds": [0], "arms": [{"name": "winder", "transport_weight": 1.0}]},
        "evaluation": {"steps": [2], "headline_step": 2},
    })  # fmt: skip
    pipeline.write_resolved_config(cfg)
    cache = pipeline.prepare(cfg, progress=False)
    pipeline.pretrain(cfg, cache, pipeline.plan_runs(cfg)[0], progress=False)
    return export_run(cfg.output_dir, folder / "package", onnx=True)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """One trained package per signal, built on first use and shared by the module's tests."""
    built: dict[str, Path] = {}

    def package(kind: str) -> Path:
        if kind not in built:
            built[kind] = train_and_export(tmp_path_factory.mktemp(kind), kind)
        return built[kind]

    return package


def released(kind: str) -> tuple[np.ndarray, float, list[str]]:
    """The first seconds of the test record of ``kind``, as wfdb reads it: (rows, samples), rate, row names."""
    import wfdb

    _, source, _, _, name, rows, seconds = SIGNALS[kind]
    header = wfdb.rdheader(str(source / name))
    record = wfdb.rdrecord(str(source / name), channel_names=rows, sampto=round(seconds * header.fs))
    return record.p_signal.T, float(record.fs), list(record.sig_name)


def compare(package: Path, signal: np.ndarray, fs: float, names: list[str], folder: Path) -> np.ndarray:
    """reference.py's tokens and mean of ``signal`` against `load_pretrained(...).embed`'s, to 1e-4,
    every token of every window; returns the tokens."""
    done, imported = reference(package, signal, fs, names, folder, "--mean-tokens", str(folder / "mean.npy"), repeated=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not imported & {"torch", "cyclejepa", "scipy"}
    expected = cyclejepa.load_pretrained(package).embed(signal, fs, names)
    tokens = np.load(folder / "tokens.npy")
    assert tokens.shape == expected.tokens.shape
    assert np.abs(tokens - expected.tokens).max() <= 1e-4
    assert np.abs(np.load(folder / "mean.npy") - expected.mean_tokens[0]).max() <= 1e-4
    return tokens


def test_the_readme_command_of_a_pulse_package_gives_embeds_tokens(packages, tmp_path):
    """The pulse package's README says how to run reference.py and what it applies; the command
    line, as written there, on 63 s of bidmc45 (PLETH, with RESP beside it) gives embed's tokens."""
    package = packages("pulse")
    prep = json.loads((package / "config.json").read_text())["preprocessing"]
    assert prep["preparation"] == {"highpass_hz": [0.25], "scope": "corpus", "drop_s": 3.0}  # the wfdb default for pulse
    np.testing.assert_array_equal(prep["highpass_filter"]["sos"][0], highpass_sos(125.0, 0.25))
    card = " ".join((package / "README.md").read_text().split())
    assert "the first 3 s dropped; the high-pass with the second-order sections of `config.json` `highpass_filter.sos`" in card
    assert "holds the record's samples and prepares and encodes them when the record ends" in card
    command = re.search(r"```bash (python DIR/reference\.py SIGNAL\.npy .*?) ```", card).group(1)
    assert "--fs 125 --channels PLETH --out tokens.npy --mean-tokens mean.npy" in command
    signal, fs, names = released("pulse")
    np.save(tmp_path / "SIGNAL.npy", signal[:1])
    words = shlex.split(command.replace("DIR", str(package)))
    done = subprocess.run([sys.executable, *words[1:]], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0 and not done.stdout, done.stderr[-2000:]
    expected = cyclejepa.load_pretrained(package).embed(signal, fs, names)  # RESP beside it: ignored
    assert expected.tokens.shape == (6, 125, 16)  # 60 s after the 3 s dropped
    assert np.abs(np.load(tmp_path / "tokens.npy") - expected.tokens).max() <= 1e-4
    assert np.abs(np.load(tmp_path / "mean.npy") - expected.mean_tokens[0]).max() <= 1e-4
    compare(package, signal, fs, names, tmp_path)  # both rows given, by their released names


def test_a_pulse_packages_embeddings_carry_each_cycles_quality(packages):
    """`embed` of a pulse package: every window's events in its own seconds of the record, each
    cycle inside a window with the provider's quality and verdict, each window's last event none."""
    result = cyclejepa.load_pretrained(packages("pulse")).embed(*released("pulse"))
    ends = np.cumsum(result.window_events)
    last = ends - 1
    inner = np.setdiff1d(np.arange(ends[-1]), last)
    assert (result.window_events > 5).all() and np.isfinite(result.cycle_quality[inner]).all()
    assert np.isnan(result.cycle_quality[last]).all() and not result.cycle_ok[last].any()
    assert result.cycle_ok[inner].mean() > 0.9  # a clean ICU pulse
    for window, (start, stop) in enumerate(zip(ends - result.window_events, ends, strict=True)):
        times = result.event_time_s[start:stop]
        lower = result.window_start[window]
        assert (np.diff(times) > 0).all() and lower <= times[0] and times[-1] < lower + 10.0


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["breath", "ecg"])
def test_a_breath_and_an_ecg_package_give_embeds_tokens(packages, tmp_path, kind):
    """125 s of bidmc45's RESP at 125 Hz (resampled to the breath package's 25 Hz; 15 s dropped)
    and 30 s of MIT-BIH 100 at 360 Hz (resampled to 125 Hz; MLII and V5): embed's tokens."""
    signal, fs, names = released(kind)
    tokens = compare(packages(kind), signal, fs, names, tmp_path)
    assert tokens.shape == {"breath": (2, 125, 16), "ecg": (2, 125, 16)}[kind]


def edited(package: Path, folder: Path, edit) -> Path:
    """A copy of ``package`` whose config.json ``preprocessing`` went through ``edit``, signed again
    (its config_sha256 recomputed), so that the library reads it too."""
    copy = shutil.copytree(package, folder / "edited", dirs_exist_ok=True)
    config = json.loads((package / "config.json").read_text())
    edit(config["preprocessing"])
    config["config_sha256"] = _config_digest(config)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


@pytest.mark.parametrize("scope", ["record", "window"])
def test_each_scope_is_prepared_as_embed_prepares_it(packages, tmp_path, scope):
    """The pulse package with PLETH high-passed at 0.1 Hz, 2.4 s dropped and each record's (or
    each window's) own z-score before the training one: embed's tokens."""

    def edit(prep):
        prep["preparation"] = {"highpass_hz": [0.1], "scope": scope, "drop_s": 2.4}
        prep["highpass_filter"]["sos"] = [highpass_sos(125.0, 0.1).tolist()]

    signal, fs, names = released("pulse")
    tokens = compare(edited(packages("pulse"), tmp_path, edit), signal, fs, names, tmp_path)
    assert tokens.shape == (6, 125, 16)


@pytest.mark.slow
def test_a_channel_without_high_pass_is_left_as_it_is(packages, tmp_path):
    """The ECG package (MLII, V5) with V5 high-passed at 0.5 Hz and MLII not (a null cut-off and
    null sections) under each window's own z-score: embed's tokens on MIT-BIH 100."""

    def edit(prep):
        prep["preparation"] = {"highpass_hz": [None, 0.5], "scope": "window", "drop_s": 0.0}
        prep["highpass_filter"]["sos"] = [None, highpass_sos(125.0, 0.5).tolist()]

    signal, fs, names = released("ecg")
    tokens = compare(edited(packages("ecg"), tmp_path, edit), signal, fs, names, tmp_path)
    assert tokens.shape == (3, 125, 16)


def test_the_numpy_high_pass_is_scipys():
    """reference.sosfiltfilt and sosfilt_zi against scipy: the library's high-pass at the rates and
    cut-offs the wfdb dataset uses (equal to the last bit on these), a fourth-order filter of two
    sections, and a first-order one (b2 = a2 = 0: one tap less of padding)."""
    x = np.random.default_rng(0).normal(size=3000).cumsum() + 150.0
    for fs, cutoff in ((125.0, 0.25), (25.0, 0.05), (125.0, 0.05), (500.0, 0.3)):
        np.testing.assert_array_equal(script.sosfiltfilt(highpass_sos(fs, cutoff), x), highpass(x, fs, cutoff))
    for sos in (butter(4, 0.02, btype="highpass", output="sos"), butter(1, 0.1, btype="highpass", output="sos")):
        np.testing.assert_allclose(script.sosfilt_zi(sos), sosfilt_zi(sos), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(script.sosfiltfilt(sos, x), sosfiltfilt(sos, x), rtol=1e-12, atol=1e-9)
    with pytest.raises(script.PreparationError, match="9 samples are too few for the high-pass"):
        script.sosfiltfilt(highpass_sos(125.0, 0.25), x[:9])


def test_a_preparation_it_cannot_apply_is_refused_by_name(packages, tmp_path):
    """A scope, drop or cut-off the library would refuse, sections missing (a package written
    before they were in config.json) or of the wrong form, the steps of an older package with a
    preparation; a record too short once its first seconds are dropped; a constant channel under
    the record's own z-score (as embed refuses it). The script: one line each, exit status 1,
    nothing written."""
    package = packages("pulse")
    signal, fs, names = released("pulse")
    signal = signal[:1]
    edits = {
        r"preparation.scope: must be one of corpus, record, window, got 'global'": lambda p: p["preparation"].update(
            scope="global"
        ),
        r"preparation.drop_s: must be a finite number in \[0, inf\], got -1": lambda p: p["preparation"].update(drop_s=-1),
        r"preparation.highpass_hz of PLETH: must be null or in \(0, 62.5\) Hz, got 70": lambda p: p["preparation"].update(
            highpass_hz=[70]
        ),
        r"highpass_filter.sos: must hold the sections .* export it again": lambda p: p.pop("highpass_filter"),
        r"highpass_filter.sos of PLETH: must be null without a cut-off, else 1 to 64 sections": lambda p: p[
            "highpass_filter"
        ].update(sos=[[[1, 2, 3, 2, 1, 0]]]),
    }  # fmt: skip
    for message, edit in edits.items():
        prep = json.loads((package / "config.json").read_text())["preprocessing"]
        edit(prep)
        with pytest.raises(script.PreparationError, match=f"config.json preprocessing.{message}"):
            script.check_package(prep)
    older = edited(package, tmp_path, lambda p: p["steps"].remove("prepare"))
    line = refused(reference(older, signal, fs, names[:1], tmp_path)[0])
    assert "preprocessing.steps is ['channels', 'resample', 'cut_windows'" in line
    line = refused(reference(package, signal[:, : 125 * 12], fs, names[:1], tmp_path)[0])
    assert "the signal lasts 12.00 s, shorter than one 10 s window after dropping its first 3 s" in line
    flat = edited(package, tmp_path, lambda p: p["preparation"].update(scope="record", highpass_hz=[]))
    line = refused(reference(flat, np.full((1, 125 * 20), 80.0), fs, names[:1], tmp_path)[0])
    assert "the record's channel ['PLETH'] is constant, which cannot be z-scored" in line
    with pytest.raises(ValueError, match=r"the record's channel \['PLETH'\] is constant"):
        cyclejepa.load_pretrained(flat).embed(np.full((1, 125 * 20), 80.0), fs, names[:1])
    assert not (tmp_path / "tokens.npy").exists()


@pytest.mark.slow
def test_embed_cli_on_a_whole_released_record_matches_the_reference(packages, tmp_path):
    """`cyclejepa embed PKG bidmc45` (a fresh interpreter, the record file as released, 8 min) and
    reference.py on its PLETH as wfdb reads it: the same 47 windows of tokens, to 1e-4."""
    import wfdb

    package = packages("pulse")
    out = tmp_path / "embedded.npz"
    done = subprocess.run([sys.executable, "-m", "cyclejepa", "embed", str(package), str(BIDMC / "bidmc45"), "--out", str(out)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    record = wfdb.rdrecord(str(BIDMC / "bidmc45"), channel_names=["PLETH,"])
    run, _ = reference(package, record.p_signal.T, record.fs, ["PLETH,"], tmp_path, repeated=True)
    assert run.returncode == 0, run.stderr[-2000:]
    tokens, saved = np.load(tmp_path / "tokens.npy"), np.load(out)["tokens"]
    assert tokens.shape == saved.shape == (47, 125, 16)
    assert np.abs(tokens - saved).max() <= 1e-4
