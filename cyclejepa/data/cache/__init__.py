"""The preprocessing cache: each record of a dataset verified, windowed, decimated, normalised,
phase-tagged once.

`prepare_cache` reads every record of a `Dataset` (PTB-XL, the synthetic corpus, the Challenge
format, a plugin) as a `CacheSpec` says, resamples it to the cache rate ``cache_fs`` (the
dataset's unless the config sets ``data.cache_fs``; PTB-XL: 500 Hz), cuts it into windows of the
model's length (`cut_windows`), decimates each window to the model rate
``model_fs = cache_fs / decimation``, normalises it and runs the phase provider on it at
``cache_fs``. The cache knows no corpus: every fact comes from the dataset and is recorded in
the manifest, which every later stage reads (`PreparedCache.model_fs`, `cache_fs`,
`token_patch`, `channels`, `units`, `folds`). It writes::

    CACHE/signals-NNNNN.npy  (N, C, L) float32 windows, z-scored, channel-major (PTB-XL: 12 x 1000),
                             in row order, in parts of at most `PART_BYTES` (read as one: `SignalParts`)
    CACHE/phase_centre.npy   (N, T) float32 token phases in radians, centre convention (training)
    CACHE/phase_causal.npy   (N, T) float32 token phases in radians, causal convention (reporting)
    CACHE/events.npz         the provider's events at ``cache_fs`` from each window's start, ragged: ``indices``, ``offsets`` (N+1)
    CACHE/meta.csv           one row per kept window (see `meta_columns`)
    CACHE/norm.json          per-channel mean and std fitted on the training folds
    CACHE/rejections.csv     id, check, detail of every rejected record
    CACHE/manifest.json      arguments, their hash, the dataset's facts (name, units, folds),
                             channels, rates, label vocabularies, counts, sha256 of every file

A provider of C > 1 cyclic coordinates (``composite``) stores (N, T, C) phases, coordinate c in
the provider's order (`CompositeTrack.at_tokens`), its events per coordinate (``indices``,
``offsets`` the first coordinate's, ``indices_c``, ``offsets_c`` coordinate c's), the joint QC in
meta.csv and the coordinate names in the manifest (``phase_coordinates``); a one-coordinate
cache has none of these additions.

Row i of every array is row i of meta.csv (windows of the kept records, in record order, then
window order); phases are NaN where undefined. Normalisation is fitted on the decimated
training-fold windows before any normalised signal is written: pass one writes decimated mV to
scratch files, pass two fits the statistics on them and writes the z-scored windows. The cache
is built in a temporary folder beside ``cache_dir`` and renamed into place; loading it needs
only numpy (pandas only for `PreparedCache.meta`).

Modules: `spec` (`CacheSpec`: what building, naming and opening a cache needs), `record` (one
record through the chain), `files` (file names, meta.csv columns, writers and readers),
`prepared` (`PreparedCache`, `SignalParts`), `build` (`prepare_cache`), `shares` (a share of the
records prepared into a folder, and the cache assembled from shares), `shards` (`prepare_shard`,
`merge_shards`: one cache on N machines), `identity` (`open_cache`: a cache is read only by the
experiment it was built for).
"""

from typing import TYPE_CHECKING

from cyclejepa.registry import lazy_names

if TYPE_CHECKING:
    from cyclejepa.data.cache.build import prepare_cache as prepare_cache
    from cyclejepa.data.cache.files import (
        CACHE_FORMAT as CACHE_FORMAT,
        meta_columns as meta_columns,
        PHASE_REVISION as PHASE_REVISION,
    )
    from cyclejepa.data.cache.identity import CacheMismatch as CacheMismatch, open_cache as open_cache
    from cyclejepa.data.cache.prepared import PreparedCache as PreparedCache, SignalParts as SignalParts
    from cyclejepa.data.cache.record import (
        cut_record as cut_record,
        decimate_fast as decimate_fast,
        decimate_and_phase as decimate_and_phase,
        record_windows as record_windows,
        RecordOutcome as RecordOutcome,
    )
    from cyclejepa.data.cache.shards import merge_shards as merge_shards, prepare_shard as prepare_shard
    from cyclejepa.data.cache.spec import CacheSpec as CacheSpec

_HOMES = {
    "prepare_cache": "build",
    "CACHE_FORMAT": "files",
    "PHASE_REVISION": "files",
    "meta_columns": "files",
    "CacheMismatch": "identity",
    "open_cache": "identity",
    "PreparedCache": "prepared",
    "SignalParts": "prepared",
    "merge_shards": "shards",
    "prepare_shard": "shards",
    "RecordOutcome": "record",
    "cut_record": "record",
    "decimate_fast": "record",
    "decimate_and_phase": "record",
    "record_windows": "record",
    "CacheSpec": "spec",
}
"""Each public name and the submodule that defines it (imported on first use: opening a cache
imports neither the builder nor the record chain)."""

__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
