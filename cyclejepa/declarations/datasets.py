"""The built-in datasets' declarations: the facts a config reads when it loads, inherited by the
datasets of `cyclejepa.data` (``class PTBXL(PTBXLDeclaration, Dataset)``)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal

from pydantic import Field

from cyclejepa.declarations.kinds import DatasetDeclaration, FoldProtocol
from cyclejepa.declarations.options import NoOptions, Options

STANDARD_LEADS = ("I", "II", "III", "aVR", "aVL", "aVF", "V1", "V2", "V3", "V4", "V5", "V6")
"""The twelve standard ECG leads, in their conventional order."""


MAX_SYNTHETIC_RECORDS = 99_999
"""Most records of a synthetic corpus (its ``ecg_id`` has five digits)."""


class SyntheticOptions(Options):
    """``records`` to write when the root holds no corpus (None: read the one there), and the seed."""

    records: int | None = Field(None, ge=1, le=MAX_SYNTHETIC_RECORDS)
    seed: int = Field(0, ge=0, lt=2**32)
    progress: bool = False


class ChannelOptions(Options):
    """The channels kept, in this order (matched by name in any case)."""

    channels: tuple[str, ...] = Field(STANDARD_LEADS, min_length=1)


class WfdbFolderOptions(Options):
    """A WFDB folder's reading (`cyclejepa.data.wfdb_folder.WfdbFolder` says what each does)."""

    channels: tuple[str, ...] = ()
    units: tuple[str, ...] | None = None
    subjects: str | None = None
    highpass_hz: Literal["auto"] | None | float | tuple[float | None, ...] = "auto"
    normalisation: Literal["auto", "corpus", "record", "window"] = "auto"
    drop_s: Literal["auto"] | float = "auto"
    max_gap_s: float = Field(0.5, ge=0)
    unwrap: Literal["auto", "off"] = "auto"


class PTBXLDeclaration(DatasetDeclaration):
    """PTB-XL 1.0.3 (`cyclejepa.data.ptbxl.PTBXL`): twelve leads in mV at 500 Hz, ten
    ``strat_fold`` folds (10 sealed, 9 the development fold), the model at 100 Hz."""

    channels: tuple[str, ...] = STANDARD_LEADS
    units: tuple[str, ...] = ("mV",) * len(STANDARD_LEADS)
    fs = 500.0
    cache_fs = 500.0
    decimation = 5
    token_patch = 8
    window_s = 10.0
    folds = FoldProtocol(train=tuple(range(1, 10)), evaluation=(10,), sealed=(10,), eligible=9, count=10)  # strat_fold
    phase_provider = "ecg-rpeak"
    Options: type[Options] = NoOptions


class SyntheticDeclaration(PTBXLDeclaration):
    """The synthetic corpus (`cyclejepa.data.synthetic.dataset.SyntheticPTBXL`): written in
    PTB-XL's layout and read by PTB-XL's reader, so PTB-XL's facts; its options say what to write."""

    Options = SyntheticOptions


class Challenge2021Declaration(DatasetDeclaration):
    """PhysioNet/CinC Challenge 2021 WFDB records (`cyclejepa.data.challenge.Challenge2021`): the
    twelve leads by default (a ``channels`` option), 257 Hz to 1 kHz record by record, cached at
    500 Hz."""

    channels: tuple[str, ...] = STANDARD_LEADS
    fs = None  # 257 Hz to 1 kHz, record by record
    cache_fs = 500.0
    decimation = 5
    token_patch = 8
    window_s = 10.0
    folds = FoldProtocol()
    phase_provider = "ecg-rpeak"
    Options = ChannelOptions


class WfdbFolderDeclaration(DatasetDeclaration):
    """Any folder of WFDB records (`cyclejepa.data.wfdb_folder.WfdbFolder`): channels are an
    option, rates come from the phase provider's cycle band unless set, no fold is sealed."""

    fs = None
    cache_fs = None
    folds = FoldProtocol(sealed=())
    Options = WfdbFolderOptions


DECLARED: Mapping[str, type[DatasetDeclaration]] = MappingProxyType(
    {
        "ptbxl": PTBXLDeclaration,
        "synthetic": SyntheticDeclaration,
        "challenge2021": Challenge2021Declaration,
        "wfdb": WfdbFolderDeclaration,
    }
)
"""Registered name -> declaration (`cyclejepa.registry.DATASETS`)."""
