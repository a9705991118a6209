"""Hostile inputs on the way into a cache: each is refused by name before it costs memory, time or
the rest of the corpus. A cache rebuilt from another corpus, a decompression bomb whose header
agrees, a full disk, a file name that is not UTF-8, a rate in exponent form or out of range,
amplitudes no body makes, a header linked from outside the root, two prepares of one cache."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.io

from cyclejepa import pipeline
from cyclejepa.config import load_config
from cyclejepa.data.cache import CacheSpec, prepare_cache
from cyclejepa.data.cache.build import cache_lock
from cyclejepa.data.cache.identity import CacheMismatch
from cyclejepa.data.challenge import Challenge2021
from cyclejepa.data.datasets import Dataset, RecordRejected
from cyclejepa.data.synthetic import generate_records
from cyclejepa.data.wfdb_format import MAX_RECORD_SAMPLES, HeaderError, read_record
from cyclejepa.lock import OutputLocked
from test_challenge import EXAMPLE, write_challenge
from test_ptbxl_dev import SMALL_MODEL

SOURCE = generate_records(4, seed=11)
"""Four 10 s, 12-lead synthetic ECGs at 500 Hz in mV."""


def corpus(root: Path, names: tuple[str, ...] = ("A0", "A1", "A2")) -> Path:
    """Challenge-format records of `SOURCE` at ``root``, one per name (.dat, format 16)."""
    for i, name in enumerate(names):
        write_challenge(root / name, SOURCE.signals[i % len(SOURCE.signals)], 500, ["164889003"], "dat")
    return root


def reject(dataset: Dataset, name: str) -> RecordRejected:
    """The rejection of record ``name`` by ``dataset``'s index or reader (fails if it is read)."""
    for rejection in dataset.rejected():
        if rejection.record_id == name:
            return rejection
    entry = next(e for e in dataset.entries() if e.name == name)
    with pytest.raises(RecordRejected) as caught:
        dataset.read(entry)
    return caught.value


def experiment(root: Path, out: Path, cache: Path, *overrides: str):
    return load_config(EXAMPLE, [f"data.root={root}", "data.dataset=challenge2021", f"output_dir={out}",
                                 f"data.cache_dir={cache}", "data.train_folds=[1,2,3,4,5,6,7,8,9,10]", "data.eval_folds=[]",
                                 "evaluation.unseal=true", *SMALL_MODEL, *overrides])  # fmt: skip


# 1. A cache rebuilt from another corpus


def test_a_cache_rebuilt_from_another_corpus_is_refused_naming_both_sides(tmp_path):
    cache = tmp_path / "r1" / "cache"
    first = experiment(corpus(tmp_path / "one"), tmp_path / "r1", cache)
    pipeline.prepare(first, progress=False)
    assert pipeline.configured_cache(first).path == cache
    other = experiment(corpus(tmp_path / "two", ("B0", "B1")), tmp_path / "r2", cache,
                       "data.options={channels: [I, II, III, aVR, aVL, aVF, V1, V2, V3, V4, V5, V6]}")  # fmt: skip
    with pytest.raises(CacheMismatch) as refused:  # the other experiment's prepare would replace it: refused
        pipeline.prepare(other, progress=False)
    assert f"data.cache_dir: the cache {cache} was prepared by experiment {first.name!r} at {(tmp_path / 'r1').resolve()}" in (
        str(refused.value)
    )
    assert "own data.cache_dir, or pass --overwrite-cache" in str(refused.value)
    assert pipeline.configured_cache(first).path == cache  # untouched
    pipeline.prepare(other, progress=False, overwrite_cache=True)
    with pytest.raises(CacheMismatch) as caught:
        pipeline.configured_cache(first)
    message = str(caught.value)
    assert f"root: cache '{(tmp_path / 'two').resolve()}', config '{(tmp_path / 'one').resolve()}'" in message
    assert "dataset_options: cache {'channels': ['I'," in message and "config {}" in message
    assert "corpus: cache {'files': 4," in message and "config {'files': 6," in message


