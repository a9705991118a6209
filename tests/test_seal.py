"""The sealed fold: every path that reads folds asks `cyclejepa.pipeline.seal.use_folds`, which refuses fold
10 without unseal, audits an unsealed use, and records what each stage read for the report."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from cyclejepa import pipeline
from cyclejepa.bench.commands import allocations_main
from cyclejepa.cli import app
from cyclejepa.config import parse_config
from cyclejepa.pipeline.identity import config_hash
from cyclejepa.data.datasets import LabelLevel
from cyclejepa.evaluation.report import folds_markdown, sealed_markdown
from cyclejepa.pipeline.evaluation import compare_runs
from cyclejepa.pipeline.reporting import report_spec
from cyclejepa.pipeline.seal import SealedFoldError, use_folds

DEVELOPMENT = {"train_folds": [1, 2, 3, 4, 5, 6, 7, 8], "eval_folds": [9]}
WITH_FOLD_10 = {"train_folds": [1, 2, 3, 4, 5, 6, 7, 8, 10], "eval_folds": [9]}


class Untouchable:
    """A cache that fails the test when a stage reads it before the seal refused (its label
    vocabulary, which says whether there is a probe to fit, holds no record)."""

    path = Path("untouchable")
    label_levels = (LabelLevel("superclass", "super", ("NORM",)),)

    def __getattr__(self, name):
        raise AssertionError(f"cache.{name} was read before the seal was asked")


def config(tmp_path, data=None, **sections):
    return parse_config({"output_dir": str(tmp_path / "out"), "data": data or {}, **sections})


def logs(tmp_path):
    out = tmp_path / "out"
    audit, folds = out / "unseal_audit.jsonl", out / "folds_used.jsonl"
    read = lambda p: [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []  # noqa: E731
    return read(audit), read(folds)


def test_the_gate_refuses_audits_and_records(tmp_path):
    with pytest.raises(SealedFoldError, match=r"evaluation: data.eval_folds \[10\] includes the sealed fold 10 of dataset"):
        use_folds(config(tmp_path), "evaluation", "data.eval_folds")
    assert logs(tmp_path) == ([], [])
    unsealed = config(tmp_path, evaluation={"unseal": True})
    assert use_folds(unsealed, "evaluation", "data.eval_folds") == [10]
    assert use_folds(unsealed, "pre-training", "data.train_folds") == list(range(1, 10))
    audit, folds = logs(tmp_path)
    assert [(e["stage"], e["key"], e["folds"]) for e in audit] == [("evaluation", "data.eval_folds", [10])]
    assert audit[0]["config_hash"] == config_hash(unsealed) and {"time", "git_revision", "cyclejepa"} <= audit[0].keys()
    assert [(e["stage"], e["folds"]) for e in folds] == [("evaluation", [10]), ("pre-training", list(range(1, 10)))]


def test_prepare_statistics_refuse_fold_10_in_the_training_folds(tmp_path):
    with pytest.raises(SealedFoldError, match="normalisation statistics: data.train_folds"):
        pipeline.prepare(config(tmp_path, data=WITH_FOLD_10), progress=False)
    assert not (tmp_path / "out").exists()


def test_a_missing_corpus_is_named_before_any_fold_is_recorded_as_used(tmp_path):
    from cyclejepa.data.datasets import DatasetNotFound

    (tmp_path / "empty").mkdir()
    unsealed = config(tmp_path, data={"dataset": "ptbxl", "root": str(tmp_path / "empty")}, evaluation={"unseal": True})
    with pytest.raises(DatasetNotFound):
        pipeline.prepare(unsealed, progress=False)
    assert logs(tmp_path) == ([], [])  # neither an audited unsealed use nor a use of folds 1-9


def test_pretraining_refuses_fold_10_before_reading_the_cache(tmp_path):
    with pytest.raises(SealedFoldError, match="pre-training: data.train_folds"):
        pipeline.train_run(config(tmp_path, data=WITH_FOLD_10), Untouchable(), tmp_path / "run", seed=0, transport_weight=1.0)


def test_probes_and_evaluation_refuse_fold_10(tmp_path):
    with pytest.raises(SealedFoldError, match="probe fitting: data.train_folds"):
        pipeline.evaluation_spec(config(tmp_path, data=WITH_FOLD_10), Untouchable())
    with pytest.raises(SealedFoldError, match="evaluation: data.eval_folds"):
        pipeline.evaluation_spec(config(tmp_path), Untouchable())
    unlabelled = Untouchable()
    unlabelled.label_levels = ()  # no probe to fit: the evaluation folds are still asked for first
    with pytest.raises(SealedFoldError, match="evaluation: data.eval_folds"):
        pipeline.evaluation_spec(config(tmp_path), unlabelled)


def test_the_evaluation_spec_holds_the_folds_as_they_passed_the_seal(tmp_path):
    labelled = SimpleNamespace(label_levels=Untouchable.label_levels, channels=("I", "II"), units=("mV", "mV"), coordinates=())
    spec = pipeline.evaluation_spec(config(tmp_path, data=DEVELOPMENT), labelled)
    assert (spec.train_folds, spec.eval_folds) == ((1, 2, 3, 4, 5, 6, 7, 8), (9,))
    assert [(e["stage"], e["key"]) for e in logs(tmp_path)[1]] == [
        ("probe fitting", "data.train_folds"),
        ("evaluation", "data.eval_folds"),
    ]
    unlabelled = SimpleNamespace(**{**vars(labelled), "label_levels": ()})
    spec = pipeline.evaluation_spec(config(tmp_path, data=DEVELOPMENT), unlabelled)
    assert spec.train_folds == () and spec.strata_not_applying == "no probe scores to stratify (no labels)"
    assert [e["stage"] for e in logs(tmp_path)[1]][2:] == ["evaluation"]  # no probe: its folds are not read


@pytest.mark.parametrize(("labelled", "per_checkpoint"), [(True, ["probe fitting", "evaluation"]), (False, ["evaluation"])])
def test_the_evaluation_records_the_cohort_table_then_each_checkpoint_in_the_order_of_the_reads(
    tmp_path, labelled, per_checkpoint
):
    """`evaluation_folds` passes the cohort table's two keys, then the folds of each checkpoint
    left to evaluate (the probes' only with labels), through the seal, and returns the cohort's."""
    from cyclejepa.pipeline.evaluation import evaluation_folds

    folds = evaluation_folds(config(tmp_path, data=DEVELOPMENT), labelled, 2)
    assert folds == ((1, 2, 3, 4, 5, 6, 7, 8), (9,))
    stages = [(e["stage"], e["key"]) for e in logs(tmp_path)[1]]
    assert stages[:2] == [("cohort table", "data.train_folds"), ("cohort table", "data.eval_folds")]
    keys = {"probe fitting": "data.train_folds", "evaluation": "data.eval_folds"}
    assert stages[2:] == [(stage, keys[stage]) for stage in per_checkpoint * 2]


def test_the_evaluation_grid_and_its_figures_refuse_fold_10(tmp_path):
    plans = pipeline.plan_runs(config(tmp_path))
    with pytest.raises(SealedFoldError, match="cohort table: data.eval_folds"):
        pipeline.evaluate_grid(config(tmp_path), Untouchable(), plans, [2], progress=False)
    with pytest.raises(SealedFoldError, match="figures: data.train_folds"):
        sealed = config(tmp_path, data=WITH_FOLD_10)
        compare_runs(sealed, Untouchable(), plans, 2, torch.device("cpu"), pipeline.objective_spec(sealed), None, "unused")
    assert logs(tmp_path)[0] == []


def test_run_refuses_fold_10_in_the_training_folds_up_front(tmp_path):
    cfg = config(tmp_path, data=WITH_FOLD_10)
    with pytest.raises(SealedFoldError, match="data.train_folds"):
        pipeline.run_experiment(cfg, progress=False)
    assert not (tmp_path / "out" / "cache").exists() and not (tmp_path / "out" / "runs").exists()
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({"output_dir": str(tmp_path / "out"), "data": WITH_FOLD_10}))
    result = CliRunner().invoke(app, ["run", str(path), "--dry-run"])
    assert result.exit_code == 0 and "fold 10 is sealed: needs --unseal" in result.output


def test_a_grid_refuses_a_sealed_cell_before_training_any_cell(tmp_path):
    cfg = config(tmp_path, data=DEVELOPMENT, grid={"data.eval_folds": [[9], [10]]})
    with pytest.raises(SealedFoldError, match=r"data.eval_folds \[10\]"):
        pipeline.run_experiment(cfg, progress=False)
    assert not list((tmp_path / "out").rglob("cache")) and not list((tmp_path / "out").rglob("runs"))


def test_the_allocations_benchmark_refuses_fold_10_before_preparing(tmp_path):
    overrides = ["data.eval_folds=[10]", f"data.root={tmp_path / 'corpus'}", f"data.cache_dir={tmp_path / 'cache'}"]
    with pytest.raises(SealedFoldError, match="data.eval_folds"):
        allocations_main(["--out", str(tmp_path / "out"), "--steps", "2", *sum((["--set", o] for o in overrides), [])])
    assert not (tmp_path / "cache").exists() and not (tmp_path / "corpus").exists()
    assert logs(tmp_path) == ([], [])


def test_the_report_states_the_folds_each_stage_read_and_the_audit(tmp_path):
    development = config(tmp_path, data=DEVELOPMENT)
    use_folds(development, "pre-training", "data.train_folds")
    use_folds(development, "evaluation", "data.eval_folds")
    use_folds(development, "evaluation", "data.eval_folds")
    out = tmp_path / "out"

    def sealed_lines():
        spec = report_spec(development)  # the logs of the output directory, as the report reads them
        return sealed_markdown(spec.folds_used, spec.unseal_audit, spec.audit_log)

    table = "\n".join(folds_markdown(report_spec(development).folds_used))
    assert "| pre-training | `data.train_folds` | [1, 2, 3, 4, 5, 6, 7, 8] | 1 |" in table
    assert "| evaluation | `data.eval_folds` | [9] | 2 |" in table
    assert sealed_lines() == ["The sealed fold was not touched."]
    use_folds(config(tmp_path, evaluation={"unseal": True}), "evaluation", "data.eval_folds")
    sealed = "\n".join(sealed_lines())
    assert "not touched" not in sealed
    assert "Sealed fold 10 was read by: evaluation; 1 audit entry (`unseal_audit.jsonl`)" in sealed
    assert "| evaluation | `data.eval_folds` | [10] |" in sealed
    (out / "unseal_audit.jsonl").unlink()  # an evaluation of fold 10 is reported even without its audit file
    assert "Sealed fold 10 was read by: evaluation; 0 audit entries" in "\n".join(sealed_lines())
