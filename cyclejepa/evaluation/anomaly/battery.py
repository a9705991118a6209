"""The battery: every family at every severity, scored by one detector, against the same records clean.

Per cell: AUROC of the record scores (maximum over the tokens from the onset on), its excess
over the family's zero-severity reference, and, at a threshold calibrated on the clean records
only, the alarm rate, the localisation hit rate and the median latency.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from cyclejepa.evaluation.anomaly.beats import BeatTimes, causal_token_phases
from cyclejepa.evaluation.anomaly.detectors import ArrayLike
from cyclejepa.evaluation.anomaly.perturbations import FAMILIES, MAX_SEVERITY, SEVERITIES, applicable_families
from cyclejepa.registry import DETECTORS, PERTURBATIONS
from cyclejepa.symmetry import PhaseSymmetry

ONSET_FRACTIONS = (0.32, 0.80)
"""The default onset range as fractions of the record: the paper's tokens 40–100 of 125."""


def draw_onsets(n: int, token_range: tuple[int, int], seed: int = 0) -> np.ndarray:
    """(n,) onset tokens uniform on the integers of ``token_range`` (inclusive), seeded."""
    low, high = token_range
    if not 0 < low <= high:
        raise ValueError(f"onset token range must satisfy 0 < low <= high, got {token_range}")
    return np.random.default_rng([seed, 0]).integers(low, high + 1, size=n)


def _family_rng(seed: int, family: str) -> np.random.Generator:
    """The family's generator: equal for every severity, so that only the amplitude changes."""
    return np.random.default_rng([seed, 1, zlib.crc32(family.encode())])


def record_scores(scores: np.ndarray, onset_tokens: np.ndarray) -> np.ndarray:
    """(N,) maximum of each record's token scores from its onset token on (NaN ignored; NaN if none)."""
    scores = np.asarray(scores, dtype=np.float64)
    window = np.arange(scores.shape[1]) >= np.asarray(onset_tokens)[:, None]
    return np.fmax.reduce(np.where(window, scores, np.nan), axis=1)


