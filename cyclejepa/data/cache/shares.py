"""A share of a corpus's records prepared on its own, and a cache assembled from shares.

A share is a contiguous run of the dataset's records (`share_rows`). `ShareWriter` appends the
chunks the builder writes (`ChunkResult`), in record order, to the share's folder: the decimated
windows in physical units (``mv-NNNNN.npy`` parts of at most ``part_rows`` windows), token phases,
events, meta.csv rows, rejections, each window's channel means and standard deviations (for
`spread_warnings`), and in ``share.json`` the normalisation's sufficient statistics over its
training windows (`NormStatistics`) and its counts. Nothing of the share is held in memory but
one chunk and one fold per window.

`assemble_cache` fits the normalisation from the shares' statistics (`NormStatistics.combine`),
writes each share's parts z-scored as the cache's signal parts, and concatenates the rest in
share order: the cache of N shares is the cache of one share holding every record, its
normalisation equal to float64 rounding, its other files equal. Memory stays bounded by a block of
512 windows and one float64 column of the windows' statistics.
"""

from __future__ import annotations

import csv
import json
import logging
import shutil
import zipfile
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cyclejepa.data.cache import files
from cyclejepa.data.cache.files import EVENTS_FILE, SIGNAL_PARTS, NpyAppender, arguments_hash, row_blocks
from cyclejepa.data.datasets import LabelLevel, RecordRejected
from cyclejepa.data.preprocess import SPREAD_RATIO_MIN, NormStatistics
from cyclejepa.jsonio import writing

log = logging.getLogger(__name__)

SHARE_FILE = "share.json"
"""The file a finished share folder holds: identity, counts, parts, statistics."""
BLOCK = 512
"""Windows read at a time."""


