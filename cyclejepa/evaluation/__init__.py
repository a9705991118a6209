"""Evaluation: embeddings, probes, mechanism, robustness, geometry, anomaly battery, report."""

from cyclejepa.evaluation.bootstrap import (  # noqa: F401
    BootstrapCI,
    patient_bootstrap_weights,
    percentile_interval,
)
from cyclejepa.evaluation.mechanism import (  # noqa: F401
    G1Result,
    GainResult,
    RecordSimilarities,
    g1_gate,
    record_similarities,
    shuffle_phases,
    transport_gain,
)
from cyclejepa.evaluation.geometry import (  # noqa: F401
    CoherenceResult,
    dephase,
    fundamental_amplitude,
    orbit_coherence,
    phase_ring_figure,
    umap_figure,
)
from cyclejepa.evaluation.embeddings import (  # noqa: F401
    Representations,
    embed_records,
    extract_tokens,
    record_representations,
)
from cyclejepa.evaluation.probe import (  # noqa: F401
    DiagnosticTask,
    LinearProbe,
    ProbeResult,
    TaskSplit,
    clustered_bootstrap,
    diagnostic_tasks,
    evaluate_probe,
    evaluate_task,
    macro_auroc,
    record_bootstrap,
    replicate_macro_auroc,
    score_probe,
    weighted_auroc,
)
from cyclejepa.evaluation.robustness import RobustnessResult, lead_zeroing, zero_lead  # noqa: F401
from cyclejepa.evaluation.context import (  # noqa: F401
    HRStratification,
    HRStratum,
    heart_rate,
    hr_stratified_auroc,
)
from cyclejepa.evaluation.anomaly import (  # noqa: F401
    PERTURBATIONS,
    AnomalyCell,
    BeatTimes,
    Perturbed,
    anomaly_battery,
    causal_token_phases,
    evaluate_cell,
    next_token_predictions,
    predictor_error,
    strongest_cell,
    to_table,
    transport_violation,
)
