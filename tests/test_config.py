"""Registry, config schema, overrides and the CLI's validate/info commands."""

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cyclejepa import registry
from cyclejepa.cli import app
from cyclejepa.config import (
    PAPER_SPECTRUM,
    ConfigError,
    ExperimentConfig,
    apply_overrides,
    load_config,
    parse_config,
)
from cyclejepa.pipeline.identity import config_hash

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
runner = CliRunner()


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_registry_unknown_name_lists_names_and_closest_match():
    reg = registry.Registry("widget")
    reg.register("householder")(object)
    reg.register("canonical")(int)
    with pytest.raises(registry.UnknownComponentError) as caught:
        reg.get("housholder")
    message = str(caught.value)
    assert "canonical, householder" in message and "Did you mean 'householder'?" in message


def test_did_you_mean_names_the_closest_choice_or_nothing():
    assert registry.did_you_mean("housholder", ["canonical", "householder"]) == ". Did you mean 'householder'?"
    assert registry.did_you_mean("zzz", ["canonical", "householder"]) == ""


def test_registry_refuses_a_second_component_under_one_name():
    reg = registry.Registry("widget")
    reg.register("a")(int)
    reg.register("a")(int)  # the same object again is harmless (re-import)
    with pytest.raises(ValueError, match="already registered"):
        reg.register("a")(float)


def test_entry_point_plugins_are_loaded(monkeypatch):
    calls = []

    class FakeEntry:
        name = "demo"

        def load(self):
            return lambda: calls.append("registered")

    class BrokenEntry:
        name = "broken"

        def load(self):
            raise ImportError("missing dependency")

    monkeypatch.setattr(
        registry, "entry_points", lambda group: [FakeEntry(), BrokenEntry()] if group == registry.PLUGIN_GROUP else []
    )
    assert registry.load_plugins() == ["demo"]
    assert calls == ["registered"]


def test_empty_config_is_the_paper_configuration():
    cfg = parse_config({})
    assert cfg.symmetry.spectrum == PAPER_SPECTRUM
    assert cfg.objectives.regulariser.weight == 0.15
    assert (cfg.training.steps, cfg.training.batch_size, cfg.training.checkpoint_every) == (30_000, 64, 2_500)
    assert cfg.optimiser.betas == (0.9, 0.95) and cfg.optimiser.warmup_steps == 5
    assert [a.transport_weight for a in cfg.runs.arms] == [1.0, 0.0]
    assert len(cfg.augmentations) == 6 and all(a.p == 0.5 for a in cfg.augmentations)


def test_unknown_key_names_path_allowed_keys_and_fix():
    with pytest.raises(ConfigError) as caught:
        parse_config({"model": {"encoder": {"widht": 64}}})
    (problem,) = caught.value.problems
    assert problem.startswith("model.encoder.widht: unknown key")
    assert "width" in problem and "Did you mean 'width'?" in problem


def test_unknown_component_name_prints_the_fix():
    with pytest.raises(ConfigError) as caught:
        parse_config({"model": {"predictor": {"name": "causal-transfomer"}}})
    (problem,) = caught.value.problems
    assert problem.startswith("model.predictor.name:")
    assert "Did you mean 'causal-transformer'?" in problem


def test_wrong_type_and_literal_are_reported_with_key_path():
    with pytest.raises(ConfigError) as caught:
        parse_config({"training": {"steps": "many", "precision": "bf61"}})
    problems = "\n".join(caught.value.problems)
    assert "training.steps:" in problems
    assert "training.precision:" in problems and "Did you mean 'bf16'?" in problems


def test_overrides_parse_values_as_yaml_and_create_sections():
    raw = apply_overrides(
        {"training": {"steps": 10}}, ["training.steps=20", "objectives.transport_weight=0.5", "runs.seeds=[3, 4]"]
    )
    cfg = parse_config(raw)
    assert cfg.training.steps == 20 and cfg.objectives.transport_weight == 0.5 and cfg.runs.seeds == [3, 4]


def test_malformed_override_is_rejected():
    with pytest.raises(ConfigError, match="key.path=value"):
        apply_overrides({}, ["training.steps"])


def test_config_hash_changes_with_content():
    assert config_hash(parse_config({})) == config_hash(ExperimentConfig())
    assert config_hash(parse_config({"training": {"steps": 7}})) != config_hash(ExperimentConfig())


def test_load_config_reports_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "absent.yaml")


PLUGIN_EXAMPLES = {
    "respiration.yaml",
    "cardio_respiratory.yaml",
    "ppg.yaml",
}  # need the example plugins: test_cardio_respiratory.py, test_pulse_example.py


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml") if p.name not in PLUGIN_EXAMPLES))
def test_shipped_examples_validate(name):
    load_config(EXAMPLES / name)


