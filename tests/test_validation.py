"""Validation up front: every check that the config and the files on disk allow fails in
`validate`, in `run --dry-run` and at the start of `run`, before any work, with the key path,
the allowed values and the closest match."""

import json

import pytest
import torch
from typer.testing import CliRunner

from cyclejepa.cli import app
from cyclejepa.data.synthetic import write_synthetic_corpus

# (overrides, expected fragments of the one problem line)
CASES = {
    "malformed spectrum": ({"symmetry": {"spectrum": "4x0+banana"}}, ["symmetry.spectrum: malformed term 2 ('banana')"]),
    "repeated harmonic": (
        {"symmetry": {"spectrum": "4x0+4x1+4x1"}},
        ["symmetry.spectrum: frequency 1 appears in more than one term"],
    ),
    "spectrum dimension": (
        {"symmetry": {"spectrum": "4x0+4x1"}},
        ["symmetry.spectrum: '4x0+4x1' has dimension 12, but model.projector.dim is 256"],
    ),
    "anomaly family": (
        {"evaluation": {"families": ["ectopic", "st-shfit"]}},
        ["evaluation.families[1]: unknown anomaly family 'st-shfit'", "registered: attenuation,", "Did you mean 'st-shift'?"],
    ),
    "headline step": (
        {"evaluation": {"headline_step": 14000}},
        ["evaluation.headline_step: 14000 is not evaluated; allowed: evaluation.steps [5000, 15000, 30000]. Did you mean 15000?"],
    ),
    "step beyond training": (
        {"training": {"steps": 20000}, "evaluation": {"steps": [5000, 15000, 30000]}},
        ["evaluation.steps: 30000 is beyond training.steps (20000)"],
    ),
    "fold overlap": (
        {"data": {"train_folds": [1, 2, 3], "eval_folds": [3, 4]}},
        ["data.eval_folds: folds [3] are also in data.train_folds [1, 2, 3]"],
    ),
    "device name": (
        {"training": {"device": "banana"}},
        ["training.device: unknown device 'banana': use auto, cpu, cuda or cuda:N"],
    ),
    "missing device": ({"evaluation": {"device": "cuda:7"}}, ["evaluation.device: device 'cuda:7': this machine has"]),
    "duplicate arm": (
        {"runs": {"arms": [{"name": "winder", "transport_weight": 1.0}, {"name": "winder", "transport_weight": 0.0}]}},
        ["runs.arms: arm name 'winder' appears 2 times"],
    ),
    "encoder width": (
        {"model": {"encoder": {"leads": 1}}},
        ["model.encoder.leads: 1, but dataset 'ptbxl' gives 12 channel(s)", "leave model.encoder.leads out to derive it"],
    ),
    "token patch": (
        {"model": {"encoder": {"patch": 5}}},
        ["model.encoder.patch: 5, but the cache's tokens are data.token_patch = 8 samples"],
    ),
    "provider lead": (
        {"phase": {"options": {"lead": "PPG"}}},
        ["phase.options.lead: 'PPG' is not a channel of dataset 'ptbxl'; its channels: I, II, III, aVR"],
    ),
    "coordinate lead": (
        {"phase": {"provider": "composite", "options": {"coordinates": {"cardiac": {"provider": "ecg-rpeak", "lead": "MLII"}}}}},
        ["phase.options.coordinates.cardiac.lead: 'MLII' is not a channel of dataset 'ptbxl'", "Did you mean 'II'?"],
    ),
    "family on one channel": (
        {
            "data": {"dataset": "challenge2021", "options": {"channels": ["II"]}},
            "evaluation": {"families": ["attenuation", "lead-dropout"]},
        },
        ["evaluation.families[1]: 'lead-dropout' needs at least 2 channels; the records have 1; leave it out"],
    ),
    "provider option": (
        {"phase": {"options": {"min_event": 3}}},
        [
            "phase.options.min_event: unknown option of phase provider 'ecg-rpeak'",
            "allowed: detection_leads, detector,",
            "Did you mean 'min_events'?",
        ],
    ),
}


def write(tmp_path, sections):
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({"output_dir": str(tmp_path / "out"), **sections}))
    return path


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], terminal_width=400)


def assert_refused_everywhere(tmp_path, path, fragments):
    """`validate`, `run --dry-run`, `run` and `train` exit 2 naming the problem; nothing is written."""
    for command in (["validate", path], ["run", path, "--dry-run"], ["run", path], ["train", path]):
        result = invoke(*command)
        assert result.exit_code == 2, (command, result.output)
        flat = " ".join(result.output.split())
        for fragment in fragments:
            assert fragment in flat, (command, fragment, result.output)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_config_that_would_fail_later_is_refused_up_front(tmp_path, case):
    sections, fragments = CASES[case]
    if case == "missing device" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    assert_refused_everywhere(tmp_path, write(tmp_path, sections), fragments)


def test_the_consistent_default_passes(tmp_path):
    result = invoke("validate", write(tmp_path, {}))
    assert result.exit_code == 0 and "valid" in result.output, result.output


