"""The one sample reader (`cyclejepa.data.samples`) on the files of ../shared/data exactly as
released, against the wfdb package and scipy.io.loadmat; every storage format against the
values written; its refusals (FIFOs, unbounded files, MATLAB headers that disagree) and the
per-record rejections of prepare."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import tarfile
import zlib
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import wfdb
import yaml

from conftest import SAMPLES, SHARED
from cyclejepa.data.datasets import RecordRejected
from cyclejepa.data.samples import SampleError, read_matlab_variable, read_record, read_samples
from cyclejepa.data.wfdb_format import MAX_RECORD_SAMPLES, HeaderError

DATA = SHARED / "data"
CINC = DATA / "cinc2021-samples"
CPSC = DATA / "rpeak-dev" / "cpsc2021"
PTBXL_ARCHIVE = DATA / "ptbxl-dev" / "ptbxl-dev-434.tar.xz"
REPO = Path(__file__).resolve().parents[1]
needs_shared = pytest.mark.skipif(not (SAMPLES / "100.hea").is_file(), reason="../shared/data is absent")


def same_as_wfdb(path: Path) -> None:
    """Digital samples equal the package's exactly, each signal at its own rate; physical values
    equal to float rounding (NaN where missing); `read_record` equals ``wfdb.rdrecord``."""
    ours = read_samples(path)
    physical = wfdb.rdrecord(str(path), smooth_frames=False, return_res=64).e_p_signal
    assert len(ours.digital) == len(physical)
    if {s.format for s in ours.specs} != {61}:  # the package cannot return big-endian integers ("int(str(dtype)[3:])")
        digital = wfdb.rdrecord(str(path), physical=False, smooth_frames=False, return_res=64).e_d_signal
        for expected, found in zip(digital, ours.digital, strict=True):
            np.testing.assert_array_equal(found, expected)
    for i, expected in enumerate(physical):
        np.testing.assert_allclose(ours.physical(i), expected, rtol=1e-13, atol=0, equal_nan=True)
    record = read_record(path)
    np.testing.assert_allclose(record.signal, wfdb.rdrecord(str(path)).p_signal.T, rtol=1e-13, atol=0, equal_nan=True)


@needs_shared
@pytest.mark.parametrize("name", ["100", "a103l", "mixedsignals", "03700181", "v102s", "s0010_re"])
def test_physionet_samples_read_as_the_wfdb_package_reads_them(name):
    """212 (100, and skewed in 03700181), a MATLAB Level 4 .mat (a103l), the multi-rate FLAC
    mixedsignals (1, 2 and 4 samples per frame), 16 with ADC wraps (v102s)."""
    same_as_wfdb(SAMPLES / name)


@needs_shared
def test_multi_rate_channels_keep_their_own_rates():
    samples = read_samples(SAMPLES / "mixedsignals")
    rates = {spec.name: len(x) // samples.header.samples for spec, x in zip(samples.specs, samples.digital, strict=True)}
    assert sorted(set(rates.values())) == [1, 2, 4]


@pytest.mark.skipif(not CINC.is_dir(), reason="../shared/data/cinc2021-samples is absent")
@pytest.mark.parametrize("name", sorted(path.stem for path in CINC.glob("*.hea")))
def test_the_cinc2021_release_reads_as_loadmat_and_wfdb_read_it(name):
    """Each of the six real Challenge 2021 records (MATLAB Level 4, type code 30): the stored int16
    matrix equals scipy.io.loadmat's ``val``, the samples the wfdb package's."""
    assert (CINC / f"{name}.mat").read_bytes()[:4] == (30).to_bytes(4, "little")  # Level 4, int16
    samples = read_samples(CINC / name)
    np.testing.assert_array_equal(np.stack(samples.digital), scipy.io.loadmat(CINC / f"{name}.mat")["val"])
    same_as_wfdb(CINC / name)


@pytest.mark.skipif(not CPSC.is_dir(), reason="../shared/data/rpeak-dev is absent")
def test_the_rpeak_sets_read_as_wfdb_reads_them():
    for header in sorted(CPSC.glob("*.hea"))[:4]:
        same_as_wfdb(header.with_suffix(""))


def test_a_plain_matlab_variable_is_read_and_a_missing_one_named(tmp_path):
    """A MATLAB file without a WFDB header (the CPSC 2019 layout: ``ecg`` in mV) reads as written;
    a variable it lacks is a KeyError naming the file and the variable."""
    ecg = np.linspace(-1.0, 2.0, 50)[:, None]
    scipy.io.savemat(tmp_path / "data_00001.mat", {"ecg": ecg})
    np.testing.assert_array_equal(read_matlab_variable(tmp_path / "data_00001.mat", "ecg"), ecg)
    with pytest.raises(KeyError, match="data_00001.mat holds no MATLAB variable 'R_peak'"):
        read_matlab_variable(tmp_path / "data_00001.mat", "R_peak")


pytestmark = pytest.mark.xdist_group("samples")  # one worker builds the module's fixtures (`--dist loadgroup`)


@pytest.fixture(scope="module")
def ptbxl_records(tmp_path_factory) -> list[Path]:
    """Five real PTB-XL records, taken from the shared archive as released."""
    if not PTBXL_ARCHIVE.is_file():
        pytest.skip("../shared/data/ptbxl-dev is absent")
    folder, found = tmp_path_factory.mktemp("ptbxl"), {}
    with tarfile.open(PTBXL_ARCHIVE) as archive:
        for member in archive:
            if member.name.endswith(("_hr.hea", "_hr.dat")):
                (folder / Path(member.name).name).write_bytes(archive.extractfile(member).read())
                found[Path(member.name).stem] = found.get(Path(member.name).stem, 0) + 1
                if sum(n == 2 for n in found.values()) == 5:
                    break
    return [folder / stem for stem, n in found.items() if n == 2]


def test_real_ptbxl_records_read_as_wfdb_reads_them(ptbxl_records):
    from cyclejepa.data.ptbxl import read_verified

    assert len(ptbxl_records) == 5
    for path in ptbxl_records:
        same_as_wfdb(path)
        expected = wfdb.rdrecord(str(path)).p_signal.T.astype(np.float32)
        np.testing.assert_array_equal(read_verified(path), expected)


# ------------------------------------------------------------------ every format against the values written


FORMATS = ["8", "16", "24", "32", "61", "80", "160", "212", "310", "311"]
RANGES = {"8": 100, "16": 32767, "24": 2**23 - 1, "32": 2**31 - 1, "61": 32767, "80": 127, "160": 32767, "212": 2047,
          "310": 511, "311": 511}  # fmt: skip


def encode(fmt: str, flat: np.ndarray) -> bytes:
    """Stored values (frame after frame) as the bytes of format ``fmt`` (signal(5)), written here
    independently of the reader; 212, 310 and 311 padded to whole blocks."""
    if fmt in ("16", "61", "32"):
        return flat.astype({"16": "<i2", "61": ">i2", "32": "<i4"}[fmt]).tobytes()
    if fmt in ("160", "80"):
        return (flat + {"160": 32768, "80": 128}[fmt]).astype({"160": "<u2", "80": "u1"}[fmt]).tobytes()
    if fmt in ("8", "24"):
        width = {"8": 1, "24": 3}[fmt]
        return b"".join(int(v).to_bytes(width, "little", signed=True) for v in flat)
    block = 2 if fmt == "212" else 3
    u = np.concatenate([flat, np.zeros(-len(flat) % block, np.int64)]).reshape(-1, block) & (0xFFF if fmt == "212" else 0x3FF)
    if fmt == "212":
        out = [u[:, 0] & 0xFF, (u[:, 0] >> 8) | ((u[:, 1] >> 8) << 4), u[:, 1] & 0xFF]
    elif fmt == "310":
        out = [(u[:, 0] & 0x7F) << 1, ((u[:, 0] >> 7) & 0x07) | ((u[:, 2] & 0x1F) << 3), (u[:, 1] & 0x7F) << 1,
               ((u[:, 1] >> 7) & 0x07) | (((u[:, 2] >> 5) & 0x1F) << 3)]  # fmt: skip
    else:  # 311
        out = [u[:, 0] & 0xFF, ((u[:, 0] >> 8) & 0x03) | ((u[:, 1] & 0x3F) << 2),
               ((u[:, 1] >> 6) & 0x0F) | ((u[:, 2] & 0x0F) << 4), (u[:, 2] >> 4) & 0x3F]  # fmt: skip
    return np.stack(out, axis=1).astype(np.uint8).tobytes()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("spf", [(1, 1), (2, 1, 3)], ids=["one-per-frame", "multi-rate"])
def test_every_format_reads_the_values_written(tmp_path, fmt, spf):
    """Stored values over the whole range (the invalid value first, except in format 8, whose
    samples are differences from the initial value) written frame by frame, read back exactly, at
    each signal's own rate; the physical values the wfdb package's, NaN at the invalid value."""
    rng = np.random.default_rng(int(fmt))
    frames, top = 301, RANGES[fmt]
    if fmt == "8":  # steps that fit a byte from a start value
        written = [np.cumsum(rng.integers(-top, top, n * frames)) + 17 for n in spf]
        stored = [np.diff(w, prepend=w[0]) for w in written]  # the first difference from the initial value w[0]
    else:
        written = [np.concatenate([[-top - 1, top, 0], rng.integers(-top - 1, top + 1, n * frames - 3)]) for n in spf]
        stored = written
    flat = np.concatenate([np.concatenate([x[f * n : (f + 1) * n] for x, n in zip(stored, spf, strict=True)])
                           for f in range(frames)])  # fmt: skip
    (tmp_path / "r.dat").write_bytes(encode(fmt, flat))
    lines = [
        f"r.dat {fmt}x{n} {100 + i}({i - 1})/mV 0 0 {int(w[0])} 0 0 S{i}"
        for i, (n, w) in enumerate(zip(spf, written, strict=True))
    ]
    (tmp_path / "r.hea").write_text(f"r {len(spf)} 250 {frames}\n" + "\n".join(lines) + "\n")
    samples = read_samples(tmp_path / "r")
    for found, values in zip(samples.digital, written, strict=True):
        np.testing.assert_array_equal(found, values)
    same_as_wfdb(tmp_path / "r")
    if fmt != "8":
        assert np.isnan(samples.physical(0)[0]) and np.isfinite(samples.physical(0)[1:3]).all()


def test_a_byte_offset_is_skipped(tmp_path):
    values = np.arange(-50, 50, dtype=np.int16).reshape(50, 2)
    (tmp_path / "r.dat").write_bytes(b"\x7f" * 24 + values.astype("<i2").tobytes())
    (tmp_path / "r.hea").write_text("r 2 100 50\nr.dat 16+24 10/mV 16 0 0 0 0 A\nr.dat 16+24 10/mV 16 0 0 0 0 B\n")
    samples = read_samples(tmp_path / "r")
    np.testing.assert_array_equal(np.stack(samples.digital), values.T)
    same_as_wfdb(tmp_path / "r")


# ------------------------------------------------------------------ MATLAB files: their own header bytes first


def _copy_cinc(tmp_path: Path, name: str = "E07518") -> Path:
    for suffix in (".hea", ".mat"):
        shutil.copyfile(CINC / f"{name}{suffix}", tmp_path / f"{name}{suffix}")
    return tmp_path / name


@pytest.mark.skipif(not CINC.is_dir(), reason="../shared/data/cinc2021-samples is absent")
@pytest.mark.parametrize(("offset", "value", "check", "message"), [
    (0, 0, "format", "type code 0"),  # Level 4 double, not the int16 of format 16
    (0, 20, "format", "type code 20"),  # int32
    (4, 11, "extent", "stores a 11 x 5000 matrix"),  # rows
    (8, 4999, "extent", "stores a 12 x 4999 matrix"),  # columns
    (16, 5, "format", "starts at byte 25"),  # name length: the data moves
])  # fmt: skip
def test_a_level4_header_that_disagrees_with_the_wfdb_header_is_refused(tmp_path, offset, value, check, message):
    path = _copy_cinc(tmp_path)
    data = bytearray(path.with_suffix(".mat").read_bytes())
    data[offset : offset + 4] = value.to_bytes(4, "little")
    path.with_suffix(".mat").write_bytes(bytes(data))
    with pytest.raises(SampleError, match=message) as caught:
        read_samples(path)
    assert caught.value.check == check


@pytest.mark.parametrize("compress", [True, False])
def test_a_level5_file_is_read_and_checked(tmp_path, compress):
    values = np.arange(-600, 600, dtype=np.int16).reshape(2, 600)
    scipy.io.savemat(tmp_path / "r.mat", {"other": np.ones(3), "val": values}, do_compression=compress)
    (tmp_path / "r.hea").write_text("r 2 100 600\nr.mat 16 10/mV 16 0 0 0 0 A\nr.mat 16 10/mV 16 0 0 0 0 B\n")
    np.testing.assert_array_equal(np.stack(read_samples(tmp_path / "r").digital), values)
    scipy.io.savemat(tmp_path / "r.mat", {"val": values.astype(np.float64)}, do_compression=compress)
    with pytest.raises(SampleError, match="stores 'val' as double, the header's format 16 as int16"):
        read_samples(tmp_path / "r")
    scipy.io.savemat(tmp_path / "r.mat", {"val": values[:, :500]}, do_compression=compress)
    with pytest.raises(SampleError, match=r"declares 'val' of shape \(2, 500\)"):
        read_samples(tmp_path / "r")


def _level5(matrix: bytes) -> bytes:
    """A Level 5 file of one compressed element: the 128-byte header, then ``matrix`` deflated."""
    head = b"MATLAB 5.0 MAT-file".ljust(124, b" ") + (0x0100).to_bytes(2, "little") + b"IM"
    packed = zlib.compress(matrix)
    return head + (15).to_bytes(4, "little") + len(packed).to_bytes(4, "little") + packed


def _matrix(data_type: int, data_bytes: int, payload: bytes) -> bytes:
    """A miMATRIX element of class int16, dimensions 2 x 600, name ``val``, with a data tag of
    ``data_type`` and ``data_bytes`` followed by ``payload``."""
    body = struct.pack("<II", 6, 8) + struct.pack("<II", 10, 0)  # array flags: class int16
    body += struct.pack("<II", 5, 8) + struct.pack("<ii", 2, 600)  # dimensions
    body += struct.pack("<HH", 1, 3) + b"val\0"  # name, a small element
    body += struct.pack("<II", data_type, data_bytes) + payload
    return struct.pack("<II", 14, len(body)) + body


def test_a_level5_matrix_inflates_no_more_than_it_declares(tmp_path, monkeypatch):
    """A compressed matrix whose data tag claims 400 MB, and one whose stream holds 100 MB more than
    its 2 x 600 int16: the first refused from its tag, the second read without inflating the rest."""
    (tmp_path / "r.hea").write_text("r 2 100 600\nr.mat 16 10/mV 16 0 0 0 0 A\nr.mat 16 10/mV 16 0 0 0 0 B\n")
    (tmp_path / "r.mat").write_bytes(_level5(_matrix(3, 400_000_000, bytes(4096))))
    with pytest.raises(SampleError, match="holds 400000000 bytes of data type 3") as caught:
        read_samples(tmp_path / "r")
    assert caught.value.check == "extent"
    values = np.arange(1200, dtype="<i2")
    (tmp_path / "r.mat").write_bytes(_level5(_matrix(3, 2400, values.tobytes() + bytes(100_000_000))))
    inflated = []
    decompressobj = zlib.decompressobj

    def counting():
        inflater = decompressobj()

        class Counting:
            unconsumed_tail = property(lambda self: inflater.unconsumed_tail)

            def decompress(self, data, limit):
                out = inflater.decompress(data, limit)
                inflated.append(len(out))
                return out

        return Counting()

    monkeypatch.setattr(zlib, "decompressobj", counting)
    np.testing.assert_array_equal(np.stack(read_samples(tmp_path / "r").digital), values.reshape(600, 2).T)
    assert sum(inflated) < 10_000


# ------------------------------------------------------------------ refusals before any read


@pytest.fixture
def alarm():
    """Fails a test whose reader blocks (opening a FIFO waits for a writer) instead of hanging."""

    def stuck(*_):
        raise TimeoutError("the reader blocked")

    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(5)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_a_fifo_named_as_a_header_or_signal_file_is_refused_at_once(tmp_path, alarm):
    from cyclejepa.data.wfdb_folder import WfdbFolder

    os.mkfifo(tmp_path / "x.hea")
    with pytest.raises(HeaderError, match="not a regular file"):
        read_record(tmp_path / "x")
    os.mkfifo(tmp_path / "y.dat")
    (tmp_path / "y.hea").write_text("y 1 100 10\ny.dat 16 10/mV 16 0 0 0 0 PLETH\n")
    with pytest.raises(SampleError, match="not a regular file"):
        read_record(tmp_path / "y")
    dataset = WfdbFolder(tmp_path, channels=["PLETH"])
    assert len(dataset.fingerprint()["headers_sha256"]) == 64  # the cache identity hashes headers: never opens x.hea
    assert [(r.record_id, r.check) for r in dataset.rejected()] == [("x", "unreadable")]
    with pytest.raises(RecordRejected, match="not a regular file") as caught:
        dataset.read(dataset.entries()[0])
    assert caught.value.record_id == "y"


def test_a_header_without_a_sample_count_is_bounded_by_its_file_before_any_read(tmp_path, monkeypatch):
    """The wfdb folder reader too (it once skipped the bound and took 20 GB): a sparse file of
    2 x (cap + 2) bytes under a header with no sample count is refused, nothing decoded."""
    from cyclejepa.data import samples as module
    from cyclejepa.data.wfdb_folder import WfdbFolder

    with open(tmp_path / "r.dat", "wb") as stream:  # sparse: no block is written
        stream.truncate(2 * (MAX_RECORD_SAMPLES + 2))
    (tmp_path / "r.hea").write_text("r 1 125\nr.dat 16 200/NU 16 0 0 0 0 PLETH\n")
    monkeypatch.setattr(module, "_decode", lambda *a: pytest.fail("samples were decoded"))
    monkeypatch.setattr(wfdb, "rdrecord", lambda *a, **k: pytest.fail("the wfdb package read samples"))
    dataset = WfdbFolder(tmp_path, channels=["PLETH"])
    with pytest.raises(RecordRejected, match=f"hold {MAX_RECORD_SAMPLES + 2} samples, more than") as caught:
        dataset.read(dataset.entries()[0])
    assert caught.value.record_id == "r"


# ------------------------------------------------------------------ prepare: named rejections, the batch goes on


def _write_folder(root: Path, names: list[str]) -> None:
    rng = np.random.default_rng(0)
    t = np.arange(125 * 40) / 125
    for k, name in enumerate(names):
        pleth = np.sin(2 * np.pi * (1.1 + 0.1 * k) * t) ** 2 + 0.01 * rng.normal(size=t.size)
        wfdb.wrsamp(name, fs=125, units=["NU"], sig_name=["PLETH"], p_signal=pleth[:, None], fmt=["16"], write_dir=str(root))


def _config(tmp_path: Path, data: dict) -> Path:
    raw = yaml.safe_load((REPO / "examples" / "ppg.yaml").read_text())
    raw["data"] = {**data, "workers": 1}
    raw["output_dir"] = str(tmp_path / "run")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_memory_error_while_preparing_one_record_rejects_it_by_name(tmp_path, monkeypatch):
    from cyclejepa import pipeline
    from cyclejepa.config import load_config
    from cyclejepa.data import wfdb_folder

    root = tmp_path / "corpus"
    root.mkdir()
    _write_folder(root, ["a", "b", "c", "d"])
    (root / "d.dat").write_bytes((root / "d.dat").read_bytes()[:100])  # truncated: a read-time rejection
    read = wfdb_folder.WfdbFolder._read

    def exploding(self, path, name):  # what numpy raises when an allocation fails, while reading record b
        if name == "b":
            raise np.core._exceptions._ArrayMemoryError((6_500_000_000,), np.dtype(np.uint8))
        return read(self, path, name)

    monkeypatch.setattr(wfdb_folder.WfdbFolder, "_read", exploding)
    cfg = load_config(_config(tmp_path, {"dataset": "wfdb", "root": str(root), "options": {"channels": ["PLETH"]}}))
    cache = pipeline.prepare(cfg, progress=False)
    assert {(r.record_id, r.check) for r in cache.rejections} == {("b", "memory"), ("d", "extent")}
    assert sorted(set(cache.columns["record"])) == ["a", "c"]
