"""The schema of every result file the evaluation writes, and the one way to write and read them.

Each file is a typed model (pydantic) carrying ``schema_version`` and ``checksum`` (its content's
sha256, `cyclejepa.evaluation.integrity.content_checksum`):

| file | model | rebuilt by |
|---|---|---|
| ``evaluation/<run>-stepNNNNNN.json`` | `CheckpointResult` | ``cyclejepa evaluate CONFIG`` |
| ``evaluation/protocol.json`` | `ProtocolResult` | ``cyclejepa evaluate CONFIG`` |
| ``evaluation/hr-strata-stepNNNNNN.json`` | `StrataResult` | ``cyclejepa evaluate CONFIG`` |
| ``report/report.json`` | `ReportResult` | ``cyclejepa report RUN_DIR`` |
| ``rows/<allocation>-seedS.json`` | `AllocationRow` | ``cyclejepa benchmark allocations`` |

`write_result` validates a model and writes it atomically with its checksum; `read_result`
refuses a file of another ``schema_version`` (`ResultSchemaMismatch`: a file written by another
version of the package, or before results carried a version), one whose content no longer
matches its checksum (`ResultAltered`) and one that does not fit its model, each naming the
file and the command that rebuilds it. The nested parts reuse the dataclasses that compute
them (`G1Result`, `ProbeResult`, `RobustnessResult`, `CoherenceResult`, `AnomalyCell`,
`HRStratification`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cyclejepa.evaluation.anomaly.battery import AnomalyCell
from cyclejepa.evaluation.geometry import CoherenceResult
from cyclejepa.evaluation.hr_strata import HRStratification
from cyclejepa.evaluation.integrity import CHECKSUM, ResultAltered, content_checksum, with_checksum
from cyclejepa.evaluation.mechanism import G1Result
from cyclejepa.evaluation.probe import ProbeResult
from cyclejepa.evaluation.robustness import RobustnessResult
from cyclejepa.evaluation.spec import DataDescription
from cyclejepa.jsonio import read_json, write_json

__all__ = [
    "SCHEMA_VERSION",
    "AllocationRow",
    "CheckpointMetrics",
    "CheckpointResult",
    "FewData",
    "Geometry",
    "ProbeFailure",
    "ProtocolResult",
    "ReportResult",
    "ResultSchemaMismatch",
    "StrataResult",
    "Validity",
    "plain",
    "read_result",
    "write_result",
]

SCHEMA_VERSION = 1
"""The version of every result schema of this module; a file of another one is refused."""

EVALUATE = "cyclejepa evaluate CONFIG"
"""The command that rebuilds the evaluation's result files (the checkpoints are kept)."""


class ResultSchemaMismatch(ValueError):
    """A result file of another schema version (or none), or one that does not fit its schema."""


class Part(BaseModel):
    """A part of a result: frozen, no unknown key."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ResultFile(Part):
    """A result file: its ``schema_version`` and, once written, its content ``checksum``."""

    rebuild: ClassVar[str] = EVALUATE
    """The command that rebuilds a file of this schema."""
    rebuild_first: ClassVar[str] = ""
    """What to do before running it."""
    schema_version: int = SCHEMA_VERSION
    checksum: str | None = None


# a checkpoint's result


class ProbeFailure(Part):
    """A probe task that could not be evaluated, and why."""

    task: str
    classes: list[str]
    error: str


class RepresentationCounts(Part):
    """The record representations the probes score, and the records left out by reason."""

    records: int
    excluded: dict[str, int]


class Geometry(Part):
    """Latent geometry: the effective rank of z and, with a fundamental block, the loop
    amplitude and the orbit coherence (NaN and None without one; a torus coordinate's has no
    effective rank)."""

    effective_rank: float = math.nan
    amplitude: float = math.nan
    coherence: CoherenceResult | None = None


class CoordinateMetrics(Part):
    """The G1 gate and geometry of one cyclic coordinate of a torus."""

    mechanism: G1Result
    geometry: Geometry


class PhaseRecords(Part):
    """Evaluation records in the phase analyses, and those left out failing phase QC."""

    evaluated: int
    qc_failed: int


class FewData(Part):
    """The fewest evaluation windows and patients behind a result's figures, with the thresholds
    and what a patient is called (``subject``: "patient" or "recording")."""

    windows: int
    patients: int
    min_windows: int
    min_patients: int
    subject: str


class Validity(Part):
    """Whether a checkpoint's figures mean anything (`cyclejepa.evaluation.validity.cell_validity`)."""

    collapsed: bool
    token_similarity: float
    collapse_similarity: float
    degenerate_probes: dict[str, str]
    too_few: FewData | None
    meaningful: bool


class CheckpointMetrics(Part):
    """Every metric of one checkpoint (`cyclejepa.evaluation.checkpoint_evaluation.evaluate_checkpoint`);
    a part that did not apply is absent and named in ``not_run`` with the reason."""

    data: DataDescription
    not_run: dict[str, str] = Field(default_factory=dict)
    diagnostic: dict[str, ProbeResult | ProbeFailure] = Field(default_factory=dict)
    representations: RepresentationCounts | None = None
    mechanism: G1Result
    geometry: Geometry
    coordinates: dict[str, CoordinateMetrics] | None = None
    phase_records: PhaseRecords
    robustness: RobustnessResult | None = None
    anomaly: list[AnomalyCell] = Field(default_factory=list)
    anomaly_skipped: dict[str, str] = Field(default_factory=dict)


