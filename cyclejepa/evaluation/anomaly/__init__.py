"""The anomaly battery: six synthetic perturbation families scored by one causal detector.

Each family perturbs z-scored records (N, channels, samples) from a per-record onset onward at
a severity s in [0, 2]; s = 0 runs the same pipeline at zero amplitude and is the identity. A
detector from `DETECTORS` emits one score per token (80 ms: 8 samples at 100 Hz, for PTB-XL)
that reads only tokens ≤ t. Per family and severity, `anomaly_battery` compares the perturbed
records with the same records unperturbed: AUROC of the record scores (maximum over the tokens
from the onset on), its excess over the family's zero-severity reference, and, at a threshold
calibrated on the clean records only, the alarm rate, the localisation hit rate and the median
latency. Every rate comes with the data: the signals' and the beats' (`BeatTimes.from_cache`)
and the samples per token (``cache.token_patch``), all from the cache's manifest.

Phases come from a causal tracker on the clean record's beats, the phase provider's events
(`causal_token_phases`): the phase of token t uses only the beats at or before the token's
last sample.

The package: `beats` (beat times, the causal tracker), `perturbations` (the families, registered
in `PERTURBATIONS` with the signals they apply to), `detectors` (the scorers, registered in
`DETECTORS`), `battery` (cells, metrics, the battery, its table).
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
