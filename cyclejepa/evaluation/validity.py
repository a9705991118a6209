"""Whether the figures of one evaluated checkpoint mean anything.

Three things make a figure meaningless, each read from the saved result:

- a **collapsed** representation: the mean untransported similarity E[c_I] of a record's
  tokens is at least `COLLAPSE_SIMILARITY`, so the gain fraction E[c_R − c_I] / E[1 − c_I]
  divides by about zero and G1 is not testable (`cyclejepa.evaluation.mechanism`);
- a **degenerate probe**: constant predictions, or one class left to rank
  (`cyclejepa.evaluation.probe.degenerate_probe`);
- **too few** evaluation windows (`MIN_WINDOWS`) or patients (`MIN_PATIENTS`): the figures
  are shown, each with the words "few data" beside it, since a single window or patient moves
  them and the patient-clustered intervals rest on a handful of distinct resamples.
"""

from __future__ import annotations

from cyclejepa.evaluation.mechanism import COLLAPSE_SIMILARITY, G1Result
from cyclejepa.evaluation.probe import ProbeResult
from cyclejepa.evaluation.results import CheckpointMetrics, FewData, Validity

MIN_WINDOWS = 30
"""Fewest evaluation windows under which a cell's figures are flagged as resting on too few."""
MIN_PATIENTS = 10
"""Fewest evaluation patients (bootstrap clusters) under which a cell's figures are flagged: a
percentile interval of n clusters draws from C(2n − 1, n) distinct resamples (126 at n = 5,
92,378 at n = 10), and its 2.5 % tails are then set by one or two patients."""


def cell_validity(result: CheckpointMetrics) -> Validity:
    """The validity of one checkpoint's metrics: ``collapsed`` (E[c_I] ≥ `COLLAPSE_SIMILARITY`),
    ``token_similarity`` (E[c_I]) and the threshold, ``degenerate_probes`` ({task: why}),
    ``too_few`` (`few_data`) and ``meaningful`` (none of them)."""
    degenerate = {task: p.degenerate for task, p in result.diagnostic.items() if isinstance(p, ProbeResult) and p.degenerate}
    too_few = few_data(result)
    collapsed = is_collapsed(result.mechanism)
    return Validity(
        collapsed=collapsed,
        token_similarity=result.mechanism.true.mean_c_i,
        collapse_similarity=COLLAPSE_SIMILARITY,
        degenerate_probes=degenerate,
        too_few=too_few,
        meaningful=not (collapsed or degenerate or too_few),
    )


def subject_word(result: CheckpointMetrics) -> str:
    """Who the bootstrap resamples: "patient", or "recording" when the dataset does not know
    whose each recording is (``data.subjects_known`` False: each recording its own subject)."""
    return "patient" if result.data.subjects_known else "recording"


def is_collapsed(mechanism: G1Result) -> bool:
    """Whether a G1 result (a checkpoint's, or a torus coordinate's) has collapsed tokens:
    E[c_I] ≥ `COLLAPSE_SIMILARITY`."""
    return mechanism.true.mean_c_i >= COLLAPSE_SIMILARITY


def few_data(result: CheckpointMetrics) -> FewData | None:
    """The fewest evaluation windows and patients behind the result's figures (the mechanism's,
    or a probe's) with the thresholds and what a patient is called (`subject_word`), when below
    `MIN_WINDOWS` or `MIN_PATIENTS`; else None."""
    counts = [(result.mechanism.true.records, result.mechanism.patients)]
    counts += [(p.counts["eval"], p.counts["eval_patients"]) for p in result.diagnostic.values() if isinstance(p, ProbeResult)]
    windows, patients = min(c[0] for c in counts), min(c[1] for c in counts)
    if windows >= MIN_WINDOWS and patients >= MIN_PATIENTS:
        return None
    return FewData(
        windows=windows, patients=patients, min_windows=MIN_WINDOWS, min_patients=MIN_PATIENTS, subject=subject_word(result)
    )
