"""Embeddings out: a trained run's encoder applied to new records with the run's own preprocessing.

An `Encoder` is a trained model with the settings of its run's cache (`CacheSettings`: the
`SignalGeometry`, the `SignalPreparation`, the normalisation, the phase provider and the dataset). `cyclejepa.load_encoder` (the embedding stage,
`cyclejepa.pipeline.embedding`) builds one from a run's configuration, checkpoint and cache;
`cyclejepa.load_pretrained` from an exported package. A record file is read by the run's dataset
(`Dataset.read_path`: its reader, units, gap filling) and a record is prepared as the cache
prepared the training records: the run's channels in the run's order, resampled to the cache's
rate and cut into windows of the training record length (`cut_record`, the cache's rule: a
shorter tail is dropped), each window through the cache's `decimate_and_phase` (decimation, the
run's phase provider, token phases, phase QC) and the run's normalisation. Tokens come from
`extract_tokens` and a record's embedding is the mean of its phase-valid tokens
(`record_representations`), as in the evaluation stage; ``mean_tokens``, the mean of all its
tokens, is the record embedding that the exported graphs alone reproduce. Each record's
prepared channels are scored against the run's normalisation (`input_distance`); a record
beyond `OUT_OF_RANGE_DECADES` keeps its embedding and says so in ``qc_reason``. Non-finite
weights are refused when the encoder is built, non-finite tokens per record. `cyclejepa embed`
runs `Encoder.embed_files` over record files and writes `Embeddings.save` (.npz or .parquet).
"""

from __future__ import annotations

import json
import math
import numbers
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cyclejepa.data.cache import PreparedCache, cut_record, decimate_and_phase
from cyclejepa.data.datasets import Dataset, Entry, Record, RecordRejected
from cyclejepa.data.preprocess import Normalisation, SignalPreparation
from cyclejepa.evaluation.embeddings import QC_FAILED, extract_tokens, record_representations
from cyclejepa.outputs import RunFolder, checkpoint_step
from cyclejepa.progress import progress_bar
from cyclejepa.signal_geometry import SignalGeometry

__all__ = [
    "OUT_OF_RANGE",
    "OUT_OF_RANGE_DECADES",
    "CacheSettings",
    "Embeddings",
    "Encoder",
    "NothingEmbedded",
    "check_channel_names",
    "check_finite_weights",
    "check_fs",
    "check_output",
    "check_signal",
    "escaped_name",
    "find_checkpoint",
    "input_distance",
    "write_atomically",
]

FORMATS = (".npz", ".parquet")
"""Output formats of `Embeddings.save`, by file suffix."""
OUT_OF_RANGE = "out_of_range"
"""``qc_reason`` prefix of a record whose input is far from the run's normalisation."""
OUT_OF_RANGE_DECADES = 1.0
"""`input_distance` above which a record is marked `OUT_OF_RANGE`: a channel 10× larger or
smaller than the training data, or offset by 9 of its training standard deviations."""


def input_distance(normalised: np.ndarray) -> tuple[float, int]:
    """How far one record's normalised windows (W, C, L) are from the run's normalisation, in
    decades, and the channel row furthest.

    Per channel c, with m_c and s_c the mean and standard deviation of the normalised record
    (the training data have 0 and 1 overall): d_c = max(|log10 s_c|, log10(1 + |m_c|)); the
    score is max_c d_c (+inf for a constant channel).
    """
    x = np.asarray(normalised, dtype=np.float64)
    mean, std = x.mean(axis=(0, 2)), x.std(axis=(0, 2))
    with np.errstate(divide="ignore"):
        per_channel = np.maximum(np.abs(np.log10(std)), np.log10(1 + np.abs(mean)))
    worst = int(np.argmax(per_channel))
    return float(per_channel[worst]), worst


def check_finite_weights(model, where: str) -> None:
    """`NonFiniteWeights` (a ValueError) naming ``where`` and the tensors of ``model``'s state
    dict that hold a NaN or an infinity (`cyclejepa.training.checkpoint.require_finite`)."""
    from cyclejepa.training.checkpoint import require_finite

    require_finite(model.state_dict(), where)


