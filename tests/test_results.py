"""The result files' schemas: each written and read back through its model, and a file of
another schema version (or of none) refused by name with the command that rebuilds it."""

import json
import math

import pytest

from cyclejepa.evaluation.bootstrap import BootstrapCI
from cyclejepa.evaluation.hr_strata import HRStratification, HRStratum
from cyclejepa.evaluation.integrity import ResultAltered, with_checksum
from cyclejepa.evaluation.probe import ProbeResult
from cyclejepa.evaluation.results import (
    SCHEMA_VERSION,
    AllocationRow,
    CheckpointMetrics,
    CheckpointResult,
    ProbeFailure,
    ProtocolResult,
    ReportResult,
    ResultSchemaMismatch,
    StrataResult,
    plain,
    read_result,
    write_result,
)
from test_phase_qc_gate import mechanism_result, report_of

INTERVAL = {"point": 0.71, "low": 0.6, "high": 0.8, "replicates": 20, "level": 0.95}
PROBE = {"task": "superclass", "classes": ["NORM", "MI"], "per_class": {"NORM": 0.7, "MI": math.nan}, "skipped": [],
         "macro_auroc": INTERVAL, "C": 1.0, "positives": {"NORM": 5, "MI": 3}, "counts": {"eval": 40, "eval_patients": 12},
         "degenerate": None}  # fmt: skip
PASSING = {"windows": 100, "passed": 90}


def checkpoint_result() -> CheckpointResult:
    """A checkpoint's result with a probe, a task that failed, channel zeroing and an anomaly cell."""
    result = mechanism_result("winder", 1.0, 0.8)
    result["diagnostic"] = {
        "superclass": PROBE,
        "subclass-eligible": {"task": "subclass-eligible", "classes": [], "error": "none"},
    }
    result["robustness"] = {"intact": 0.7, "zeroed": {"I": 0.6}, "delta": {"I": INTERVAL}, "mean_delta": INTERVAL,
                            "worst_delta": -0.1, "worst_channel": "I", "records": 40, "excluded": {}}  # fmt: skip
    result["anomaly"] = [{"family": "ectopic", "severity": 2.0, "detector": "transport-violation", "records": 4, "auroc": 0.9,
                          "reference_auroc": 0.5, "excess": 0.4, "threshold": 1.0, "clean_alarm_rate": 0.05,
                          "alarm_rate": 0.5, "hit_rate": 0.25, "median_latency_ms": math.nan, "alarmed": 2}]  # fmt: skip
    return CheckpointResult(**result)


def every_schema() -> list:
    stratum = HRStratum(
        low=40.0, high=80.0, records=9, classes=2, auroc={"a": 0.7, "b": 0.6}, gap=0.1, gap_ci=BootstrapCI(**INTERVAL)
    )
    strata = HRStratification(arms=["a", "b"], strata=[stratum], overall=stratum, excluded={"no_heart_rate": 1})
    validity = checkpoint_result().validity
    return [
        checkpoint_result(),
        ProtocolResult(
            cache="cache",
            counts={"records": 4},
            rejections=[{"record": "00001", "check": "extent", "detail": "short"}],
            cohort_markdown="| x |",
            phase_qc={"event": "beat", "train": PASSING, "eval": PASSING},
            evaluation_hash="e0",
        ),  # fmt: skip
        StrataResult(task="superclass", seeds={"seed0": strata}, evaluation_hash="e0"),
        ReportResult(
            headline={"winder": {"G1 shuffled-φ gate": "Pass"}},
            headline_cell={"seed": 0, "step": 2},
            bottom_line_seeds=[0],
            validity={"winder": validity},
            phase_qc_flags=[],
            probe_rows=[],
            grid=[],
            figures=[],
            checksums={"protocol.json": "0" * 64},
        ),  # fmt: skip
        AllocationRow(
            allocation="uniform",
            spectrum="2x0+3x1",
            seed=0,
            encoder="trained",
            auroc=0.7,
            auroc_low=0.6,
            auroc_high=0.8,
            gain_fraction=0.5,
            shuffled_gain_fraction=0.0,
            g1=None,
            amplitude=1.0,
            coherence=math.nan,
            effective_rank=3.0,
        ),  # fmt: skip
    ]


@pytest.mark.parametrize("result", every_schema(), ids=lambda r: type(r).__name__)
def test_each_result_schema_reads_back_what_it_wrote(result, tmp_path):
    path = write_result(tmp_path / "result.json", result)
    written = json.loads(path.read_text())
    assert written["schema_version"] == SCHEMA_VERSION and len(written["checksum"]) == 64
    back = read_result(path, type(result))
    assert json.dumps(plain(back)) == json.dumps(plain(result))  # NaN included
    assert back.checksum == written["checksum"]


