"""Hostile conditions give one line naming the file, key or record, never a traceback: a full
disk, an encoder whose config no longer fits its checkpoint, a sample beyond float32, an empty
batch. (Hostile config values: tests/test_validation.py.)"""

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

import cyclejepa
from conftest import TINY_MODEL, synthetic_data
from cyclejepa import pipeline
from cyclejepa.cli import app
from cyclejepa.config import parse_config
from cyclejepa.data.ptbxl import LEADS, PTBXL
from cyclejepa.lock import LOCK_FILE


pytestmark = pytest.mark.xdist_group("one_line_errors")  # one worker builds the module's fixtures (`--dist loadgroup`)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny run (40 synthetic records, one arm, two steps) and the paths of its records."""
    root = tmp_path_factory.mktemp("errors")
    cfg = parse_config({
        "output_dir": str(root / "run"),
        "data": synthetic_data(root, 40, cache_dir=str(root / "cache")),
        **TINY_MODEL,
        "training": {"steps": 2, "batch_size": 4, "checkpoint_every": 1, "device": "cpu"},
        "runs": {"seeds": [0], "arms": [{"name": "winder", "transport_weight": 1.0}]},
        "evaluation": {"steps": [1, 2]},
    })  # fmt: skip
    pipeline.write_resolved_config(cfg)
    pipeline.pretrain(cfg, pipeline.prepare(cfg, progress=False), pipeline.plan_runs(cfg)[0], progress=False)
    meta = PTBXL(cfg.data.root).metadata
    return cfg, [str(cfg.data.root / name) for name in meta["filename_hr"][:3]]


def one_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip() and "embedding records" not in line]
    assert len(lines) == 1 and "Traceback" not in output, output
    return lines[0]


FULL_DISK = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))  # a checkpoint of the tiny model: 200 kB
from cyclejepa.cli import main
sys.argv = ["cyclejepa", *sys.argv[1:]]
main()
"""


@pytest.mark.slow
def test_a_full_disk_at_a_checkpoint_is_one_line_naming_it(trained):
    cfg, _ = trained
    config = cfg.output_dir / "config.yaml"
    done = subprocess.run([sys.executable, "-c", FULL_DISK, "train", str(config), "--seed", "1"], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    checkpoints = cfg.output_dir / "runs" / "winder-seed1" / "checkpoints"
    assert done.returncode == 1, done.stderr
    line = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert line == [f"error [Errno 27] cannot write {checkpoints / 'step_000001.pt'}: File too large"], done.stderr
    assert "Traceback" not in done.stderr
    assert list(checkpoints.iterdir()) == []  # no temporary left behind
    assert not list(cfg.output_dir.rglob(LOCK_FILE))


def test_an_encoder_whose_config_no_longer_fits_its_checkpoint_names_the_keys(trained, tmp_path):
    cfg, records = trained
    edited = tmp_path / "run"
    shutil.copytree(cfg.output_dir, edited)
    raw = yaml.safe_load((edited / "config.yaml").read_text())
    raw["model"]["encoder"]["width"] = 24
    (edited / "config.yaml").write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(app, ["embed", str(edited), records[0], "--out", str(tmp_path / "e.npz"), "--device", "cpu"])
    assert result.exit_code == 1
    line = one_line(result.output)
    assert line.startswith(f"error checkpoint {edited / 'runs' / 'winder-seed0' / 'checkpoints' / 'step_000002.pt'} does "
                           "not fit the config's model: the config's model.encoder.width: 16 → 24 (trained → now); ")  # fmt: skip
    assert "tensors differ, e.g. model.encoder." in line and "in the checkpoint," in line


def hostile_copy(record: str, folder: Path, gain_of_lead_i: str) -> str:
    """``record`` as ``folder/hostile`` with lead I's ADC gain (1000 per mV) replaced in its header."""
    name = Path(record).name
    shutil.copy(record + ".dat", folder / "hostile.dat")
    lines = Path(record + ".hea").read_text().replace(f"{name}.dat", "hostile.dat").replace(name, "hostile", 1).splitlines()
    assert lines[1].endswith(" I") and "1000.0(0)/mV" in lines[1]
    lines[1] = lines[1].replace("1000.0(0)", f"{gain_of_lead_i}(0)")
    (folder / "hostile.hea").write_text("\n".join(lines) + "\n")
    return str(folder / "hostile")


def test_a_sample_beyond_float32_is_a_record_refused_with_its_reason(trained, tmp_path):
    cfg, records = trained
    hostile = hostile_copy(records[0], tmp_path, "1e-297")  # 1 / 1e-297 mV per unit: samples up to 3e300 mV
    out = tmp_path / "e.npz"
    result = CliRunner().invoke(app, ["embed", str(cfg.output_dir), hostile, *records[1:], "--out", str(out), "--device", "cpu"])
    assert result.exit_code == 1, result.output
    assert f"{hostile}: samples beyond float32's range (±3.4e38) on ['I']" in result.output
    saved = np.load(out)
    assert list(saved["records"]) == records[1:]
    assert all(
        reason for ok, reason in zip(saved["qc_ok"], saved["qc_reason"], strict=True) if not ok
    )  # never false without a reason


def test_an_empty_batch_is_refused_by_name(trained):
    cfg, _ = trained
    encoder = cyclejepa.load_encoder(cfg.output_dir, device="cpu")
    with pytest.raises(ValueError, match=r"^no record to embed: the batch \(0, 12, 5000\) is empty$"):
        encoder.embed(np.zeros((0, 12, 5000)), 500.0, LEADS)
