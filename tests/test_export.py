"""Weights package: `cyclejepa export` and `load_pretrained` against the run's own encoder; damaged,
changed and mismatched packages refused; input the encoder cannot conform refused."""

import contextlib
import copy as copy_module
import dataclasses
import errno
import hashlib
import importlib.util
import json
import os
import re
import resource
import shlex
import shutil
import stat
import subprocess
import sys
import tarfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import safetensors.torch as safetensors_torch
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from scipy.signal import firwin, resample_poly
from typer.testing import CliRunner

import cyclejepa
from conftest import SHARED, TINY_MODEL, synthetic_data
from cyclejepa import pipeline
from cyclejepa.cli import app
from cyclejepa.config import parse_config
from cyclejepa.data.channels import channel_key
from cyclejepa.data.ptbxl import read_record_fast
from cyclejepa.data.ptbxl import LEADS, PTBXL
from cyclejepa.embed import OUT_OF_RANGE_DECADES, input_distance
from cyclejepa.export import PackageError, read_package_config
from cyclejepa.pipeline import export_run
from cyclejepa.export.package import FORMAT_VERSION, _config_digest
from cyclejepa.training.checkpoint import load_checkpoint


pytestmark = pytest.mark.xdist_group("export")  # one worker builds the module's fixtures (`--dist loadgroup`)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny evaluated run (one arm, 3 steps, a Householder basis) and a package of step 2."""
    out = tmp_path_factory.mktemp("export")
    cfg = parse_config(
        {
            "name": "tiny",
            "output_dir": str(out / "run"),
            "data": synthetic_data(out, 60),
            **TINY_MODEL,
            "symmetry": {**TINY_MODEL["symmetry"], "basis": "householder", "basis_options": {"reflections": 4}},
            "training": {"steps": 3, "batch_size": 4, "checkpoint_every": 1},
            "runs": {"seeds": [0], "arms": [{"name": "winder", "transport_weight": 1.0}]},
            "evaluation": {
                "steps": [2],
                "bootstrap": 20,
                "anomaly_records": 6,
                "severities": [0.0, 2.0],
                "umap": False,
                "eligible_min_positives": 1,
                "headline_step": 2,
            },
        }
    )
    pipeline.run_experiment(cfg, progress=False)
    package = out / "package"
    result = CliRunner().invoke(app, ["export", str(cfg.output_dir), "--out", str(package)])
    assert result.exit_code == 0, result.output
    meta = PTBXL(cfg.data.root).metadata
    records = np.stack([read_record_fast(cfg.data.root / name) for name in meta["filename_hr"][:6]])
    return cfg, package, records


