"""The WFDB header reader against the wfdb package's own parser, on real headers and on every
format-field form of the specification; the record reader's refusals."""

from pathlib import Path

import numpy as np
import pytest

from cyclejepa.data.wfdb_format import HeaderError, parse_header, read_header, read_record

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
REAL_HEADERS = (
    sorted((SHARED / "physionet-samples").glob("*.hea")) + sorted((SHARED / "rpeak-dev" / "cpsc2021").glob("*.hea"))[:4]
)

CHALLENGE_2021 = """E07500 12 500 5000 05-Feb-2020 11:39:16
E07500.mat 16x1+24 1000.0(0)/mV 16 0 -68 1250 0 I
E07500.mat 16x1+24 1000.0(0)/mV 16 0 -56 -1062 0 II
E07500.mat 16x1+24 1000.0(0)/mV 16 0 12 2062 0 III
E07500.mat 16x1+24 1000.0(0)/mV 16 0 62 -183 0 aVR
E07500.mat 16x1+24 1000.0(0)/mV 16 0 -40 1597 0 aVL
E07500.mat 16x1+24 1000.0(0)/mV 16 0 -22 -1595 0 aVF
E07500.mat 16x1+24 1000.0(0)/mV 16 0 23 -13 0 V1
E07500.mat 16x1+24 1000.0(0)/mV 16 0 -41 -1433 0 V2
E07500.mat 16x1+24 1000.0(0)/mV 16 0 -53 -2024 0 V3
E07500.mat 16x1+24 1000.0(0)/mV 16 0 -56 -1898 0 V4
E07500.mat 16x1+24 1000.0(0)/mV 16 0 -58 1736 0 V5
E07500.mat 16x1+24 1000.0(0)/mV 16 0 -58 -2029 0 V6
# Age: 53
# Sex: Male
# Dx: 164889003,59118001
# Rx: Unknown
"""

FORMAT_FIELDS = ["16", "16x1", "16+24", "16x1+24", "16:0", "16x1:0+24", "212", "16x4", "80:3"]


def reference(path: Path) -> dict:
    """The wfdb package's reading of a header, in our field names."""
    import wfdb

    h = wfdb.rdheader(str(path.with_suffix("")))
    n = h.n_sig
    return {
        "record": h.record_name, "fs": float(h.fs), "samples": h.sig_len, "n_signals": n,
        "file": list(h.file_name), "format": [int(f) for f in h.fmt], "samples_per_frame": list(h.samps_per_frame),
        "skew": [s or 0 for s in h.skew], "byte_offset": [o or 0 for o in h.byte_offset],
        "gain": [float(g) for g in h.adc_gain], "baseline": list(h.baseline), "units": list(h.units),
        "adc_resolution": list(h.adc_res), "adc_zero": list(h.adc_zero), "initial_value": list(h.init_value),
        "checksum": list(h.checksum), "block_size": list(h.block_size), "name": list(h.sig_name),
    }  # fmt: skip


def ours(path: Path) -> dict:
    h = read_header(path)
    fields = ["file", "format", "samples_per_frame", "skew", "byte_offset", "gain", "baseline", "units",
              "adc_resolution", "adc_zero", "initial_value", "checksum", "block_size", "name"]  # fmt: skip
    return {"record": h.record, "fs": h.fs, "samples": h.samples, "n_signals": h.n_signals,
            **{f: [getattr(s, f) for s in h.signals] for f in fields}}  # fmt: skip


@pytest.mark.skipif(not REAL_HEADERS, reason="../shared is absent")
@pytest.mark.parametrize("path", REAL_HEADERS, ids=lambda p: p.name)
def test_real_headers_read_as_the_wfdb_package_reads_them(path):
    assert ours(path) == reference(path)


@pytest.mark.parametrize("field", FORMAT_FIELDS)
def test_every_format_field_form_reads_as_the_wfdb_package_reads_it(tmp_path, field):
    text = CHALLENGE_2021.replace("16x1+24", field)
    path = tmp_path / "E07500.hea"
    path.write_text(text)
    assert ours(path) == reference(path)


def test_the_real_challenge_line():
    header = parse_header(CHALLENGE_2021)
    first = header.signals[0]
    assert (first.format, first.samples_per_frame, first.byte_offset, first.gain, first.baseline) == (16, 1, 24, 1000.0, 0)
    assert header.names[:3] == ("I", "II", "III") and header.comment("dx") == "164889003,59118001"
    assert (header.fs, header.samples, first.checksum, first.initial_value) == (500.0, 5000, 1250, -68)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no record line"),
        ("r 2 500 10\nr.dat 16 200/mV 12 0 0 0 0 I\n", "declares 2 signals but the header has 1"),
        ("r 1 500 10\nr.dat 17 200/mV\n", "format 17 is not a WFDB storage format"),
        ("r 1 500 10\nr.dat 16y1\n", "format field '16y1'"),
        ("r 1 fast 10\nr.dat 16\n", "sampling frequency 'fast'"),
        ("r 1 500 10\nr.dat 16 200/mV 12 0 0 " + "9" * 5000 + " 0 I\n", "checksum '9999"),
        ("r 1 500 10\nr.dat 16x0\n", "samples per frame must be at least 1"),
        ("r/3 1 500 10\nr.dat 16\n", "multi-segment"),
    ],
)
def test_malformed_headers_name_the_line_and_field(text, message):
    with pytest.raises(HeaderError, match=message):
        parse_header(text)