def share_rows(records: int, index: int, count: int) -> range:
    """The records of share ``index`` of ``count``: contiguous runs in record order,
    ``floor(index · records / count)`` up to ``floor((index + 1) · records / count)``."""
    return range(index * records // count, (index + 1) * records // count)


@dataclass
class ChunkResult:
    """What a chunk of records wrote beside ``stem`` (``.npy`` decimated windows, ``.npz``
    phases, events and window statistics, ``.csv`` meta rows, ``.rejections.csv``) and its counts."""

    stem: str
    records: int
    windows: int = 0
    records_kept: int = 0
    qc_failed: int = 0
    checks: Counter = field(default_factory=Counter)
    coordinates: tuple[str, ...] = ()
    n_coordinates: int = 0


class ShareWriter:
    """Appends chunks (`add`, in record order) to the share folder ``directory``; `finish` fits
    the statistics and writes `SHARE_FILE`."""

    def __init__(self, directory: Path, part_rows: int, train_folds: Sequence[int]):
        self.directory, self.part_rows, self.train_folds = Path(directory), max(1, int(part_rows)), list(train_folds)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.parts: list[dict[str, Any]] = []
        self.appenders: dict[str, NpyAppender] = {}
        self.part: NpyAppender | None = None
        self.folds: list[np.ndarray] = []
        self.counts: Counter = Counter()
        self.checks: Counter = Counter()
        self.coordinates: tuple[str, ...] = ()
        self.n_coordinates = 0
        self.events: Counter[int] = Counter()
        for name in ("meta.csv", "rejections.csv"):
            (self.directory / name).write_text("")

    def add(self, chunk: ChunkResult) -> None:
        stem = Path(chunk.stem)
        self.counts.update(
            records=chunk.records,
            windows=chunk.windows,
            records_kept=chunk.records_kept,
            qc_failed=chunk.qc_failed,
            rejected=sum(chunk.checks.values()),
        )
        self.checks.update(chunk.checks)
        for name in ("meta.csv", "rejections.csv"):
            source = stem.with_suffix(".csv" if name == "meta.csv" else ".rejections.csv")
            if source.is_file():
                with writing(self.directory / name), (self.directory / name).open("ab") as out:
                    out.write(source.read_bytes())
                source.unlink()
        if chunk.windows:
            self.coordinates, self.n_coordinates = chunk.coordinates, chunk.n_coordinates
            self._append_signals(np.load(stem.with_suffix(".npy")))
            with np.load(stem.with_suffix(".npz")) as arrays:
                self.folds.append(arrays["fold"].astype(np.int16))
                for name in ("phase_centre", "phase_causal", "means", "stds"):
                    self._appender(name, arrays[name]).append(arrays[name])
                for c in range(chunk.n_coordinates):
                    for name in (f"events_{c}", f"counts_{c}"):
                        self._appender(name, arrays[name]).append(arrays[name])
                    self.events[c] += len(arrays[f"events_{c}"])
            stem.with_suffix(".npy").unlink()
            stem.with_suffix(".npz").unlink()

    def _appender(self, name: str, like: np.ndarray) -> NpyAppender:
        if name not in self.appenders:
            self.appenders[name] = NpyAppender(self.directory / f"{name}.npy", like.shape[1:], like.dtype)
        return self.appenders[name]

    def _append_signals(self, windows: np.ndarray) -> None:
        while len(windows):
            if self.part is None or self.part.rows == self.part_rows:
                self._close_part()
                self.part = NpyAppender(self.directory / f"mv-{len(self.parts):05d}.npy", windows.shape[1:])
            room = self.part_rows - self.part.rows
            self.part.append(windows[:room])
            windows = windows[room:]

    def _close_part(self) -> None:
        if self.part is not None:
            self.part.close()
            self.parts.append({"file": self.part.path.name, "rows": self.part.rows})
            self.part = None

    def finish(self, arguments: Mapping[str, Any], index: int, count: int) -> dict[str, Any]:
        """Close the files, fit the training windows' `NormStatistics` and write `SHARE_FILE`."""
        self._close_part()
        for appender in self.appenders.values():
            appender.close()
        folds = np.concatenate(self.folds) if self.folds else np.zeros(0, np.int16)
        train = np.isin(folds, self.train_folds)
        paths = [self.directory / p["file"] for p in self.parts]
        channels = len(arguments["geometry"]["channels"])
        statistics = NormStatistics.fit(lambda: _selected_blocks(paths, train), channels)
        info = {
            "config_hash": arguments_hash(arguments),
            "arguments": dict(arguments),
            "shard": [index, count],
            "counts": {key: int(self.counts[key]) for key in ("records", "windows", "records_kept", "qc_failed", "rejected")},
            "checks": dict(self.checks),
            "train_windows": int(train.sum()),
            "statistics": statistics.to_dict(),
            "coordinates": list(self.coordinates),
            "n_coordinates": self.n_coordinates,
            "events": [int(self.events[c]) for c in range(self.n_coordinates)],
            "parts": self.parts,
        }
        with writing(self.directory / SHARE_FILE):
            (self.directory / SHARE_FILE).write_text(json.dumps(info, indent=2))
        return info


def _selected_blocks(paths: Sequence[Path], selected: np.ndarray) -> Iterator[np.ndarray]:
    """The ``selected`` rows of the parts at ``paths`` (rows in order across them), in blocks of
    `BLOCK` selected rows (the last shorter): the blocks `cyclejepa.data.preprocess.fit_normalisation`
    reads, so that the statistics of one share are the single-pass fit's bit for bit."""
    pending, held, start = [], 0, 0
    for path in paths:
        for block in row_blocks(path, BLOCK):
            chosen = block[selected[start : start + len(block)]]
            start += len(block)
            pending.append(chosen)
            held += len(chosen)
            while held >= BLOCK:
                joined = np.concatenate(pending)
                yield joined[:BLOCK]
                pending, held = [joined[BLOCK:]], held - BLOCK
    if held:
        yield np.concatenate(pending)


def read_share(directory: Path) -> dict[str, Any]:
    return json.loads((Path(directory) / SHARE_FILE).read_text())


def assemble_cache(
    shares: Sequence[Path],
    out: Path,
    arguments: dict[str, Any],
    facts: dict[str, Any],
    levels: Sequence[LabelLevel],
    index_rejections: Sequence[RecordRejected],
    report: Path,
) -> None:
    """Write the cache of the share folders ``shares`` (in record order) into ``out``: the
    normalisation fitted from their statistics, the signal parts z-scored, phases, events, meta,
    rejections (``index_rejections``, the dataset's, first), norm.json and the manifest with
    ``facts``. ValueError when no training window passed verification (each rejection in ``report``)."""
    infos = [read_share(s) for s in shares]
    checks = Counter(r.check for r in index_rejections)
    for info in infos:
        checks.update(info["checks"])
    counts = {key: sum(i["counts"][key] for i in infos) for key in ("records", "records_kept", "qc_failed")}
    n_records, train_windows = counts["records"] + len(index_rejections), sum(i["train_windows"] for i in infos)
    if train_windows == 0:
        _write_rejections(report, shares, index_rejections)
        raise ValueError(
            f"no record of train_folds {arguments['train_folds']} passed verification "
            f"({sum(checks.values())} of {n_records} records rejected: {dict(checks)}); each record's reason is in {report}"
        )
    windowed = [(s, i) for s, i in zip(shares, infos, strict=True) if i["counts"]["windows"]]
    spread = spread_warnings([s for s, _ in windowed], arguments)
    norm = NormStatistics.combine([NormStatistics.from_dict(i["statistics"]) for i in infos]).normalisation(
        train_windows, arguments["geometry"]["channels"]
    )
    parts = _write_signals(windowed, out, norm)
    kept = sum(p["rows"] for p in parts)
    for convention in ("centre", "causal"):
        _concatenate(out / f"phase_{convention}.npy", [s / f"phase_{convention}.npy" for s, _ in windowed])
    _write_events(out / EVENTS_FILE, windowed, kept)
    with writing(out / "meta.csv"), (out / "meta.csv").open("w", newline="") as stream:
        csv.writer(stream).writerow(files.meta_columns(levels))
    _append(out / "meta.csv", [share / "meta.csv" for share, _ in windowed])
    _write_rejections(out / "rejections.csv", shares, index_rejections)
    with writing(out / "norm.json"):
        (out / "norm.json").write_text(
            json.dumps(
                {
                    **norm.to_dict(arguments["geometry"]["channels"]),
                    "train_folds": arguments["train_folds"],
                    "windows": train_windows,
                },
                indent=2,
            )
        )
    counts = {
        "records": n_records,
        "records_kept": counts["records_kept"],
        "kept": kept,
        "rejected": sum(checks.values()),
        "qc_failed": counts["qc_failed"],
    }
    coordinates = windowed[0][1]["coordinates"] if windowed else []
    facts = {**facts, **({"spread_warnings": spread} if spread else {})}
    files.write_manifest(out, arguments, facts, levels, counts, parts, coordinates)


def _write_signals(windowed: Sequence[tuple[Path, dict]], out: Path, norm) -> list[dict[str, Any]]:
    """Each share's decimated parts z-scored by ``norm`` into the cache's `SIGNAL_PARTS`, space
    reserved first (`files.reserve`)."""
    parts: list[dict[str, Any]] = []
    for share, info in windowed:
        for part in info["parts"]:
            source, target = share / part["file"], out / SIGNAL_PARTS.format(len(parts))
            shape, dtype, offset = files.npy_layout(source)
            files.reserve(target, offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
            with writing(target), target.open("r+b") as stream:
                files.write_npy(stream, shape, np.float32, (norm.apply(b) for b in row_blocks(source, BLOCK)))
            parts.append({"file": target.name, "rows": int(shape[0])})
    return parts


def _concatenate(target: Path, sources: Sequence[Path]) -> None:
    """The ``.npy`` files ``sources`` concatenated along their rows into ``target``."""
    layouts = [files.npy_layout(s) for s in sources]
    shape = (sum(layout[0][0] for layout in layouts), *layouts[0][0][1:])
    blocks = (block for source in sources for block in row_blocks(source, BLOCK * 64))
    with writing(target), target.open("wb") as stream:
        files.write_npy(stream, shape, layouts[0][1], blocks)


def _write_events(target: Path, windowed: Sequence[tuple[Path, dict]], kept: int) -> None:
    """`EVENTS_FILE`: per coordinate c the shares' events concatenated (``indices``, ``indices_c``)
    and the offsets (N + 1) of their counts, streamed into the archive."""
    n_coordinates = windowed[0][1]["n_coordinates"]
    with writing(target), zipfile.ZipFile(target, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for c in range(n_coordinates):
            suffix = f"_{c}" if c else ""
            total = sum(info["events"][c] for _, info in windowed)
            with archive.open(f"indices{suffix}.npy", "w", force_zip64=True) as member:
                events = (b for share, _ in windowed for b in row_blocks(share / f"events_{c}.npy", BLOCK * 64))
                files.write_npy(member, (total,), np.int64, events)
            with archive.open(f"offsets{suffix}.npy", "w", force_zip64=True) as member:
                files.write_npy(member, (kept + 1,), np.int64, _offsets([share / f"counts_{c}.npy" for share, _ in windowed]))


def _offsets(paths: Sequence[Path]) -> Iterator[np.ndarray]:
    """0, then the running sum of the counts in ``paths``."""
    running = 0
    yield np.zeros(1, np.int64)
    for path in paths:
        for counts in row_blocks(path, BLOCK * 64):
            ends = running + np.cumsum(counts, dtype=np.int64)
            running = int(ends[-1]) if len(ends) else running
            yield ends


def _write_rejections(path: Path, shares: Sequence[Path], index_rejections: Sequence[RecordRejected]) -> None:
    """The dataset's rejections while indexing, then each share's, in order."""
    files.write_rejections(path, index_rejections)
    _append(path, [share / "rejections.csv" for share in shares])


def _append(path: Path, sources: Sequence[Path]) -> None:
    """The bytes of ``sources`` appended to ``path``."""
    with writing(path), path.open("ab") as stream:
        for source in sources:
            with source.open("rb") as part:
                shutil.copyfileobj(part, stream)


def spread_warnings(shares: Sequence[Path], arguments: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One entry per channel whose `spread_ratio` over the shares' windows is below
    `SPREAD_RATIO_MIN` (from each window's mean and standard deviation the shares hold, one
    channel at a time), each logged as a warning naming the channel and the remedy."""
    found = []
    for c, channel in enumerate(arguments["geometry"]["channels"]):
        within, means = (
            np.concatenate([b[:, c] for s in shares for b in row_blocks(s / name, BLOCK * 64)])
            for name in ("stds.npy", "means.npy")
        )
        between = means.std()
        ratio = np.median(within) / between if between > 0 else np.inf
        if ratio < SPREAD_RATIO_MIN:
            found.append({"channel": channel, "ratio": round(float(ratio), 4)})
            log.warning(
                "channel %s: the median spread within a window is %.3g of the spread of the window means (below %g): "
                "a constant offset or slow drift the corpus z-score cannot remove dominates it; high-pass it or "
                "normalise per record or per window (data.options highpass_hz / normalisation, see docs/your-signal.md)",
                channel,
                ratio,
                SPREAD_RATIO_MIN,
            )
    return found
