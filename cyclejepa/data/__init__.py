"""Data: the dataset interface, PTB-XL and Challenge-format readers, preprocessing cache, synthetic corpus,
augmentations.

Names are imported on first use (PEP 562), so that importing one module does not import
its siblings and their dependencies.
"""

from typing import TYPE_CHECKING

from cyclejepa.registry import lazy_names

if TYPE_CHECKING:  # each name's type for type checkers and editors (`X as X`: re-exported); nothing imported at run time
    from cyclejepa.data.augment import (
        AmplitudeModulation as AmplitudeModulation,
        Augmentation as Augmentation,
        AugmentationStep as AugmentationStep,
        AugmentationTrace as AugmentationTrace,
        Augmenter as Augmenter,
        DEFAULT_AUGMENTATIONS as DEFAULT_AUGMENTATIONS,
        Drift as Drift,
        GaussianNoise as GaussianNoise,
        LeadDropout as LeadDropout,
        LeadGain as LeadGain,
        record_rms as record_rms,
        Tone as Tone,
    )
    from cyclejepa.data.cache import prepare_cache as prepare_cache, PreparedCache as PreparedCache
    from cyclejepa.data.challenge import Challenge2021 as Challenge2021
    from cyclejepa.data.channels import (
        channel_key as channel_key,
        ChannelError as ChannelError,
        match_channels as match_channels,
    )
    from cyclejepa.data.cohort import cohort_markdown as cohort_markdown, cohort_table as cohort_table
    from cyclejepa.data.datasets import (
        conform as conform,
        Dataset as Dataset,
        DatasetNotFound as DatasetNotFound,
        Entry as Entry,
        fill_gaps as fill_gaps,
        FoldProtocol as FoldProtocol,
        hash_fold as hash_fold,
        in_units as in_units,
        LabelLevel as LabelLevel,
        Record as Record,
    )
    from cyclejepa.data.preprocess import (
        cut_windows as cut_windows,
        decimate as decimate,
        fit_normalisation as fit_normalisation,
        Normalisation as Normalisation,
    )
    from cyclejepa.data.ptbxl import (
        download_ptbxl as download_ptbxl,
        DownloadFailed as DownloadFailed,
        eligible_subclasses as eligible_subclasses,
        LEADS as LEADS,
        PTBXL as PTBXL,
        PTBXLNotFound as PTBXLNotFound,
        read_ptbxl_record as read_ptbxl_record,
        RecordRejected as RecordRejected,
        SUBCLASSES as SUBCLASSES,
        SUPERCLASSES as SUPERCLASSES,
    )
    from cyclejepa.data.synthetic import (
        generate_metadata as generate_metadata,
        generate_records as generate_records,
        HEADER_LEADS as HEADER_LEADS,
        read_rpeaks as read_rpeaks,
        RPEAKS_FILENAME as RPEAKS_FILENAME,
        SyntheticPTBXL as SyntheticPTBXL,
        SyntheticRecords as SyntheticRecords,
        write_synthetic_corpus as write_synthetic_corpus,
    )
    from cyclejepa.data.wfdb_folder import WfdbFolder as WfdbFolder

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
    "ChannelError": "channels",
    "channel_key": "channels",
    "match_channels": "channels",
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
    "DatasetNotFound": "datasets",
    "PTBXLNotFound": "ptbxl",
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
