"""Non-finite values stop training and are refused downstream: the step and the loss component
are named, the last finite checkpoint is kept, ``metrics.jsonl`` stays strict JSON, and a
checkpoint with NaN weights is refused by name."""

import json
import math

import pytest
import torch

from cyclejepa.pipeline import objective_spec, training_spec
from cyclejepa.training import Trainer, load_trained, save_checkpoint
from cyclejepa.training.checkpoint import NonFiniteWeights, load_checkpoint, nonfinite_tensors
from cyclejepa.training.trainer import Diverged
from test_training import corpus, tiny_config

DIVERGING = {"optimiser": {"lr": 1e4, "grad_clip": 1e12}}  # the reproducer of a diverging run


def strict_rows(path):
    """The rows of a JSONL file, refusing the bare NaN / Infinity that Python's json accepts."""

    def refuse(constant):
        raise ValueError(f"{path} holds a bare {constant}: not JSON")

    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


def test_nonfinite_tensors_finds_exactly_the_nonfinite_float_tensors_at_any_depth():
    state = {
        "model": {"a": torch.ones(3), "b": torch.tensor([1.0, math.nan]), "steps": torch.tensor([7])},
        "optimisers": [{"state": {0: {"exp_avg": torch.tensor([math.inf])}, 1: {"exp_avg": torch.zeros(2)}}}],
        "meta": {"seed": 0, "note": "text"},
    }
    expected = []
    for name, tensor in (
        ("model.a", state["model"]["a"]),
        ("model.b", state["model"]["b"]),
        ("optimisers.0.state.0.exp_avg", state["optimisers"][0]["state"][0]["exp_avg"]),
        ("optimisers.0.state.1.exp_avg", state["optimisers"][0]["state"][1]["exp_avg"]),
    ):
        if any(not math.isfinite(v) for v in tensor.tolist()):  # the naive reading, value by value
            expected.append(name)
    assert nonfinite_tensors(state) == expected == ["model.b", "optimisers.0.state.0.exp_avg"]
    assert nonfinite_tensors({"x": torch.ones(2, dtype=torch.bfloat16)}) == []


def test_a_diverging_run_stops_naming_step_and_component_and_keeps_its_last_finite_checkpoint(tmp_path):
    cfg = tiny_config(**DIVERGING, training={"checkpoint_every": 1})
    trainer = Trainer(training_spec(cfg, tmp_path, seed=0, transport_weight=1.0), *corpus(), model_fs=100.0)
    with pytest.raises(Diverged) as stopped:
        trainer.fit(progress=False)
    error = stopped.value
    rows = strict_rows(tmp_path / "metrics.jsonl")
    assert [row["step"] for row in rows] == list(range(1, error.step + 1))  # up to the bad step, no further
    bad = rows[-1]
    named = str(error).split("non-finite ")[1]
    assert str(error).startswith(f"training diverged at step {error.step}: non-finite ") and "\n" not in str(error)
    nonfinite_terms = [t for t in ("prediction", "regulariser", "transport") if isinstance(bad[t], str)]
    if nonfinite_terms:
        assert named.startswith(", ".join(nonfinite_terms) + " loss")
    else:
        assert bad["grad_norm"] in ("nan", "inf", "-inf") and named.startswith("gradient norm")
    assert all(isinstance(v, float) and math.isfinite(v) for row in rows[:-1] for k, v in row.items() if k != "step")
    checkpoints = sorted((tmp_path / "checkpoints").glob("step_*.pt"))
    assert checkpoints and checkpoints[-1].name == f"step_{error.step - 1:06d}.pt" == error.checkpoint.name
    assert f"the last finite checkpoint is {error.checkpoint}" in str(error)
    assert nonfinite_tensors(load_checkpoint(checkpoints[-1])["model"]) == []


def test_nonfinite_weights_are_never_checkpointed(tmp_path):
    trainer = Trainer(training_spec(tiny_config(), tmp_path, seed=0, transport_weight=1.0), *corpus(), model_fs=100.0)
    kept = trainer.save()
    with torch.no_grad():
        next(trainer.objective.model.parameters()).fill_(math.inf)
    trainer.step = 1
    with pytest.raises(Diverged, match=f"at step 1: non-finite weights .*model.*; stopped, the last finite checkpoint is {kept}"):
        trainer.save()
    assert sorted((tmp_path / "checkpoints").glob("*.pt")) == [kept]


def test_loading_a_checkpoint_with_nan_weights_is_refused_naming_it(tmp_path):
    cfg = tiny_config()
    trainer = Trainer(training_spec(cfg, tmp_path, seed=0, transport_weight=1.0), *corpus(), model_fs=100.0)
    state = trainer.state_dict()
    name = next(iter(state["model"]))
    state["model"][name] = torch.full_like(state["model"][name], math.nan)
    path = save_checkpoint(state, tmp_path / "nan.pt")
    with pytest.raises(NonFiniteWeights, match=f"checkpoint {path} holds non-finite .* 1 tensor\\(s\\): {name}"):
        load_trained(objective_spec(cfg), path)


def corrupted_corpus():
    """The test corpus with one record of NaN samples: a batch holding it has non-finite losses."""
    x, phi = corpus()
    x[3] = math.nan
    return x, phi


def test_skip_nonfinite_steps_drops_the_updates_of_bad_steps_up_to_its_bound(tmp_path):
    cfg = tiny_config(training={"skip_nonfinite_steps": 12})
    trainer = Trainer(training_spec(cfg, tmp_path / "a", seed=0, transport_weight=1.0), *corrupted_corpus(), model_fs=100.0)
    last = trainer.fit(progress=False)
    rows = strict_rows(tmp_path / "a" / "metrics.jsonl")
    skipped = [row["step"] for row in rows if row.get("skipped")]
    nonfinite = [row["step"] for row in rows if any(isinstance(v, str) for v in row.values())]
    assert 0 < len(skipped) < 12 and skipped == nonfinite == trainer.skipped
    state = load_checkpoint(last)
    assert nonfinite_tensors(state["model"]) == [] and state["skipped"] == skipped
    adam_steps = {int(s["step"]) for o in state["optimisers"] for s in o["state"].values()}
    assert adam_steps == {12 - len(skipped)}  # the optimiser took exactly the steps not skipped

    bounded = tiny_config(training={"skip_nonfinite_steps": len(skipped) - 1})
    again = Trainer(training_spec(bounded, tmp_path / "b", seed=0, transport_weight=1.0), *corrupted_corpus(), model_fs=100.0)
    with pytest.raises(Diverged, match=f"at step {skipped[-1]}: non-finite .* after skipping {len(skipped) - 1} "):
        again.fit(progress=False)