def test_the_package_embeds_as_the_run_does_without_the_run_folder(run, tmp_path):
    cfg, package, records = run
    assert sorted(p.name for p in package.iterdir()) == ["README.md", "config.json", "model.safetensors", "reference.py"]
    own = cyclejepa.load_encoder(cfg.output_dir, device="cpu")  # evaluation.headline_step, 2
    copy = shutil.copytree(package, tmp_path / "copied")
    moved = cfg.output_dir.with_name("moved")
    cfg.output_dir.rename(moved)  # neither the run folder nor its cache is there to read
    try:
        pretrained = cyclejepa.load_pretrained(copy)
    finally:
        moved.rename(cfg.output_dir)
    mine, theirs = pretrained.embed(records, 500, LEADS), own.embed(records, 500, LEADS)
    assert mine.qc_ok.sum() >= 4
    np.testing.assert_allclose(mine.tokens, theirs.tokens, rtol=0, atol=1e-6)
    np.testing.assert_allclose(mine.embeddings, theirs.embeddings, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(mine.token_phases, theirs.token_phases)
    angles = torch.linspace(0, 6, 7)  # the learned Householder basis came along: the same action
    torch.testing.assert_close(pretrained.symmetry.matrix(angles), own.symmetry.matrix(angles), rtol=0, atol=1e-6)
    assert pretrained.symmetry.basis.matrix() is not None
    assert pretrained.source == {"package": str(copy), "run": "winder-seed0", "step": 2,
                                 "run_hash": own_meta(cfg, 2)["run_hash"]}  # fmt: skip


def own_meta(cfg, step):
    return load_checkpoint(cfg.output_dir / "runs" / "winder-seed0" / "checkpoints" / f"step_{step:06d}.pt")["meta"]


def test_config_holds_what_prepares_the_input_and_who_made_it(run):
    cfg, package, _ = run
    config = json.loads((package / "config.json").read_text())
    prep = config["preprocessing"]
    norm = json.loads((cfg.output_dir / "cache" / "norm.json").read_text())
    assert prep["channels"] == list(LEADS) and prep["cache_fs"] == 500 and prep["model_fs"] == 100
    assert (
        prep["window"] == 5000
        and prep["window_s"] == 10
        and prep["token_patch"] == 8
        and prep["decimation"] == 5
        and prep["n_tokens"] == 125
    )
    assert prep["normalisation"] == {"leads": list(LEADS), "mean": norm["mean"], "std": norm["std"]}
    assert prep["phase_provider"] == "ecg-rpeak" and prep["phase_convention"] == "centre"
    assert prep["decimation_filter"]["taps"] == 101 and prep["decimation_filter"]["window"] == ["kaiser", 5.0]
    taps = firwin(101, 1 / 5, window=("kaiser", 5.0))  # scipy's design, the one resample_poly uses
    np.testing.assert_array_equal(prep["decimation_filter"]["coefficients"], taps)
    assert prep["decimation_filter"]["group_delay"] == 50 and prep["steps"][:6] == [
        "channels",
        "resample",
        "prepare",
        "cut_windows",
        "decimate",
        "normalise",
    ]
    assert "preparation" not in prep and "highpass_filter" not in prep  # PTB-XL's chain prepares nothing before windowing
    assert config["symmetry"]["spectrum"] == "2x0+3x1+2x2+2x3" and config["symmetry"]["basis"] == "householder"
    meta = own_meta(cfg, 2)
    assert config["run"]["step"] == 2 and config["run"]["run_hash"] == meta["run_hash"]
    assert config["run"]["identity"] == meta["identity"] and config["cyclejepa_version"] == cyclejepa.__version__
    model = cyclejepa.load_encoder(cfg.output_dir, device="cpu").model
    assert config["model"]["deployed_parameters"] == sum(
        p.numel() for m in (model.encoder, model.projector) for p in m.parameters()
    )
    assert [s["shape"] for s in config["streaming"]["state"]] == [
        ["batch", 16, 2],
        ["batch", 16, 2],
        ["batch", 16, 4],
        ["batch", 16, 4],
    ]
    assert config["files"] == {
        name: hashlib.sha256((package / name).read_bytes()).hexdigest()
        for name in ("README.md", "model.safetensors", "reference.py")
    }


def test_model_card_reports_the_runs_own_figures(run):
    cfg, package, _ = run
    card = (package / "README.md").read_text()
    result = json.loads((cfg.output_dir / "evaluation" / "winder-seed0-step000002.json").read_text())
    gain = result["mechanism"]["true"]["gain_fraction"]
    row = next(line for line in card.splitlines() if line.startswith("| Transport gain fraction"))
    few = result["validity"]["too_few"]  # 60 records leave a few windows in fold 9: the card's cell says so
    assert row == f"| Transport gain fraction ↑ | {gain:.4f} (few data: {few['windows']} windows, {few['patients']} patients) |"
    for text in (
        "## Training data",
        "Pre-training folds [1, 2, 3, 4, 5, 6, 7, 8]; evaluation folds [9]",
        "## Intended use",
        "## Limits",
        "Not a medical device",
        "checkpoint step 2 of 3",
        "I, II, III, aVR",
    ):
        assert text in card, text


def test_an_unevaluated_step_gets_a_card_without_figures(run, tmp_path):
    cfg, _, _ = run
    package = export_run(cfg.output_dir, tmp_path / "step3", step=3)
    card = (package / "README.md").read_text()
    assert "Step 3 of this run was not evaluated" in card and "| Transport gain fraction" not in card
    assert json.loads((package / "config.json").read_text())["run"]["step"] == 3


def test_graphs_in_the_package_give_the_encoders_tokens(run, tmp_path):
    cfg, _, records = run
    package = export_run(cfg.output_dir, tmp_path / "graphs", onnx=True, torchscript=True)
    names = ["README.md", "config.json", "encoder.onnx", "encoder.pt", "encoder_streaming.onnx",
             "encoder_streaming.pt", "model.safetensors", "reference.py"]  # fmt: skip
    assert sorted(p.name for p in package.iterdir()) == names
    assert sorted(read_package_config(package)["files"]) == [n for n in names if n != "config.json"]
    encoder = cyclejepa.load_pretrained(package)
    window = encoder.prepare(records[0], 500, LEADS).signals  # (1, 12, 1000): normalised, at 100 Hz
    tokens = encoder.embed(records[:1], 500, LEADS).tokens
    (onnx,) = ort.InferenceSession(str(package / "encoder.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": window})
    np.testing.assert_allclose(onnx, tokens, rtol=0, atol=1e-4)
    with torch.no_grad():
        scripted = torch.jit.load(str(package / "encoder.pt"))(torch.from_numpy(window)).numpy()
    np.testing.assert_allclose(scripted, tokens, rtol=0, atol=1e-5)


def damaged(package, tmp_path, name, change):
    """A copy of ``package`` with ``change`` applied to the bytes of its file ``name``."""
    copy = shutil.copytree(package, tmp_path / "damaged")
    path = copy / name
    path.write_bytes(change(path.read_bytes()))
    return copy


@pytest.mark.parametrize(
    "name, change, error, message",
    [
        ("model.safetensors", lambda b: b[: len(b) // 2], PackageError, "model.safetensors does not match its sha256"),
        ("model.safetensors", lambda b: b[:-5] + bytes([b[-5] ^ 1]) + b[-4:], PackageError, "damaged, cut short or changed"),
        ("config.json", lambda b: b.replace(b'"cache_fs": 500.0', b'"cache_fs": 250.0'), PackageError, "changed after export"),
        ("config.json", lambda b: b[:100], PackageError, "not valid JSON"),
    ],
    ids=["truncated-weights", "flipped-bit", "edited-config", "truncated-config"],
)
def test_damaged_or_changed_packages_are_refused(run, tmp_path, name, change, error, message):
    _, package, _ = run
    with pytest.raises(error, match=message):
        cyclejepa.load_pretrained(damaged(package, tmp_path, name, change))


def test_a_missing_file_is_named(run, tmp_path):
    _, package, _ = run
    copy = shutil.copytree(package, tmp_path / "copy")
    (copy / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors is missing from the package"):
        cyclejepa.load_pretrained(copy)
    with pytest.raises(FileNotFoundError, match="no config.json"):
        cyclejepa.load_pretrained(tmp_path)


def resealed(package, tmp_path, edit):
    """A copy of ``package`` whose weights ``edit`` changed, with checksums that match (as a
    faulty exporter would write it): only the strict loading can catch it."""
    copy = shutil.copytree(package, tmp_path / "resealed")
    weights = safetensors_torch.load_file(copy / "model.safetensors")
    edit(weights)
    safetensors_torch.save_file(weights, copy / "model.safetensors")
    config = json.loads((copy / "config.json").read_text())
    config["files"]["model.safetensors"] = hashlib.sha256((copy / "model.safetensors").read_bytes()).hexdigest()
    config["config_sha256"] = _config_digest(config)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda w: w.pop("projector.2.bias"), r"missing: projector\.2\.bias"),
        (lambda w: w.update({"predictor.output.bias": torch.zeros(16)}), r"unexpected: predictor\.output\.bias"),
        (lambda w: w.pop("symmetry.basis.vectors"), r"missing: symmetry\.basis\.vectors"),
        (
            lambda w: w.update({"encoder.blocks.0.norm1.weight": torch.ones(8)}),
            r"wrong shape: encoder\.blocks\.0\.norm1\.weight \(8,\) \(the architecture has \(16,\)\)",
        ),
    ],
    ids=["missing", "extra", "missing-basis", "shape"],
)
def test_weights_load_strictly(run, tmp_path, edit, message):
    _, package, _ = run
    with pytest.raises(PackageError, match=message):
        cyclejepa.load_pretrained(resealed(package, tmp_path, edit))


def test_embed_refuses_input_it_cannot_conform(run):
    _, package, records = run
    encoder = cyclejepa.load_pretrained(package)
    with pytest.raises(ValueError, match=r"record 0: no channel \['V6'\]"):
        encoder.embed(records[:, :11], 500, LEADS[:11])
    with pytest.raises(ValueError, match="record 0: the record is sampled at 50 Hz, below the 100 Hz the encoder reads"):
        encoder.embed(records[:, :, ::10], 50, LEADS)
    with pytest.raises(ValueError, match=r"record 0: non-finite samples on \['II'\]"):
        bad = records[:1].copy()
        bad[0, 1, 7] = np.nan
        encoder.embed(bad, 500, LEADS)
    with pytest.raises(ValueError, match=r"11 channel names for a signal of shape \(12, 5000\)"):
        encoder.embed(records, 500, LEADS[:11])
    upper = encoder.embed(records[:2, ::-1], 500, [lead.upper() for lead in LEADS[::-1]])  # any order, any case
    np.testing.assert_allclose(upper.tokens, encoder.embed(records[:2], 500, LEADS).tokens, rtol=0, atol=1e-6)


def test_export_refuses_an_existing_folder_and_says_what_is_missing(run, tmp_path, monkeypatch):
    cfg, package, _ = run
    with pytest.raises(FileExistsError, match="exists; choose another folder or overwrite it"):
        export_run(cfg.output_dir, package)
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="is not an encoder package; it is left alone"):
        export_run(cfg.output_dir, tmp_path, overwrite=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)
    result = CliRunner().invoke(app, ["export", str(cfg.output_dir), "--out", str(tmp_path / "new")])
    assert result.exit_code == 1 and "weights packages need safetensors: pip install 'cyclejepa[export]'" in result.output
    assert not (tmp_path / "new").exists()


