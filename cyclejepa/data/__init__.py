"""Data: the dataset interface, PTB-XL and Challenge-format readers, preprocessing cache, synthetic corpus,
augmentations."""

from cyclejepa.data.augment import (
    DEFAULT_AUGMENTATIONS,
    AmplitudeModulation,
    Augmentation,
    AugmentationStep,
    AugmentationTrace,
    Augmenter,
    Drift,
    GaussianNoise,
    LeadDropout,
    LeadGain,
    Tone,
    record_rms,
)
from cyclejepa.data.cache import PreparedCache, prepare_cache
from cyclejepa.data.challenge import Challenge2021
from cyclejepa.data.cohort import cohort_markdown, cohort_table
from cyclejepa.data.datasets import Dataset, Entry, FoldProtocol, LabelLevel, Record, conform, fill_gaps, hash_fold, in_units
from cyclejepa.data.preprocess import Normalisation, cut_windows, decimate, fit_normalisation
from cyclejepa.data.ptbxl import (
    LEADS,
    PTBXL,
    SUBCLASSES,
    SUPERCLASSES,
    DatasetNotFound,
    DownloadFailed,
    RecordRejected,
    download_ptbxl,
    eligible_subclasses,
    read_ptbxl_record,
)
from cyclejepa.data.wfdb_folder import WfdbFolder
from cyclejepa.data.synthetic import (
    HEADER_LEADS,
    RPEAKS_FILENAME,
    SyntheticPTBXL,
    SyntheticRecords,
    generate_metadata,
    generate_records,
    read_rpeaks,
    write_synthetic_corpus,
)

__all__ = [
    "AmplitudeModulation", "Augmentation", "AugmentationStep", "AugmentationTrace", "Augmenter",
    "Challenge2021", "cohort_markdown", "cohort_table", "conform", "cut_windows", "Dataset",
    "DatasetNotFound", "decimate", "DEFAULT_AUGMENTATIONS", "download_ptbxl", "DownloadFailed", "Drift",
    "eligible_subclasses", "Entry", "fill_gaps", "fit_normalisation", "FoldProtocol", "GaussianNoise",
    "generate_metadata", "generate_records", "hash_fold", "HEADER_LEADS", "in_units", "LabelLevel",
    "LeadDropout", "LeadGain", "LEADS", "Normalisation", "prepare_cache", "PreparedCache", "PTBXL",
    "read_ptbxl_record", "read_rpeaks", "Record", "record_rms", "RecordRejected", "RPEAKS_FILENAME", "SUBCLASSES",
    "SUPERCLASSES", "SyntheticPTBXL", "SyntheticRecords", "Tone", "WfdbFolder", "write_synthetic_corpus",
]
