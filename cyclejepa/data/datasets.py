"""The dataset interface: what the cache, the runner and the evaluation need from a corpus.

A dataset is a class registered in `cyclejepa.registry.DATASETS` and built from the config as
``DATASETS.build(data.dataset, data.options, root=data.root)``. It owns its facts: channels and
their units, native and cache rates, window, fold protocol, label levels and where its root is
found (`Dataset`). It lists its records as `Entry` rows (integer id, name, patient, fold,
age, sex, multi-label targets per `LabelLevel`), reads one record as a `Record` (signal in each
channel's declared unit, rate, channel names), reads a record file outside its index the same
way (`Dataset.read_path`, for ``cyclejepa embed``) and reports what it rejected while indexing.
Reading a record verifies it: a record that fails a check raises `RecordRejected` naming the
check, and the cache logs it to rejections.csv.

Everything after reading is generic (`conform`): the dataset's channels are picked by name,
the signal resampled to the cache's rate and cut into windows of the model's length
(`cyclejepa.data.preprocess.cut_windows`).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from cyclejepa.data.channels import ChannelError, channel_key, match_channels
from cyclejepa.data.preprocess import SignalPreparation, fill_nonfinite, resample, resampling_ratio
from cyclejepa.declarations.kinds import MODEL_RATES, DatasetDeclaration, FoldProtocol, band_rates

__all__ = [
    "AMPLITUDE_LIMITS",
    "MV_PER_UNIT",
    "Dataset",
    "DatasetNotFound",
    "DownloadFailed",
    "Entry",
    "FoldProtocol",
    "LabelLevel",
    "Record",
    "RecordRejected",
    "amplitude_limit",
    "band_rates",
    "check_amplitudes",
    "conform",
    "corpus_listing",
    "fill_gaps",
    "hash_fold",
    "in_units",
    "record_name",
    "sha256_file",
    "sha256_of",
    "MODEL_RATES",
]


class RecordRejected(Exception):
    """A record failed a verification check.

    Attributes
    ----------
    record_id : the record's id (PTB-XL: the ecg_id, the file name when read without one)
    check : what failed (PTB-XL's are `cyclejepa.data.ptbxl.CHECKS`; ``extent`` also when a
        record is shorter than one window)
    detail : what was found
    """

    def __init__(self, record_id: object, check: str, detail: str):
        self.record_id, self.check, self.detail = record_id, check, detail
        super().__init__(f"record {record_id} rejected ({check}): {detail}")

    def __reduce__(self):  # picklable across worker processes
        return type(self), (self.record_id, self.check, self.detail)


@dataclass(frozen=True)
class Record:
    """One verified record: ``signal`` (channels, samples) float32 in physical units (ECG: mV) at
    ``fs`` Hz; ``id`` is how rejections name it (the entry's id or name)."""

    id: int | str
    signal: np.ndarray
    fs: float
    channels: tuple[str, ...]


@dataclass(frozen=True)
class LabelLevel:
    """A multi-label vocabulary: meta.csv holds one 0/1 column ``{prefix}_{class}`` per class."""

    name: str
    prefix: str
    classes: tuple[str, ...]

    def columns(self) -> tuple[str, ...]:
        return tuple(f"{self.prefix}_{c}" for c in self.classes)


@dataclass(frozen=True)
class Entry:
    """One record of a dataset's index.

    ``id`` is a positive integer unique in the dataset (the cache's ``record_id``), ``name`` what
    the source calls the record, ``fold`` 1..`FoldProtocol.count` (all records of one patient in
    one fold), ``age`` NaN when unknown, ``sex`` 0 male, 1 female, -1 unknown; ``labels`` maps a
    `LabelLevel` name to the classes present.
    """

    id: int
    name: str
    patient_id: int
    fold: int
    age: float = float("nan")
    sex: int = -1
    labels: dict[str, frozenset[str]] = field(default_factory=dict)


class DatasetNotFound(FileNotFoundError):
    """A dataset's root is not configured or holds no data: says where to put it and how to get it."""


class DownloadFailed(RuntimeError):
    """A dataset's source could not be reached or the download broke off."""


class Dataset(DatasetDeclaration):
    """Base of a registered dataset: subclass it, set its facts, implement `entries` and `read`.

    The cache calls exactly `entries`, `read`, `rejected` and `fingerprint` (in that order of
    need) and reads the class facts below; a runner calls `fetch` first; ``cyclejepa embed``
    reads record files with `read_path`. Everything after reading is generic (`conform`,
    `cut_windows`, the cache), so a dataset never resamples.

    Facts (class attributes; a config may override the rates and the window). Those a config
    needs when it loads, from ``channels`` to ``phase_provider``, are `DatasetDeclaration`'s: a
    built-in inherits them from its declaration in `cyclejepa.declarations.datasets`, so that a
    config is read without importing the dataset (`cyclejepa.registry.Registry.declared`).

    - ``channels``: the channels the cache keeps, in order (matched to a record's names
      case-insensitively); a dataset whose channels are an option declares a ``channels`` field
      in its ``Options`` model (`cyclejepa.declarations.options.Options`).
    - ``units``: each channel's physical unit (``"mV"`` for ECG, ``"NU"`` for a pulse wave);
      a record file whose channel is in another unit is refused (`read_path`).
    - ``fs``: the native rate in Hz (None when it varies from record to record).
    - ``cache_fs``: the rate records are resampled to and phased at (``data.cache_fs``; None: ``fs``).
    - ``decimation``: the model sees ``cache_fs / decimation`` (``data.decimation``).
    - ``token_patch``: samples per token at the model rate (``data.token_patch``).
    - ``window_s``: the model's record length in seconds (``data.window_s``).
    - ``folds``: the `FoldProtocol` (how many folds, which ones each stage uses by default);
      ``label_levels``: the label vocabularies (may be empty).
    - ``task_titles``: how the report names a probe task (``{task: title}``, e.g. the paper's
      names of a corpus's tasks); a task left out is named by itself ("`task` macro-AUROC").
    - ``phase_provider``: the registered phase provider the cache uses when the config names
      none (``phase.provider`` left out); None: the config must name one.
    - ``root_env``: the environment variable naming the root when ``data.root`` is not set.
    - ``subjects_known``: whether ``Entry.patient_id`` names the person a record comes from
      (False when each record is its own subject because the people are unknown: the report
      then speaks of recordings and says the same person may sit in training and evaluation).
    - ``licence``, ``citation``: the data's licence (an SPDX identifier) and how to cite it, for
      the model card of an exported encoder (empty: unknown, and the card says so).

    The dataset is built as ``Cls(root=data.root, **data.options.arguments())``. The base constructor keeps
    the root (``data.root``, else ``$root_env``, else None) in ``self.root``; a subclass with
    options of its own takes ``root`` first and calls ``super().__init__(root)``. Building reads
    nothing: ``cyclejepa embed`` builds the dataset where its corpus may be absent.

    >>> class Tiny(Dataset):
    ...     channels, units, fs, token_patch = ("PPG",), ("NU",), 125.0, 25
    ...     def entries(self):
    ...         return [Entry(1, "a", patient_id=1, fold=hash_fold("a"))]
    ...     def read(self, entry):
    ...         return Record(entry.id, np.zeros((1, 1250), np.float32), self.fs, self.channels)
    >>> Tiny.geometry(Tiny.channels)
    SignalGeometry(channels=('PPG',), cache_fs=125.0, decimation=1, token_patch=25, window_s=10.0)
    >>> Tiny(root=None).read(Tiny().entries()[0]).signal.shape
    (1, 1250)
    """

    rate_check: Callable[[float], str | None] | None = None
    """Why a record's native rate is too slow for the phase provider the cache uses (the
    provider's ``rate_problem``: its text, None when the rate will do); None: any rate. Set by
    the cache build (`require_rate`) before indexing; `check_native_rate` asks it."""
    label_levels: tuple[LabelLevel, ...] = ()
    task_titles: Mapping[str, str] = MappingProxyType({})
    root_env: str | None = None
    subjects_known: bool = True
    licence: str = ""
    citation: str = ""

    def __init__(self, root: str | os.PathLike | None = None):
        found = root if root is not None else (os.environ.get(self.root_env) if self.root_env else None)
        self.root: Path | None = Path(found).expanduser() if found else None

    def entries(self) -> list[Entry]:
        """Every indexed record, in a fixed order."""
        raise NotImplementedError(f"{type(self).__name__} must implement entries()")

    def read(self, entry: Entry) -> Record:
        """The verified record of ``entry``; raises `RecordRejected` naming the failed check."""
        raise NotImplementedError(f"{type(self).__name__} must implement read(entry)")

    def rejection_id(self, entry: Entry) -> int | str:
        """How a rejection names ``entry``'s record: by default its name (its path below the root),
        never its rank in the index. A dataset whose source names records by number (PTB-XL's
        ``ecg_id``) overrides it."""
        return entry.name

    def read_path(self, path: str | os.PathLike) -> Record:
        """A record file outside the index, read as `read` reads an entry (``cyclejepa embed``).

        By default the WFDB record at ``path`` (no extension; `read_record`) with every channel
        the dataset keeps in its declared unit (`unit_of`; `in_units`): a voltage in another
        voltage unit is converted (µV or V to mV), any other unit refused (`RecordRejected`,
        check ``units``, naming both); a channel whose header states no unit is taken as
        declared. Override it when `read` does more than read (renames channels, fills gaps).
        It runs on a dataset built without its corpus: it must not need the root.
        """
        from cyclejepa.data.samples import read_record

        record = read_record(path)
        kept = {channel_key(channel): self.unit_of(channel) for channel in self.channels}
        declared = [kept.get(channel_key(name), unit) for name, unit in zip(record.names, record.units, strict=True)]
        signal = in_units(str(path), record.signal, record.names, record.units, declared)
        return Record(str(path), as_float32(str(path), signal, record.names), record.fs, record.names)

    def rejected(self) -> list[RecordRejected]:
        """Records (or metadata rows) rejected while indexing, before any signal is read."""
        return []

    def require_rate(self, rate_check: Callable[[float], str | None] | None) -> None:
        """Have records the phase provider finds too slow rejected (`rate_check`), never
        upsampled; called before indexing (a dataset that knows its records' rates from their
        headers rejects them while indexing, `check_native_rate`)."""
        self.rate_check = rate_check

    def check_native_rate(self, record_id: int | str, fs: float) -> None:
        """`RecordRejected` (check ``sampling_rate``) naming ``record_id``, its rate and the
        requirement when `rate_check` finds ``fs`` Hz too slow."""
        problem = self.rate_check(float(fs)) if self.rate_check is not None else None
        if problem:
            raise RecordRejected(record_id, "sampling_rate", f"{problem}; it is left out, not upsampled")

    def fingerprint(self) -> dict[str, Any]:
        """What the dataset's contents depend on, JSON-serialisable (part of the cache hash)."""
        return {"class": f"{type(self).__module__}.{type(self).__qualname__}"}

    def fetch(self) -> None:
        """Make the data available at the root before indexing (e.g. write a generated corpus).

        By default only checks the root: `DatasetNotFound` when it is not a folder, or when the
        dataset has a ``root_env`` and neither it nor ``data.root`` is set.
        """
        root = getattr(self, "root", None)
        if root is None and self.root_env:
            type(self).resolve_root(None)  # raises, naming data.root and the variable
        if root is not None and not Path(root).is_dir():
            raise DatasetNotFound(f"{type(self).__name__}: the root {root} is not a folder (set data.root)")

    @classmethod
    def download(cls, dest: str | os.PathLike) -> Path:
        """Download the dataset into ``dest`` (``cyclejepa download NAME``) and return the root;
        raises `DownloadFailed`. By default the dataset has no download."""
        raise DownloadFailed(f"{cls.__name__} has no download: put its files in a folder and set data.root")

    @classmethod
    def resolve_root(cls, root: str | os.PathLike | None) -> Path:
        """``root``, else ``$root_env``; raises `DatasetNotFound` naming both when neither is set."""
        if root is not None:
            return Path(root).expanduser()
        found = os.environ.get(cls.root_env) if cls.root_env else None
        if found:
            return Path(found).expanduser()
        where = f"set data.root or ${cls.root_env}" if cls.root_env else "set data.root"
        raise DatasetNotFound(f"{cls.__name__}: no dataset root configured ({where})")

    def unit_of(self, channel: str) -> str:
        """The physical unit of ``channel`` (``units`` in channel order; mV when not declared), the
        name matched by `channel_key`."""
        try:
            row = match_channels(channel, self.channels)[0]
        except ChannelError:
            raise KeyError(f"{type(self).__name__} has no channel {channel!r}; channels: {list(self.channels)}") from None
        return self.units[row] if self.units else "mV"

    def preparation(self, cycle_band_hz: tuple[float, float] | None = None) -> SignalPreparation:
        """What each record goes through before windowing (`SignalPreparation`), given the phase
        provider's ``cycle_band_hz``. By default nothing (the paper's chain: the corpus-wide
        z-score only); a dataset of raw sensor signals overrides it."""
        return SignalPreparation()


MV_PER_UNIT = {"mv": 1.0, "uv": 1e-3, "µv": 1e-3, "μv": 1e-3, "v": 1e3}
"""Millivolts per physical unit, for the voltage units WFDB headers write (lower case)."""
AMPLITUDE_LIMITS = {"mV": 200.0, "mmHg": 1000.0}
"""The largest magnitude a sample may have in each unit (a voltage in µV or V scales the mV
limit): 200 mV spans a 16-bit ADC at WFDB's default gain of 200 per mV, far beyond any body
surface potential; 1000 mmHg any blood pressure. `OTHER_UNIT_LIMIT` holds for other units."""
OTHER_UNIT_LIMIT = 1e8
"""The largest magnitude in a unit `AMPLITUDE_LIMITS` does not list (``NU``, ADC counts: a
24-bit converter reads at most 8.4e6)."""
MAX_UPSAMPLING = 100
"""The most a record's rate may be raised to the cache rate (25 Hz to 2.5 kHz); a record
declaring a lower rate (0.12 Hz for 500 Hz would be 4,166 times as many samples) is refused."""
MAX_RECORD_BYTES = 1 << 30
"""The most memory one conformed record may take (float32); a longer one is rejected (``extent``)."""


def in_units(
    record_id: int | str, signal: np.ndarray, channels: Sequence[str], units: Sequence[str | None], declared: Sequence[str | None]
) -> np.ndarray:
    """(C, L) float64 ``signal`` with row c converted from ``units[c]`` to ``declared[c]``: the
    same unit (any case) is kept, a voltage scaled to another (`MV_PER_UNIT`: µV or V to mV),
    any other pair refused (`RecordRejected`, check ``units``, naming the channel and both units).
    A unit the file does not state (None) is taken to be the declared one.

    >>> in_units("r1", np.ones((2, 3)), ("II", "PLETH"), ("uV", "NU"), ("mV", "NU"))[:, 0]
    array([0.001, 1.   ])
    """
    signal = np.array(signal, dtype=np.float64)
    for row, (channel, unit, wanted) in enumerate(zip(channels, units, declared, strict=True)):
        if unit is None or wanted is None or unit.lower() == wanted.lower():
            continue
        if unit.lower() not in MV_PER_UNIT or wanted.lower() not in MV_PER_UNIT:
            raise RecordRejected(record_id, "units", f"channel {channel} is in {unit}, but the dataset declares {wanted}")
        signal[row] *= MV_PER_UNIT[unit.lower()] / MV_PER_UNIT[wanted.lower()]
    return signal


def amplitude_limit(unit: str, overrides: Mapping[str, float] | None = None) -> float:
    """The largest magnitude of a sample in ``unit`` (case-insensitive): ``overrides``' value
    (``data.amplitude_limits``), else `AMPLITUDE_LIMITS`' (a voltage scaled from mV by
    `MV_PER_UNIT`), else `OTHER_UNIT_LIMIT`.

    >>> amplitude_limit("uV"), amplitude_limit("NU"), amplitude_limit("mV", {"mv": 10.0})
    (200000.0, 100000000.0, 10.0)
    """
    for table in (overrides or {}, AMPLITUDE_LIMITS):
        found = {name.lower(): float(limit) for name, limit in table.items()}.get(unit.lower())
        if found is not None:
            return found
    if unit.lower() in MV_PER_UNIT:
        return AMPLITUDE_LIMITS["mV"] / MV_PER_UNIT[unit.lower()]
    return OTHER_UNIT_LIMIT


def check_amplitudes(record_id: int | str, windows: np.ndarray, channels: Sequence[str], limits: Sequence[float]) -> None:
    """`RecordRejected` (check ``amplitude``) naming each channel of ``windows`` (..., C, L) with a
    sample whose magnitude exceeds its limit (`amplitude_limit`), with the largest found."""
    peaks = np.abs(np.asarray(windows, dtype=np.float64)).reshape(-1, len(channels), np.shape(windows)[-1]).max(axis=(0, 2))
    over = [
        f"{channel} reaches {peak:.3g} (limit {limit:g})"
        for channel, peak, limit in zip(channels, peaks, limits, strict=True)
        if not peak <= limit
    ]
    if over:
        raise RecordRejected(record_id, "amplitude", f"{'; '.join(over)}: not a physiological amplitude (data.amplitude_limits)")


def fill_gaps(record_id: int | str, signal: np.ndarray, fs: float, max_gap_s: float, channels: Sequence[str]) -> np.ndarray:
    """(C, L) ``signal`` with its runs of non-finite samples linearly interpolated
    (`fill_nonfinite`) when none lasts more than ``max_gap_s`` seconds; a longer one raises
    `RecordRejected` (check ``non_finite``, naming the channel and the run's length and start).

    >>> fill_gaps("r1", np.array([[0.0, np.nan, 2.0, 3.0]]), 2.0, 0.5, ["PLETH"])
    array([[0., 1., 2., 3.]])
    """
    for row, missing in enumerate(~np.isfinite(signal)):
        if missing.all():
            raise RecordRejected(record_id, "non_finite", f"no finite sample on {channels[row]}")
        edges = np.flatnonzero(np.diff(np.concatenate([[0], missing.astype(np.int8), [0]])))
        starts, lengths = edges[::2], edges[1::2] - edges[::2]
        if len(lengths) and lengths.max() > max_gap_s * fs:
            k = int(np.argmax(lengths))
            raise RecordRejected(
                record_id,
                "non_finite",
                f"{lengths[k]} missing samples in a row on {channels[row]} from "
                f"{starts[k] / fs:.2f} s, more than {max_gap_s:g} s",
            )
    return fill_nonfinite(signal, list(channels))


def conform(record: Record, channels: tuple[str, ...], fs: float) -> np.ndarray:
    """``record``'s ``channels`` (by name, `match_channels`) resampled to ``fs``: (C, L) float32.

    Raises `RecordRejected`, checked in this order before any resampling: ``sampling_rate``
    when the record's rate is out of range, the resampling ratio unreasonable
    (`resampling_ratio`) or an upsampling by more than `MAX_UPSAMPLING`, ``extent`` when the
    result would exceed `MAX_RECORD_BYTES`, ``channel_order`` when a channel is missing,
    ``non_finite`` when a sample is not finite, or not finite once float32. A channel is missing
    when no channel matches its name, or two do (both named).
    """
    try:
        resampling_ratio(float(record.fs), float(fs))
    except (TypeError, ValueError) as error:
        raise RecordRejected(record.id, "sampling_rate", str(error)) from None
    if float(fs) > MAX_UPSAMPLING * float(record.fs):
        raise RecordRejected(
            record.id,
            "sampling_rate",
            f"{float(record.fs):g} Hz is more than {MAX_UPSAMPLING} times "
            f"below the cache rate {float(fs):g} Hz: not a rate this record can be resampled from",
        )
    length = np.shape(record.signal)[-1] * float(fs) / float(record.fs)
    if 4.0 * len(channels) * length > MAX_RECORD_BYTES:
        raise RecordRejected(
            record.id, "extent", f"{len(channels)} x {length:.0f} samples at {fs:g} Hz exceed {MAX_RECORD_BYTES >> 20} MiB"
        )
    try:
        rows = match_channels(channels, record.channels)
    except ChannelError as error:
        raise RecordRejected(record.id, "channel_order", str(error)) from None
    x = np.asarray(record.signal)[rows]
    bad = [channels[i] for i in np.flatnonzero(~np.isfinite(x).all(axis=1))]
    if bad:
        raise RecordRejected(record.id, "non_finite", f"non-finite samples on {bad}")
    return resample(as_float32(record.id, x, channels), record.fs, fs)


def as_float32(record_id: int | str, signal: np.ndarray, channels: Sequence[str]) -> np.ndarray:
    """``signal`` (channels, samples) as float32; `RecordRejected` (``non_finite``) naming the
    channels with a sample beyond float32's range, which the cast would turn into inf."""
    huge = [channels[int(i)] for i in np.flatnonzero((np.abs(signal) > np.finfo(np.float32).max).any(axis=1))]
    if huge:
        raise RecordRejected(record_id, "non_finite", f"samples beyond float32's range (±3.4e38) on {huge}")
    return np.asarray(signal).astype(np.float32)


def record_name(name: str) -> str:
    """``name`` when it is UTF-8 text; else `RecordRejected` (check ``name``) naming it by its
    bytes (a file name that is not UTF-8 reaches Python as surrogate escapes, which no text file,
    hash or CSV can hold). A dataset calls it on every name it builds from a file name, inside
    its per-record ``try``, so that one such file is rejected and counted, never the whole index.

    >>> record_name("g1/A00001")
    'g1/A00001'
    >>> record_name(os.fsdecode(b"bad\\xffname"))
    Traceback (most recent call last):
    ...
    cyclejepa.data.datasets.RecordRejected: record bad\\xffname rejected (name): the file name b'bad\\xffname' is not UTF-8; rename it
    """
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raw = os.fsencode(name)
        raise RecordRejected(
            raw.decode("utf-8", "backslashreplace"), "name", f"the file name {raw!r} is not UTF-8; rename it"
        ) from None
    return name


def hash_fold(key: str, count: int = FoldProtocol.count) -> int:
    """A deterministic fold 1..``count`` of ``key`` (a patient or record name), ``count`` the
    dataset's `FoldProtocol.count`: sha256 modulo ``count``, plus 1."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:12], 16) % count + 1


def corpus_listing(root: str | os.PathLike[str] | None) -> dict[str, Any] | None:
    """What the corpus at ``root`` holds, from one ``stat`` per file (nothing is read): the
    number of files, their total size and one sha256 over each file's path relative to ``root``,
    size and modification time (ns), in path order; hidden entries (a leading ``.``) are left
    out. None when ``root`` is None or not a folder."""
    if root is None or not Path(root).is_dir():
        return None
    rows = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [name for name in subfolders if not name.startswith(".")]
        for name in names:
            if not name.startswith("."):
                path = os.path.join(folder, name)
                stat = os.stat(path) if os.path.exists(path) else None
                rows.append(
                    (os.fsencode(os.path.relpath(path, root)), stat.st_size if stat else -1, stat.st_mtime_ns if stat else -1)
                )
    digest = hashlib.sha256()
    for relative, size, mtime in sorted(rows):
        digest.update(relative + b"\0" + f"{size} {mtime}\n".encode())
    return {"files": len(rows), "bytes": sum(max(size, 0) for _, size, _ in rows), "sha256": digest.hexdigest()}


def sha256_of(paths: list[Path], root: Path | None = None) -> str:
    """One sha256 over the names (relative to ``root``) and contents of ``paths``, read in 1 MiB
    blocks; a path that is not a regular file (a FIFO, a device: opening it could block) counts
    by its name and type alone and is never opened."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(os.fsencode(path.relative_to(root) if root else path) + b"\0")
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            digest.update(f"<not a regular file: {stat.filemode(mode)}>".encode())
            continue
        with path.open("rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def sha256_file(path: Path) -> str:
    """sha256 of one file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
