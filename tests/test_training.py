"""Trainer: schedule, RNG streams, checkpoints, exact resume, optimiser routing, precision switches.

`training.device` is ``auto``: on a GPU machine (``benchmarks/gpu_check.sh tests``) the trainers
run on CUDA. Equalities that hold bit for bit on the CPU are asserted exactly there and within
float tolerances on CUDA, whose cuDNN algorithms and atomic additions are not deterministic.
"""

import json
import math
import pickle

import numpy as np
import pytest
import torch

from cyclejepa.config import parse_config
from cyclejepa.objectives import sample_cutoffs
from cyclejepa.pipeline import training_spec
from cyclejepa.pipeline.identity import training_identity
from cyclejepa.training import RNGStreams, Trainer, learning_rate, load_checkpoint, save_checkpoint

TINY = {
    "model": {
        "encoder": {"width": 16, "hidden": 32},
        "projector": {"hidden": 32, "dim": 16},
        "predictor": {"depth": 1, "heads": 2, "ffn": 32, "max_relative_position": 16},
    },
    "symmetry": {"spectrum": "2x0+3x1+3x2+1x3"},
    "objectives": {"regulariser": {"options": {"num_directions": 16}}},
    "training": {"steps": 12, "batch_size": 4, "checkpoint_every": 4, "precision": "float32"},
}


def tiny_config(**sections):
    raw = json.loads(json.dumps(TINY))
    for key, value in sections.items():
        raw.setdefault(key, {}).update(value)
    return parse_config(raw)


def corpus(records=10, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((records, 12, 1000)).astype(np.float32)
    phi = (0.4 * np.arange(125)[None] + rng.uniform(0, 2 * np.pi, (records, 1))) % (2 * np.pi)
    phi[:, :7] = np.nan  # undefined before the first beat
    phi[0] = np.nan  # a record failing phase QC
    return x, phi


def losses(directory):
    return [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]


def assert_same_run(a, b, device: torch.device, rtol: float = 1e-3, atol: float = 1e-5):
    """``a`` equals ``b`` (arrays, tensors or nested lists): exactly on the CPU, within
    ``rtol``/``atol`` on CUDA."""
    a, b = (np.asarray(x.detach().cpu() if torch.is_tensor(x) else x, dtype=np.float64) for x in (a, b))
    if device.type == "cpu":
        np.testing.assert_array_equal(a, b)
    else:
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def test_learning_rate_is_linear_warmup_then_cosine():
    cfg = parse_config({}).optimiser
    total = 30_000
    assert [learning_rate(s, total, cfg) for s in range(5)] == pytest.approx([cfg.lr * k / 5 for k in range(1, 6)])
    middle = 5 + (total - 6) / 2
    assert learning_rate(int(middle), total, cfg) == pytest.approx((cfg.lr + cfg.min_lr) / 2, rel=1e-3)
    assert learning_rate(total - 1, total, cfg) == pytest.approx(cfg.min_lr)
    steps = np.arange(5, total)
    expected = cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + np.cos(np.pi * (steps - 5) / (total - 6)))
    assert np.allclose([learning_rate(int(s), total, cfg) for s in steps[::997]], expected[::997])


def test_rng_streams_are_independent_and_reproducible():
    a, b = RNGStreams(0), RNGStreams(0)
    draws = {name: torch.rand(4, generator=a[name]) for name in ("init", "mask", "sigreg", "augment", "data")}
    assert all(torch.equal(draws[n], torch.rand(4, generator=b[n])) for n in draws)
    values = torch.stack(list(draws.values()))
    assert len({tuple(row.tolist()) for row in values}) == 5
    assert not torch.equal(torch.rand(4, generator=RNGStreams(1)["mask"]), draws["mask"])


def test_checkpoint_is_atomic_and_loads_with_weights_only(tmp_path):
    path = save_checkpoint({"step": 3, "w": torch.ones(2)}, tmp_path / "c.pt")
    assert load_checkpoint(path)["step"] == 3
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]  # no temporary left behind
    with pytest.raises((pickle.PicklingError, AttributeError)):  # by Python version and where the lambda lives
        save_checkpoint({"bad": lambda: 0}, tmp_path / "d.pt")
    assert not (tmp_path / "d.pt").exists() and [p.name for p in tmp_path.iterdir()] == ["c.pt"]