# ------------------------------------------------------------ the package a device engineer uses

ARCHIVE = SHARED / "data" / "ptbxl-dev" / "ptbxl-dev-434.tar.xz"
FORBID = """import sys


class Forbid:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "cyclejepa", "scipy"):
            raise ImportError(f"{name} may not be imported by the reference")


sys.meta_path.insert(0, Forbid())
"""


@pytest.fixture(scope="module")
def real_records(tmp_path_factory):
    """Three real PTB-XL records (WFDB, 500 Hz, 10 s) from the shared archive; skips without it."""
    if not ARCHIVE.is_file():
        pytest.skip(f"real PTB-XL records not found at {ARCHIVE}")
    folder = tmp_path_factory.mktemp("real")
    wanted = {f"ptbxl-dev/records500/00000/{i:05d}_hr.{ext}" for i in (1, 2, 3) for ext in ("hea", "dat")}
    with tarfile.open(ARCHIVE) as archive:
        for member in archive:
            if member.name in wanted:
                archive.extract(member, folder, filter="data")
                wanted.discard(member.name)
                if not wanted:
                    break
    return [folder / "ptbxl-dev" / "records500" / "00000" / f"{i:05d}_hr" for i in (1, 2, 3)]


@pytest.fixture(scope="module")
def onnx_package(run, tmp_path_factory):
    cfg, _, _ = run
    return export_run(cfg.output_dir, tmp_path_factory.mktemp("onnx") / "package", onnx=True)


def reference(package, signal, fs, names, folder, *options, repeated=False, out="tokens.npy"):
    """Run ``package/reference.py`` on ``signal`` in a process that cannot import torch, cyclejepa or
    scipy (``names`` comma-joined in one ``--channels``, or ``repeated``: one option each; tokens
    to ``folder / out``); returns the finished process and the top-level modules it imported."""
    guard = folder / "guard"
    guard.mkdir(exist_ok=True)
    (guard / "sitecustomize.py").write_text(FORBID)
    np.save(folder / "signal.npy", signal)
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(guard), "OMP_NUM_THREADS": "1"}
    blocked = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, env=env)
    assert blocked.returncode != 0 and "may not be imported" in blocked.stderr  # the guard works
    channels = [word for name in names for word in ("--channels", name)] if repeated else ["--channels", ",".join(names)]
    command = [sys.executable, "-X", "importtime", str(package / "reference.py"), str(folder / "signal.npy"),
               "--fs", str(fs), *channels, "--out", str(folder / out), *options]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=folder)
    imported = {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines() if line.startswith("import time:")}
    return done, imported