def test_a_corpus_changed_since_the_cache_was_built_is_refused(tmp_path):
    root = corpus(tmp_path / "one")
    cfg = experiment(root, tmp_path / "r1", tmp_path / "r1" / "cache")
    pipeline.prepare(cfg, progress=False)
    corpus(root, ("A3",))  # one record more: the listing differs, though the options and root are the same
    with pytest.raises(CacheMismatch, match=r"corpus: cache \{'files': 6, .*config \{'files': 8,"):
        pipeline.configured_cache(cfg)


def test_amplitude_limits_are_part_of_the_identity(tmp_path):
    cfg = experiment(corpus(tmp_path / "one"), tmp_path / "r1", tmp_path / "r1" / "cache")
    pipeline.prepare(cfg, progress=False)
    strict = experiment(tmp_path / "one", tmp_path / "r1", tmp_path / "r1" / "cache", "data.amplitude_limits={mV: 50}")
    with pytest.raises(CacheMismatch, match=r"amplitude_limits: cache \{'I': 200.0, .*config \{'I': 50.0,"):
        pipeline.configured_cache(strict)


# 2. Memory bounded before reading: a .mat bomb whose header agrees, a truncated .dat


def _mat_record(root: Path, name: str, val: np.ndarray, compress: bool) -> None:
    """A Challenge record whose .mat holds ``val`` and whose header declares exactly its shape."""
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    scipy.io.savemat(path.with_suffix(".mat"), {"val": val}, do_compression=compress)
    lines = [f"{name} {val.shape[0]} 500 {val.shape[1]}"]
    lines += [f"{name}.mat 16x1+24 1000.0(0)/mV 16 0 0 0 0 L{i}" for i in range(val.shape[0])]
    path.with_suffix(".hea").write_text("\n".join(lines + ["# Dx: 164889003"]) + "\n")


def test_a_compressed_mat_bomb_with_an_agreeing_header_is_refused_before_it_is_decompressed(tmp_path, monkeypatch):
    _mat_record(tmp_path, "bomb", np.zeros((12, 400_000), np.int16), compress=True)  # 9.6 MB of zeros
    size = (tmp_path / "bomb.mat").stat().st_size
    assert size < 9_600_000 / 64 and scipy.io.whosmat(tmp_path / "bomb.mat") == [("val", (12, 400_000), "int16")]
    monkeypatch.setattr(scipy.io, "loadmat", lambda *a, **k: pytest.fail("the samples were decompressed"))
    rejection = reject(Challenge2021(tmp_path, channels=[f"L{i}" for i in range(12)]), "bomb")
    assert (rejection.check, rejection.detail) == (
        "extent",
        f"bomb.mat declares 9600000 bytes of samples in a file of {size} bytes, more than 64 times its size",
    )


def test_a_declaration_over_the_sample_cap_is_refused_before_the_file_is_opened(tmp_path, monkeypatch):
    _mat_record(tmp_path, "big", np.zeros((12, 10), np.int16), compress=False)
    header = tmp_path / "big.hea"
    header.write_text(header.read_text().replace("big 12 500 10", "big 12 500 25000000"))
    monkeypatch.setattr(scipy.io, "whosmat", lambda *a, **k: pytest.fail("the file was opened"))
    rejection = reject(Challenge2021(tmp_path, channels=[f"L{i}" for i in range(12)]), "big")
    assert rejection.check == "extent"
    assert rejection.detail == f"record 'big' declares 300000000 samples, more than the {MAX_RECORD_SAMPLES} a record may hold"


def test_a_float_mat_under_a_format_16_header_is_refused(tmp_path):
    _mat_record(tmp_path, "float", np.full((12, 5000), 3e38, np.float32), compress=False)
    rejection = reject(Challenge2021(tmp_path, channels=[f"L{i}" for i in range(12)]), "float")
    assert (rejection.check, rejection.detail) == ("format", "float.mat stores 'val' as single, the header's format 16 as int16")