def test_resume_reproduces_the_uninterrupted_run_bit_for_bit(tmp_path):
    cfg = tiny_config()
    x, phi = corpus()
    straight = Trainer(training_spec(cfg, tmp_path / "straight", seed=3, transport_weight=1.0), x, phi, model_fs=100.0)
    straight.fit(progress=False)

    interrupted = Trainer(training_spec(cfg, tmp_path / "resumed", seed=3, transport_weight=1.0), x, phi, model_fs=100.0)
    interrupted.fit(until=6, progress=False)  # "killed" after step 6; last checkpoint: step 4
    resumed = Trainer(training_spec(cfg, tmp_path / "resumed", seed=3, transport_weight=1.0), x, phi, model_fs=100.0)
    resumed.resume(tmp_path / "resumed" / "checkpoints" / "step_000004.pt")
    assert resumed.step == 4
    resumed.fit(progress=False)

    keys = ("loss", "prediction", "regulariser", "transport", "grad_norm", "lr")
    a = [[row[k] for k in keys] for row in losses(tmp_path / "straight")]
    b = [[row[k] for k in keys] for row in losses(tmp_path / "resumed")]
    assert len(a) == len(b) == 12
    assert_same_run(a, b, straight.device)  # on the CPU bit-identical, not approximately equal
    for name, tensor in straight.objective.state_dict().items():
        assert_same_run(tensor, resumed.objective.state_dict()[name], straight.device)


def test_a_run_stopped_before_its_first_checkpoint_starts_its_metrics_again(tmp_path):
    cfg = tiny_config()
    x, phi = corpus()
    straight = Trainer(training_spec(cfg, tmp_path / "straight", seed=3, transport_weight=1.0), x, phi, model_fs=100.0)
    straight.fit(progress=False)
    Trainer(training_spec(cfg, tmp_path / "again", seed=3, transport_weight=1.0), x, phi, model_fs=100.0).fit(
        until=3, progress=False
    )
    assert not (tmp_path / "again" / "checkpoints").exists() and len(losses(tmp_path / "again")) == 3
    Trainer(training_spec(cfg, tmp_path / "again", seed=3, transport_weight=1.0), x, phi, model_fs=100.0).fit(
        progress=False
    )  # from step 0
    rows = losses(tmp_path / "again")
    assert [row["step"] for row in rows] == list(range(1, 13))  # each step once, not 1-3 then 1-12
    keys = ("loss", "grad_norm", "lr")
    assert_same_run([[r[k] for k in keys] for r in rows], [[r[k] for k in keys] for r in losses(tmp_path / "straight")],
                    straight.device)  # fmt: skip


def test_a_torn_last_metrics_line_is_dropped_with_a_warning_naming_it(tmp_path, caplog):
    cfg = tiny_config()
    x, phi = corpus()
    Trainer(training_spec(cfg, tmp_path, seed=3, transport_weight=1.0), x, phi, model_fs=100.0).fit(until=6, progress=False)
    metrics = tmp_path / "metrics.jsonl"
    with open(metrics, "a") as stream:
        stream.write('{"step": 7, "loss": 0.')  # killed in the middle of a write
    resumed = Trainer(training_spec(cfg, tmp_path, seed=3, transport_weight=1.0), x, phi, model_fs=100.0)
    resumed.resume(tmp_path / "checkpoints" / "step_000004.pt")
    with caplog.at_level("WARNING", logger="cyclejepa.training.trainer"):
        resumed.fit(progress=False)
    assert [row["step"] for row in losses(tmp_path)] == list(range(1, 13))
    assert f"{metrics}: line 7 is not a metrics row" in caplog.text


