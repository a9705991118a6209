"""Evaluation: embeddings, probes, mechanism, robustness, geometry, anomaly battery, report.

Names are imported on first use, so that importing one module (e.g. the anomaly detectors the
registry needs) does not pull in scikit-learn, matplotlib or UMAP.
"""

from typing import TYPE_CHECKING

from cyclejepa.registry import lazy_names

if TYPE_CHECKING:  # each name's type for type checkers and editors (`X as X`: re-exported); nothing imported at run time
    from cyclejepa.evaluation.anomaly import (
        anomaly_battery as anomaly_battery,
        AnomalyBattery as AnomalyBattery,
        AnomalyCell as AnomalyCell,
        applicable_families as applicable_families,
        BeatTimes as BeatTimes,
        causal_token_phases as causal_token_phases,
        next_token_predictions as next_token_predictions,
        PERTURBATIONS as PERTURBATIONS,
        Perturbed as Perturbed,
        predictor_error as predictor_error,
        score_anomaly_cell as score_anomaly_cell,
        strongest_cell as strongest_cell,
        to_table as to_table,
        transport_violation as transport_violation,
    )
    from cyclejepa.evaluation.bootstrap import (
        BootstrapCI as BootstrapCI,
        patient_bootstrap_weights as patient_bootstrap_weights,
        percentile_interval as percentile_interval,
    )
    from cyclejepa.evaluation.hr_strata import (
        heart_rate as heart_rate,
        hr_stratified_auroc as hr_stratified_auroc,
        HRStratification as HRStratification,
        HRStratum as HRStratum,
        record_heart_rates as record_heart_rates,
    )
    from cyclejepa.evaluation.embeddings import (
        embed_records as embed_records,
        extract_tokens as extract_tokens,
        record_representations as record_representations,
        Representations as Representations,
    )
    from cyclejepa.evaluation.geometry import (
        CoherenceResult as CoherenceResult,
        dephase as dephase,
        fundamental_amplitude as fundamental_amplitude,
        orbit_coherence as orbit_coherence,
        phase_ring_figure as phase_ring_figure,
        umap_figure as umap_figure,
    )
    from cyclejepa.evaluation.mechanism import (
        g1_gate as g1_gate,
        G1Result as G1Result,
        GainResult as GainResult,
        record_similarities as record_similarities,
        RecordSimilarities as RecordSimilarities,
        shuffle_phases as shuffle_phases,
        transport_gain as transport_gain,
    )
    from cyclejepa.evaluation.probe import (
        clustered_bootstrap as clustered_bootstrap,
        diagnostic_tasks as diagnostic_tasks,
        DiagnosticTask as DiagnosticTask,
        evaluate_probe as evaluate_probe,
        evaluate_task as evaluate_task,
        LinearProbe as LinearProbe,
        macro_auroc as macro_auroc,
        ProbeResult as ProbeResult,
        record_bootstrap as record_bootstrap,
        replicate_macro_auroc as replicate_macro_auroc,
        score_probe as score_probe,
        TaskSplit as TaskSplit,
        weighted_auroc as weighted_auroc,
    )
    from cyclejepa.evaluation.robustness import (
        channel_zeroing as channel_zeroing,
        RobustnessResult as RobustnessResult,
        zero_channel as zero_channel,
    )

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
    "HRStratification": "hr_strata",
    "HRStratum": "hr_strata",
    "heart_rate": "hr_strata",
    "hr_stratified_auroc": "hr_strata",
    "record_heart_rates": "hr_strata",
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
