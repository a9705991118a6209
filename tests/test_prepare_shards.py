"""Preparing a cache in shards: shares prepared apart and merged equal the one-step cache; the
merge refuses a missing or foreign shard by name; the signals in several parts read as one array."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from cyclejepa.cli import app
from cyclejepa.data.cache import CacheSpec, PreparedCache, prepare_cache
from cyclejepa.data.cache import build as cache_build
from cyclejepa.data.cache.prepared import SignalParts
from cyclejepa.data.cache.shards import ShardMismatch, merge_shards, parse_shard, prepare_shard, shards_dir
from cyclejepa.data.cache.shares import share_rows
from cyclejepa.data.preprocess import NormStatistics, fit_normalisation
from cyclejepa.data.ptbxl import PTBXL

RECORDS = 18
CORRUPTED = {4: "checksum", 13: "extent"}
SMALL_PARTS = 4 * 12 * 1000 * 4
"""Signal parts of 4 windows of 12 x 1000 float32, so that every cache here has several."""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A synthetic PTB-XL corpus with two corrupted records."""
    from test_ptbxl import CORRUPTIONS

    from cyclejepa.data.synthetic import write_synthetic_corpus

    root = write_synthetic_corpus(tmp_path_factory.mktemp("ptbxl"), RECORDS, seed=3, progress=False)
    for ecg_id, check in CORRUPTED.items():
        CORRUPTIONS[check](PTBXL(root).record_path(ecg_id))
    return root


@pytest.fixture(scope="module")
def one_step(corpus, tmp_path_factory) -> PreparedCache:
    return prepare_cache(
        PTBXL(corpus), CacheSpec(tmp_path_factory.mktemp("one") / "cache", part_bytes=SMALL_PARTS), progress=False
    )


def _merged(corpus: Path, directory: Path, count: int, **options) -> PreparedCache:
    spec = CacheSpec(directory, part_bytes=SMALL_PARTS, **options)
    for index in reversed(range(count)):  # any order: each share is prepared on its own
        prepare_shard(PTBXL(corpus), spec, index, count, progress=False)
    return merge_shards(PTBXL(corpus), spec)