def test_cli_validate_prints_the_fix_for_a_misspelt_component(tmp_path):
    path = write(tmp_path, {"symmetry": {"basis": "housholder"}})
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert "symmetry.basis" in result.output and "Did you mean 'householder'?" in result.output


def test_cli_output_lines_are_not_broken_at_80_columns(tmp_path):
    """Piped into a log, a line (a path, a progress note) stays one line whatever its length."""
    folder = tmp_path / ("a-long-folder-name-" * 6)
    folder.mkdir()
    path = write(folder, {})
    output = runner.invoke(app, ["validate", str(path)]).output.splitlines()
    assert output[0].startswith("valid ") and str(path) in output[0] and len(output) == 1


def test_cli_validate_accepts_overrides(tmp_path):
    path = write(tmp_path, {})
    assert runner.invoke(app, ["validate", str(path), "--set", "training.batch_size=3"]).exit_code == 0
    bad = runner.invoke(app, ["validate", str(path), "--set", "training.stepz=3"])
    assert bad.exit_code == 2 and "Did you mean 'steps'?" in bad.output


def test_validate_checks_the_regularisers_option_names_and_values(tmp_path):
    """The regulariser's options are typed by its declared model: `validate` refuses a misspelt
    name with the closest one, and a value out of range with its key path, importing no torch."""
    path = write(tmp_path, {"output_dir": str(tmp_path / "out")})
    misspelt = runner.invoke(app, ["validate", str(path), "--set", "objectives.regulariser.options.num_direction=3"])
    assert misspelt.exit_code == 2 and "Did you mean 'num_directions'?" in misspelt.output
    zero = runner.invoke(
        app, ["validate", str(path), "--set", "objectives.regulariser.options.num_directions=0"], terminal_width=400
    )
    assert zero.exit_code == 2
    assert "objectives.regulariser.options.num_directions: Input should be greater than or equal to 1 (got 0)" in zero.output


def test_cli_info_lists_every_registered_component():
    result = runner.invoke(app, ["info"], terminal_width=200)
    assert result.exit_code == 0
    for reg in registry.ALL_REGISTRIES.values():
        for name in reg.names():
            assert name in result.output


VALIDATION = """
import json, sys
from cyclejepa.cli import main
sys.argv = ["cyclejepa", "validate", *sys.argv[1:]]
try:
    main()
except SystemExit as exit:
    code = exit.code
print(json.dumps({"exit": code, "modules": sorted(sys.modules)}))
"""
VALIDATION_ONLY = ("torch", "cyclejepa.training", "cyclejepa.models", "cyclejepa.objectives", "cyclejepa.data.augment",
                   "cyclejepa.data.cache.build", "cyclejepa.data.cache.record", "cyclejepa.data.cache.prepared",
                   "cyclejepa.data.cache.files", "cyclejepa.data.cache.identity", "cyclejepa.evaluation", "cyclejepa.export", "cyclejepa.embed", "cyclejepa.bench",
                   "cyclejepa.pipeline.run", "cyclejepa.pipeline.pretraining", "cyclejepa.pipeline.evaluation")  # fmt: skip
"""What validating a config never needs: torch, the torch-backed components, the cache's builder
and readers, the later stages (the cache's face and its `CacheSpec`, plain names, may load)."""


@pytest.mark.parametrize("name", ["quickstart.yaml", "winder_ptbxl.yaml", "wfdb_breath.yaml"])
def test_validating_a_config_imports_no_step_beyond_the_registry(name, tmp_path):
    """`cyclejepa validate` imports the foundations, the declarations, the pipeline's checks and
    the dataset the config names (it looks at the corpus on disk): no phase provider (its facts and
    options are declared), nothing of torch, training, evaluation or export."""
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    overrides = ["--set", f"output_dir={tmp_path}"]
    if name == "wfdb_breath.yaml":  # the default families: the battery's own list, no family module
        overrides += ["--set", "evaluation.families=[ectopic, t-inversion, st-shift, attenuation, lead-dropout, baseline-wander]"]
    result = subprocess.run([sys.executable, "-c", VALIDATION, str(EXAMPLES / name), *overrides],
                            capture_output=True, text=True, cwd=root, check=True)  # fmt: skip
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["exit"] in (0, None), result.stdout + result.stderr
    assert [m for m in report["modules"] if m.startswith(VALIDATION_ONLY)] == []
    assert [m for m in report["modules"] if m.startswith("cyclejepa.phase.")] == []  # declared, not imported


def test_the_cache_rate_key_of_earlier_versions_is_refused_naming_its_successor():
    with pytest.raises(ConfigError) as caught:
        parse_config({"data": {"fs": 250}})
    (problem,) = caught.value.problems
    assert problem.startswith("data.fs: no longer a key; the cache rate is data.cache_fs")
    assert parse_config({"data": {"cache_fs": 250}}).data.cache_fs == 250.0