def test_read_record_bounds_a_dat_by_its_size_before_the_wfdb_package_reads_it(tmp_path, monkeypatch):
    import wfdb

    (tmp_path / "r.dat").write_bytes(np.zeros(100, "<i2").tobytes())
    (tmp_path / "r.hea").write_text("r 2 500 100000\nr.dat 16 200/mV 16 0 0 0 0 I\nr.dat 16 200/mV 16 0 0 0 0 II\n")
    monkeypatch.setattr(wfdb, "rdrecord", lambda *a, **k: pytest.fail("the samples were read"))
    with pytest.raises(HeaderError, match=r"signal file 'r.dat' has 200 bytes; the header of 'r' declares 100000 frames "
                                          r"of 2 samples in format 16, 400000 bytes"):  # fmt: skip
        read_record(tmp_path / "r")


def test_read_record_bounds_a_dat_without_a_declared_length_by_its_size(tmp_path, monkeypatch):
    import wfdb

    with open(tmp_path / "r.dat", "wb") as stream:  # sparse: no block is written
        stream.truncate(2 * (MAX_RECORD_SAMPLES + 2))
    (tmp_path / "r.hea").write_text("r 1 500\nr.dat 16 200/mV 16 0 0 0 0 I\n")
    monkeypatch.setattr(wfdb, "rdrecord", lambda *a, **k: pytest.fail("the samples were read"))
    with pytest.raises(HeaderError, match=rf"signal file\(s\) 'r.dat' hold {MAX_RECORD_SAMPLES + 2} samples, more than"):
        read_record(tmp_path / "r")


# 9. One header reader gives the rate everywhere; rates no biosignal has are refused


def test_a_rate_in_exponent_form_is_read_as_the_header_reader_reads_it(tmp_path):
    import wfdb

    write_challenge(tmp_path / "E07599", SOURCE.signals[0], 500, ["164889003"], "dat")
    header = tmp_path / "E07599.hea"
    header.write_text(header.read_text().replace("E07599 12 500 5000", "E07599 12 5000e-1 5000"))
    assert wfdb.rdheader(str(tmp_path / "E07599")).fs == 5000  # the package's misreading
    assert read_record(tmp_path / "E07599").fs == 500.0
    assert Challenge2021(root=None).read_path(tmp_path / "E07599").fs == 500.0  # what `embed` reads
    dataset = Challenge2021(tmp_path)
    assert dataset.read(dataset.entries()[0]).fs == 500.0  # what `prepare` reads


def test_both_ptbxl_readers_read_a_rate_in_exponent_form_as_the_header_reader_does(tmp_path):
    from cyclejepa.data.ptbxl import read_record_fast, read_verified
    from test_ptbxl import write_record

    path = write_record(tmp_path, "r")
    header = path.with_suffix(".hea")
    header.write_text(header.read_text().replace("r 12 500 5000", "r 12 5000e-1 5000", 1))
    np.testing.assert_array_equal(read_verified(path), read_record_fast(path))  # the package alone read 5000 Hz: rejected


@pytest.mark.parametrize("rate", ["1e12", "0.12"])
def test_a_rate_no_biosignal_has_is_refused_before_reading(tmp_path, rate):
    write_challenge(tmp_path / "r", SOURCE.signals[0], 500, ["164889003"], "dat")
    header = tmp_path / "r.hea"
    header.write_text(header.read_text().replace("r 12 500 5000", f"r 12 {rate} 5000"))
    shown = f"{float(rate):g}"
    with pytest.raises(HeaderError, match=re.escape(f"record 'r' declares {shown} Hz, outside the 1 Hz to 1e+06 Hz")):
        read_record(tmp_path / "r")
    rejection = reject(Challenge2021(tmp_path), "r")
    assert rejection.check == "sampling_rate" and f"declares {shown} Hz" in rejection.detail


