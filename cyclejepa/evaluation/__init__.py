"""Evaluation: embeddings, probes, mechanism, robustness, geometry, anomaly battery, report.

Names are imported on first use, so that importing one module (e.g. the anomaly detectors the
registry needs) does not pull in scikit-learn, matplotlib or UMAP.
"""

import importlib

_EXPORTS = {
    "AnomalyBattery": "anomaly",
    "AnomalyCell": "anomaly",
    "BeatTimes": "anomaly",
    "BootstrapCI": "bootstrap",
    "CoherenceResult": "geometry",
    "DiagnosticTask": "probe",
    "G1Result": "mechanism",
    "GainResult": "mechanism",
    "HRStratification": "context",
    "HRStratum": "context",
    "LinearProbe": "probe",
    "PERTURBATIONS": "anomaly",
    "Perturbed": "anomaly",
    "ProbeResult": "probe",
    "RecordSimilarities": "mechanism",
    "Representations": "embeddings",
    "RobustnessResult": "robustness",
    "TaskSplit": "probe",
    "anomaly_battery": "anomaly",
    "applicable_families": "anomaly",
    "causal_token_phases": "anomaly",
    "channel_zeroing": "robustness",
    "clustered_bootstrap": "probe",
    "dephase": "geometry",
    "diagnostic_tasks": "probe",
    "embed_records": "embeddings",
    "evaluate_probe": "probe",
    "evaluate_task": "probe",
    "extract_tokens": "embeddings",
    "fundamental_amplitude": "geometry",
    "g1_gate": "mechanism",
    "heart_rate": "context",
    "hr_stratified_auroc": "context",
    "macro_auroc": "probe",
    "next_token_predictions": "anomaly",
    "orbit_coherence": "geometry",
    "patient_bootstrap_weights": "bootstrap",
    "percentile_interval": "bootstrap",
    "phase_ring_figure": "geometry",
    "predictor_error": "anomaly",
    "record_bootstrap": "probe",
    "record_heart_rates": "context",
    "record_representations": "embeddings",
    "record_similarities": "mechanism",
    "replicate_macro_auroc": "probe",
    "score_anomaly_cell": "anomaly",
    "score_probe": "probe",
    "shuffle_phases": "mechanism",
    "strongest_cell": "anomaly",
    "to_table": "anomaly",
    "transport_gain": "mechanism",
    "transport_violation": "anomaly",
    "umap_figure": "geometry",
    "weighted_auroc": "probe",
    "zero_channel": "robustness",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