class CheckpointSource(Part):
    """The checkpoint a result was computed from (relative to the output directory) and the
    digest of its weights (`cyclejepa.evaluation.integrity.model_digest`)."""

    path: str
    model_sha256: str


class WeightsDigest(Part):
    """The digest of untrained weights (`cyclejepa.evaluation.integrity.state_digest`)."""

    model_sha256: str


class RunFields(Part):
    """Which run, arm, seed and step a result is of; the random baseline's are ``untrained``
    and carry the digest of their ``weights`` instead of a ``checkpoint``."""

    run: str
    arm: str
    seed: int
    step: int
    transport_weight: float | None
    checkpoint: CheckpointSource | None = None
    untrained: bool = False
    weights: WeightsDigest | None = None


class CheckpointResult(ResultFile, CheckpointMetrics, RunFields):
    """``evaluation/<run>-stepNNNNNN.json``: a checkpoint's metrics, its run, its validity, the
    evaluation's hash and the sha256 of its per-record scores (``.npz``, where a probe ran)."""

    validity: Validity
    evaluation_hash: str
    scores_sha256: str | None = None


# the other files of the evaluation


class Rejection(Part):
    record: str
    check: str
    detail: str


class PhaseQC(Part):
    """The event word and the phase QC counts of the training and evaluation windows."""

    event: str
    train: dict[str, Any]
    eval: dict[str, Any]


class ProtocolResult(ResultFile):
    """``evaluation/protocol.json``: the cache, its counts and rejections, the cohort table, the
    phase QC of the windows and the evaluation's hash."""

    cache: str
    counts: dict[str, int]
    rejections: list[Rejection]
    cohort_markdown: str
    phase_qc: PhaseQC
    evaluation_hash: str


class StrataResult(ResultFile):
    """``evaluation/hr-strata-stepNNNNNN.json``: per seed, two arms' AUROC gap of ``task`` within
    heart-rate strata."""

    task: str
    seeds: dict[str, HRStratification]
    evaluation_hash: str


class ReportResult(ResultFile):
    """``report/report.json``: the bottom line per arm (row label → value), the headline cell,
    the validity of its arms, the grid and the checksums of the results it was built from."""

    rebuild: ClassVar[str] = "cyclejepa report RUN_DIR"
    headline: dict[str, dict[str, Any]]
    headline_cell: dict[str, int]
    bottom_line_seeds: list[int]
    validity: dict[str, Validity]
    phase_qc_flags: list[str]
    probe_rows: list[str]
    grid: list[dict[str, Any]]
    figures: list[str]
    checksums: dict[str, str | None]


class AllocationRow(ResultFile):
    """``rows/<allocation>-seedS.json`` of ``cyclejepa benchmark allocations``: one allocation
    and seed, trained or the random baseline, scored like a checkpoint."""

    rebuild: ClassVar[str] = "cyclejepa benchmark allocations --out DIR"
    rebuild_first: ClassVar[str] = "delete it (finished rows are kept), then "
    allocation: str
    spectrum: str
    seed: int
    encoder: str
    auroc: float
    auroc_low: float
    auroc_high: float
    gain_fraction: float
    shuffled_gain_fraction: float
    g1: bool | None
    amplitude: float
    coherence: float
    effective_rank: float


# writing and reading

Result = TypeVar("Result", bound=ResultFile)


def plain(value: Any) -> Any:
    """``value`` as it reads back from JSON: dataclasses and models as dicts, numpy values as
    plain numbers, tuples as lists."""
    if isinstance(value, BaseModel):
        value = value.model_dump(exclude={CHECKSUM})
    return json.loads(json.dumps(value, default=_plain))


def write_result(path: str | Path, result: ResultFile) -> Path:
    """Write ``result`` to ``path`` atomically, validated against its own schema, with its
    content ``checksum``; returns the path."""
    content = plain(result)
    type(result).model_validate(content)
    return write_json(path, with_checksum(content))


def read_result(path: str | Path, schema: type[Result]) -> Result:
    """The result in ``path`` as a ``schema``, refused with the command that rebuilds it when it
    is of another schema version (`ResultSchemaMismatch`), altered (`ResultAltered`) or does not
    fit ``schema`` (`ResultSchemaMismatch`, with pydantic's key paths)."""
    value = read_json(path)
    again = f"{schema.rebuild_first}rebuild it with `{schema.rebuild}`"
    found = value.get("schema_version") if isinstance(value, dict) else None
    if found != SCHEMA_VERSION:
        written = "before results carried a schema version" if found is None else f"with schema version {found}"
        raise ResultSchemaMismatch(
            f"{path} was written {written}; this version of cyclejepa reads schema version {SCHEMA_VERSION} "
            f"({schema.__name__}): {again}"
        )
    if value.get(CHECKSUM) != content_checksum(value):
        raise ResultAltered(f"{path} was changed after it was written: its content does not match its checksum ({again})")
    try:
        return schema.model_validate(value)
    except ValidationError as error:
        raise ResultSchemaMismatch(f"{path} does not fit {schema.__name__} ({again}):\n{error}") from None


def _plain(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(value)
    if isinstance(value, tuple):
        return list(value)
    return value.tolist() if hasattr(value, "tolist") else str(value)