def test_the_spec_carries_the_run_identity_into_every_checkpoint(tmp_path):
    """`training_spec` gives the trainer the sections it reads and the identity the pipeline
    computes (`training_identity`), which every checkpoint then holds."""
    from cyclejepa.pipeline.identity import identity_hash

    cfg = tiny_config(training={"steps": 2, "checkpoint_every": 2})
    spec = training_spec(cfg, tmp_path, seed=3, transport_weight=0.5)
    assert (spec.optimiser, spec.training, spec.augmentations) == (cfg.optimiser, cfg.training, tuple(cfg.augmentations))
    assert (spec.objective.model, spec.objective.symmetry, spec.objective.precision) == (cfg.model, cfg.symmetry, "float32")
    assert spec.identity == training_identity(cfg, 0.5, 3) and spec.run_hash == identity_hash(spec.identity)
    Trainer(spec, *corpus(), model_fs=100.0).fit(progress=False)
    meta = load_checkpoint(tmp_path / "checkpoints" / "step_000002.pt")["meta"]
    assert meta == {"seed": 3, "transport_weight": 0.5, "identity": training_identity(cfg, 0.5, 3), "run_hash": spec.run_hash}


def test_checkpoint_of_another_run_is_refused(tmp_path):
    cfg = tiny_config(training={"steps": 4})
    x, phi = corpus()
    Trainer(training_spec(cfg, tmp_path, seed=0, transport_weight=1.0), x, phi, model_fs=100.0).fit(progress=False)
    other = Trainer(training_spec(cfg, tmp_path / "b", seed=1, transport_weight=1.0), x, phi, model_fs=100.0)
    with pytest.raises(ValueError, match="belongs to run"):
        other.resume(tmp_path / "checkpoints" / "step_000004.pt")


def test_a_generator_state_from_another_kind_of_device_is_refused_naming_the_stream():
    streams = RNGStreams(0)
    before = {name: state.clone() for name, state in streams.state_dict().items()}
    states = streams.state_dict()
    states["mask"] = torch.zeros(16, dtype=torch.uint8)  # the size of a CUDA generator's state
    with pytest.raises(ValueError, match=r"RNG stream 'mask'.*16-byte.*5056 bytes.*another kind of device"):
        streams.load_state_dict(states)
    assert all(torch.equal(streams[name].get_state(), before[name]) for name in before)  # nothing half-loaded


def test_a_checkpoint_trained_on_cuda_is_refused_on_the_cpu_naming_device_and_precision(tmp_path):
    cpu, cuda = (tiny_config(training={"steps": 4, "precision": "auto", "device": d}) for d in ("cpu", "cuda"))
    x, phi = corpus()
    Trainer(training_spec(cpu, tmp_path, seed=0, transport_weight=1.0), x, phi, model_fs=100.0).fit(progress=False)
    path = tmp_path / "checkpoints" / "step_000004.pt"
    state = load_checkpoint(path)  # made into what the same run trained on CUDA writes:
    state["meta"]["identity"] = training_identity(cuda, 1.0, 0)  # its identity, and 16-byte generator states
    state["rng"] = {name: s if name == "init" else torch.zeros(16, dtype=torch.uint8) for name, s in state["rng"].items()}
    save_checkpoint(state, path)
    resumed = Trainer(training_spec(cpu, tmp_path / "b", seed=0, transport_weight=1.0), x, phi, model_fs=100.0)
    with pytest.raises(ValueError, match='training.device: "cuda" → "cpu"; training.precision: "bf16" → "float32"'):
        resumed.resume(path)


def test_training_reduces_the_loss_and_the_control_ignores_transport(tmp_path):
    cfg = tiny_config(training={"steps": 40, "checkpoint_every": 40}, optimiser={"lr": 3e-3})
    x, phi = corpus(16)
    Trainer(training_spec(cfg, tmp_path / "w", seed=0, transport_weight=1.0), x, phi, model_fs=100.0).fit(progress=False)
    rows = losses(tmp_path / "w")
    assert np.mean([r["loss"] for r in rows[-5:]]) < 0.7 * np.mean([r["loss"] for r in rows[:5]])
    control = Trainer(training_spec(cfg, tmp_path / "c", seed=0, transport_weight=0.0), x, phi, model_fs=100.0)
    control.fit(until=1, progress=False)
    (row,) = losses(tmp_path / "c")
    expected = row["prediction"] + 0.15 * row["regulariser"]
    assert math.isclose(row["loss"], expected, rel_tol=1e-6) and row["transport"] > 0