def alarm_threshold(clean_record_scores: np.ndarray, false_alarm_rate: float = 0.05) -> float:
    """The (1 − ``false_alarm_rate``) quantile of the clean records' scores (NaN ignored)."""
    if not 0.0 < false_alarm_rate < 1.0:
        raise ValueError(f"false_alarm_rate must lie in (0, 1), got {false_alarm_rate}")
    finite = np.asarray(clean_record_scores, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        raise ValueError("alarm_threshold: no clean record has a defined score")
    return float(np.quantile(finite, 1.0 - false_alarm_rate))


def first_alarms(scores: np.ndarray, threshold: float, onset_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N,) first token at or after the onset above ``threshold`` (−1: none), and (N,) whether
    any token before the onset is above it (an early alarm)."""
    above = np.asarray(scores) > threshold  # NaN: no alarm
    after = np.arange(above.shape[1]) >= np.asarray(onset_tokens)[:, None]
    alarmed = above & after
    first = np.where(alarmed.any(1), alarmed.argmax(1), -1)
    return first, np.any(above & ~after, axis=1)


def auroc(negative: np.ndarray, positive: np.ndarray) -> float:
    """AUROC of ``positive`` against ``negative`` scores (ties count ½)."""
    from cyclejepa.evaluation.probe import weighted_auroc

    scores = np.concatenate([negative, positive])[:, None]
    labels = np.r_[np.zeros(len(negative)), np.ones(len(positive))][:, None]
    return float(weighted_auroc(labels, scores)[0, 0])


@dataclass
class AnomalyCell:
    """Detection of one family at one severity (`score_anomaly_cell`); ``excess`` = auroc −
    reference_auroc (the family's at severity 0)."""

    family: str
    severity: float
    detector: str
    records: int
    auroc: float
    reference_auroc: float
    excess: float
    threshold: float
    clean_alarm_rate: float
    alarm_rate: float
    hit_rate: float
    median_latency_ms: float
    alarmed: int


def score_anomaly_cell(
    clean: np.ndarray,
    perturbed: np.ndarray,
    onset_tokens: np.ndarray,
    *,
    token_ms: float,
    family: str = "",
    severity: float = math.nan,
    detector: str = "",
    false_alarm_rate: float = 0.05,
    hit_tokens: int = 3,
) -> AnomalyCell:
    """One cell from token scores (N, T) of the clean and perturbed records.

    Records without a defined record score in either are left out. The threshold is the
    (1 − ``false_alarm_rate``) quantile of the clean record scores; a hit is a first alarm within
    ``hit_tokens`` tokens of the onset with none before it; latency is (first alarm − onset + 1)
    × ``token_ms``. The reference is left NaN (`anomaly_battery` fills it in).
    """
    if hit_tokens < 1:
        raise ValueError(f"hit_tokens must be >= 1, got {hit_tokens}")
    onset_tokens = np.asarray(onset_tokens)
    clean_max, perturbed_max = record_scores(clean, onset_tokens), record_scores(perturbed, onset_tokens)
    kept = np.isfinite(clean_max) & np.isfinite(perturbed_max)
    if not kept.any():
        raise ValueError(f"{family or 'cell'} at severity {severity}: no record has a defined score after its onset")
    clean_max, perturbed_max, onset_tokens = clean_max[kept], perturbed_max[kept], onset_tokens[kept]
    threshold = alarm_threshold(clean_max, false_alarm_rate)
    first, early = first_alarms(np.asarray(perturbed)[kept], threshold, onset_tokens)
    alarmed = first >= 0
    delay = first - onset_tokens
    latency = (delay[alarmed] + 1) * token_ms
    return AnomalyCell(
        family=family,
        severity=float(severity),
        detector=detector,
        records=int(kept.sum()),
        auroc=auroc(clean_max, perturbed_max),
        reference_auroc=math.nan,
        excess=math.nan,
        threshold=threshold,
        clean_alarm_rate=float(np.mean(clean_max > threshold)),
        alarm_rate=float(alarmed.mean()),
        hit_rate=float(np.mean(alarmed & ~early & (delay < hit_tokens))),
        median_latency_ms=float(np.median(latency)) if latency.size else math.nan,
        alarmed=int(alarmed.sum()),
    )


@dataclass
class AnomalyBattery:
    """The battery's cells, and the requested families it skipped, each with the reason."""

    cells: list[AnomalyCell]
    skipped: dict[str, str] = field(default_factory=dict)


def anomaly_battery(
    model: nn.Module,
    symmetry: PhaseSymmetry,
    signals: ArrayLike,
    beats: BeatTimes,
    phases_causal: np.ndarray | None = None,
    *,
    patch: int,
    families: Sequence[str] | None = None,
    severities: Sequence[float] = SEVERITIES,
    signal_kind: str | None = None,
    detector: str = "transport-violation",
    detector_options: dict[str, Any] | None = None,
    onset_range: tuple[int, int] | None = None,
    false_alarm_rate: float = 0.05,
    hit_tokens: int = 3,
    seed: int = 0,
    device: str | torch.device = "cpu",
    batch_size: int = 64,
) -> AnomalyBattery:
    """One `AnomalyCell` per family that applies (others skipped with the reason) and severity
    (0 always included, ascending), scored by one detector.

    ``signals`` (N, channels, samples) are z-scored records with their ``beats``
    (``BeatTimes.from_cache``) and ``patch`` samples per token. Perturbed records keep the clean
    records' phases (``phases_causal``, default `causal_token_phases`). ``signal_kind`` (the
    provider's `PhaseProvider.signal`; None: not checked) and the channel count decide which
    ``families`` (default `FAMILIES`) apply; ``detector_options`` go to the detector. Onsets are
    drawn in ``onset_range`` (default `ONSET_FRACTIONS` of the tokens, 40–100 for T = 125), each
    family starting at its first affected sample after it. ``seed`` seeds the onsets and each
    family's draws (equal across severities).
    """
    families = list(FAMILIES if families is None else families)
    for family in families:
        PERTURBATIONS.get(family)  # unknown names fail here, with the closest registered one
    levels = sorted({0.0, *map(float, severities)})
    if not all(0.0 <= s <= MAX_SEVERITY for s in levels):
        raise ValueError(f"severities must lie in [0, {MAX_SEVERITY}], got {list(severities)}")
    x = torch.as_tensor(np.asarray(signals, dtype=np.float32))
    if x.dim() != 3 or len(beats) != len(x):
        raise ValueError(
            f"signals must be (N, channels, samples) with one beat train per record; got {tuple(x.shape)} and {len(beats)}"
        )
    if patch < 1 or x.shape[-1] % patch:
        raise ValueError(f"patch must divide the {x.shape[-1]} samples of a record into whole tokens, got {patch}")
    tokens = x.shape[-1] // patch
    phases = causal_token_phases(beats, tokens, patch) if phases_causal is None else np.asarray(phases_causal)
    if onset_range is None:
        onset_range = (round(ONSET_FRACTIONS[0] * tokens), round(ONSET_FRACTIONS[1] * tokens))
    if not onset_range[1] < tokens:
        raise ValueError(f"onset_range {onset_range} must end before the last of the {tokens} tokens")
    families, skipped = applicable_families(families, signal_kind, x.shape[1])
    score_fn = DETECTORS.get(detector)
    options = dict(detector_options or {})

    def score(batch: Tensor) -> np.ndarray:
        return score_fn(model, symmetry, batch, phases, device=device, batch_size=batch_size, **options)

    clean = score(x)
    requested = torch.from_numpy(draw_onsets(len(x), onset_range, seed) * patch)
    token_ms = 1000.0 * patch / beats.fs
    cell = partial(
        score_anomaly_cell, token_ms=token_ms, detector=detector, false_alarm_rate=false_alarm_rate, hit_tokens=hit_tokens
    )
    cells = []
    for family in families:
        row = []
        for severity in levels:
            perturbed = PERTURBATIONS.get(family)(x, severity, requested, beats, _family_rng(seed, family))
            onset_tokens = (perturbed.onset // patch).numpy()
            row.append(cell(clean, score(perturbed.signals), onset_tokens, family=family, severity=severity))
        reference = row[0].auroc
        cells += [replace(c, reference_auroc=reference, excess=c.auroc - reference) for c in row]
    return AnomalyBattery(cells, skipped)


def strongest_cell(cells: Sequence[AnomalyCell], severity: float | None = None) -> AnomalyCell:
    """The cell with the largest excess at ``severity`` (default: the highest present): the
    paper's "strongest of six families"."""
    severity = max(c.severity for c in cells) if severity is None else severity
    candidates = [c for c in cells if c.severity == severity and math.isfinite(c.excess)]
    if not candidates:
        raise ValueError(f"no cell with a finite excess at severity {severity}")
    return max(candidates, key=lambda c: c.excess)


def to_table(cells: Sequence[AnomalyCell]) -> str:
    """A Markdown table of the cells, one row each."""
    header = (
        "| family | severity | AUROC | reference | excess | alarm rate | hit rate | median latency (ms) | records |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    rows = [
        f"| {c.family} | {c.severity:.1f} | {c.auroc:.4f} | {c.reference_auroc:.4f} | {c.excess:+.4f} | "
        f"{c.alarm_rate:.3f} | {c.hit_rate:.3f} | {c.median_latency_ms:.0f} | {c.records} |"
        for c in cells
    ]
    return "\n".join([header, *rows])