def find_checkpoint(run: RunFolder, step: int | None, headline: int | None) -> Path:
    """The checkpoint of ``step`` of ``run``; by default the headline step's, else the latest."""
    steps = [checkpoint_step(path) for path in run.checkpoint_files()]
    if not steps:
        raise FileNotFoundError(f"no checkpoint in {run.checkpoints}; train the run with `cyclejepa run`")
    if step is None:
        step = headline if headline in steps else steps[-1]
    if step not in steps:
        raise FileNotFoundError(f"no checkpoint of step {step} in {run.checkpoints}; it holds steps {steps}")
    return run.checkpoint(step)


@dataclass
class Embeddings:
    """Embeddings of N records, cut into M windows of the run's record length.

    Attributes
    ----------
    records : (N,) record names (paths for files, ``"0"``, ``"1"``, … for arrays).
    embeddings : (N, K) float64 mean of the phase-valid projected tokens of the record's windows
        that pass phase QC (the evaluation's record representation); NaN where not ``qc_ok``.
    qc_ok : (N,) bool, whether the record has an embedding.
    qc_reason : (N,) why not: ``qc_failed: <the provider's reasons>`` or ``no_valid_phase``; and,
        embedding or not, ``out_of_range: ...`` when ``input_distance`` exceeds
        `OUT_OF_RANGE_DECADES` (joined by ``; ``).
    mean_tokens : (N, K) float64 mean of all tokens of all the record's windows, phase and QC
        aside: the record embedding that the exported graphs alone reproduce.
    input_distance : (N,) float64 `input_distance` of the record's prepared channels (decades).
    windows : (N,) windows per record; record i's are the next ``windows[i]`` window rows.
    window_start : (M,) float64 start of each window in the record, seconds.
    window_qc_ok, window_qc_reason : (M,) the phase QC of each window.
    token_phases : (M, T) float32 radians, centre convention (the evaluation's), NaN undefined.
    tokens : (M, T, K) float32 projected token embeddings, or None when not kept.
    window_events : (M,) events the phase provider found in each window; window j's are the next
        ``window_events[j]`` event rows (E in all).
    event_time_s : (E,) float64 time of each event in the record, seconds (its window's start
        plus its sample over the cache rate).
    event_coordinate : (E,) index of the event's phase coordinate (0 for a provider of one).
    cycle_quality : (E,) float64 quality in [0, 1] of the cycle from this event to the next one of
        its coordinate, as the provider judged it; NaN for a window's last event of each
        coordinate (it starts no cycle inside the window) and for a provider that judges no
        single cycle.
    cycle_ok : (E,) bool, whether that cycle passed the provider's quality; where the provider
        judges no single cycle, its window's phase QC; False for a window's last event.
    failed : record name -> why it could not be embedded (`Encoder.embed_files`).
    source : run folder and checkpoint step the embeddings come from.
    """

    records: np.ndarray
    embeddings: np.ndarray
    qc_ok: np.ndarray
    qc_reason: np.ndarray
    mean_tokens: np.ndarray
    input_distance: np.ndarray
    windows: np.ndarray
    window_start: np.ndarray
    window_qc_ok: np.ndarray
    window_qc_reason: np.ndarray
    token_phases: np.ndarray
    tokens: np.ndarray | None
    window_events: np.ndarray
    event_time_s: np.ndarray
    event_coordinate: np.ndarray
    cycle_quality: np.ndarray
    cycle_ok: np.ndarray
    failed: dict[str, str] = field(default_factory=dict)
    source: dict[str, object] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.records)

    def save(self, path: str | os.PathLike) -> Path:
        """Write to ``path``: ``.npz`` (these arrays) or ``.parquet`` (one row per record).

        ``source`` and ``failed`` go along as JSON: npz entries, parquet schema metadata. The
        file is written beside ``path`` and renamed onto it once complete (`write_atomically`):
        a failed write leaves any previous file unchanged and raises an OSError naming ``path``.
        """
        path = check_output(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".npz":
            arrays = {k: v for k, v in vars(self).items() if isinstance(v, np.ndarray)}
            extra = {"source": json.dumps(self.source), "failed": json.dumps(self.failed)}
            write_atomically(path, lambda file: np.savez(file, allow_pickle=False, **arrays, **extra))
        else:
            write_atomically(path, lambda file: _write_parquet(self, file))
        return path


def write_atomically(path: Path, write) -> None:
    """``write(file)`` into a hidden temporary file in ``path``'s folder, then renamed onto
    ``path``; on any failure the temporary file is removed, a previous ``path`` is left as it
    was, and an OSError names ``path``. The file gets the mode a new file gets (umask)."""
    descriptor, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    partial = Path(name)
    try:
        with os.fdopen(descriptor, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        partial.chmod(0o666 & ~_umask())
        os.replace(partial, path)
    except OSError as error:
        partial.unlink(missing_ok=True)
        reason = error.strerror or str(error)
        raise OSError(error.errno, f"{path}: could not be written ({reason}); any previous file there is unchanged") from None
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def escaped_name(name: str) -> str:
    """``name`` as valid UTF-8 text: bytes of a file name that are not UTF-8 (held as lone
    surrogates, Python's ``surrogateescape``) written as ``\\xNN``, any other lone surrogate as
    ``\\udNNN``; a valid name is unchanged."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        pass
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


def check_output(path: str | os.PathLike) -> Path:
    """``path`` as a Path if `Embeddings.save` can write it (suffix, pyarrow for parquet)."""
    path = Path(path)
    if path.suffix not in FORMATS:
        raise ValueError(f"output {path}: unknown format {path.suffix!r}; use one of {', '.join(FORMATS)}")
    if path.suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ValueError(f"output {path}: writing parquet needs pyarrow (pip install pyarrow), or write .npz") from None
    return path


def _write_parquet(result: Embeddings, file) -> None:
    """One row per record; the per-window columns are lists over its windows. Text is UTF-8:
    names and reasons pass through `escaped_name`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    offsets = pa.array(np.concatenate([[0], np.cumsum(result.windows)]), pa.int32())
    record_events = np.add.reduceat(result.window_events, np.cumsum(result.windows) - result.windows)
    event_offsets = pa.array(np.concatenate([[0], np.cumsum(record_events)]), pa.int64())

    def nested(values: np.ndarray) -> pa.Array:
        """(rows, a, b, ...) numpy -> arrow fixed-size lists of (a, b, ...) per row."""
        array = pa.array(values.reshape(-1))
        for size in reversed(values.shape[1:]):
            array = pa.FixedSizeListArray.from_arrays(array, size)
        return array

    def per_record(values: np.ndarray) -> pa.Array:
        return pa.ListArray.from_arrays(offsets, nested(values))

    def text(values: np.ndarray) -> pa.Array:
        return pa.array([escaped_name(str(value)) for value in values], pa.string())

    columns = {
        "record": text(result.records),
        "embedding": nested(result.embeddings),
        "qc_ok": pa.array(result.qc_ok),
        "qc_reason": text(result.qc_reason),
        "mean_tokens": nested(result.mean_tokens),
        "input_distance": pa.array(result.input_distance),
        "windows": pa.array(result.windows),
        "window_start": per_record(result.window_start),
        "window_qc_ok": per_record(result.window_qc_ok),
        "window_qc_reason": pa.ListArray.from_arrays(offsets, text(result.window_qc_reason)),
        "token_phases": per_record(result.token_phases),
    }
    for name in ("window_events",):
        columns[name] = per_record(getattr(result, name))
    for name in ("event_time_s", "event_coordinate", "cycle_quality", "cycle_ok"):  # one list per record
        columns[name] = pa.LargeListArray.from_arrays(event_offsets, pa.array(getattr(result, name)))
    if result.tokens is not None:
        columns["tokens"] = per_record(result.tokens)
    failed = {escaped_name(name): escaped_name(reason) for name, reason in result.failed.items()}
    metadata = {"source": json.dumps(result.source), "failed": json.dumps(failed)}
    table = pa.table(columns).replace_schema_metadata(metadata)
    pq.write_table(table, file)


@dataclass
class _Events:
    """One window's events, every coordinate's in turn (`Embeddings.event_time_s` and the rest)."""

    time_s: np.ndarray
    coordinate: np.ndarray
    quality: np.ndarray
    ok: np.ndarray

    @classmethod
    def of(cls, outcome, start_s: float, cache_fs: float) -> _Events:
        """The events of one window's `RecordOutcome`, timed from the record's start (``start_s``);
        each event carries the cycle it starts (none for the last of each coordinate)."""
        parts = [
            (
                start_s + events / cache_fs,
                np.full(len(events), c),
                np.append(quality, np.nan)[: len(events)],
                np.append(ok, False)[: len(events)],
            )
            for c, (events, quality, ok) in enumerate(zip(outcome.events, outcome.cycle_quality, outcome.cycle_ok, strict=True))
        ]
        time_s, coordinate, quality, ok = (np.concatenate([p[i] for p in parts]) for i in range(4))
        return cls(time_s.astype(np.float64), coordinate.astype(np.int64), quality.astype(np.float64), ok.astype(bool))


@dataclass
class _Windows:
    """One record prepared as the cache prepares a record: its normalised windows and phases."""

    signals: np.ndarray  # (W, channels, samples at the model rate) float32, z-scored
    phases: np.ndarray  # (W, T) float32, centre convention
    qc_ok: np.ndarray  # (W,) bool
    qc_reason: list[str]
    start: np.ndarray  # (W,) seconds
    events: list[_Events]  # one per window


@dataclass(frozen=True)
class CacheSettings:
    """What `Encoder.prepare` does to a record: the settings of the run's cache.

    Attributes
    ----------
    geometry : the channels the model reads, the cache and model rates, window and tokens.
    preparation : what a record goes through before windowing (the manifest's
        `SignalPreparation`; nothing for a cache of the paper's chain).
    norm : the per-channel z-score statistics of the decimated training-fold windows.
    phase_provider, phase_options : the registered phase provider and its options.
    dataset, dataset_options : the registered dataset the run read and its options (it reads
        record files, `Dataset.read_path`).
    units : each channel's physical unit, as the dataset declares it.
    """

    geometry: SignalGeometry
    preparation: SignalPreparation
    norm: Normalisation
    phase_provider: str
    phase_options: dict
    dataset: str
    dataset_options: dict
    units: tuple[str, ...]

    @classmethod
    def from_cache(cls, cache: PreparedCache, dataset: str, dataset_options: dict) -> CacheSettings:
        """The settings of ``cache``, built from the registered ``dataset`` with ``dataset_options``."""
        arguments = cache.manifest["arguments"]
        return cls(
            cache.geometry,
            SignalPreparation.from_dict(arguments.get("preparation")),
            cache.norm,
            arguments["phase_provider"],
            dict(arguments["phase_options"]),
            dataset,
            dict(dataset_options),
            cache.units,
        )

    def to_dict(self) -> dict:
        """JSON form (a package's ``config.json`` ``preprocessing``): the geometry's
        (`SignalGeometry.to_dict`), the phase provider, the normalisation per channel, the
        dataset, the units and the preparation when it does anything."""
        return {
            **self.geometry.to_dict(),
            "phase_provider": self.phase_provider,
            "phase_options": self.phase_options,
            "normalisation": self.norm.to_dict(self.geometry.channels),
            "dataset": {"name": self.dataset, "options": self.dataset_options},
            "units": list(self.units),
            **({} if self.preparation.is_default else {"preparation": self.preparation.to_dict()}),
        }

    @classmethod
    def from_dict(cls, data: dict) -> CacheSettings:
        """The `to_dict` form back (a package's ``config.json`` ``preprocessing``)."""
        return cls(
            SignalGeometry.from_dict(data),
            SignalPreparation.from_dict(data.get("preparation")),
            Normalisation.from_dict(data["normalisation"]),
            data["phase_provider"],
            dict(data["phase_options"]),
            data["dataset"]["name"],
            dict(data["dataset"]["options"]),
            tuple(data["units"]),
        )


class Encoder:
    """A trained encoder with its run's preprocessing (build it with `cyclejepa.load_encoder` or
    `cyclejepa.load_pretrained`).

    Attributes
    ----------
    model : the trained `JEPAModel`, in eval mode, on ``device``.
    settings : the run's `CacheSettings` (geometry, preparation, normalisation, phase provider).
    geometry : the run's `SignalGeometry` (channels, cache and model rates, window, tokens).
    symmetry : the run's phase action ρ on the projected tokens (`PhaseSymmetry`).
    dataset : the run's dataset, which reads record files (`Dataset.read_path`); built from its
        registered name and options with the run's ``root`` (None for a package), which reading
        a file does not need.
    source : where the weights come from (run folder, checkpoint step; the package when exported).
    """

    def __init__(self, model, settings: CacheSettings, device, source: dict, symmetry, root=None):
        from cyclejepa.registry import DATASETS, PHASE_PROVIDERS

        check_finite_weights(model, f"the encoder of {source}")
        self.model, self.settings, self.device, self.symmetry = model, settings, device, symmetry
        self.geometry = settings.geometry
        self.provider = PHASE_PROVIDERS.build(settings.phase_provider, **settings.phase_options)
        self.dataset: Dataset = DATASETS.build(settings.dataset, root=root, **settings.dataset_options)
        self.dataset.require_rate(self.provider.rate_problem)  # a record too slow for the provider: refused, never upsampled
        self.source = dict(source)

    def __repr__(self) -> str:
        where = ", ".join(f"{key}={value!r}" for key, value in self.source.items())
        return f"Encoder({where}, device={self.device})"

    def embed(
        self,
        signal: np.ndarray,
        fs: float,
        channel_names: Sequence[str],
        *,
        batch_size: int = 256,
        progress: bool = False,
    ) -> Embeddings:
        """Embeddings of one record (channels, samples) or a batch (records, channels, samples).

        ``signal`` is in the dataset's units (`CacheSettings.units`; ECG: mV) at ``fs`` Hz, its
        rows named by ``channel_names`` (matched to the run's channels by `channel_key`: case, space and trailing punctuation aside; other
        channels are ignored). ``batch_size`` windows go
        through the model at a time; ``progress`` shows a progress bar over them. A record the
        run cannot embed (a missing channel, a rate below the model's, shorter than one window,
        non-finite samples) raises a ValueError naming it and why; so does a signal that is not a
        real numeric array (`check_signal`), a rate that is not a positive finite number, or
        channel names that are not one string per row.
        """
        signal = check_signal(signal)
        if signal.ndim not in (2, 3):
            raise ValueError(f"signal must be (channels, samples) or (records, channels, samples), got {signal.shape}")
        fs = check_fs(fs)
        channel_names = check_channel_names(channel_names, signal.shape[-2:])
        batch = signal if signal.ndim == 3 else signal[None]
        if not len(batch):
            raise ValueError(f"no record to embed: the batch {signal.shape} is empty")
        prepared = []
        for index, record in enumerate(batch):
            try:
                prepared.append(self.prepare(record, fs, channel_names))
            except ValueError as error:
                raise ValueError(f"record {index}: {error}") from None
        names = [str(i) for i in range(len(batch))]
        return self._embed(names, prepared, batch_size, progress, keep_tokens=True)

    def prepare(self, signal: np.ndarray, fs: float, channel_names: Sequence[str]) -> _Windows:
        """One record (channels, samples) in the dataset's units at ``fs``, prepared as the cache
        prepares a record (`decimate_and_phase`); its arguments are checked as `embed` checks them."""
        signal = check_signal(signal)
        if signal.ndim != 2:
            raise ValueError(f"signal must be (channels, samples), got {signal.shape}")
        names = check_channel_names(channel_names, signal.shape)
        return self._prepare(Record("record", signal, check_fs(fs), names))

    def _prepare(self, record: Record) -> _Windows:
        """``record``'s windows (`cut_record`) through `decimate_and_phase` and the run's normalisation;
        ValueError naming what the run cannot embed."""
        geometry, preparation = self.geometry, self.settings.preparation
        model_fs = geometry.model_fs
        if not (np.isfinite(record.fs) and record.fs >= model_fs):
            raise ValueError(
                f"the record is sampled at {record.fs:g} Hz, below the {model_fs:g} Hz the encoder reads (content up to "
                f"{model_fs / 2:g} Hz); give it at {model_fs:g} Hz or more"
            )
        try:  # the run's channels at its rate, in windows, as the cache cuts a dataset's record
            windows = cut_record(record, geometry.channels, geometry.cache_fs, geometry.window, preparation=preparation)
        except RecordRejected as rejection:
            raise ValueError(rejection.detail) from None
        signals, phases, outcomes = [], [], []
        for segment in windows:
            decimated, outcome, _ = decimate_and_phase(segment, self.provider, geometry)
            assert outcome.phase_centre is not None, "decimate_and_phase gives every window its token phases"
            signals.append(self.settings.norm.apply(decimated))
            phases.append(outcome.phase_centre)
            outcomes.append(outcome)
        starts = preparation.drop_s + np.arange(len(windows)) * geometry.window / geometry.cache_fs  # record time (s)
        return _Windows(
            np.stack(signals),
            np.stack(phases),
            np.array([o.qc_ok for o in outcomes]),
            [o.qc_reason for o in outcomes],
            starts,
            [_Events.of(o, start, geometry.cache_fs) for o, start in zip(outcomes, starts, strict=True)],
        )

    def read(self, path: str | os.PathLike) -> Record:
        """The record file at ``path`` as the run's dataset reads it (`Dataset.read_path`; WFDB:
        the path without extension). Raises FileNotFoundError, ValueError (unreadable) or
        `RecordRejected` (a check of the dataset, e.g. ``units`` for a channel in another unit, or
        ``sampling_rate`` for a rate below what the phase provider needs)."""
        record = self.dataset.read_path(path)
        self.dataset.check_native_rate(record.id, record.fs)
        return record

    def embed_files(
        self,
        paths: Sequence[str | os.PathLike],
        *,
        batch_size: int = 256,
        progress: bool = False,
        keep_tokens: bool = True,
    ) -> Embeddings:
        """`embed` of record files read by the run's dataset (`read`), ``batch_size`` records at a time.

        A record that cannot be read or embedded is left out and listed in
        `Embeddings.failed` with the reason; the others go on. ``keep_tokens`` False keeps only
        the record embeddings, phases and QC (``tokens`` is None).
        """
        named = [(str(path), path) for path in paths]
        return self._embed_each(named, self.read, batch_size=batch_size, progress=progress, keep_tokens=keep_tokens)

    def embed_entries(
        self,
        dataset: Dataset,
        entries: Sequence[Entry],
        *,
        batch_size: int = 256,
        progress: bool = False,
        keep_tokens: bool = True,
    ) -> Embeddings:
        """`embed_files` of records of a corpus: ``entries`` of ``dataset`` (a dataset of the run's
        kind, e.g. built on another folder, `corpus_dataset`), each read and verified by
        `Dataset.read` and named by `Entry.name`."""

        def read(entry: Entry) -> Record:
            record = dataset.read(entry)
            dataset.check_native_rate(dataset.rejection_id(entry), record.fs)
            return record

        named = [(entry.name, entry) for entry in entries]
        return self._embed_each(named, read, batch_size=batch_size, progress=progress, keep_tokens=keep_tokens)

    def corpus_dataset(self, root: str | os.PathLike | None = None) -> Dataset:
        """The run's dataset on the folder ``root`` (default: the run's own corpus), its records
        too slow for the phase provider rejected (`Dataset.require_rate`); `Dataset.fetch` checks
        the folder."""
        from cyclejepa.registry import DATASETS

        folder = self.dataset.root if root is None else Path(root)
        if folder is None:
            raise ValueError("this encoder knows no corpus (an exported package): name a folder of records")
        dataset: Dataset = DATASETS.build(self.settings.dataset, root=folder, **self.settings.dataset_options)
        dataset.require_rate(self.provider.rate_problem)
        dataset.fetch()
        return dataset

    def to(self, device: str | object) -> Encoder:
        """This encoder on ``device`` (``"cpu"``, a `torch.device`): a copy when it moves."""
        import copy

        import torch

        target = torch.device(device) if isinstance(device, str) else device
        if target == self.device:
            return self
        model, symmetry = copy.deepcopy(self.model).to(target), copy.deepcopy(self.symmetry)
        if hasattr(symmetry, "to"):
            symmetry = symmetry.to(target)
        return Encoder(model, self.settings, target, self.source, symmetry, root=self.dataset.root)

    def _embed_each(self, named: Sequence[tuple[str, Any]], read, *, batch_size: int, progress: bool, keep_tokens: bool):
        """Records ``read(item)`` for each (name, item) of ``named``, ``batch_size`` at a time; a
        record that cannot be read or embedded goes to `Embeddings.failed` and the others on."""
        parts: list[Embeddings | None] = []
        failed: dict[str, str] = {}
        with progress_bar(len(named), "embedding records", enabled=progress) as advance:
            for start in range(0, len(named), batch_size):
                names, prepared = [], []
                for name, item in named[start : start + batch_size]:
                    try:
                        prepared.append(self._prepare(read(item)))
                        names.append(name)
                    except RecordRejected as rejection:
                        failed[name] = rejection.detail
                    except (FileNotFoundError, ValueError) as error:
                        failed[name] = str(error)
                if prepared:
                    parts.append(self._embed_finite(names, prepared, batch_size, keep_tokens, failed))
                advance(len(named[start : start + batch_size]))
        if not parts:
            raise NothingEmbedded(failed, f"none of the {len(named)} records could be embedded: {failed}")
        return _concatenate(parts, failed)

    def _embed_finite(
        self, names: list[str], prepared: list[_Windows], batch_size: int, keep_tokens: bool, failed: dict
    ) -> Embeddings | None:
        """`_embed`; a record whose tokens are not finite goes to ``failed`` and the rest on."""
        try:
            return self._embed(names, prepared, batch_size, False, keep_tokens)
        except NonFiniteTokens as error:
            failed.update({names[i]: str(error) for i in error.rows})
            kept = [i for i in range(len(names)) if i not in error.rows]
            return (
                self._embed([names[i] for i in kept], [prepared[i] for i in kept], batch_size, False, keep_tokens)
                if kept
                else None
            )

    def _embed(
        self, names: list[str], prepared: list[_Windows], batch_size: int, progress: bool, keep_tokens: bool
    ) -> Embeddings:
        """Tokens of every window, then each record's mean over its phase-valid, QC-passing windows."""
        tokens = extract_tokens(
            self.model,
            np.concatenate([p.signals for p in prepared]),
            batch_size=batch_size,
            device=self.device,
            progress=progress,
        )
        windows = np.array([len(p.qc_ok) for p in prepared], dtype=np.int64)
        finite = np.add.reduceat(np.isfinite(tokens).all(axis=(1, 2)), np.cumsum(windows) - windows) == windows
        if not finite.all():
            raise NonFiniteTokens([names[i] for i in np.flatnonzero(~finite)], list(np.flatnonzero(~finite)))
        phases = np.concatenate([p.phases for p in prepared])
        window_qc = np.concatenate([p.qc_ok for p in prepared])
        embeddings = np.full((len(prepared), tokens.shape[-1]), np.nan)
        mean_tokens = np.stack(
            [
                tokens[s : s + n].reshape(-1, tokens.shape[-1]).astype(np.float64).mean(axis=0)
                for s, n in zip(np.cumsum(windows) - windows, windows, strict=True)
            ]
        )
        distances = [input_distance(p.signals) for p in prepared]
        reasons = np.full(len(prepared), "", dtype=object)
        for i, (start, p) in enumerate(zip(np.cumsum(windows) - windows, prepared, strict=True)):
            rows = slice(start, start + windows[i])
            kept = np.where(window_qc[rows, None], phases[rows], np.nan)  # failing windows: no valid token
            reps = record_representations(
                tokens[rows].reshape(1, -1, tokens.shape[-1]), kept.reshape(1, -1), np.any(window_qc[rows], keepdims=True)
            )
            if len(reps.rows):
                embeddings[i] = reps.features[0]
            elif reps.excluded[QC_FAILED]:
                reasons[i] = f"{QC_FAILED}: " + "; ".join(dict.fromkeys(r for r in p.qc_reason if r))
            else:
                reasons[i] = next(reason for reason, count in reps.excluded.items() if count)
            reasons[i] = "; ".join(filter(None, [reasons[i], self._out_of_range(*distances[i])]))
        events = [e for p in prepared for e in p.events]
        return Embeddings(
            records=np.array(names, dtype=str),
            embeddings=embeddings,
            qc_ok=~np.isnan(embeddings).any(axis=1),
            qc_reason=reasons.astype(str),
            mean_tokens=mean_tokens,
            input_distance=np.array([d for d, _ in distances], dtype=np.float64),
            windows=windows,
            window_start=np.concatenate([p.start for p in prepared]),
            window_qc_ok=window_qc,
            window_qc_reason=np.array([r for p in prepared for r in p.qc_reason], dtype=str),
            token_phases=phases,
            tokens=tokens if keep_tokens else None,
            window_events=np.array([len(e.time_s) for e in events], dtype=np.int64),
            event_time_s=np.concatenate([e.time_s for e in events]),
            event_coordinate=np.concatenate([e.coordinate for e in events]),
            cycle_quality=np.concatenate([e.quality for e in events]),
            cycle_ok=np.concatenate([e.ok for e in events]),
            source=dict(self.source),
        )

    def _out_of_range(self, distance: float, row: int) -> str:
        """The `OUT_OF_RANGE` reason of a record at ``distance`` (its furthest channel ``row``), or ''."""
        if distance <= OUT_OF_RANGE_DECADES:
            return ""
        return (
            f"{OUT_OF_RANGE}: channel {self.geometry.channels[row]} is {distance:.2f} decades from the run's normalisation "
            f"(limit {OUT_OF_RANGE_DECADES:g})"
        )


def check_signal(signal) -> np.ndarray:
    """``signal`` as a numpy array of real numbers (integers or floats); a ValueError names any
    other dtype (bool, complex, datetime, text, objects), whose conversion would be silent."""
    try:
        array = np.asarray(signal)
    except (TypeError, ValueError) as error:
        raise ValueError(f"signal must be a numeric array: {str(error)[:200]}") from None
    if array.dtype.kind not in "iuf":
        kind = {
            "b": "booleans",
            "c": "complex numbers (an imaginary part would be dropped)",
            "O": "Python objects",
            "U": "text",
            "S": "bytes",
            "M": "dates",
            "m": "time spans",
        }.get(array.dtype.kind, "not real numbers")
        raise ValueError(f"signal must be an array of real numbers (integers or floats), got dtype {array.dtype}: {kind}")
    return array


def check_fs(fs) -> float:
    """``fs`` as a float, if it is a real number (not a bool or a string), finite and positive."""
    rate = float(fs) if isinstance(fs, numbers.Real) and not isinstance(fs, bool | np.bool_) else math.nan
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"fs must be a positive finite number of Hz, got {fs!r} ({type(fs).__name__})")
    return rate


def check_channel_names(names, shape: tuple[int, ...]) -> tuple[str, ...]:
    """``names`` as a tuple of non-empty strings, one per row of a record of ``shape`` (channels, samples)."""
    if isinstance(names, str | bytes) or not isinstance(names, Sequence | np.ndarray):
        raise ValueError(f"channel names must be a list of strings, one per row, got {type(names).__name__} {str(names)[:80]!r}")
    wrong = [f"{i}: {name!r}" for i, name in enumerate(names) if not isinstance(name, str) or not name.strip()]
    if wrong:
        raise ValueError(f"channel names must be non-empty strings; not so at {', '.join(wrong[:5])}")
    if len(names) != shape[0]:
        raise ValueError(f"{len(names)} channel names for a signal of shape {tuple(shape)}")
    return tuple(names)


class NothingEmbedded(ValueError):
    """No record of a call could be embedded; ``failed`` maps each record name to why."""

    def __init__(self, failed: dict[str, str], message: str):
        self.failed = dict(failed)
        super().__init__(message)


class NonFiniteTokens(ValueError):
    """Records (``names``, at batch ``rows``) whose tokens hold a NaN or an infinity."""

    def __init__(self, names: list[str], rows: list[int]):
        self.names, self.rows = names, [int(r) for r in rows]
        super().__init__(f"records {names}: the encoder's output is not finite (input far outside the training range?)")


def _concatenate(parts: list[Embeddings | None], failed: dict[str, str]) -> Embeddings:
    """The records of ``parts`` (None: a batch of which none could be embedded) in order, as one `Embeddings`."""
    embedded = [p for p in parts if p is not None]
    if not embedded:
        raise NothingEmbedded(failed, f"none of the records could be embedded: {failed}")
    first = embedded[0]
    joined: dict[str, Any] = {  # field name -> its array joined over the parts, or None (as in the first)
        name: None if value is None else np.concatenate([getattr(p, name) for p in embedded])
        for name, value in vars(first).items()
        if isinstance(value, np.ndarray) or value is None
    }
    return Embeddings(**joined, failed=failed, source=first.source)