def test_a_checkpoint_result_reads_typed_parts():
    result = checkpoint_result()
    assert isinstance(result.diagnostic["superclass"], ProbeResult)
    assert isinstance(result.diagnostic["subclass-eligible"], ProbeFailure)
    assert result.diagnostic["superclass"].macro_auroc.point == 0.71
    assert result.mechanism.paired_difference.point == 0.8 and result.robustness.worst_channel == "I"
    assert result.geometry.coherence.mean_kappa == 0.8 and result.anomaly[0].family == "ectopic"


@pytest.mark.parametrize("version", [None, 0, SCHEMA_VERSION + 1])
@pytest.mark.parametrize(("schema", "command"), [
    (CheckpointResult, "cyclejepa evaluate CONFIG"),
    (ReportResult, "cyclejepa report RUN_DIR"),
    (AllocationRow, "cyclejepa benchmark allocations"),
])  # fmt: skip
def test_a_file_of_another_schema_version_is_refused_with_the_command_that_rebuilds_it(tmp_path, version, schema, command):
    content = {"anything": 1} if version is None else {"schema_version": version, "anything": 1}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(with_checksum(content)))
    with pytest.raises(ResultSchemaMismatch) as refused:
        read_result(path, schema)
    message = str(refused.value)
    assert str(path) in message and f"`{command}" in message and f"schema version {SCHEMA_VERSION}" in message
    assert ("before results carried a schema version" if version is None else f"with schema version {version}") in message


def test_a_file_that_does_not_fit_its_schema_is_refused_with_the_key_path(tmp_path):
    content = plain(checkpoint_result()) | {"worst_lead": "V2"}
    del content["mechanism"]["paired_difference"]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(with_checksum(content)))
    with pytest.raises(ResultSchemaMismatch, match=r"odd\.json does not fit CheckpointResult") as refused:
        read_result(path, CheckpointResult)
    assert "mechanism.paired_difference" in str(refused.value) and "worst_lead" in str(refused.value)


def test_an_altered_file_is_refused_naming_it(tmp_path):
    path = write_result(tmp_path / "protocol.json", every_schema()[1])
    content = json.loads(path.read_text())
    content["cache"] = "elsewhere"
    path.write_text(json.dumps(content))
    with pytest.raises(ResultAltered, match=r"protocol\.json was changed after it was written.*cyclejepa evaluate CONFIG"):
        read_result(path, ProtocolResult)


def test_the_report_refuses_an_evaluation_result_of_an_older_version(tmp_path):
    """A run directory whose result was written before results carried a schema version: the
    report names the file and `cyclejepa evaluate CONFIG` instead of reading it."""
    from cyclejepa.pipeline.reporting import report_experiment

    text, _ = report_of(tmp_path, {"event": "pulse", "train": PASSING, "eval": PASSING})
    assert "## Bottom line" in text
    path = tmp_path / "evaluation" / "control-seed0-step000002.json"
    older = json.loads(path.read_text())
    del older["schema_version"], older["checksum"]
    path.write_text(json.dumps(with_checksum(older)))
    with pytest.raises(ResultSchemaMismatch, match=r"control-seed0-step000002\.json was written before results carried"):
        report_experiment(tmp_path)


def test_evaluate_recomputes_a_result_of_another_version(tmp_path):
    """`is_current_untrained` keeps a result of this schema and this evaluation, not one of another version."""
    from cyclejepa.evaluation.checkpoint_evaluation import is_current_untrained

    result = mechanism_result("random", None, 0.1) | {"untrained": True, "weights": {"model_sha256": "w" * 64}}
    path = write_result(tmp_path / "random-seed0-step000000.json", CheckpointResult(**result))
    assert is_current_untrained(path, "e0", "w" * 64)
    assert not is_current_untrained(path, "e1", "w" * 64)
    content = json.loads(path.read_text()) | {"schema_version": SCHEMA_VERSION + 1}
    path.write_text(json.dumps(with_checksum(content)))
    assert not is_current_untrained(path, "e0", "w" * 64)


def test_an_allocation_row_reads_a_checkpoints_metrics_by_field():
    from cyclejepa.bench.allocations import allocation_metrics

    scores = {key: value for key, value in plain(checkpoint_result()).items() if key in CheckpointMetrics.model_fields}
    metrics = allocation_metrics(scores)  # as `core_metrics` gives them
    assert (metrics["auroc"], metrics["auroc_low"], metrics["auroc_high"]) == (0.71, 0.6, 0.8)
    assert (metrics["gain_fraction"], metrics["shuffled_gain_fraction"], metrics["g1"]) == (0.8, 0.0, True)
    assert (metrics["amplitude"], metrics["coherence"], metrics["effective_rank"]) == (0.8, 0.8, 3.8)
    AllocationRow(allocation="a", spectrum="2x0", seed=0, encoder="trained", **metrics)  # a row holds exactly these
