"""Evaluation: embeddings, probes, mechanism, robustness, geometry, anomaly battery, report.

Names are imported on first use, so that importing one module (e.g. the anomaly detectors the
registry needs) does not pull in scikit-learn, matplotlib or UMAP.
"""

from cyclejepa.registry import lazy_names

_HOMES = {
    "AnomalyBattery": "anomaly",
    "AnomalyCell": "anomaly",
    "BeatTimes": "anomaly",
    "PERTURBATIONS": "anomaly",
    "Perturbed": "anomaly",
    "anomaly_battery": "anomaly",
    "applicable_families": "anomaly",
    "causal_token_phases": "anomaly",
    "score_anomaly_cell": "anomaly",
    "next_token_predictions": "anomaly",
    "predictor_error": "anomaly",
    "strongest_cell": "anomaly",
    "to_table": "anomaly",
    "transport_violation": "anomaly",
    "BootstrapCI": "bootstrap",
    "patient_bootstrap_weights": "bootstrap",
    "percentile_interval": "bootstrap",
    "HRStratification": "context",
    "HRStratum": "context",
    "heart_rate": "context",
    "hr_stratified_auroc": "context",
    "record_heart_rates": "context",
    "Representations": "embeddings",
    "embed_records": "embeddings",
    "extract_tokens": "embeddings",
    "record_representations": "embeddings",
    "CoherenceResult": "geometry",
    "dephase": "geometry",
    "fundamental_amplitude": "geometry",
    "orbit_coherence": "geometry",
    "phase_ring_figure": "geometry",
    "umap_figure": "geometry",
    "G1Result": "mechanism",
    "GainResult": "mechanism",
    "RecordSimilarities": "mechanism",
    "g1_gate": "mechanism",
    "record_similarities": "mechanism",
    "shuffle_phases": "mechanism",
    "transport_gain": "mechanism",
    "DiagnosticTask": "probe",
    "LinearProbe": "probe",
    "ProbeResult": "probe",
    "TaskSplit": "probe",
    "clustered_bootstrap": "probe",
    "diagnostic_tasks": "probe",
    "evaluate_probe": "probe",
    "evaluate_task": "probe",
    "macro_auroc": "probe",
    "record_bootstrap": "probe",
    "replicate_macro_auroc": "probe",
    "score_probe": "probe",
    "weighted_auroc": "probe",
    "RobustnessResult": "robustness",
    "channel_zeroing": "robustness",
    "zero_channel": "robustness",
}
"""Each public name and the submodule that defines it."""

__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
