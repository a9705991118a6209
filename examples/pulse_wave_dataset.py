"""A dataset of pulse waves: the PLETH (or ABP) channel of WFDB records, at the channel's own rate.

Registered as ``pulse-wave`` once this module is imported, which a plugin entry point does
(``[project.entry-points."cyclejepa.plugins"]`` ``pulse-wave = "pulse_wave_dataset"``; see
docs/own-signal.md). In a config::

    data:
      dataset: pulse-wave
      root: ../shared/data/physionet-samples
      options: {channels: [PLETH]}

Every ``*.hea`` record under ``root`` that holds the channels (case-insensitive) is indexed, one
subject per record, no labels; a record without them is rejected while indexing (check
``channel_order``). A record is one entry, folded by `hash_fold` of its name, or, with
``segment_s``, cut into entries of that length (``a103l/0``, ``a103l/1``, ...) folded by
record (``split: subject``) or each by its own name (``split: segment``: training and evaluation
then share subjects, for a corpus too small to hold one out). No fold is sealed. Reading a
record (`read`, and `read_path` for a record file given by its path, as ``cyclejepa embed``
reads one):

- as the core dataset ``wfdb`` reads it (`cyclejepa.data.wfdb_folder.WfdbFolder`, of which this is
  a subclass): each channel at its own rate, a multi-rate record (``mixedsignals``: ECG at 250 Hz,
  pulse waves at 125 Hz, in 62.5 Hz frames) read frame by frame, not averaged to the frame rate;
- ADC wrap-around undone (`cyclejepa.data.wfdb_folder.unwrap`): a pulse wave beyond its 12-bit
  range wraps to the other end (``v102s``'s PLETH does, about 1,000 times); only a step where the
  signal runs into one limit and comes back from the other is a wrap;
- each channel in its declared unit (`UNITS`: PLETH ``NU``, ABP ``mmHg``; another is refused,
  ``units``);
- missing samples at either end cut off, runs of missing samples up to ``max_gap_s`` inside
  interpolated; a longer one rejects the record (``non_finite``).

The cache resamples to 125 Hz (pulse timing to 8 ms) and the model reads 25 Hz, the pulse
wave's band, in 80 ms tokens (about seven per beat) of 10 s windows.
"""

from __future__ import annotations

import os
from dataclasses import replace
from functools import cached_property
from typing import Literal

from pydantic import Field

from cyclejepa.data.datasets import Entry, Record, RecordRejected, hash_fold, sha256_of
from cyclejepa.data.wfdb_folder import WfdbFolder
from cyclejepa.data.wfdb_format import read_header
from cyclejepa.declarations.options import Options
from cyclejepa.registry import DATASETS

UNITS = {"PLETH": "NU", "ABP": "mmHg"}
"""The unit each pulse-wave channel is declared in."""


class PulseWaveOptions(Options):
    """The options a config gives ``pulse-wave`` (checked when the config loads)."""

    channels: tuple[str, ...] = Field(("PLETH",), min_length=1)
    max_gap_s: float = Field(0.5, ge=0)
    segment_s: float | None = Field(None, gt=0)
    split: Literal["subject", "segment"] = "subject"


@DATASETS.register("pulse-wave")
class PulseWaves(WfdbFolder):
    """WFDB records under ``root`` with pulse-wave channels, one entry per record or segment: the
    core `WfdbFolder` (its reading, wrap-around rule and gap filling) with the units of `UNITS`,
    the paper's chain (no preparation), fixed rates and segments.

    Parameters
    ----------
    root : the folder searched for ``*.hea`` headers (any depth), when the index is first needed.
    channels : the channels kept, from `UNITS` (``PLETH``, ``ABP``).
    max_gap_s : longest run of missing samples filled by linear interpolation.
    segment_s : the length of one entry in seconds (None: a whole record).
    split : ``"subject"`` (folds by record) or ``"segment"`` (folds by segment).
    """

    cache_fs = 125.0
    decimation = 5
    token_patch = 2
    window_s = 10.0
    Options = PulseWaveOptions  # its own options, not the WFDB folder's it inherits

    def __init__(self, root: str | os.PathLike | None = None, channels: list[str] | tuple[str, ...] = ("PLETH",),
                 max_gap_s: float = 0.5, segment_s: float | None = None, split: str = "subject"):  # fmt: skip
        unknown = [c for c in channels if c.upper() not in UNITS]
        if unknown or not channels:
            raise ValueError(f"channels must be some of {', '.join(UNITS)} (their units are declared), got {list(channels)}")
        if (segment_s is not None and segment_s <= 0) or split not in ("subject", "segment"):
            raise ValueError(f"need segment_s > 0 or None, split 'subject' or 'segment'; got {segment_s}, {split!r}")
        super().__init__(root, channels=channels, units=[UNITS[c.upper()] for c in channels], highpass_hz=None,
                         normalisation="corpus", drop_s=0.0, max_gap_s=max_gap_s)  # fmt: skip
        self.segment_s, self.split = segment_s, split

    def __repr__(self) -> str:
        return f"PulseWaves({str(self.root)!r}, channels={list(self.channels)})"

    @cached_property
    def _segments(self) -> tuple[list[Entry], dict[int, tuple[str, int]], list[RecordRejected]]:
        entries, segments, rejected = [], {}, list(super().rejected())
        patients = {path.relative_to(self.root).with_suffix("").as_posix(): k for k, path in enumerate(self._headers, 1)}
        for record in super().entries():
            header = read_header(self.root / f"{record.name}.hea")
            seconds = (header.samples or 0) / header.fs
            count = int(seconds // self.segment_s) if self.segment_s else 1
            for k in range(count):
                label = f"{record.name}/{k}" if self.segment_s else record.name
                fold = hash_fold(label if self.split == "segment" else record.name)
                entries.append(Entry(len(entries) + 1, label, patients[record.name], fold))
                segments[len(entries)] = (record.name, k)
            if not count:
                detail = f"lasts {seconds:.1f} s, shorter than one {self.segment_s:g} s segment"
                rejected.append(RecordRejected(record.name, "extent", detail))
        return entries, segments, rejected

    def entries(self) -> list[Entry]:
        """Every record with the channels (or its segments), in path order."""
        return self._segments[0]

    def rejected(self) -> list[RecordRejected]:
        """Records without the channels, with an unreadable header, or shorter than a segment."""
        return self._segments[2]

    def fingerprint(self) -> dict:
        """The root, the options and one sha256 over every header."""
        headers = sha256_of(self._headers, self.root)
        return {"root": str(self.root.resolve()), "headers_sha256": headers, "channels": list(self.channels),
                "max_gap_s": self.max_gap_s, "segment_s": self.segment_s, "split": self.split}  # fmt: skip

    def read(self, entry: Entry) -> Record:
        """The record of ``entry`` (see the module docstring), or its ``segment_s`` segment."""
        name, k = self._segments[1][entry.id]
        record = self._read(self.root / name, entry.name)
        if self.segment_s:
            length = round(self.segment_s * record.fs)
            record = replace(record, signal=record.signal[:, k * length : (k + 1) * length])
        return replace(record, id=entry.id)
