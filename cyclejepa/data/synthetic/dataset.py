"""The synthetic corpus as a registered dataset."""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path

from cyclejepa.data.ptbxl import DATABASE_CSV, PTBXL, resolve_root
from cyclejepa.data.synthetic.corpus import RPEAKS_FILENAME, write_synthetic_corpus
from cyclejepa.registry import DATASETS


@DATASETS.register("synthetic")
class SyntheticPTBXL(PTBXL):
    """The synthetic corpus as a dataset: PTB-XL's reader (and facts) on a corpus root.

    With ``records``, `fetch` writes a corpus of that size and ``seed`` at ``root`` when it
    holds none; a corpus already there must be the one asked for (`mismatch`). Constructing
    the dataset touches nothing on disk.

    >>> SyntheticPTBXL("corpus", records=600).channels[:3]
    ('I', 'II', 'III')
    """

    root_env = None

    def __init__(self, root: str | os.PathLike | None = None, records: int | None = None, seed: int = 0,
                 progress: bool = False):  # fmt: skip
        self._root = root
        self.records, self.seed, self.progress = records, seed, progress

    @cached_property
    def root(self) -> Path:
        """``data.root`` (`DatasetNotFound` when it is not set); `fetch` writes the corpus there."""
        return type(self).resolve_root(self._root)

    def __repr__(self) -> str:
        return f"SyntheticPTBXL({self._root!r}, records={self.records}, seed={self.seed})"

    def fetch(self) -> None:
        """Write the corpus when ``records`` is set and the root holds none, then check the root."""
        if self.records and not (self.root / DATABASE_CSV).exists():
            write_synthetic_corpus(self.root, self.records, seed=self.seed, progress=self.progress)
        problem = self.mismatch()
        if problem:
            raise ValueError(problem)
        self.root = resolve_root(self.root)

    def mismatch(self) -> str | None:
        """Why the corpus at the root is not the one these options ask for, or None."""
        import csv
        import json

        if not self.records or not (self.root / DATABASE_CSV).exists():
            return None
        sidecar = self.root / RPEAKS_FILENAME
        if not sidecar.exists():
            return (f"data.options.records: {self.records}, but {self.root} holds a corpus that is not a cyclejepa "
                    "synthetic one; leave out data.options.records or point data.root elsewhere")  # fmt: skip
        with open(self.root / DATABASE_CSV, newline="") as stream:
            found = sum(1 for _ in csv.reader(stream)) - 1
        seed = json.loads(sidecar.read_text()).get("seed")
        if (found, seed) != (self.records, self.seed):
            return (f"data.options: the corpus at {self.root} was written with records {found}, seed {seed}, "
                    f"not {self.records}, {self.seed}; set those values or point data.root at a new folder")  # fmt: skip
        return None