def test_an_upsampling_beyond_the_cap_is_refused_before_resampling(tmp_path):
    from cyclejepa.data.datasets import Record, conform

    record = Record("slow", np.zeros((1, 600)), 2.0, ("PPG",))  # 2 Hz to 500 Hz: 250 times as many samples
    with pytest.raises(RecordRejected, match=r"\(sampling_rate\): 2 Hz is more than 100 times below the cache rate 500 Hz"):
        conform(record, ("PPG",), 500.0)
    assert conform(Record("ok", np.zeros((1, 600)), 5.0, ("PPG",)), ("PPG",), 500.0).shape == (1, 60_000)


# 10. Amplitudes no body makes


def test_extreme_finite_amplitudes_are_rejected_by_name_and_the_limit_is_overridable(tmp_path):
    root = corpus(tmp_path / "corpus")
    write_challenge(root / "huge", SOURCE.signals[3], 500, ["164889003"], "dat")
    header = root / "huge.hea"
    lines = header.read_text().splitlines()
    lines[2] = lines[2].replace("1000.0(0)/mV", "1e-26(0)/mV", 1)  # lead II: stored values / 1e-26 = up to ~1e29 mV
    header.write_text("\n".join(lines) + "\n")
    cache = prepare_cache(Challenge2021(root), CacheSpec(tmp_path / "cache", train_folds=range(1, 11)), progress=False)
    (rejection,) = cache.rejections
    assert (rejection.record_id, rejection.check) == ("huge", "amplitude")  # the record's name, as for a record too short
    assert rejection.detail.startswith("II reaches ") and "(limit 200)" in rejection.detail
    assert sorted(set(cache.columns["record"])) == ["A0", "A1", "A2"]
    loose_spec = CacheSpec(tmp_path / "loose", train_folds=range(1, 11), amplitude_limits={"mV": 1e35})
    loose = prepare_cache(Challenge2021(root), loose_spec, progress=False)
    assert loose.rejections == [] and loose.manifest["arguments"]["amplitude_limits"]["II"] == 1e35


# 6, 12. Per-record failures of the index: a name that is not UTF-8, a header linked from outside


@pytest.mark.skipif(sys.platform != "linux", reason="file names of arbitrary bytes")
def test_a_file_name_that_is_not_utf8_is_rejected_by_name_and_the_prepare_goes_on(tmp_path):
    root = corpus(tmp_path / "corpus")
    bad = os.path.join(os.fsencode(root), b"bad\xffname")
    for suffix in (b".hea", b".dat"):
        os.rename(os.fsencode(root / "A2") + suffix, bad + suffix)
    cache = prepare_cache(Challenge2021(root), CacheSpec(tmp_path / "cache", train_folds=range(1, 11)), progress=False)
    (rejection,) = cache.rejections
    assert (rejection.record_id, rejection.check) == ("bad\\xffname", "name")
    assert rejection.detail == "the file name b'bad\\xffname' is not UTF-8; rename it"
    assert sorted(set(cache.columns["record"])) == ["A0", "A1"]
    assert "bad\\xffname,name," in (tmp_path / "cache" / "rejections.csv").read_text()


def test_a_ptbxl_row_that_is_not_utf8_is_rejected_by_line_and_the_others_go_on(tmp_path):
    from cyclejepa.data.ptbxl import PTBXL
    from test_ptbxl import write_root

    root = write_root(tmp_path / "ptbxl", [{"NORM": 100.0}] * 3, [1, 2, 3])
    table = root / "ptbxl_database.csv"
    table.write_bytes(table.read_bytes().replace(b"records500/00000/00002_hr", b"records500/00000/0000\xff_hr"))
    dataset = PTBXL(root)
    (rejection,) = dataset.rejected()
    assert (rejection.record_id, rejection.check) == (2, "metadata")
    assert rejection.detail == "filename_hr: b'records500/00000/0000\\xff_hr' is not UTF-8 text (line 3)"
    assert [entry.id for entry in dataset.entries()] == [1, 3]