def test_a_synthetic_size_that_disagrees_with_the_corpus_on_disk(tmp_path):
    corpus = write_synthetic_corpus(tmp_path / "corpus", 20, seed=0, progress=False)
    data = {"root": str(corpus), "dataset": "synthetic", "options": {"records": 20, "seed": 0}}
    assert invoke("validate", write(tmp_path, {"data": data})).exit_code == 0
    data["options"]["records"] = 40
    assert_refused_everywhere(
        tmp_path,
        write(tmp_path, {"data": data}),
        [
            f"data.options: the corpus at {corpus} was written with records 20, seed 0, not 40, 0",
        ],
    )


def test_a_malformed_override_is_one_line_naming_it(tmp_path):
    result = invoke("validate", write(tmp_path, {}), "--set", "x=[1")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "--set x=[1: x: value '[1' is not valid YAML" in lines[0] and "Traceback" not in result.output


def assert_one_line(result, *fragments):
    """Refused with exit status 2 in one line holding ``fragments``, no traceback."""
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 400, result.output[:2000]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def test_a_deeply_nested_override_is_one_line_naming_it(tmp_path):
    deep = "[" * 5000 + "]" * 5000
    result = invoke("validate", write(tmp_path, {}), "--set", f"training.steps={deep}")
    assert_one_line(result, "--set training.steps=[[[", "(10015 characters)", "training.steps: value '[[[",
                    "nested more than 100 levels deep")  # fmt: skip
    result = invoke("validate", write(tmp_path, {}), "--set", f"training.steps={'[' * 90}{']' * 90}")
    assert_one_line(result, "training.steps: Input should be a valid integer (got [[[[", "… (180 characters))")


def test_an_integer_too_long_for_python_is_one_line_naming_its_key(tmp_path):
    digits = "9" * 5000
    result = invoke("validate", write(tmp_path, {}), "--set", f"runs.seeds=[1, -{digits}]")
    assert_one_line(result, "runs.seeds[1]: an integer of 5000 digits, more than the 4300 Python reads")
    path = tmp_path / "long.yaml"
    path.write_text(f"output_dir: {tmp_path / 'out'}\ntraining:\n  steps: {digits}\n")
    assert_one_line(invoke("validate", path), f"{path}: training.steps: an integer of 5000 digits")


def test_a_grid_of_too_many_experiments_is_refused_naming_the_count(tmp_path):
    path = write(tmp_path, {"grid": {"optimiser.lr": [0.1 * k for k in range(1, 18)], "runs.seeds": [[k] for k in range(16)]}})
    assert_one_line(invoke("validate", path),
                    "grid: 17 (optimiser.lr) × 16 (runs.seeds) = 272 experiments, more than the 256 a grid may hold")  # fmt: skip
    huge = write(tmp_path, {"grid": {"optimiser.lr": list(range(1, 101)), "optimiser.weight_decay": list(range(1000))}})
    assert_one_line(invoke("validate", huge), "= 100000 experiments")  # at once, not after 10^5 validations
    assert not (tmp_path / "out").exists()


def test_a_huge_number_of_steps_is_validated_without_listing_them(tmp_path):
    path = write(tmp_path, {"training": {"steps": 10**8, "checkpoint_every": 3}, "evaluation": {"steps": [3, 5]}})
    assert_one_line(invoke("validate", path), "evaluation.steps: step 5 is never checkpointed (training.checkpoint_every 3); "
                    "checkpointed: 3, 6, 9, 12, 15, 18, 21, …, 100000000. Did you mean 6?")  # fmt: skip


def test_run_preflights_once_before_anything_is_written(tmp_path, monkeypatch):
    """`cyclejepa run` checks the config once (in `pipeline.run_experiment`, before the output
    lock), not again in the CLI or before the evaluation stage."""
    from cyclejepa.pipeline import run

    calls = []
    checked = run.preflight
    monkeypatch.setattr(run, "preflight", lambda cfg: calls.append(cfg.name) or checked(cfg))
    monkeypatch.setattr(run, "prepare", lambda cfg, progress=True, **_: None)
    monkeypatch.setattr(
        run, "prepared_cache_verdict", lambda cfg, cache: ([], [])
    )  # the cache check after prepare: its own tests
    monkeypatch.setattr(run, "pretrain_all", lambda cfg, cache, config, plans, progress=True: None)
    monkeypatch.setattr(run, "evaluate_stage", lambda cfg, cache, plans, steps, progress: tmp_path / "out" / "report.md")
    result = invoke("run", write(tmp_path, {"data": {"train_folds": [1, 2, 3, 4, 5, 6, 7, 8], "eval_folds": [9]}}))
    assert result.exit_code == 0, result.output
    assert len(calls) == 1


def test_a_dataset_without_a_phase_provider_and_own_families_is_named_not_a_crash(tmp_path, monkeypatch):
    """A config's own anomaly families and no phase provider (its dataset declares none, it names
    none): preflight lists the missing provider; the families' check does not look up None."""
    from cyclejepa.config import ConfigError, parse_config
    from cyclejepa.data.ptbxl import PTBXL
    from cyclejepa.pipeline.checks import preflight
    from cyclejepa.registry import DATASETS

    class Unphased(PTBXL):
        phase_provider = None

    monkeypatch.setattr(DATASETS, "_entries", {**DATASETS._entries, "unphased": Unphased})
    cfg = parse_config({"output_dir": str(tmp_path), "data": {"dataset": "unphased"}, "evaluation": {"families": ["ectopic"]}})
    with pytest.raises(ConfigError, match=r"phase\.provider: dataset 'unphased' declares no default phase provider; name one"):
        preflight(cfg)
