"""The anomaly battery: six synthetic perturbation families scored by one causal detector.

A family perturbs z-scored records from a per-record onset on at severity s in [0, 2] (s = 0 is
the identity); a detector emits one score per token that reads only tokens ≤ t, with phases from
a causal tracker on the clean record's beats. Rates (signals, beats, samples per token) come from
the cache's manifest. Modules: `beats` (beat times, the causal tracker), `perturbations` (the
families, `PERTURBATIONS`), `detectors` (`DETECTORS`), `battery` (cells, metrics, the table).
"""

from cyclejepa.evaluation.anomaly.battery import (
    AnomalyBattery,
    AnomalyCell,
    alarm_threshold,
    anomaly_battery,
    auroc,
    draw_onsets,
    first_alarms,
    record_scores,
    score_anomaly_cell,
    strongest_cell,
    to_table,
)
from cyclejepa.evaluation.anomaly.beats import BeatTimes, causal_token_phases
from cyclejepa.evaluation.anomaly.detectors import next_token_predictions, predictor_error, transport_violation
from cyclejepa.evaluation.anomaly.perturbations import (
    FAMILIES,
    SEVERITIES,
    Perturbed,
    applicable_families,
    attenuation,
    baseline_wander,
    channel_dropout,
    ectopic,
    perturbation,
    st_shift,
    t_inversion,
)
from cyclejepa.registry import DETECTORS, PERTURBATIONS

__all__ = [
    "DETECTORS",
    "FAMILIES",
    "PERTURBATIONS",
    "SEVERITIES",
    "AnomalyBattery",
    "AnomalyCell",
    "BeatTimes",
    "Perturbed",
    "alarm_threshold",
    "anomaly_battery",
    "applicable_families",
    "attenuation",
    "auroc",
    "baseline_wander",
    "causal_token_phases",
    "channel_dropout",
    "draw_onsets",
    "ectopic",
    "first_alarms",
    "next_token_predictions",
    "perturbation",
    "predictor_error",
    "record_scores",
    "score_anomaly_cell",
    "st_shift",
    "strongest_cell",
    "t_inversion",
    "to_table",
    "transport_violation",
]