def test_a_header_linked_from_outside_the_root_is_refused_unread(tmp_path):
    root = corpus(tmp_path / "corpus")
    outside = corpus(tmp_path / "elsewhere", ("X0",))
    (root / "X0.hea").symlink_to(outside / "X0.hea")
    (root / "X0.dat").symlink_to(root / "A0.dat")  # its samples would be inside the root
    dataset = Challenge2021(root)
    rejection = reject(dataset, "X0")
    assert rejection.check == "outside_root"
    assert rejection.detail == f"header 'X0.hea' resolves to {(outside / 'X0.hea').resolve()}, outside the dataset root {root}"
    assert [e.name for e in dataset.entries()] == ["A0", "A1", "A2"]


# 5. A full disk during prepare


def _no_leftovers(parent: Path, name: str) -> list[Path]:
    return [p for p in parent.iterdir() if p.name.startswith(f".{name}.")]


def test_a_full_disk_fails_with_enospc_naming_the_file_and_leaves_nothing_behind(tmp_path, monkeypatch):
    root = corpus(tmp_path / "corpus")

    def full(handle, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full, raising=False)
    with pytest.raises(OSError) as caught:
        prepare_cache(Challenge2021(root), CacheSpec(tmp_path / "cache", train_folds=range(1, 11)), progress=False)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename.endswith("signals-00000.npy")
    assert "cannot reserve" in str(caught.value) and "No space left on device" in str(caught.value)
    assert _no_leftovers(tmp_path, "cache") == [] and not (tmp_path / "cache").exists()


def test_a_full_disk_on_a_chunk_write_names_the_chunk(tmp_path, monkeypatch):
    root = corpus(tmp_path / "corpus")

    def full(file, array, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(np, "save", full)
    with pytest.raises(OSError, match=r"cannot write .*scratch-000000000\.npy: No space left on device") as caught:
        prepare_cache(Challenge2021(root), CacheSpec(tmp_path / "cache", train_folds=range(1, 11)), progress=False)
    assert caught.value.errno == errno.ENOSPC
    assert _no_leftovers(tmp_path, "cache") == []


# 13. Two prepares of one cache at once


def test_a_second_prepare_of_one_cache_is_refused_naming_the_first(tmp_path):
    root = corpus(tmp_path / "corpus")
    cache = tmp_path / "shared" / "cache"
    cache.parent.mkdir()
    hold = ("import sys, time\nfrom cyclejepa.lock import file_lock\nwith file_lock(sys.argv[1], 'x'):\n"
            "    print('held', flush=True)\n    time.sleep(60)\n")  # fmt: skip
    first = subprocess.Popen([sys.executable, "-c", hold, str(cache_lock(cache))], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})  # fmt: skip
    try:
        assert first.stdout.readline().strip() == "held"
        with pytest.raises(OutputLocked, match=rf"the cache {cache} is in use by pid {first.pid} on host .*wait for it to end"):
            prepare_cache(Challenge2021(root), CacheSpec(cache, train_folds=range(1, 11)), progress=False)
    finally:
        first.kill()
        first.wait()
    assert not cache.exists()
    prepare_cache(Challenge2021(root), CacheSpec(cache, train_folds=range(1, 11)), progress=False)  # the stale lock is taken over
    assert not cache_lock(cache).exists()


def test_a_rebuild_is_logged_once_and_a_shared_cache_is_reused_by_an_experiment_that_asks_the_same(tmp_path, caplog):
    cache = tmp_path / "shared"
    first = experiment(corpus(tmp_path / "one"), tmp_path / "r1", cache)
    pipeline.prepare(first, progress=False)
    strict = experiment(tmp_path / "one", tmp_path / "r1", cache, "data.amplitude_limits={mV: 50}")
    with caplog.at_level("INFO", logger="cyclejepa.data.cache.build"):
        pipeline.prepare(strict, progress=False)  # the same experiment with other settings: rebuilt
    assert [r.getMessage() for r in caplog.records].count(f"cache {cache} was built with other arguments; rebuilding") == 1
    same = experiment(tmp_path / "one", tmp_path / "r2", cache, "data.amplitude_limits={mV: 50}")
    assert pipeline.prepare(same, progress=False).path == cache  # another experiment, the same cache: reused
