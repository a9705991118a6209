"""The evaluation reads narrow specs, never the experiment config: `EvaluationSpec` and
`ReportSpec` (cyclejepa/evaluation/spec.py), built by the pipeline's evaluation and report stages."""

import ast
import dataclasses
from pathlib import Path

import pytest

from cyclejepa.evaluation.spec import DataDescription, EvaluationSpec, ReportSpec

EVALUATION = Path(__file__).resolve().parents[1] / "cyclejepa" / "evaluation"
CONFIG_NAMES = {"ExperimentConfig", "RunPlan", "parse_config", "load_config"}


def config_reads(path: Path) -> list[str]:
    """``line: what`` for each import of the pipeline or of the experiment config's names in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = {alias.name for alias in node.names}
            if node.module.startswith("cyclejepa.pipeline") or names & CONFIG_NAMES:
                found.append(f"{node.lineno}: from {node.module} import {', '.join(sorted(names))}")
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name.startswith("cyclejepa.pipeline")]
        elif isinstance(node, ast.Name) and node.id in CONFIG_NAMES:
            found.append(f"{node.lineno}: {node.id}")
    return found


@pytest.mark.parametrize("path", sorted(EVALUATION.rglob("*.py")), ids=lambda p: str(p.relative_to(EVALUATION)))
def test_no_evaluation_module_reads_the_experiment_config_or_the_pipeline(path):
    assert config_reads(path) == []


@pytest.mark.parametrize("spec, consumers", [
    (EvaluationSpec, ["checkpoint_evaluation.py"]),
    (ReportSpec, ["report.py"]),
])  # fmt: skip
def test_every_field_of_a_spec_is_read_by_its_consumer(spec, consumers):
    """No field the consumer does not read: each is read as ``spec.<field>`` there."""
    read = {node.attr for name in consumers for node in ast.walk(ast.parse((EVALUATION / name).read_text()))
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "spec"}  # fmt: skip
    assert {field.name for field in dataclasses.fields(spec)} - read == set()


def test_specs_are_frozen():
    data = DataDescription("synthetic", True, ("I",), ("mV",), "lead", "ecg", "beat")
    with pytest.raises(dataclasses.FrozenInstanceError):
        data.channel_word = "channel"  # type: ignore[misc]