def test_read_record_refuses_a_signal_file_outside_its_folder_and_huge_declarations(tmp_path):
    folder = tmp_path / "records"
    folder.mkdir()
    (tmp_path / "secret.dat").write_bytes(np.zeros(20, "<i2").tobytes())
    (folder / "r.hea").write_text("r 1 500 20\n../secret.dat 16 200/mV 16 0 0 0 0 I\n")
    with pytest.raises(HeaderError, match="outside"):
        read_record(folder / "r")
    (folder / "big.hea").write_text(
        "big 12 500 100000000\nbig.dat 16 200/mV 16 0 0 0 0 I\n" * 1
        + "".join(f"big.dat 16 200/mV 16 0 0 0 0 L{i}\n" for i in range(11))
    )
    with pytest.raises(HeaderError, match="declares 1200000000 samples"):
        read_record(folder / "big")
    with pytest.raises(FileNotFoundError, match="not found"):
        read_record(folder / "missing")


@pytest.mark.skipif(not (SHARED / "physionet-samples" / "100.hea").exists(), reason="../shared is absent")
def test_read_record_equals_the_wfdb_package_on_a_real_record():
    import wfdb

    path = SHARED / "physionet-samples" / "100"
    record = read_record(path)
    expected = wfdb.rdrecord(str(path))
    np.testing.assert_array_equal(record.signal, expected.p_signal.T)
    assert (record.fs, record.names, record.units) == (360.0, ("MLII", "V5"), (None, None))  # its header states no unit
    assert read_record(SHARED / "physionet-samples" / "v102s").units == ("mV", "mV", "NU", "NU")


def test_a_unit_the_header_does_not_state_is_marked_so():
    from cyclejepa.data.wfdb_format import parse_header

    stated, unstated, no_gain = parse_header(
        "r 3 250 10\nr.dat 16 200/NU 16 0 0 0 0 PLETH\nr.dat 16 200 16 0 0 0 0 RESP\nr.dat 16"
    ).signals
    assert (stated.units, stated.units_stated) == ("NU", True)
    assert (unstated.units, unstated.units_stated) == ("mV", False) == (no_gain.units, no_gain.units_stated)  # the default


# ------------------------------------------------------------------ one digital-to-physical conversion


@pytest.mark.skipif(not (SHARED / "physionet-samples" / "v102s.hea").exists(), reason="../shared is absent")
@pytest.mark.parametrize("name", ["v102s", "03700181", "a103l", "mixedsignals"])
def test_to_physical_equals_the_wfdb_package_on_real_records(name):
    """Formats 212, 16 and 516 (FLAC), baselines and gains as the real headers state them: every
    valid sample equals the wfdb package's own physical value, bit for bit."""
    import wfdb

    from cyclejepa.data.wfdb_format import to_physical

    path = SHARED / "physionet-samples" / name
    signals = read_header(path).signals
    stored = wfdb.rdrecord(str(path), physical=False, return_res=64).d_signal.T
    expected = wfdb.rdrecord(str(path)).p_signal.T
    valid = np.isfinite(expected)  # the package marks the invalid sample value NaN
    assert valid.mean() > 0.9
    found = to_physical(stored, [s.gain for s in signals], [s.baseline for s in signals])
    np.testing.assert_array_equal(found[valid], expected[valid])
    scaled = to_physical(stored, [s.gain for s in signals], [s.baseline for s in signals], factor=[1e-3] * len(signals))
    np.testing.assert_array_equal(scaled, found * 1e-3)


PTBXL_ARCHIVE = SHARED / "ptbxl-dev" / "ptbxl-dev-434.tar.xz"


@pytest.mark.skipif(not PTBXL_ARCHIVE.is_file(), reason="../shared is absent")
def test_every_reader_gives_the_same_samples_of_a_real_ptbxl_record(tmp_path):
    """PTB-XL's fast path, its verified path and the Challenge reader (the same record with a
    ``# Dx`` comment, as the Challenge writes it) read three real records to the wfdb package's
    physical values rounded once to float32."""
    import tarfile

    import wfdb

    from cyclejepa.data.challenge import Challenge2021
    from cyclejepa.data.ptbxl import read_record_fast, read_verified

    wanted = {f"ptbxl-dev/records500/00000/{i:05d}_hr.{ext}" for i in (1, 2, 3) for ext in ("hea", "dat")}
    with tarfile.open(PTBXL_ARCHIVE) as archive:
        for member in archive:
            if member.name in wanted:
                (tmp_path / Path(member.name).name).write_bytes(archive.extractfile(member).read())
                wanted.discard(member.name)
                if not wanted:
                    break
    challenge = tmp_path / "challenge" / "g1"
    challenge.mkdir(parents=True)
    for dat in sorted(tmp_path.glob("*.dat")):
        (challenge / dat.name).write_bytes(dat.read_bytes())
        (challenge / dat.with_suffix(".hea").name).write_text(
            dat.with_suffix(".hea").read_text().rstrip("\n") + "\n# Dx: 426783006\n"
        )
    dataset = Challenge2021(tmp_path / "challenge")
    entries = {Path(e.name).name: e for e in dataset.entries()}
    assert sorted(entries) == ["00001_hr", "00002_hr", "00003_hr"]
    for name, entry in entries.items():
        expected = wfdb.rdrecord(str(tmp_path / name)).p_signal.T.astype(np.float32)
        assert np.abs(expected).max() > 0.1  # a real ECG in mV
        for signal in (read_record_fast(tmp_path / name), read_verified(tmp_path / name), dataset.read(entry).signal):
            assert signal.dtype == np.float32
            np.testing.assert_array_equal(signal, expected)