def test_shards_prepared_apart_and_merged_equal_the_one_step_cache(corpus, one_step, tmp_path):
    merged = _merged(corpus, tmp_path / "cache", 3)
    assert len(merged.manifest["signal_parts"]) > 1 and isinstance(merged.signals, SignalParts)
    assert merged.signals.shape == one_step.signals.shape == (RECORDS - len(CORRUPTED), 12, 1000)
    np.testing.assert_array_max_ulp(np.asarray(merged.signals), np.asarray(one_step.signals), maxulp=1)
    np.testing.assert_allclose(merged.norm.mean, one_step.norm.mean, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(merged.norm.std, one_step.norm.std, rtol=1e-12)
    for name in ("phase_centre", "phase_causal", "event_indices", "event_offsets"):
        np.testing.assert_array_equal(getattr(merged, name), getattr(one_step, name))
    for name in ("meta.csv", "rejections.csv"):
        assert (merged.path / name).read_bytes() == (one_step.path / name).read_bytes()
    assert {r.record_id: r.check for r in merged.rejections} == CORRUPTED
    for key in ("counts", "config_hash", "dataset", "geometry"):
        assert merged.manifest[key] == one_step.manifest[key]
    assert not shards_dir(merged.path).exists()  # the shards are removed once the cache is in place


def test_one_step_cache_is_the_single_pass_fit_and_streams_its_windows(one_step):
    """The one-step cache's normalisation is `fit_normalisation` over its decimated training
    windows, bit for bit (recovered from the written signals in float64)."""
    train = np.isin(one_step.columns["fold"], one_step.manifest["arguments"]["train_folds"])
    decimated = np.asarray(one_step.signals, dtype=np.float64) * one_step.norm.std[:, None] + one_step.norm.mean[:, None]
    refit = fit_normalisation(decimated, train)
    np.testing.assert_allclose(refit.mean, one_step.norm.mean, atol=1e-6)
    np.testing.assert_allclose(refit.std, one_step.norm.std, rtol=1e-6)
    assert [p["rows"] for p in one_step.manifest["signal_parts"]] == [4, 4, 4, 4]


def test_combined_statistics_equal_the_single_pass_fit_to_float64_rounding():
    rng = np.random.default_rng(0)
    windows = rng.normal(3.0, [[0.5], [2.0], [0.01]], size=(301, 3, 50))
    train = rng.random(301) < 0.8
    single = fit_normalisation(windows, train)
    reference = windows[train].transpose(1, 0, 2).reshape(3, -1)
    np.testing.assert_allclose(single.mean, reference.mean(axis=1), rtol=1e-13)
    np.testing.assert_allclose(single.std, reference.std(axis=1), rtol=1e-12)
    cuts = [0, 7, 8, 150, 151, 301]  # shares of 7, 1, 142, 1, 150 windows; one with no training window below
    parts = []
    for start, stop in zip(cuts[:-1], cuts[1:], strict=True):
        rows = np.flatnonzero(train[start:stop]) + start
        parts.append(NormStatistics.fit(lambda rows=rows: [windows[rows]], 3))
    parts.append(NormStatistics.fit(lambda: [], 3))
    combined = NormStatistics.combine(parts).normalisation(int(train.sum()))
    np.testing.assert_allclose(combined.mean, single.mean, rtol=1e-14)
    np.testing.assert_allclose(combined.std, single.std, rtol=1e-13)
    whole = NormStatistics.combine([NormStatistics.fit(lambda: [windows[train]], 3)]).normalisation(int(train.sum()))
    fit_one_block = fit_normalisation(windows, train, chunk=10_000)
    assert np.array_equal(whole.mean, fit_one_block.mean) and np.array_equal(whole.std, fit_one_block.std)


def test_a_missing_shard_is_refused_by_name(corpus, tmp_path):
    spec = CacheSpec(tmp_path / "cache")
    prepare_shard(PTBXL(corpus), spec, 0, 3, progress=False)
    prepare_shard(PTBXL(corpus), spec, 2, 3, progress=False)
    with pytest.raises(
        ShardMismatch, match=r"1 of 3 shards missing .*shard-00001-of-00003 \(`cyclejepa prepare CONFIG --shard 1/3`\)"
    ):
        merge_shards(PTBXL(corpus), spec)
    assert not spec.directory.exists()
    with pytest.raises(ShardMismatch, match=r"no prepared shard in .*other\.shards: run `cyclejepa prepare CONFIG --shard I/N`"):
        merge_shards(PTBXL(corpus), CacheSpec(tmp_path / "other"))


def test_a_shard_of_another_config_is_refused_by_name(corpus, tmp_path):
    spec = CacheSpec(tmp_path / "cache")
    prepare_shard(PTBXL(corpus), spec, 0, 2, progress=False)
    prepare_shard(PTBXL(corpus), CacheSpec(tmp_path / "cache", train_folds=(1, 2, 3)), 1, 2, progress=False)
    with pytest.raises(
        ShardMismatch, match=r"shard 1/2 at .*shard-00001-of-00002 was prepared for another cache \(differs in train_folds\)"
    ):
        merge_shards(PTBXL(corpus), spec)
    prepare_shard(PTBXL(corpus), spec, 0, 3, progress=False)  # a second split beside the first
    with pytest.raises(ShardMismatch, match=r"holds shards of 2 and of 3 shares"):
        merge_shards(PTBXL(corpus), spec)


def test_a_finished_shard_is_reused_and_a_killed_one_leaves_nothing(corpus, tmp_path, monkeypatch):
    spec = CacheSpec(tmp_path / "cache")
    first = prepare_shard(PTBXL(corpus), spec, 1, 2, progress=False)
    calls = []
    real = cache_build._process_chunk
    monkeypatch.setattr(cache_build, "_process_chunk", lambda *a: calls.append(1) or real(*a))
    assert prepare_shard(PTBXL(corpus), spec, 1, 2, progress=False) == first and calls == []

    def killed(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cache_build, "_process_chunk", killed)
    with pytest.raises(KeyboardInterrupt):
        prepare_shard(PTBXL(corpus), spec, 0, 2, progress=False)
    assert sorted(p.name for p in shards_dir(spec.directory).iterdir() if not p.name.endswith(".lock")) == [
        "shard-00001-of-00002"
    ]


@pytest.mark.parametrize(("records", "count"), [(17, 3), (5, 5), (2, 4), (1000, 7)])
def test_shares_partition_the_records_in_order(records, count):
    shares = [share_rows(records, i, count) for i in range(count)]
    assert [r for s in shares for r in s] == list(range(records))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


@pytest.mark.parametrize(
    ("text", "message"),
    [("3/2", r"I = 3 is not a share of 2; I runs from 0 to 1"), ("0/0", r"N = 0, the number of shares must be at least 1"),
     ("a/b", r"expected I/N, two integers such as 0/4"), ("-1/2", r"expected I/N"), ("1/2/3", r"expected I/N")],
)  # fmt: skip
def test_shard_argument_errors_say_what_is_wrong(text, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        parse_shard(text)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"name": "x", "output_dir": str(tmp_path / "run")}))
    result = CliRunner().invoke(app, ["prepare", str(config), "--shard", text])
    assert result.exit_code == 2 and "--shard" in result.output
    assert " ".join(result.output.replace("│", " ").split()).count(text) >= 1


