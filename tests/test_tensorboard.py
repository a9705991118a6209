"""TensorBoard events beside metrics.jsonl: the tags and values of a short run read back with
TensorBoard's own reader, the diagnostics against a naive recomputation, rank 0 only, and a
watched run trains exactly as an unwatched one."""

import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from test_training import corpus, losses, tiny_config

from cyclejepa.config import ExperimentConfig
from cyclejepa.pipeline import preflight, training_spec, watch_run
from cyclejepa.training import Distributed, Trainer, load_checkpoint, load_trained
from cyclejepa.training.tensorboard import TAGS, TensorBoardLog

DIAGNOSTICS = {"geometry/effective_rank", "mechanism/gain_fraction", "mechanism/mean_gain", "mechanism/token_similarity"}


def events(directory):
    accumulator = EventAccumulator(str(directory))
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def train(directory, tensorboard, steps=3):
    cfg = tiny_config(training={"steps": steps, "checkpoint_every": 1, "tensorboard": tensorboard})
    signals, phases = corpus()
    trainer = Trainer(training_spec(cfg, directory, seed=0, transport_weight=1.0), signals, phases, model_fs=100.0)
    board = watch_run(trainer, signals, phases)
    trainer.fit(progress=False)
    if board is not None:
        board.close()
    return trainer, signals, phases


def naive_effective_rank(z):
    singular = np.linalg.svd(z - z.mean(0), compute_uv=False)
    p = singular / singular.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def naive_fraction_and_similarity(tokens, phases, symmetry):
    """Σ (c_R − c_I) / Σ (1 − c_I) over every ordered pair of valid tokens of every record, with
    c_R = ⟨ρ(φ_t' − φ_t) ẑ_t, ẑ_t'⟩ from explicit matrices, and the mean c_I over those pairs."""
    gains, gaps, pairs = 0.0, 0.0, 0
    for z, phi in zip(tokens.double(), phases.double(), strict=True):
        valid = torch.isfinite(phi)
        if valid.sum() < 2:
            continue
        unit = torch.nn.functional.normalize(z[valid], dim=-1)
        phi = phi[valid]
        rho = symmetry.matrix(phi[None, :] - phi[:, None]).double()  # [t, t'] = ρ(φ_t' − φ_t)
        c_r = torch.einsum("uk,tukl,tl->tu", unit, rho, unit)
        c_i = unit @ unit.T
        off = ~torch.eye(len(phi), dtype=torch.bool)
        gains += float((c_r - c_i)[off].sum())
        gaps += float((1 - c_i)[off].sum())
        pairs += int(off.sum())
    return gains / gaps, 1 - gaps / pairs


def test_a_three_step_run_writes_readable_events_with_the_expected_tags(tmp_path):
    trainer, signals, phases = train(tmp_path / "run", tensorboard=True)
    assert list((tmp_path / "run").glob("events.out.tfevents.*"))  # beside metrics.jsonl
    scalars = events(tmp_path / "run")
    assert set(scalars) == set(TAGS.values()) | DIAGNOSTICS
    rows = losses(tmp_path / "run")
    for column, tag in TAGS.items():
        assert [step for step, _ in scalars[tag]] == [1, 2, 3]
        np.testing.assert_allclose([v for _, v in scalars[tag]], [row[column] for row in rows], rtol=1e-6)
    # the diagnostics of the first flush (step 3), against a naive recomputation from the checkpoint
    assert {tag: [step for step, _ in scalars[tag]] for tag in DIAGNOSTICS} == dict.fromkeys(DIAGNOSTICS, [3])
    objective = load_trained(trainer.spec.objective, tmp_path / "run" / "checkpoints" / "step_000003.pt")
    with torch.no_grad():
        tokens = objective.model(torch.from_numpy(signals))  # 10 windows: the held batch is all of them
    phases = torch.from_numpy(phases)
    valid = torch.isfinite(phases)
    (_, rank), (_, fraction) = scalars["geometry/effective_rank"][0], scalars["mechanism/gain_fraction"][0]
    ((_, similarity),) = scalars["mechanism/token_similarity"]
    naive_fraction, naive_similarity = naive_fraction_and_similarity(tokens, phases, objective.symmetry)
    assert rank == pytest.approx(naive_effective_rank(tokens[valid].double().numpy()), rel=1e-5)
    assert fraction == pytest.approx(naive_fraction, rel=1e-4, abs=1e-6)
    assert similarity == pytest.approx(naive_similarity, rel=1e-5, abs=1e-6)


