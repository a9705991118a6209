"""The synthetic corpus as a registered dataset."""

from __future__ import annotations

import os
from pathlib import Path

from cyclejepa.data.ptbxl import DATABASE_CSV, PTBXL
from cyclejepa.data.synthetic.corpus import write_synthetic_corpus
from cyclejepa.registry import DATASETS


@DATASETS.register("synthetic")
class SyntheticPTBXL(PTBXL):
    """The synthetic corpus as a dataset: PTB-XL's reader on a corpus root.

    With ``records``, a corpus of that size and ``seed`` is written first when ``root`` holds
    none (``data.synthetic_records`` and ``data.synthetic_seed`` of the config).
    """

    def __init__(self, root: str | os.PathLike | None = None, records: int | None = None, seed: int = 0,
                 progress: bool = False):  # fmt: skip
        if records and root is not None and not (Path(root) / DATABASE_CSV).exists():
            write_synthetic_corpus(root, records, seed=seed, progress=progress)
        super().__init__(root)