def test_signal_parts_index_as_the_one_array(tmp_path):
    rng = np.random.default_rng(1)
    whole = rng.normal(size=(11, 3, 5)).astype(np.float32)
    paths = []
    for i, (start, stop) in enumerate([(0, 4), (4, 5), (5, 11)]):
        paths.append(tmp_path / f"p{i}.npy")
        np.save(paths[-1], whole[start:stop])
    parts = SignalParts(paths)
    assert (len(parts), parts.shape, parts.dtype, parts.ndim, parts.nbytes) == (11, whole.shape, whole.dtype, 3, whole.nbytes)
    assert all(isinstance(p, np.memmap) for p in parts.parts)
    keys = [3, 4, -1, -11, slice(None), slice(2, 9), slice(None, None, -3), slice(20, 30), np.array([10, 0, 4, 4, 5]),
            [1, 2], np.array([[0, 10], [5, 6]]), np.arange(11) % 3 == 0, np.array([], dtype=np.int64), (slice(3, 7), 1),
            (np.array([9, 1]), slice(None), 2), (6, 2, 4), np.int64(5)]  # fmt: skip
    for key in keys:
        np.testing.assert_array_equal(parts[key], whole[key], err_msg=repr(key))
    np.testing.assert_array_equal(np.asarray(parts), whole)
    np.testing.assert_array_equal(np.asarray(parts, dtype=np.float64), whole.astype(np.float64))
    np.testing.assert_array_equal(np.stack(list(parts)), whole)
    for key in (11, -12, np.array([11]), np.ones(10, bool)):
        with pytest.raises(IndexError):
            parts[key]
    np.save(tmp_path / "odd.npy", whole[:2, :2])
    with pytest.raises(ValueError, match=r"odd\.npy: rows \(2, 5\)"):
        SignalParts([paths[0], tmp_path / "odd.npy"])


@pytest.mark.slow
def test_prepare_shards_then_merge_from_the_command_line(corpus, one_step, tmp_path):
    config = tmp_path / "shards.yaml"
    config.write_text(yaml.safe_dump({"name": "shards", "output_dir": str(tmp_path / "run"),
                                      "data": {"dataset": "ptbxl", "root": str(corpus), "train_folds": list(range(1, 9)),
                                               "eval_folds": [9]}}))  # fmt: skip

    def cli(*words):
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        return subprocess.run(
            [sys.executable, "-m", "cyclejepa", "prepare", str(config), *words], capture_output=True, text=True, env=env
        )

    first = cli("--shard", "0/2")
    assert first.returncode == 0 and "shard 0/2:" in first.stdout and "--merge" in first.stdout
    refused = cli("--merge")
    assert refused.returncode == 1 and "shard-00001-of-00002 (`cyclejepa prepare CONFIG --shard 1/2`)" in " ".join(
        refused.stderr.split()
    )
    assert cli("--shard", "1/2").returncode == 0
    merged = cli("--merge")
    assert merged.returncode == 0, merged.stderr
    cache = PreparedCache(tmp_path / "run" / "cache")  # normalised on folds 1-8, one_step on the dataset's 1-9

    def physical(c):
        return np.asarray(c.signals, dtype=np.float64) * c.norm.std[:, None] + c.norm.mean[:, None]

    np.testing.assert_allclose(physical(cache), physical(one_step), atol=1e-5)
    assert (cache.path / "meta.csv").read_bytes() == (one_step.path / "meta.csv").read_bytes()
    assert json.loads((cache.path / ".experiment.json").read_text())["name"] == "shards"


def test_meta_read_in_blocks_equals_meta_read_whole(one_step):
    from cyclejepa.data.cache.files import meta_columns, read_meta

    expected = meta_columns(one_step.label_levels)
    whole, blocks = (
        read_meta(one_step.path / "meta.csv", expected),
        read_meta(one_step.path / "meta.csv", expected, rows_at_once=3),
    )
    assert list(whole) == list(blocks)
    for name in whole:
        assert whole[name].dtype == blocks[name].dtype, name
        np.testing.assert_array_equal(whole[name], blocks[name])
    assert len(whole["record_id"]) == RECORDS - len(CORRUPTED) and whole["record"].dtype.kind == "U"
