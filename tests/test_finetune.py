"""Supervised training of the deployed path: nested stratified label subsets, the probe's linear map
as the head's warm start, what fine-tuning changes, early stopping and exact resumption."""

import math

import numpy as np
import pytest
import torch

from cyclejepa.evaluation.probe import LinearProbe
from cyclejepa.models import build_model
from cyclejepa.training.finetune import Classifier, FineTuner, FinetuneSettings, label_subset, predict_logits


def tiny_classifier(classes=3, seed=0):
    model = build_model("winder", seed=1, encoder={"leads": 2, "width": 8, "hidden": 16}, projector={"hidden": 16, "out_dim": 8},
                        predictor={"depth": 1, "heads": 2, "ffn": 16, "max_relative_position": 16})  # fmt: skip
    return Classifier(model.encoder, model.projector, classes, seed=seed)


def toy_data(n=24, seed=0):
    rng = np.random.default_rng(seed)
    signals = rng.normal(size=(n, 2, 64)).astype(np.float32)
    labels = np.stack([signals[:, 0].mean(1) > 0, signals[:, 1].std(1) > 1, signals[:, 0, :8].mean(1) > 0], axis=1)
    labels[~labels.any(axis=1), 0] = True
    return signals, labels.astype(np.uint8)


def tuner(tmp_path, validate, scale=None, **changes):
    signals, labels = toy_data()
    settings = FinetuneSettings(
        **{"steps": 6, "batch_size": 8, "lr": 1e-2, "warmup_steps": 1, "eval_every": 2, "patience": 10, **changes}
    )
    return FineTuner(tiny_classifier(), signals, labels, tmp_path, validate=validate, settings=settings,
                     backbone_scale=scale, seed=3, device="cpu", precision="float32")  # fmt: skip


def strata(labels):
    """Each record's rarest class (by count), -1 without a label: the naive definition."""
    counts = labels.sum(axis=0)
    return np.array([min(np.flatnonzero(row), key=lambda c: (counts[c], c)) if row.any() else -1 for row in labels])


def test_label_subsets_are_nested_deterministic_and_stratified():
    rng = np.random.default_rng(0)
    labels = (rng.random((600, 6)) < [0.5, 0.2, 0.05, 0.02, 0.3, 0.01]).astype(np.uint8)
    groups = strata(labels)
    previous = np.array([], dtype=int)
    for fraction in (0.01, 0.1, 0.5, 1.0):
        rows = label_subset(labels, fraction, seed=7)
        assert len(rows) == math.ceil(fraction * 600) and np.all(np.diff(rows) > 0)
        assert set(previous) <= set(rows)  # nested
        np.testing.assert_array_equal(rows, label_subset(labels, fraction, seed=7))  # fixed by the seed
        for s in np.unique(groups):
            n_s = (groups == s).sum()
            assert abs((groups[rows] == s).sum() - len(rows) * n_s / 600) <= 1  # stratified: ±1 per stratum
        previous = rows
    assert not np.array_equal(label_subset(labels, 0.1, seed=7), label_subset(labels, 0.1, seed=8))
    with pytest.raises(ValueError, match=r"a label fraction must lie in \(0, 1\], got 0"):
        label_subset(labels, 0, seed=0)


def test_the_probes_linear_map_is_its_decision_function_and_starts_the_head():
    signals, labels = toy_data(40)
    labels[:, 2] = 0  # one class never present: sklearn's constant predictor
    classifier = tiny_classifier()
    x = torch.from_numpy(signals)
    with torch.no_grad():
        features = classifier.features(x).double().numpy()
    probe = LinearProbe(C=0.5).fit(features, labels)
    weight, bias = probe.linear_map()
    np.testing.assert_allclose(features @ weight.T + bias, probe.decision_function(features), rtol=1e-9, atol=1e-9)
    assert not weight[2].any()
    classifier.set_head(weight, bias)
    np.testing.assert_allclose(predict_logits(classifier, signals), probe.decision_function(features), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("scale, encoder_changes", [(0.1, True), (0.0, False)])
def test_fine_tuning_changes_the_encoder_and_head_only_training_does_not(tmp_path, scale, encoder_changes):
    run = tuner(tmp_path, validate=lambda c: float(c.head.bias.detach().sum()), scale=scale)
    before = {k: v.clone() for k, v in run.classifier.state_dict().items()}
    run.fit()
    after = run.classifier.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert any(k.startswith("head.") for k in changed)
    assert any(k.startswith("encoder.") for k in changed) == encoder_changes
    assert any(k.startswith("projector.") for k in changed) == encoder_changes


def test_early_stopping_keeps_the_best_state(tmp_path):
    scores, seen = iter([0.5, 0.7, 0.6, 0.6, 0.9]), {}

    def validate(classifier):
        seen[run.step] = {k: v.clone() for k, v in classifier.state_dict().items()}
        return next(scores)

    run = tuner(tmp_path, validate, steps=20, patience=2)
    assert run.fit() == 0.7
    assert (run.step, run.best_step) == (8, 4)  # two evaluations without improvement after step 4
    assert all(torch.equal(v, seen[4][k]) for k, v in run.classifier.state_dict().items())
    assert [h["step"] for h in run.history] == [2, 4, 6, 8]


def test_an_interrupted_run_resumes_exactly(tmp_path):
    validate = lambda c: float(c.head.weight.detach().abs().sum())  # noqa: E731
    whole = tuner(tmp_path / "whole", validate)
    whole.fit()

    calls = []

    def interrupted(classifier):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # killed during the second evaluation: the checkpoint of step 2 remains
        return validate(classifier)

    with pytest.raises(KeyboardInterrupt):
        tuner(tmp_path / "cut", interrupted).fit()
    resumed = tuner(tmp_path / "cut", validate)
    assert resumed.resume() and resumed.step == 2
    resumed.fit()
    assert resumed.history == whole.history and resumed.best_step == whole.best_step
    for key, value in whole.classifier.state_dict().items():
        assert torch.equal(value, resumed.classifier.state_dict()[key]), key
    assert len(list((tmp_path / "cut" / "checkpoints").glob("step_*.pt"))) == 1  # the latest only
    with pytest.raises(ValueError, match="other settings: settings.lr: 0.01 → 0.02"):
        FineTuner(tiny_classifier(), *toy_data(), tmp_path / "cut", validate=validate, seed=3, device="cpu",
                  settings=FinetuneSettings(steps=6, batch_size=8, lr=2e-2, warmup_steps=1, eval_every=2, patience=10)).resume()  # fmt: skip