@pytest.mark.slow
@pytest.mark.parametrize("fs", [500, 250], ids=["native-rate", "resampled"])
def test_the_reference_streams_a_real_record_to_embeds_tokens_without_torch(run, onnx_package, real_records, tmp_path, fs):
    """27.3 s of real ECG (three PTB-XL records end to end: two windows and a dropped tail), fed
    sample by sample through reference.py's preparation and the streaming ONNX graph, gives the
    tokens and the all-token mean of `embed` to 1e-4, every token, no warm-up."""
    signal = np.concatenate([read_record_fast(path) for path in real_records], axis=1)[:, :13650]
    if fs != 500:
        signal = resample_poly(signal.astype(np.float64), fs, 500, axis=1).astype(np.float32)
    done, imported = reference(onnx_package, signal, fs, LEADS, tmp_path, "--mean-tokens", str(tmp_path / "mean.npy"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "numpy" in imported and "onnxruntime" in imported and not imported & {"torch", "cyclejepa", "scipy"}
    expected = cyclejepa.load_pretrained(onnx_package).embed(signal, fs, LEADS)
    tokens = np.load(tmp_path / "tokens.npy")
    assert tokens.shape == expected.tokens.shape == (2, 125, 16)
    assert np.abs(tokens - expected.tokens).max() <= 1e-4
    assert np.abs(np.load(tmp_path / "mean.npy") - expected.mean_tokens[0]).max() <= 1e-4


def test_embed_cli_reads_a_package_and_matches_the_reference(onnx_package, real_records, tmp_path):
    out = tmp_path / "embedded.npz"
    result = CliRunner().invoke(app, ["embed", str(onnx_package), str(real_records[0]), "--out", str(out)])
    assert result.exit_code == 0, result.output
    saved = np.load(out)
    done, _ = reference(onnx_package, read_record_fast(real_records[0]), 500, LEADS, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert np.abs(np.load(tmp_path / "tokens.npy") - saved["tokens"]).max() <= 1e-4
    refused = CliRunner().invoke(app, ["embed", str(onnx_package), str(real_records[0]), "--out", str(out), "--checkpoint", "2"])
    assert refused.exit_code == 1 and "is a package of one checkpoint: --checkpoint do not apply" in refused.output


def test_the_reference_refuses_what_it_cannot_prepare_as_the_library_does(onnx_package, real_records, tmp_path):
    copy = shutil.copytree(onnx_package, tmp_path / "later")
    config = json.loads((copy / "config.json").read_text())
    config["preprocessing"]["highpass"] = {"cutoff_hz": 0.5}
    (copy / "config.json").write_text(json.dumps(config))
    signal = read_record_fast(real_records[0])
    done, _ = reference(copy, signal, 500, LEADS, tmp_path)
    assert done.returncode == 1 and "['highpass'], which this reference does not implement" in done.stderr
    config["preprocessing"].pop("highpass")
    config["preprocessing"]["steps"].insert(3, "highpass")
    (copy / "config.json").write_text(json.dumps(config))
    done, _ = reference(copy, signal, 500, LEADS, tmp_path)
    assert done.returncode == 1 and "implements ['channels', 'resample'" in done.stderr
    done, _ = reference(onnx_package, signal[:11], 500, LEADS[:11], tmp_path)
    assert done.returncode == 1 and "no channel ['V6']" in done.stderr
    graph = copy / "encoder_streaming.onnx"
    shutil.copy(onnx_package / "config.json", copy / "config.json")
    graph.write_bytes(graph.read_bytes()[:-10])
    done, _ = reference(copy, signal, 500, LEADS, tmp_path)
    assert done.returncode == 1 and "encoder_streaming.onnx does not match its sha256" in done.stderr
    assert not (tmp_path / "tokens.npy").exists()


def refused(done) -> str:
    """The one line a refusal of reference.py prints (exit status 1, no traceback)."""
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
    assert len(lines) == 1, lines
    return lines[0]


def test_the_reference_refuses_signals_the_library_refuses(onnx_package, real_records, tmp_path):
    """Non-real dtypes, a rate below the model's, samples past float32 and text: one line each,
    exit status 1, nothing written."""
    signal = read_record_fast(real_records[0])
    cases = {
        "bool": (signal > 0, 500, "not dtype bool"),
        "complex": (signal + 1j, 500, "not dtype complex"),
        "dates": (signal.astype("datetime64[ms]"), 500, r"not dtype datetime64\[ms\]"),
        "text": (signal.astype(str), 500, "not dtype <U"),
        "slow": (signal[:, ::1000], 0.5, r"sampled at 0.5 Hz, below the 100 Hz the encoder reads .* give it at 100 Hz or more"),
        "huge": (np.full_like(signal, 3e38), 500, r"normalised samples of \['I', 'II'.* overflow float32"),
        "past float32": (signal.astype(np.float64) * 1e300, 500, r"samples on \['I', 'II'.* exceed the float32 range"),
    }  # fmt: skip
    for case, (x, fs, message) in cases.items():
        line = refused(reference(onnx_package, x, fs, LEADS, tmp_path)[0])
        assert re.search(message, line), f"{case}: {line}"
    assert not (tmp_path / "tokens.npy").exists()


def test_the_reference_refuses_a_package_the_library_refuses(onnx_package, real_records, tmp_path):
    signal = read_record_fast(real_records[0])
    edits = {
        "normalisation.mean of II: must be a finite number": lambda p: p["normalisation"]["mean"].__setitem__(1, float("nan")),
        "normalisation.std of I: must be a finite number in \\[1e-09": lambda p: p["normalisation"]["std"].__setitem__(0, 0),
        r"token_patch: must be an integer in \[1, 4096\], got 0": lambda p: p.__setitem__("token_patch", 0),
        "input_range.out_of_range_decades: must be a finite number": lambda p: p["input_range"].__setitem__(
            "out_of_range_decades", "one"
        ),
    }  # fmt: skip
    for message, edit in edits.items():
        copy = shutil.copytree(onnx_package, tmp_path / "edited", dirs_exist_ok=True)
        config = json.loads((onnx_package / "config.json").read_text())
        edit(config["preprocessing"])
        (copy / "config.json").write_text(json.dumps(config))
        line = refused(reference(copy, signal, 500, LEADS, tmp_path)[0])
        assert re.search(f"config.json preprocessing.{message}", line), line


def test_the_reference_flags_input_far_from_the_normalisation_as_embed_does(onnx_package, real_records, tmp_path):
    """Raw ADC counts (int16, 1000 per mV): tokens written, and the library's out_of_range reason
    on stderr, same channel and distance; the output folder is made."""
    counts = np.round(read_record_fast(real_records[0]) * 1000).astype(np.int16)
    done, _ = reference(onnx_package, counts, 500, LEADS, tmp_path, out="new/folder/tokens.npy")
    assert done.returncode == 0, done.stderr[-2000:]
    expected = cyclejepa.load_pretrained(onnx_package).embed(counts, 500, LEADS)
    limit = json.loads((onnx_package / "config.json").read_text())["preprocessing"]["input_range"]["out_of_range_decades"]
    assert limit == OUT_OF_RANGE_DECADES  # the package carries the library's rule
    reason = expected.qc_reason[0].split("; ")[-1]
    assert reason.startswith("out_of_range: channel ") and reason in done.stderr
    assert (
        np.abs(np.load(tmp_path / "new" / "folder" / "tokens.npy") - expected.tokens).max()
        <= 1e-3 * np.abs(expected.tokens).max()
    )


def test_the_cards_command_line_runs_the_reference(onnx_package, real_records, tmp_path):
    """The package's README says how to run reference.py; its command line, as written, gives embed's tokens."""
    card = (onnx_package / "README.md").read_text()
    command = re.search(r"```bash\n(python DIR/reference\.py SIGNAL\.npy .*)\n```", card).group(1)
    assert "--fs 500 --channels I --channels II --channels III --channels aVR" in command
    signal = read_record_fast(real_records[0])
    np.save(tmp_path / "SIGNAL.npy", signal)
    words = shlex.split(command.replace("DIR", str(onnx_package)))
    done = subprocess.run([sys.executable, *words[1:]], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    expected = cyclejepa.load_pretrained(onnx_package).embed(signal, 500, LEADS)
    assert np.abs(np.load(tmp_path / "tokens.npy") - expected.tokens).max() <= 1e-4
    assert np.abs(np.load(tmp_path / "mean.npy") - expected.mean_tokens[0]).max() <= 1e-4


def test_the_reference_keeps_the_librarys_limits():
    """reference.py imports nothing of cyclejepa: its copies of the library's limits are the library's."""
    from cyclejepa.data import preprocess
    from cyclejepa.export import checks
    from cyclejepa.export import reference as script

    assert (script.MIN_STD, script.MAX_ABS_MEAN) == (checks.MIN_STD, checks.MAX_ABS_MEAN)
    assert (script.MIN_FS, script.MAX_FS) == (preprocess.MIN_FS, preprocess.MAX_FS)
    assert script.SCOPES == preprocess.SCOPES
    assert {key: checks.MAX_SIZE[key] for key in script.MAX_SIZE} == script.MAX_SIZE
    assert script.OUT_OF_RANGE_DECADES == OUT_OF_RANGE_DECADES
    x = np.random.default_rng(0).normal(3.0, 20.0, (2, 3, 400))
    assert script.distance_from_normalisation(x) == input_distance(x)
    names = ["PLETH,", " II, ", "mod.V1", "V1-V2", "Resp (Ohm)", "ECG1;", "aVR.", "HR,\t", "x_", "MLII"]
    assert [script.name_key(n) for n in names] == [channel_key(n) for n in names]  # the library's one rule


def test_reference_channels_are_repeated_options_so_a_comma_is_part_of_a_name(onnx_package, real_records, tmp_path):
    """PhysioNet writes names such as ``II,``: given one per --channels they are never split, and
    they match the package's channel as the library matches them; the comma-joined form still
    works when it is unambiguous; two rows for one channel are refused naming both."""
    signal = read_record_fast(real_records[0])
    written = [f"{lead}," for lead in LEADS]  # as MIMIC-derived releases write them
    done, _ = reference(onnx_package, signal, 500, written, tmp_path, repeated=True)
    assert done.returncode == 0, done.stderr[-2000:]
    tokens = np.load(tmp_path / "tokens.npy")
    done, _ = reference(onnx_package, signal, 500, LEADS, tmp_path, out="joined.npy")
    assert done.returncode == 0, done.stderr[-2000:]
    np.testing.assert_array_equal(np.load(tmp_path / "joined.npy"), tokens)
    line = refused(reference(onnx_package, signal, 500, written, tmp_path)[0])  # 24 parts for 12 rows: ambiguous
    assert "1 channel names ['I,,II,," in line and "give one --channels per row" in line
    line = refused(reference(onnx_package, np.vstack([signal, signal[:1]]), 500, [*LEADS, "i"], tmp_path, repeated=True)[0])
    assert "rows ['I', 'i'] all match channel 'I'" in line


KILLED_EXPORT = """
import os
import sys

from cyclejepa.export import package
from cyclejepa.pipeline import export_run


def killed(*args, **kwargs):
    os._exit(137)  # the process ends here, as under SIGKILL: no clean-up runs


package.model_card = killed  # called once the weights are written
export_run(sys.argv[1], sys.argv[2])
"""


def test_an_export_killed_part_way_leaves_no_staging_folder_behind(run, tmp_path, monkeypatch):
    """The hidden folder of an export killed part-way is removed by the next export to the same
    folder; one that fails removes its own."""
    from cyclejepa.export import package as package_module

    cfg, _, _ = run
    out = tmp_path / "package"
    done = subprocess.run([sys.executable, "-c", KILLED_EXPORT, str(cfg.output_dir), str(out)], capture_output=True, text=True)
    assert done.returncode == 137, done.stderr[-2000:]
    (left,) = tmp_path.iterdir()
    assert left.name.startswith(".package.") and (left / "model.safetensors").is_file()  # what the killed export left

    def failing(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(package_module, "model_card", failing)
    with pytest.raises(OSError, match="No space left on device"):
        export_run(cfg.output_dir, out)
    monkeypatch.undo()
    assert not list(tmp_path.iterdir())
    export_run(cfg.output_dir, out)
    assert [p.name for p in tmp_path.iterdir()] == ["package"]


def test_the_package_is_readable_by_others_whatever_the_umask(run, tmp_path):
    cfg, _, _ = run
    previous = os.umask(0o077)
    try:
        package = export_run(cfg.output_dir, tmp_path / "shared")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(package.stat().st_mode) == 0o755
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in package.iterdir()} == dict.fromkeys(
        ["README.md", "config.json", "model.safetensors", "reference.py"], 0o644
    )


def front(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def test_the_card_has_hub_front_matter_with_the_evaluation_behind_each_metric(run):
    cfg, package, _ = run
    card = (package / "README.md").read_text()
    meta = front(card)
    assert meta["license"] == "mit" and meta["library_name"] == "cyclejepa" and meta["data_license"] == "MIT"
    assert "synthetic" in meta["tags"] and meta["datasets"] == ["synthetic"]
    result = json.loads((cfg.output_dir / "evaluation" / "winder-seed0-step000002.json").read_text())
    metrics = {m["name"]: m for r in meta["model-index"][0]["results"] for m in r["metrics"]}
    superclass = result["diagnostic"]["superclass"]
    assert metrics["macro-AUROC (superclass)"] == {
        "type": "roc_auc", "name": "macro-AUROC (superclass)", "value": round(superclass["macro_auroc"]["point"], 4),
        "ci_95": [round(superclass["macro_auroc"]["low"], 4), round(superclass["macro_auroc"]["high"], 4)],
        "bootstrap": 20, "records": superclass["counts"]["eval_records"], "patients": superclass["counts"]["eval_patients"],
    }  # fmt: skip
    assert "I, II, III, aVR, aVL, aVF, V1, V2, V3, V4, V5, V6 (mV)" in card
    assert PTBXL.licence == "CC-BY-4.0" and "10.1038/s41597-020-0495-6" in PTBXL.citation


def test_card_units_come_from_the_data():
    from cyclejepa.export.card import _channels

    assert _channels({"channels": ["PLETH", "RESP"], "units": ["NU", "NU"]}) == "PLETH, RESP (NU)"
    assert _channels({"channels": ["II", "PLETH"], "units": ["mV", "NU"]}) == "II (mV), PLETH (NU)"


def test_card_states_the_preparation_and_fills_in_the_phase_action():
    """A package whose dataset prepares records (wfdb: drop, high-pass, scope) says so, and that
    `reference.py` applies it to whole records; the phase action is written out, not left as a
    template."""
    from cyclejepa.export.card import _input_section, _running_section

    prep = {"phase_provider": "pulse", "phase_options": {}, "channels": ["PLETH"], "units": ["NU"], "cache_fs": 125.0,
            "decimation": 5, "model_fs": 25.0, "window_s": 10.0, "token_patch": 2}  # fmt: skip
    symmetry = {"name": "u1", "spectrum": "4x0+4x1", "basis": "canonical"}
    model = {"projector": {"out_dim": 12}}
    plain = _input_section(prep, symmetry, 125, model)
    assert "Phase action: `u1`, spectrum `4x0+4x1`, basis `canonical`" in plain and "{" not in plain
    assert "Preparation before windowing: none" in plain and "`reference.py` reproduce alone" in plain
    prepared = _input_section({**prep, "preparation": {"highpass_hz": [0.25], "scope": "corpus", "drop_s": 3.0}},
                              symmetry, 125, model)  # fmt: skip
    assert "the first 3 s dropped; zero-phase high-pass PLETH 0.25 Hz; z-score scope `corpus`" in prepared
    assert "the graphs and `reference.py` reproduce alone" in prepared
    streamed = _running_section(prep)
    assert "Each sample is prepared as it arrives" in streamed and "dropped" not in streamed
    held = _running_section({**prep, "preparation": {"highpass_hz": [], "scope": "window", "drop_s": 3.0}})
    assert "the first 3 s dropped; each window's own z-score per channel; windows of 10 s" in held
    assert "high-pass with" not in held and "encodes them when the record ends" in held


def test_an_edited_card_or_a_deleted_graph_is_no_reason_to_refuse(onnx_package, tmp_path):
    copy = shutil.copytree(onnx_package, tmp_path / "edited")
    (copy / "README.md").write_text((copy / "README.md").read_text() + "\nReviewed by the device team.\n")
    (copy / "encoder.onnx").unlink()
    (copy / "reference.py").unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cyclejepa.load_pretrained(copy)
    graph = copy / "encoder_streaming.onnx"
    graph.write_bytes(graph.read_bytes()[:-10])
    with pytest.warns(UserWarning, match="encoder_streaming.onnx does not match its sha256"):
        cyclejepa.load_pretrained(copy)


def test_the_files_describe_themselves(onnx_package):
    config = read_package_config(onnx_package)
    prep = config["preprocessing"]
    for name in ("encoder.onnx", "encoder_streaming.onnx"):
        props = {p.key: p.value for p in onnx.load(str(onnx_package / name)).metadata_props}
        assert props["channels"] == ",".join(LEADS) and props["units"] == ",".join(["mV"] * 12)
        assert (props["cache_fs"], props["model_fs"], props["window"], props["token_patch"]) == ("500", "100", "5000", "8")
        assert json.loads(props["normalisation"]) == prep["normalisation"]
        assert props["cyclejepa_version"] == cyclejepa.__version__ and props["onnx_opset"] == "17"
        assert props["format_version"] == str(FORMAT_VERSION) and props["torch_version"] == torch.__version__
    offline = ort.InferenceSession(str(onnx_package / "encoder.onnx"), providers=["CPUExecutionProvider"])
    assert offline.get_inputs()[0].shape == ["batch", 12, "samples"] and offline.get_outputs()[0].shape == ["batch", "tokens", 16]
    with safe_open(str(onnx_package / "model.safetensors"), framework="pt") as weights:
        metadata = weights.metadata()
    assert (
        metadata["format"] == "pt"
        and metadata["package_format"] == "cyclejepa-encoder"
        and metadata["format_version"] == str(FORMAT_VERSION)
    )
    assert json.loads(metadata["model"]) == config["model"] and json.loads(metadata["symmetry"]) == config["symmetry"]
    assert config["versions"]["onnx"] == onnx.__version__ and config["versions"]["onnx_opset"] == "17"
    assert config["versions"]["numpy"] == np.__version__ and config["torch_version"] == torch.__version__


def test_save_pretrained_and_from_pretrained(run, tmp_path):
    cfg, _, records = run
    own = cyclejepa.load_encoder(cfg.output_dir, step=3, device="cpu")
    saved = cyclejepa.save_pretrained(own, tmp_path / "from-encoder")
    also = cyclejepa.save_pretrained(cfg.output_dir, tmp_path / "from-run", step=3)
    for package in (saved, also):
        loaded = cyclejepa.from_pretrained(package)
        assert loaded.source["step"] == 3
        np.testing.assert_allclose(
            loaded.embed(records[:2], 500, LEADS).tokens, own.embed(records[:2], 500, LEADS).tokens, rtol=0, atol=1e-6
        )
    assert json.loads((saved / "config.json").read_text())["run"]["weights"] == "checkpoint"
    with pytest.raises(ValueError, match="was loaded from the package"):
        cyclejepa.save_pretrained(cyclejepa.from_pretrained(saved), tmp_path / "again")
    with torch.no_grad():  # an in-memory change (e.g. fine-tuning) is saved as it is, and said
        own.model.projector[2].bias.add_(0.5)
    tuned = cyclejepa.save_pretrained(own, tmp_path / "tuned")
    np.testing.assert_allclose(cyclejepa.from_pretrained(tuned).embed(records[:2], 500, LEADS).tokens,
                               own.embed(records[:2], 500, LEADS).tokens, rtol=0, atol=1e-6)  # fmt: skip
    assert read_package_config(tuned)["run"]["weights"] == "changed in memory after loading the checkpoint"
    assert "the run's evaluation does not apply to them" in (tuned / "README.md").read_text()


def test_the_package_states_what_its_spec_says(run, tmp_path):
    """`write_package` takes the run's facts from its `ExportSpec` alone: the export stage's spec
    holds the run's config, cache and evaluation facts, and a spec changed by hand is what the
    package and its card then state."""
    from cyclejepa.export import write_package

    cfg, package, _ = run
    located, plan = pipeline.locate_run(Path(cfg.output_dir))
    spec = pipeline.export_spec(located, plan, 2)
    manifest = pipeline.configured_cache(cfg).manifest
    assert (spec.experiment, spec.run, spec.arm, spec.encoder) == (
        "tiny",
        "winder-seed0",
        "winder",
        cfg.model.encoder.model_dump(mode="json"),
    )
    assert (spec.cache_hash, spec.card.counts, spec.card.eval_folds) == (manifest["config_hash"], manifest["counts"], (9,))
    saved = json.loads((cfg.output_dir / "evaluation" / "winder-seed0-step000002.json").read_text())
    assert spec.evaluation is not None and (spec.evaluation.step, spec.evaluation.checksum) == (2, saved["checksum"])
    encoder = pipeline.run_encoder(located, plan, 2, "cpu")
    again = write_package(encoder, spec, tmp_path / "again")
    assert read_package_config(again)["preprocessing"] == read_package_config(package)["preprocessing"]
    assert (again / "README.md").read_text() == (package / "README.md").read_text()
    card = dataclasses.replace(spec.card, dataset_options={"records": 7}, augmentations=("jitter", "scale"), lr=0.125,
                               data_licence="", train_folds=(2, 3))  # fmt: skip
    stated = write_package(
        encoder, dataclasses.replace(spec, experiment="renamed", evaluation=None, card=card), tmp_path / "stated"
    )
    text = (stated / "README.md").read_text()
    assert read_package_config(stated)["run"]["experiment"] == "renamed" and front(text)["data_license"] == "unknown"
    for phrase in (
        "with options {'records': 7}",
        "augmentations: jitter, scale",
        "AdamW at lr 0.125",
        "Pre-training folds [2, 3]",
        "Step 2 of this run was not evaluated",
    ):
        assert phrase in text, phrase


def test_export_and_embed_read_no_experiment_config():
    """Below the pipeline, the export and embed layers take narrow inputs: no import of the config
    module or the pipeline, no mention of `ExperimentConfig` or `RunPlan`."""
    import ast

    from test_layout import PACKAGE, imports

    for path in [PACKAGE / "embed.py", *sorted((PACKAGE / "export").glob("*.py"))]:
        reached = [name for _, name, _ in imports(path) if name.startswith(("cyclejepa.config", "cyclejepa.pipeline"))]
        nodes = list(ast.walk(ast.parse(path.read_text())))
        named = {getattr(n, "id", None) or getattr(n, "attr", None) or getattr(n, "name", None) for n in nodes
                 if isinstance(n, (ast.Name, ast.Attribute, ast.alias))} & {"ExperimentConfig", "RunPlan", "pipeline"}  # fmt: skip
        assert not reached and not named, f"{path.name}: {reached} {sorted(named)}"


def rewritten(package, tmp_path, edit, name="rewritten"):
    """A copy of ``package`` whose config.json ``edit`` changed, resealed (a digest that matches)."""
    copy = shutil.copytree(package, tmp_path / name)
    config = json.loads((copy / "config.json").read_text())
    edit(config)
    config["config_sha256"] = _config_digest(config)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def as_format_3(config):
    """Format 3: the cache rate of ``preprocessing`` named ``fs``, no ``n_tokens``."""
    config["format_version"] = 3
    prep = config["preprocessing"]
    prep["fs"] = prep.pop("cache_fs")
    del prep["n_tokens"]


def as_format_2(config):
    """Format 2: the card was MODEL_CARD.md; no steps, taps or versions."""
    as_format_3(config)
    config["format_version"] = 2
    config["files"]["MODEL_CARD.md"] = config["files"].pop("README.md")
    del config["files"]["reference.py"], config["versions"], config["preprocessing"]["steps"]


def test_older_and_newer_formats(run, tmp_path):
    _, package, records = run

    def format_2(config):
        as_format_2(config)

    old = rewritten(package, tmp_path, format_2, "v2")
    (old / "README.md").rename(old / "MODEL_CARD.md")
    (old / "reference.py").unlink()
    read = cyclejepa.load_pretrained(old).embed(records[:1], 500, LEADS).tokens
    current = cyclejepa.load_pretrained(package)
    np.testing.assert_array_equal(read, current.embed(records[:1], 500, LEADS).tokens)
    three = cyclejepa.load_pretrained(rewritten(package, tmp_path, as_format_3, "v3"))  # the rate named fs
    assert three.geometry == current.geometry and "cache_fs" in json.loads((package / "config.json").read_text())["preprocessing"]
    np.testing.assert_array_equal(three.embed(records[:1], 500, LEADS).tokens, read)
    with pytest.raises(
        PackageError, match=r"package format 1, which no released cyclejepa reads any more .* export the run again"
    ):
        cyclejepa.load_pretrained(rewritten(package, tmp_path, lambda c: c.update(format_version=1), "v1"))
    newer = rewritten(package, tmp_path, lambda c: c.update(format_version=FORMAT_VERSION + 1, cyclejepa_version="9.0"), "vnext")
    with pytest.raises(
        PackageError, match=rf"package format {FORMAT_VERSION + 1}, written by cyclejepa 9\.0; .* upgrade cyclejepa"
    ):
        cyclejepa.load_pretrained(newer)


def _set(path, value):
    def edit(config):
        *parents, last = path
        node = config
        for key in parents:
            node = node[key]
        node[last] = value

    return edit


SHA = "0" * 64
HOSTILE = [
    (lambda c: c["files"].update({"../../x": SHA}), r"files\['\.\./\.\./x'\]: must name a file of the package folder"),
    (lambda c: c["files"].update({"/etc/hostname": SHA}), r"files\['/etc/hostname'\]"),
    (lambda c: c["files"].pop("model.safetensors"), r"files: has no checksum of \['model.safetensors'\]"),
    (lambda c: c["files"].update({"README.md": 7}), r"files\['README.md'\]: must be a sha256"),
    (
        lambda c: (_set(["model", "encoder", "width"], 9000)(c), _set(["model", "projector", "in_dim"], 9000)(c)),
        r"does not fit the architecture in config.json; wrong shape: encoder",
    ),  # found before any allocation
    (
        _set(["symmetry", "basis_options", "reflections"], 10**9),
        r"wrong shape: symmetry.basis.vectors \(4, 16\) \(the architecture has \(1000000000, 16\)\)",
    ),
    (_set(["model", "encoder", "width"], 10**6), r"model.encoder.width: must be an integer in \[1, 16384\]"),
    (_set(["model", "encoder", "leads"], 10**9), r"model.encoder.leads: must be an integer"),
    (_set(["model", "encoder", "name"], "no-such-encoder"), r"cannot build the encoder it describes"),
    (_set(["model"], "str"), r"config.json model: must be an object, got str"),
    (_set(["preprocessing", "normalisation", "mean", 0], float("nan")), r"normalisation.mean of I: must be a finite number"),
    (_set(["preprocessing", "normalisation", "mean", 1], 1e300), r"normalisation.mean of II: must be a finite number"),
    (_set(["preprocessing", "normalisation", "std", 2], 1e-300), r"normalisation.std of III: must be a finite number in \[1e-09"),
    (_set(["preprocessing", "channels"], ["I"] * 12), r"preprocessing.channels: names \['I'\] more than once"),
    (
        lambda c: (
            _set(["preprocessing", "channels", 0], "X1")(c),
            _set(["preprocessing", "normalisation", "leads", 0], "X1")(c),
        ),
        r"preprocessing.channels: \['X1'\] are not channels of dataset 'synthetic'",
    ),
    (_set(["preprocessing", "decimation"], 0), r"preprocessing.decimation: must be an integer in \[1, 1000\], got 0"),
    (_set(["preprocessing", "token_patch"], 0), r"preprocessing.token_patch: must be an integer in \[1, 4096\], got 0"),
    (_set(["preprocessing", "window"], 4999), r"preprocessing.window: 4999 samples are not whole tokens"),
    (_set(["preprocessing", "window_s"], 8.0), r"preprocessing.window_s: 8.0 s at 500 Hz is not the window of 5000 samples"),
    (_set(["preprocessing", "phase_provider"], "nothing"), r"config.json preprocessing: .*nothing"),
    (_set(["symmetry", "spectrum"], "4x0"), r"spectrum 4x0 is not of the projector's dimension 16"),
    (_set(["format_version"], "3"), r"format_version: must be an integer"),
]


@pytest.mark.parametrize("edit, message", HOSTILE, ids=[str(i) for i in range(len(HOSTILE))])
def test_a_hostile_config_is_refused_naming_the_field(run, tmp_path, edit, message):
    _, package, _ = run
    with pytest.raises(PackageError, match=message):
        cyclejepa.load_pretrained(rewritten(package, tmp_path, edit))


def test_a_listed_file_that_links_out_of_the_package_is_refused(run, tmp_path):
    _, package, _ = run
    outside = tmp_path / "outside.txt"
    outside.write_text("not the package's")
    copy = rewritten(
        package, tmp_path, lambda c: c["files"].update({"notes.txt": hashlib.sha256(outside.read_bytes()).hexdigest()})
    )
    (copy / "notes.txt").symlink_to(outside)
    with pytest.raises(PackageError, match=r"files\['notes.txt'\]: .* is a symbolic link"):
        cyclejepa.load_pretrained(copy)


def test_non_finite_weights_are_refused_by_name(run, tmp_path):
    _, package, _ = run
    copy = resealed(package, tmp_path, lambda w: w["encoder.blocks.1.conv1.weight"].view(-1).__setitem__(0, float("nan")))
    with pytest.raises(
        PackageError, match=r"non-finite \(NaN or infinite\) weights in 1 tensor\(s\): encoder.blocks.1.conv1.weight"
    ):
        cyclejepa.load_pretrained(copy)


# ------------------------------------------------------------ fuzzing the package loader


def _paths(node, prefix=()):
    """Every key path of a JSON tree."""
    yield prefix
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        yield from _paths(child, (*prefix, key))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=8,
)  # fmt: skip
FILE_NAMES = st.sampled_from(
    ["..", ".", "../x", "/etc/hostname", "a/b", "model.safetensors", "config.json", "x\\y", ""]
) | st.text(max_size=10)


def _mutate(config, paths, mutations):
    for kind, index, value, name in mutations:
        path = paths[index % len(paths)]
        parent = config
        try:
            for key in path[:-1]:
                parent = parent[key]
            if kind == "files":
                config["files"][name] = value if isinstance(value, str) else SHA
            elif not path:
                continue
            elif kind == "delete":
                del parent[path[-1]]
            else:
                parent[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or replaced this path


def test_fuzzed_config_json_gives_package_errors_only(run, tmp_path):
    """Generated mutations of a real package's config.json (values replaced by any JSON, keys
    deleted, hostile file names), resealed so that only the field checks can catch them: the
    loader either loads or raises `PackageError`, each example in bounded time, memory bounded."""
    _, package, _ = run
    copy = shutil.copytree(package, tmp_path / "fuzzed")
    base = json.loads((copy / "config.json").read_text())
    paths = [p for p in _paths(base) if p[:2] != ("run", "identity")]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    @settings(max_examples=500, deadline=10_000, database=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(st.sampled_from(["replace", "replace", "delete", "files"]), st.integers(0, 10**6), JSON, FILE_NAMES),
                    min_size=1, max_size=4))  # fmt: skip
    def load(mutations):
        config = copy_module.deepcopy(base)
        _mutate(config, paths, mutations)
        config = json.loads(json.dumps(config))  # as the file holds it (a mutation may key a dict by a list index)
        if isinstance(config, dict):
            config["config_sha256"] = _config_digest(config)
        (copy / "config.json").write_text(json.dumps(config))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with contextlib.suppress(PackageError):
                cyclejepa.load_pretrained(copy)

    load()
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 500_000  # KiB: no example allocated a model it refused


def test_the_latency_benchmark_times_a_given_package(onnx_package):
    spec = importlib.util.spec_from_file_location(
        "export_latency", Path(__file__).parents[1] / "benchmarks" / "export_latency.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.measure_package(onnx_package, 1, [1, 2], steps=3, offline_batches=[1], repeats=2)
    streaming = [r for r in rows if r["mode"] == "streaming" and not ("floor" in r["backend"] or "int8" in r["backend"])]
    assert {r["backend"] for r in streaming} == {
        f"onnxruntime {level} {way}" for level in ("basic", "extended", "all") for way in ("run", "iobinding")
    }
    path, x = bench.floor_graph(onnx_package, Path(onnx_package).parent / "floor.onnx")
    (first, *_), weights = (
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x}),
        safetensors_torch.load_file(onnx_package / "model.safetensors"),
    )
    matrix = weights["encoder.blocks.0.conv1.weight"].numpy()  # the first weight in the file: (16, 16, 3)
    np.testing.assert_allclose(
        first, x[:, :48] @ matrix.reshape(16, -1).T, rtol=1e-5, atol=1e-5
    )  # the floor multiplies the package's weights
    assert {r["batch"] for r in streaming} == {1, 2} and all(r["max_abs_vs_offline"] <= 1e-4 for r in streaming)
    assert [r["batch"] for r in rows if r["mode"] == "offline"] == [1, 1, 1]


def test_a_config_json_bomb_is_refused_before_it_is_walked(run, tmp_path):
    _, package, _ = run
    copy = shutil.copytree(package, tmp_path / "bomb")
    (copy / "config.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(PackageError, match="is not valid JSON"):
        cyclejepa.load_pretrained(copy)
    (copy / "config.json").write_text(" " * (17 << 20) + "{}")
    with pytest.raises(PackageError, match=r"is 17,825,794 bytes, more than a package's config \(16,777,216\)"):
        cyclejepa.load_pretrained(copy)
