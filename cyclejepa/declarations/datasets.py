"""The built-in datasets' declarations: the facts a config reads when it loads, inherited by the
datasets of `cyclejepa.data` (``class PTBXL(PTBXLDeclaration, Dataset)``)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from cyclejepa.declarations.kinds import DatasetDeclaration, FoldProtocol

STANDARD_LEADS = ("I", "II", "III", "aVR", "aVL", "aVF", "V1", "V2", "V3", "V4", "V5", "V6")
"""The twelve standard ECG leads, in their conventional order."""


class PTBXLDeclaration(DatasetDeclaration):
    """PTB-XL 1.0.3 (`cyclejepa.data.ptbxl.PTBXL`): twelve leads in mV at 500 Hz, ten
    ``strat_fold`` folds (10 sealed, 9 the development fold), the model at 100 Hz."""

    channels: tuple[str, ...] = STANDARD_LEADS
    units: tuple[str, ...] = ("mV",) * len(STANDARD_LEADS)
    channels_option = False
    fs = 500.0
    cache_fs = 500.0
    decimation = 5
    token_patch = 8
    window_s = 10.0
    folds = FoldProtocol(train=tuple(range(1, 10)), evaluation=(10,), sealed=(10,), eligible=9, count=10)  # strat_fold
    phase_provider = "ecg-rpeak"


class Challenge2021Declaration(DatasetDeclaration):
    """PhysioNet/CinC Challenge 2021 WFDB records (`cyclejepa.data.challenge.Challenge2021`): the
    twelve leads by default (a ``channels`` option), 257 Hz to 1 kHz record by record, cached at
    500 Hz."""

    channels: tuple[str, ...] = STANDARD_LEADS
    channels_option = True
    fs = None  # 257 Hz to 1 kHz, record by record
    cache_fs = 500.0
    decimation = 5
    token_patch = 8
    window_s = 10.0
    folds = FoldProtocol()
    phase_provider = "ecg-rpeak"


class WfdbFolderDeclaration(DatasetDeclaration):
    """Any folder of WFDB records (`cyclejepa.data.wfdb_folder.WfdbFolder`): channels are an
    option, rates come from the phase provider's cycle band unless set, no fold is sealed."""

    channels_option = True
    fs = None
    cache_fs = None
    folds = FoldProtocol(sealed=())


DECLARED: Mapping[str, type[DatasetDeclaration]] = MappingProxyType(
    {
        "ptbxl": PTBXLDeclaration,
        "synthetic": PTBXLDeclaration,  # written in PTB-XL's layout, read by PTB-XL's reader: its facts
        "challenge2021": Challenge2021Declaration,
        "wfdb": WfdbFolderDeclaration,
    }
)
"""Registered name -> declaration (`cyclejepa.registry.DATASETS`)."""
