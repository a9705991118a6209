"""The stacked ensemble: N runs stepped as one equal the N runs stepped separately."""

import numpy as np
import pytest
import torch
from test_training import corpus, tiny_config

from cyclejepa.pipeline import training_spec
from cyclejepa.training import Trainer, load_checkpoint
from cyclejepa.training.stacked import StackedRuns

RUNS = ((0, 1.0), (1, 0.0), (2, 1.0))  # (seed, λ_trans): both arms, two seeds of one


def trainers(cfg, folder, x, phi):
    return [
        Trainer(training_spec(cfg, folder / f"run{i}", seed=seed, transport_weight=weight), x, phi, model_fs=100.0)
        for i, (seed, weight) in enumerate(RUNS)
    ]


@pytest.mark.parametrize("basis", ["canonical", "householder"])
def test_stacked_steps_equal_separate_runs(tmp_path, basis):
    options = {"reflections": 3} if basis == "householder" else {}
    cfg = tiny_config(
        training={"device": "cpu"}, symmetry={"basis": basis, "basis_options": options}, optimiser={"grad_clip": 0.05}
    )  # fmt: skip  (a small clip: every step clips)
    x, phi = corpus()
    separate = trainers(cfg, tmp_path / "separate", x, phi)
    expected = np.array([[t.train_step().tolist() for t in separate] for _ in range(6)])
    ensemble = StackedRuns(trainers(cfg, tmp_path / "stacked", x, phi))
    rows = np.array([ensemble.train_step().tolist() for _ in range(6)])
    assert rows.shape == expected.shape == (6, len(RUNS), 6)
    np.testing.assert_allclose(rows, expected, rtol=1e-4, atol=1e-6)
    assert (expected[:, :, 4] > 0.05).all()  # the gradient norms before clipping: clipping acted
    w_pred, w_reg = cfg.objectives.prediction.weight, cfg.objectives.regulariser.weight
    for run, (_, weight) in enumerate(RUNS):  # each run's loss with its own λ_trans (0: the control)
        loss, prediction, regulariser, transport = rows[:, run, :4].T
        np.testing.assert_allclose(loss, w_pred * prediction + w_reg * regulariser + weight * transport, rtol=1e-6)
    ensemble.unstack()
    for mine, theirs in zip(ensemble.trainers, separate, strict=True):
        assert mine.step == theirs.step == 6
        for (name, a), b in zip(mine.objective.named_parameters(), theirs.objective.parameters(), strict=True):
            np.testing.assert_allclose(a.detach(), b.detach(), rtol=1e-4, atol=1e-6, err_msg=name)
        state, reference = mine.optimisers[0].state_dict(), theirs.optimisers[0].state_dict()
        assert state["param_groups"][0]["lr"] == reference["param_groups"][0]["lr"]
        for key in reference["state"]:
            mine_moment, their_moment = state["state"][key]["exp_avg"], reference["state"][key]["exp_avg"]
            np.testing.assert_allclose(mine_moment, their_moment, rtol=1e-3, atol=1e-7)


def test_stacked_bf16_steps_equal_separate_runs_to_bf16_tolerance(tmp_path):
    """Autocast runs inside the vmapped objective as in the trainer's (the GPU's product precision)."""
    cfg = tiny_config(training={"device": "cpu", "precision": "bf16"})
    x, phi = corpus()
    separate = trainers(cfg, tmp_path / "separate", x, phi)
    expected = np.array([[t.train_step().tolist() for t in separate] for _ in range(3)])
    ensemble = StackedRuns(trainers(cfg, tmp_path / "stacked", x, phi))
    np.testing.assert_allclose([ensemble.train_step().tolist() for _ in range(3)], expected, rtol=2e-2, atol=1e-3)