def test_manifold_parameters_go_to_riemannian_adam_and_stay_orthogonal(tmp_path):
    from geoopt.optim import RiemannianAdam

    cfg = tiny_config(symmetry={"basis": "stiefel"}, training={"steps": 5}, optimiser={"lr": 1e-2})
    x, phi = corpus()
    trainer = Trainer(training_spec(cfg, tmp_path, seed=0, transport_weight=1.0), x, phi, model_fs=100.0)
    assert [type(o) for o in trainer.optimisers][1] is RiemannianAdam
    trainer.fit(progress=False)
    q = trainer.objective.symmetry.basis.matrix().detach().cpu().double()
    eye = torch.eye(16, dtype=torch.float64)
    assert not torch.allclose(q, eye, atol=1e-4)  # it moved ...
    assert torch.linalg.matrix_norm(q.T @ q - eye) < 1e-5  # ... on the manifold


def test_bf16_autocast_stays_close_to_float32(tmp_path):
    x, phi = corpus()
    reference = Trainer(training_spec(tiny_config(), tmp_path / "a", seed=0, transport_weight=1.0), x, phi, model_fs=100.0)
    bf16 = Trainer(
        training_spec(tiny_config(training={"precision": "bf16"}), tmp_path / "b", seed=0, transport_weight=1.0),
        x,
        phi,
        model_fs=100.0,
    )
    a, b = reference.train_step(), bf16.train_step()
    assert torch.allclose(a[:4], b[:4], rtol=5e-2)  # loss terms within bf16 tolerance


@pytest.mark.slow
def test_objective_traces_as_one_graph_without_breaks(tmp_path):
    """The regulariser's random draw happens outside the module, so Dynamo sees one graph."""
    x, phi = corpus()
    trainer = Trainer(training_spec(tiny_config(), tmp_path, seed=0, transport_weight=1.0), x, phi, model_fs=100.0)
    batch, phases = trainer.batches.next()
    cutoff = sample_cutoffs(batch.shape[0], phases.shape[1], trainer.streams["mask"], trainer.device)
    explanation = torch._dynamo.explain(trainer.objective)(batch, phases, cutoff, trainer.regulariser_inputs())
    assert (explanation.graph_count, explanation.graph_break_count) == (1, 0), explanation.break_reasons


def test_augmentation_chain_traces_as_one_graph_without_breaks(tmp_path):
    """The augmenter's draws happen outside `Augmenter.apply`, so Dynamo fuses the whole chain."""
    x, phi = corpus()
    trainer = Trainer(training_spec(tiny_config(), tmp_path, seed=0, transport_weight=1.0), x, phi, model_fs=100.0)
    batch, _ = trainer.batches.next()
    draws = trainer.augmenter.draw(batch, trainer.streams["augment"])
    explanation = torch._dynamo.explain(trainer.augmenter.apply)(batch, draws.rms, draws.applied, draws.params)
    assert (explanation.graph_count, explanation.graph_break_count) == (1, 0), explanation.break_reasons


@pytest.mark.slow
def test_torch_compile_gives_the_eager_result_in_float32(tmp_path):
    x, phi = corpus()
    eager = Trainer(training_spec(tiny_config(), tmp_path / "a", seed=0, transport_weight=1.0), x, phi, model_fs=100.0)
    compiled = Trainer(
        training_spec(tiny_config(training={"compile": True}), tmp_path / "b", seed=0, transport_weight=1.0),
        x,
        phi,
        model_fs=100.0,
    )
    rtol = 1e-4 if eager.device.type == "cpu" else 2e-3  # CUDA: other kernels, other reduction orders
    for _ in range(2):
        assert torch.allclose(eager.train_step(), compiled.train_step(), rtol=rtol, atol=1e-6)


def test_records_failing_phase_qc_take_no_part_in_the_transport_term():
    from types import SimpleNamespace

    from cyclejepa.pipeline import training_phases

    _, phi = corpus(records=6)
    phi[0] = 1.0  # defined phases: only the QC verdict may remove them
    qc_ok = np.array([False, True, True, False, True, True])
    cache = SimpleNamespace(phases=lambda convention: phi, columns={"qc_ok": qc_ok})
    rows = np.array([0, 1, 3, 4])
    phases = training_phases(cache, rows, "centre")
    assert np.isnan(phases[[0, 2]]).all()  # records 0 and 3 failed QC
    np.testing.assert_array_equal(phases[[1, 3]], phi[[1, 4]].astype(np.float32))
    assert not np.isnan(phi[0]).any()  # the cache's own array is untouched
