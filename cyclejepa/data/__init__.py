"""Data: the dataset interface, PTB-XL and Challenge-format readers, preprocessing cache, synthetic corpus,
augmentations.

Names are imported on first use (PEP 562), so that importing one module does not import
its siblings and their dependencies.
"""

from cyclejepa.registry import lazy_names

_HOMES = {
    "AmplitudeModulation": "augment",
    "Augmentation": "augment",
    "AugmentationStep": "augment",
    "AugmentationTrace": "augment",
    "Augmenter": "augment",
    "DEFAULT_AUGMENTATIONS": "augment",
    "Drift": "augment",
    "GaussianNoise": "augment",
    "LeadDropout": "augment",
    "LeadGain": "augment",
    "Tone": "augment",
    "record_rms": "augment",
    "PreparedCache": "cache",
    "prepare_cache": "cache",
    "Challenge2021": "challenge",
    "cohort_markdown": "cohort",
    "cohort_table": "cohort",
    "Dataset": "datasets",
    "Entry": "datasets",
    "FoldProtocol": "datasets",
    "LabelLevel": "datasets",
    "Record": "datasets",
    "conform": "datasets",
    "fill_gaps": "datasets",
    "hash_fold": "datasets",
    "in_units": "datasets",
    "Normalisation": "preprocess",
    "cut_windows": "preprocess",
    "decimate": "preprocess",
    "fit_normalisation": "preprocess",
    "DatasetNotFound": "ptbxl",
    "DownloadFailed": "ptbxl",
    "LEADS": "ptbxl",
    "PTBXL": "ptbxl",
    "RecordRejected": "ptbxl",
    "SUBCLASSES": "ptbxl",
    "SUPERCLASSES": "ptbxl",
    "download_ptbxl": "ptbxl",
    "eligible_subclasses": "ptbxl",
    "read_ptbxl_record": "ptbxl",
    "HEADER_LEADS": "synthetic",
    "RPEAKS_FILENAME": "synthetic",
    "SyntheticPTBXL": "synthetic",
    "SyntheticRecords": "synthetic",
    "generate_metadata": "synthetic",
    "generate_records": "synthetic",
    "read_rpeaks": "synthetic",
    "write_synthetic_corpus": "synthetic",
    "WfdbFolder": "wfdb_folder",
}
"""Each public name and the submodule that defines it."""

__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
