"""A damaged checkpoint: named when loaded, skipped (with a warning) when resuming."""

import logging

import pytest
import torch

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
        last = latest_checkpoint(tmp_path / "run" / "checkpoints")
    assert last.name == "step_000002.pt" and f"{latest} is unreadable" in caplog.text

    resumed = Trainer(training_spec(cfg, tmp_path / "run", seed=3, transport_weight=1.0), x, phi, model_fs=100.0)
    resumed.resume(last)
    assert resumed.fit(progress=False) == latest  # trained steps 3-4 again, rewrote the checkpoint
    for name, value in resumed.objective.state_dict().items():
        assert torch.equal(value, final[name]), name
    assert load_checkpoint(latest)["step"] == 4


def test_a_flipped_byte_is_caught_by_the_crc(tmp_path):
    path = tmp_path / "step_000001.pt"
    torch.save({"step": 1, "w": torch.arange(1000.0)}, path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(data)
    with pytest.raises(CheckpointDamaged, match="fails its CRC check"):
        load_checkpoint(path)
    assert latest_checkpoint(tmp_path) is None