def test_a_checkpoint_of_the_ensemble_resumes_as_a_run_and_as_an_ensemble(tmp_path):
    cfg = tiny_config(training={"device": "cpu"})
    x, phi = corpus()
    ensemble = StackedRuns(trainers(cfg, tmp_path / "stacked", x, phi))
    for _ in range(4):
        ensemble.train_step()
    ensemble.unstack()
    paths = [t.save() for t in ensemble.trainers]
    after = [ensemble.train_step().tolist() for _ in range(2)]  # steps 5 and 6 (6 reads the AdamW state)
    alone = trainers(cfg, tmp_path / "stacked", x, phi)
    for trainer, path in zip(alone, paths, strict=True):
        trainer.resume(path)
        assert load_checkpoint(path)["step"] == 4
    separately = [[t.train_step().tolist() for t in alone] for _ in range(2)]
    np.testing.assert_allclose(separately, after, rtol=1e-4, atol=1e-6)
    resumed = trainers(cfg, tmp_path / "stacked", x, phi)
    for trainer, path in zip(resumed, paths, strict=True):
        trainer.resume(path)
    again = StackedRuns(resumed)  # stacks the resumed parameters and AdamW state
    np.testing.assert_allclose([again.train_step().tolist() for _ in range(2)], after, rtol=1e-5, atol=1e-7)


def test_runs_that_cannot_stack_are_named(tmp_path):
    x, phi = corpus()
    cfg = tiny_config(training={"device": "cpu"})
    other = tiny_config(training={"device": "cpu"}, optimiser={"lr": 1e-3})
    a = Trainer(training_spec(cfg, tmp_path / "a", seed=0, transport_weight=1.0), x, phi, model_fs=100.0)
    b = Trainer(training_spec(other, tmp_path / "b", seed=1, transport_weight=0.0), x, phi, model_fs=100.0)
    with pytest.raises(ValueError, match=r"b: another experiment than a"):
        StackedRuns([a, b])
    a.train_step()
    c = Trainer(training_spec(cfg, tmp_path / "c", seed=1, transport_weight=0.0), x, phi, model_fs=100.0)
    with pytest.raises(ValueError, match=r"c: at step 0, a at step 1"):
        StackedRuns([a, c])
    with pytest.raises(ValueError, match="at least one run"):
        StackedRuns([])
    stiefel = tiny_config(training={"device": "cpu"}, symmetry={"basis": "stiefel"})
    e = Trainer(training_spec(stiefel, tmp_path / "e", seed=0, transport_weight=1.0), x, phi, model_fs=100.0)
    with pytest.raises(ValueError, match=r"symmetry.basis 'stiefel' has manifold parameters"):
        StackedRuns([e])
    compiled = tiny_config(training={"device": "cpu", "compile": True})
    d = Trainer(training_spec(compiled, tmp_path / "d", seed=0, transport_weight=1.0), x, phi, model_fs=100.0)
    with pytest.raises(ValueError, match=r"d: compiled \(training.compile True\)"):
        StackedRuns([d])


def test_cutoffs_out_of_range_are_refused_before_the_step(tmp_path):
    x, phi = corpus()
    ensemble = StackedRuns(trainers(tiny_config(training={"device": "cpu"}), tmp_path, x, phi))
    first = ensemble.trainers[0]
    draw = first.step_inputs

    def bad_inputs():
        x, phi, cutoff, draws = draw()
        return x, phi, torch.full_like(cutoff, phi.shape[1] - 1), draws

    first.step_inputs = bad_inputs
    before = [p.detach().clone() for p in ensemble.params.values()]
    with pytest.raises(ValueError, match=r"cutoffs must lie in \[0, T - 2\] = \[0, 123\]"):
        ensemble.train_step()
    assert all(torch.equal(p, q) for p, q in zip(ensemble.params.values(), before, strict=True))


def test_the_vmapped_attention_uses_the_math_backend(tmp_path, monkeypatch):
    """CUDA's fused attention under vmap fails in backward (its per-run fallback misaligns the
    log-sum-exp); the ensemble restricts attention to the math backend, a plain step does not."""
    seen = []
    attention = torch.nn.functional.scaled_dot_product_attention

    def recording(*args, **kwargs):
        backends = torch.backends.cuda
        seen.append((backends.flash_sdp_enabled(), backends.mem_efficient_sdp_enabled(), backends.math_sdp_enabled()))
        return attention(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    cfg = tiny_config(training={"device": "cpu"})
    x, phi = corpus()
    plain = trainers(cfg, tmp_path / "plain", x, phi)
    plain[0].train_step()
    assert seen and all(flags == (True, True, True) for flags in seen)
    seen.clear()
    StackedRuns(trainers(cfg, tmp_path / "stacked", x, phi)).train_step()
    assert seen and all(flags == (False, False, True) for flags in seen)