def test_watching_leaves_training_unchanged(tmp_path):
    train(tmp_path / "watched", tensorboard=True)
    train(tmp_path / "plain", tensorboard=False)
    assert not list((tmp_path / "plain").glob("events.out.tfevents.*"))
    strip = lambda rows: [{k: v for k, v in row.items() if k != "time"} for row in rows]  # noqa: E731
    assert strip(losses(tmp_path / "watched")) == strip(losses(tmp_path / "plain"))
    watched, plain = (
        load_checkpoint(tmp_path / name / "checkpoints" / "step_000003.pt")["model"] for name in ("watched", "plain")
    )
    assert all(torch.equal(watched[key], plain[key]) for key in plain)


class Rows:
    """A watcher that records the steps it is handed."""

    def __init__(self):
        self.steps = []

    def __call__(self, trainer, records):
        self.steps += [r["step"] for r in records]


def test_diagnostics_come_every_so_many_steps_and_a_resumed_run_purges_later_events(tmp_path):
    board_dir = tmp_path / "board"
    trainer = SimpleNamespace(objective="the objective")
    board = TensorBoardLog(board_dir, diagnose=lambda objective: {"probe/seen": float(objective == "the objective")}, every=40)
    metrics = lambda steps: [{"step": s, **dict.fromkeys(TAGS, float(s))} for s in steps]  # noqa: E731
    for start in range(0, 125, 25):  # flushes at steps 25, 50, 75, 100, 125
        board(trainer, metrics(range(start + 1, start + 26)))
    board.close()
    assert events(board_dir)["probe/seen"] == [(25, 1.0), (50, 1.0), (100, 1.0), (125, 1.0)]  # first, past 40, 80, 120
    resumed = TensorBoardLog(board_dir, start_step=60)  # a resume from the checkpoint of step 60
    resumed(trainer, metrics(range(61, 71)))
    resumed.close()
    steps = [step for step, _ in events(board_dir)["loss/total"]]
    assert steps == list(range(1, 71))  # 61…125 of the first session are gone


def test_only_rank_zero_writes(tmp_path):
    cfg = tiny_config(training={"tensorboard": True})
    signals, phases = corpus()
    trainer = Trainer(training_spec(cfg, tmp_path / "rank1", seed=0, transport_weight=1.0), signals, phases, model_fs=100.0)
    trainer.dist = Distributed(rank=1, world=2)
    assert watch_run(trainer, signals, phases) is None and trainer.watchers == []
    rows = Rows()
    trainer.watchers.append(rows)
    pending = [(0, torch.arange(6, dtype=torch.float32))]
    trainer._flush(pending)
    assert rows.steps == [] and not (tmp_path / "rank1" / "metrics.jsonl").exists()
    trainer.dist = Distributed()
    trainer._flush(pending)
    assert rows.steps == [1]


def test_a_missing_tensorboard_is_named_before_any_work(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    cfg = ExperimentConfig.model_validate({"output_dir": str(tmp_path), "training": {"tensorboard": True}})
    with pytest.raises(ValueError, match=r"training.tensorboard: true needs tensorboard: pip install 'cyclejepa\[tensorboard\]'"):
        preflight(cfg)
    with pytest.raises(ImportError, match="needs tensorboard"):
        TensorBoardLog(tmp_path)
