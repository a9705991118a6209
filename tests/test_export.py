"""Weights package: `cyclejepa export` and `load_pretrained` against the run's own encoder; damaged,
changed and mismatched packages refused; input the encoder cannot conform refused."""

import hashlib
import json
import shutil
import sys

import numpy as np
import onnxruntime as ort
import pytest
import safetensors.torch as safetensors_torch
import torch
from scipy.signal import firwin
from typer.testing import CliRunner

import cyclejepa
from conftest import TINY_MODEL
from cyclejepa import runner
from cyclejepa.cli import app
from cyclejepa.config import parse_config
from cyclejepa.data.ptbxl import read_record_fast
from cyclejepa.data.ptbxl import LEADS, PTBXL
from cyclejepa.export import PackageError, export_run, read_package_config
from cyclejepa.export.package import _config_digest
from cyclejepa.training.checkpoint import load_checkpoint



@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny evaluated run (one arm, 3 steps, a Householder basis) and a package of step 2."""
    out = tmp_path_factory.mktemp("export")
    cfg = parse_config({
        "name": "tiny",
        "output_dir": str(out / "run"),
        "data": {"root": str(out / "corpus"), "dataset": "synthetic", "options": {"records": 60}, "train_folds": [1, 2, 3, 4, 5, 6, 7, 8], "eval_folds": [9]},
        **TINY_MODEL,
        "symmetry": {**TINY_MODEL["symmetry"], "basis": "householder", "basis_options": {"reflections": 4}},
        "training": {"steps": 3, "batch_size": 4, "checkpoint_every": 1},
        "runs": {"seeds": [0], "arms": [{"name": "winder", "transport_weight": 1.0}]},
        "evaluation": {
            "steps": [2], "bootstrap": 20, "anomaly_records": 6, "severities": [0.0, 2.0],
            "umap": False, "eligible_min_positives": 1, "headline_step": 2,
        },
    })
    runner.run_experiment(cfg, progress=False)
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
    assert prep["channels"] == list(LEADS) and prep["fs"] == 500 and prep["model_fs"] == 100
    assert prep["window"] == 5000 and prep["window_s"] == 10 and prep["token_patch"] == 8 and prep["decimation"] == 5
    assert prep["normalisation"] == {"leads": list(LEADS), "mean": norm["mean"], "std": norm["std"]}
    assert prep["phase_provider"] == "ecg-rpeak" and prep["phase_convention"] == "centre"
    assert prep["decimation_filter"]["taps"] == 101 and prep["decimation_filter"]["window"] == ["kaiser", 5.0]
    taps = firwin(101, 1 / 5, window=("kaiser", 5.0))  # scipy's design, the one resample_poly uses
    np.testing.assert_array_equal(prep["decimation_filter"]["coefficients"], taps)
    assert prep["decimation_filter"]["group_delay"] == 50 and prep["steps"][:5] == ["channels", "resample", "cut_windows", "decimate", "normalise"]
    assert config["symmetry"]["spectrum"] == "2x0+3x1+2x2+2x3" and config["symmetry"]["basis"] == "householder"
    meta = own_meta(cfg, 2)
    assert config["run"]["step"] == 2 and config["run"]["run_hash"] == meta["run_hash"]
    assert config["run"]["identity"] == meta["identity"] and config["cyclejepa_version"] == cyclejepa.__version__
    model = cyclejepa.load_encoder(cfg.output_dir, device="cpu").model
    assert config["model"]["deployed_parameters"] == sum(p.numel() for m in (model.encoder, model.projector) for p in m.parameters())
    assert [s["shape"] for s in config["streaming"]["state"]] == [["batch", 16, 2], ["batch", 16, 2], ["batch", 16, 4], ["batch", 16, 4]]
    assert config["files"] == {name: hashlib.sha256((package / name).read_bytes()).hexdigest() for name in ("README.md", "model.safetensors", "reference.py")}


def test_model_card_reports_the_runs_own_figures(run):
    cfg, package, _ = run
    card = (package / "README.md").read_text()
    result = json.loads((cfg.output_dir / "evaluation" / "winder-seed0-step000002.json").read_text())
    gain = result["mechanism"]["true"]["gain_fraction"]
    row = next(line for line in card.splitlines() if line.startswith("| Transport gain fraction"))
    assert row == f"| Transport gain fraction ↑ | {gain:.4f} |"
    for text in ("## Training data", "Pre-training folds [1, 2, 3, 4, 5, 6, 7, 8]; evaluation folds [9]",
                 "## Intended use", "## Limits", "Not a medical device", "checkpoint step 2 of 3", "I, II, III, aVR"):
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
        ("config.json", lambda b: b.replace(b'"fs": 500.0', b'"fs": 250.0'), PackageError, "changed after export"),
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
        (lambda w: w.update({"encoder.blocks.0.norm1.weight": torch.ones(8)}), r"wrong shape: encoder\.blocks\.0\.norm1\.weight \(8,\) \(the architecture has \(16,\)\)"),
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
    with pytest.raises(ValueError, match=r"record 0: 11 channel names for a signal of shape \(12, 5000\)"):
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
