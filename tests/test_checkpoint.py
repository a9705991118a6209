"""A damaged checkpoint: named when loaded, skipped (with a warning) when resuming."""

import logging

import pytest
import torch

from cyclejepa.outputs import RunFolder, checkpoint_step
from cyclejepa.pipeline import training_spec
from cyclejepa.training import Trainer
from cyclejepa.training.checkpoint import CheckpointDamaged, latest_checkpoint, load_checkpoint
from test_training import corpus, tiny_config


def test_a_truncated_latest_checkpoint_falls_back_to_the_previous_one(tmp_path, caplog):
    cfg = tiny_config(training={"steps": 4, "checkpoint_every": 2})
    x, phi = corpus()
    straight = Trainer(training_spec(cfg, tmp_path / "run", seed=3, transport_weight=1.0), x, phi, model_fs=100.0)
    straight.fit(progress=False)
    final = {name: value.clone() for name, value in straight.objective.state_dict().items()}
    latest = tmp_path / "run" / "checkpoints" / "step_000004.pt"
    latest.write_bytes(latest.read_bytes()[: latest.stat().st_size // 2])  # a copy cut short

    with pytest.raises(CheckpointDamaged, match=f"checkpoint {latest} is unreadable, truncated"):
        load_checkpoint(latest)
    with caplog.at_level(logging.WARNING, logger="cyclejepa.training.checkpoint"):
        last = latest_checkpoint(RunFolder(tmp_path / "run"))
    assert last.name == "step_000002.pt" and f"{latest} is unreadable" in caplog.text

    resumed = Trainer(training_spec(cfg, tmp_path / "run", seed=3, transport_weight=1.0), x, phi, model_fs=100.0)
    resumed.resume(last)
    assert resumed.fit(progress=False) == latest  # trained steps 3-4 again, rewrote the checkpoint
    for name, value in resumed.objective.state_dict().items():
        assert torch.equal(value, final[name]), name
    assert load_checkpoint(latest)["step"] == 4


def test_a_flipped_byte_is_caught_by_the_crc(tmp_path):
    run = RunFolder(tmp_path)
    run.checkpoints.mkdir()
    path = run.checkpoint(1)
    torch.save({"step": 1, "w": torch.arange(1000.0)}, path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(data)
    with pytest.raises(CheckpointDamaged, match="fails its CRC check"):
        load_checkpoint(path)
    assert latest_checkpoint(run) is None


def test_a_run_folder_names_its_checkpoints_and_lists_them_by_step(tmp_path):
    """One place names a checkpoint file; listed by step, not by name (step 1,000,000 after
    999,999), files of other names left out."""
    run = RunFolder(tmp_path / "run")
    assert run.checkpoint(2500) == tmp_path / "run" / "checkpoints" / "step_002500.pt"
    assert run.checkpoint_files() == []
    run.checkpoints.mkdir(parents=True)
    for step in (999_999, 1_000_000, 5):
        run.checkpoint(step).touch()
    (run.checkpoints / "step_final.pt").touch()
    (run.checkpoints / "step_000007.pt.tmp").touch()
    assert [checkpoint_step(path) for path in run.checkpoint_files()] == [5, 999_999, 1_000_000]
    with pytest.raises(ValueError, match="not named as a checkpoint"):
        checkpoint_step(run.checkpoints / "step_final.pt")
