"""PTB-XL reader: verification checks, physical units, labels, dataset root errors, download."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cyclejepa.data import ptbxl
from cyclejepa.data.ptbxl import (
    LEADS,
    PTBXL,
    SUBCLASSES,
    PTBXLNotFound,
    DownloadFailed,
    RecordRejected,
    checksum16,
    diagnostic_labels,
    diagnostic_map,
    eligible_subclasses,
    parse_scp_codes,
    read_ptbxl_record,
    read_verified,
)

from conftest import SHARED

wfdb = pytest.importorskip("wfdb")

# Real rows of PTB-XL 1.0.3's scp_statements.csv (columns trimmed to those the reader uses).
STATEMENTS = """,description,diagnostic,form,rhythm,diagnostic_class,diagnostic_subclass
NDT,non-diagnostic T abnormalities,1.0,1.0,,STTC,STTC
NST_,non-specific ST changes,1.0,1.0,,STTC,NST_
LAFB,left anterior fascicular block,1.0,,,CD,LAFB/LPFB
IMI,inferior myocardial infarction,1.0,,,MI,IMI
ASMI,anteroseptal myocardial infarction,1.0,,,MI,AMI
NORM,normal ECG,1.0,,,NORM,NORM
LVH,left ventricular hypertrophy,1.0,,,HYP,LVH
SR,sinus rhythm,,,1.0,,
LVOLT,low QRS voltages in the frontal and horizontal leads,,1.0,,,
"""


def write_record(folder: Path, name: str, digital: np.ndarray | None = None, **fields) -> Path:
    """A WFDB format-16 record (12 x 5000 unless ``digital`` says otherwise); returns its path."""
    rng = np.random.default_rng(len(name))
    digital = rng.integers(-2000, 2000, (5000, 12)) if digital is None else digital
    n_sig = digital.shape[1]
    header = {"fs": 500, "units": ["mV"] * n_sig, "sig_name": list(LEADS)[:n_sig],
              "adc_gain": [1000.0] * n_sig, "baseline": [0] * n_sig}  # fmt: skip
    header.update(fields)
    folder.mkdir(parents=True, exist_ok=True)
    wfdb.wrsamp(name, d_signal=digital.astype(np.int64), fmt=["16"] * n_sig,
                write_dir=str(folder), **header)  # fmt: skip
    return folder / name


def write_root(root: Path, scp_codes: list[dict], folds: list[int]) -> Path:
    """A PTB-XL-layout folder with one record per scp_codes entry."""
    rows = []
    for ecg_id, (codes, fold) in enumerate(zip(scp_codes, folds, strict=True), start=1):
        name = f"records500/00000/{ecg_id:05d}_hr"
        write_record(root / "records500" / "00000", f"{ecg_id:05d}_hr")
        rows.append({"ecg_id": ecg_id, "patient_id": 10.0 + ecg_id, "age": 50.0, "sex": 1,
                     "scp_codes": str(codes), "strat_fold": fold,
                     "filename_lr": name.replace("500", "100").replace("_hr", "_lr"),
                     "filename_hr": name})  # fmt: skip
    pd.DataFrame(rows).to_csv(root / "ptbxl_database.csv", index=False)
    (root / "scp_statements.csv").write_text(STATEMENTS)
    return root


def edit_header(path: Path, edit) -> None:
    hea = path.with_suffix(".hea")
    hea.write_text(edit(hea.read_text()))


def rejection(path: Path) -> RecordRejected:
    with pytest.raises(RecordRejected) as caught:
        read_verified(path, record_id=42)
    assert caught.value.record_id == 42
    return caught.value


# ---------------------------------------------------------------------------------- reading


def test_checksum16_matches_real_physionet_header(physionet_samples):
    """Our checksum reproduces the checksums PhysioNet stored in a real record's header."""
    path = str(physionet_samples / "s0010_re")
    header = wfdb.rdheader(path)
    digital = wfdb.rdrecord(path, physical=False).d_signal
    np.testing.assert_array_equal(checksum16(digital), np.mod(header.checksum, 65536))


def test_physical_units_float32_against_float64_reference(tmp_path):
    rng = np.random.default_rng(1)
    digital = rng.integers(-30000, 30000, (5000, 12))
    gains = rng.uniform(100, 500, 12).round(1)
    path = write_record(tmp_path, "uv", digital, units=["uV"] * 12, adc_gain=list(gains),
                        baseline=list(range(-6, 6)))  # fmt: skip
    signal = read_verified(path)
    expected = (digital - np.arange(-6, 6)) / gains * 1e-3  # µV -> mV
    assert signal.dtype == np.float32 and signal.shape == (12, 5000)
    np.testing.assert_allclose(signal, expected.T, rtol=1e-7, atol=0)


def test_lead_names_are_compared_case_insensitively(tmp_path):
    path = write_record(tmp_path, "lower", sig_name=[lead.lower() for lead in LEADS])
    assert read_verified(path).shape == (12, 5000)


def _flip_byte(path):
    dat = path.with_suffix(".dat")
    data = bytearray(dat.read_bytes())
    data[1001] ^= 0xFF
    dat.write_bytes(bytes(data))


def _truncate(path):
    dat = path.with_suffix(".dat")
    dat.write_bytes(dat.read_bytes()[:-240])


def _swap_v1_v2(text):
    return text.replace(" V1\n", " TMP\n").replace(" V2\n", " V1\n").replace(" TMP\n", " V2\n")


def _invalid_samples(path):
    """Rewrite the record with lead aVR partly -32768 (WFDB "no sample"), checksums consistent."""
    record = wfdb.rdrecord(str(path), physical=False)
    digital = record.d_signal.copy()
    digital[100:200, 3] = -32768
    wfdb.wrsamp(path.name, fs=record.fs, units=record.units, sig_name=record.sig_name,
                d_signal=digital, fmt=record.fmt, adc_gain=record.adc_gain,
                baseline=record.baseline, write_dir=str(path.parent))  # fmt: skip


CORRUPTIONS = {
    "non_finite": _invalid_samples,
    "checksum": _flip_byte,
    "sampling_rate": lambda p: edit_header(p, lambda t: t.replace(" 12 500 5000", " 12 250 5000", 1)),
    "lead_order": lambda p: edit_header(p, _swap_v1_v2),
    "extent": _truncate,
    "unreadable": lambda p: p.with_suffix(".hea").write_text("garbage\n"),
}


@pytest.mark.parametrize("check", sorted(CORRUPTIONS))
def test_corrupted_record_is_rejected_with_its_check(tmp_path, check):
    path = write_record(tmp_path, "rec")
    read_verified(path)  # intact first
    CORRUPTIONS[check](path)
    found = rejection(path)
    assert found.check == check
    if check == "non_finite":
        assert "aVR" in found.detail


def test_header_extent_and_calibration_are_checked(tmp_path):
    short = np.zeros((4000, 12), dtype=np.int64)
    assert rejection(write_record(tmp_path, "short", short)).check == "extent"
    eleven = np.zeros((5000, 11), dtype=np.int64)
    assert rejection(write_record(tmp_path, "eleven", eleven)).check == "extent"
    assert rejection(write_record(tmp_path, "mmhg", units=["mmHg"] * 12)).check == "calibration"


def test_rejection_survives_pickling():
    import pickle

    error = pickle.loads(pickle.dumps(RecordRejected(7, "checksum", "lead I")))
    assert (error.record_id, error.check, error.detail) == (7, "checksum", "lead I")


# ----------------------------------------------------------------------------- dataset root


def test_missing_root_says_where_and_how_to_download(tmp_path, monkeypatch):
    missing = tmp_path / "nowhere"
    dataset = PTBXL(missing)  # building reads nothing; the root is looked up when needed
    with pytest.raises(PTBXLNotFound) as caught:
        dataset.fetch()
    message = str(caught.value)
    assert str(missing) in message and "download" in message and "CYCLEJEPA_PTBXL" in message
    monkeypatch.delenv("CYCLEJEPA_PTBXL", raising=False)
    with pytest.raises(PTBXLNotFound, match="CYCLEJEPA_PTBXL"):
        PTBXL(None).entries()
    (tmp_path / "ptbxl_database.csv").write_text("ecg_id\n")
    with pytest.raises(PTBXLNotFound, match="scp_statements.csv"):
        _ = PTBXL(tmp_path).root


def test_root_from_environment_and_record_lookup(tmp_path, monkeypatch):
    root = write_root(tmp_path, [{"NORM": 100.0}, {"IMI": 15.0}], folds=[1, 9])
    monkeypatch.setenv("CYCLEJEPA_PTBXL", str(root))
    by_id = read_ptbxl_record(None, 2)
    by_name = read_ptbxl_record(root, "records500/00000/00002_hr")
    np.testing.assert_array_equal(by_id, by_name)
    with pytest.raises(KeyError, match="ecg_id 3"):
        PTBXL().read_id(3)


# --------------------------------------------------------------------------------- labels


def test_scp_codes_map_to_super_and_subclasses(tmp_path):
    codes = "{'IMI': 15.0, 'LAFB': 0.0, 'NDT': 100.0, 'SR': 0.0, 'LVOLT': 0.0}"
    statements = pd.read_csv(pd.io.common.StringIO(STATEMENTS), index_col=0)
    diagnostic = diagnostic_map(statements)
    superclasses, subclasses = diagnostic_labels(parse_scp_codes(codes), diagnostic)
    assert superclasses == {"MI", "CD", "STTC"}  # likelihood 0 counts; rhythm/form do not
    assert subclasses == {"IMI", "LAFB/LPFB", "STTC"}

    root = write_root(tmp_path, [parse_scp_codes(codes), {"SR": 0.0}, {"NORM": 100.0}], [1, 1, 9])
    meta = PTBXL(root).metadata
    row = meta.iloc[0]
    assert [c for c in ("NORM", "MI", "STTC", "CD", "HYP") if row[f"super_{c}"]] == ["MI", "STTC", "CD"]
    assert {c for c in SUBCLASSES if row[f"sub_{c}"]} == {"IMI", "LAFB/LPFB", "STTC"}
    assert meta.filter(like="super_").iloc[1].sum() == 0  # rhythm only: unlabeled
    assert list(meta["fold"]) == [1, 1, 9] and meta["patient_id"].tolist() == [11, 12, 13]


def test_unknown_diagnostic_class_is_refused(tmp_path):
    root = write_root(tmp_path, [{"NORM": 100.0}], [1])
    (root / "scp_statements.csv").write_text(STATEMENTS + "XYZ,made up,1.0,,,ODD,XYZ\n")
    with pytest.raises(ValueError, match="ODD"):
        _ = PTBXL(root).metadata


def test_eligible_subclasses_need_20_positives_in_the_fold():
    counts = {"IMI": 20, "AMI": 19, "NORM": 25, "LVH": 0}
    rows = 30
    meta = pd.DataFrame({"fold": [9] * rows + [1] * rows})
    for subclass in SUBCLASSES:
        in_fold_9 = np.arange(rows) < counts.get(subclass, 0)
        meta[f"sub_{subclass}"] = np.concatenate([in_fold_9, np.ones(rows, bool)]).astype(int)
    assert eligible_subclasses(meta) == ["IMI", "NORM"]
    assert eligible_subclasses(meta, fold=1) == list(SUBCLASSES)
    assert eligible_subclasses(meta, min_positives=19) == ["AMI", "IMI", "NORM"]
    with pytest.raises(ValueError, match="no record in fold 10"):
        eligible_subclasses(meta, fold=10)


# ------------------------------------------------------------------------------- download


def test_download_fails_fast_without_network(tmp_path, monkeypatch):
    monkeypatch.setattr(ptbxl, "PHYSIONET_URL", "http://127.0.0.1:9/ptb-xl/")  # closed port
    with pytest.raises(DownloadFailed, match="zip") as caught:
        ptbxl.download_ptbxl(tmp_path / "ptbxl", timeout=2.0)
    assert str(tmp_path / "ptbxl") in str(caught.value)


# ------------------------------------------------------------------ row-level metadata errors

ARCHIVE = SHARED / "data" / "ptbxl-dev" / "ptbxl-dev-434.tar.xz"
REAL_ROWS = 16  # the first rows of the real CSV: ecg_id 1-8, 10-17 (9 is in fold 10)
# ecg_id -> (column, value written into its real row)
BAD_CELLS = {
    2: ("strat_fold", "abc"),
    3: ("ecg_id", "x3"),
    4: ("patient_id", "unknown"),
    5: ("strat_fold", ""),
    6: ("scp_codes", "{'NORM': 100.0"),
    7: ("sex", "male"),
    10: ("ecg_id", "8"),  # a second row with ecg_id 8
    11: ("strat_fold", "11"),
    12: ("scp_codes", "{'NORMAL': 100.0, 'SR': 0.0}"),
    13: ("filename_hr", "../outside/00013_hr"),
}
# the rejections they cause: (id, detail pattern)
ROW_REJECTIONS = [
    (2, r"strat_fold: 'abc' is not an integer in 1\.\.10 \(line 3\)"),
    ("line 4", r"ecg_id: 'x3' is not an integer .* \(line 4\)"),
    (4, r"patient_id: 'unknown' is not an integer .* \(line 5\)"),
    (5, r"strat_fold: is empty \(line 6\)"),
    (6, r"scp_codes: \"\{'NORM': 100\.0\" is not a dict literal .* \(line 7\)"),
    (7, r"sex: 'male' is not an integer in 0\.\.1 \(line 8\)"),
    (8, r"ecg_id: 8 is repeated on lines \[9, 10\] \(line 9\)"),
    (8, r"ecg_id: 8 is repeated on lines \[9, 10\] \(line 10\)"),
    (11, r"strat_fold: '11' is not an integer in 1\.\.10 \(line 11\)"),
    (12, r"scp_codes: statement\(s\) \['NORMAL'\] are not in scp_statements\.csv \(line 12\)"),
    (13, r"filename_hr: '\.\./outside/00013_hr' is not a relative path inside the dataset root \(line 13\)"),
]
GOOD_IDS = [1, 14, 15, 16, 17]


pytestmark = pytest.mark.xdist_group("ptbxl")  # one worker builds the module's fixtures (`--dist loadgroup`)


@pytest.fixture(scope="module")
def real_rows(tmp_path_factory) -> Path:
    """The real CSV files and records of the first `REAL_ROWS` rows of the PTB-XL archive, with
    the cells of `BAD_CELLS` written into their rows (skips when the archive is absent)."""
    import csv
    import tarfile

    if not ARCHIVE.is_file():
        pytest.skip(f"real PTB-XL records not found at {ARCHIVE}")
    folder = tmp_path_factory.mktemp("real-rows")
    ids = [*range(1, 9), *range(10, 18)]
    wanted = {f"ptbxl-dev/{name}" for name in ("ptbxl_database.csv", "scp_statements.csv")}
    wanted |= {f"ptbxl-dev/records500/00000/{i:05d}_hr.{ext}" for i in ids for ext in ("hea", "dat")}
    with tarfile.open(ARCHIVE) as archive:
        for member in archive:  # one pass over the compressed stream
            if member.name in wanted:
                archive.extract(member, folder, filter="data")
    root = folder / "ptbxl-dev"
    shutil.copy(root / "ptbxl_database.csv", folder / "original.csv")
    with (root / "ptbxl_database.csv").open(newline="") as stream:
        reader = csv.DictReader(stream)
        columns, rows = reader.fieldnames, list(reader)[:REAL_ROWS]
    assert [int(row["ecg_id"]) for row in rows] == ids
    for row in rows:
        column, value = BAD_CELLS.get(int(row["ecg_id"]), (None, None))
        if column:
            row[column] = value
    with (root / "ptbxl_database.csv").open("w", newline="") as stream:
        writer = csv.DictWriter(stream, columns)
        writer.writeheader()
        writer.writerows(rows)
    return root


def test_each_bad_row_is_rejected_with_its_id_column_reason_and_line(real_rows):
    dataset = PTBXL(real_rows)
    found = [(r.record_id, r.check, r.detail) for r in dataset.row_rejections]
    assert [(record_id, check) for record_id, check, _ in found] == [(i, "metadata") for i, _ in ROW_REJECTIONS]
    for (_, _, detail), (_, pattern) in zip(found, ROW_REJECTIONS, strict=True):
        assert re.fullmatch(pattern, detail), detail
    meta = dataset.metadata
    assert meta["ecg_id"].tolist() == GOOD_IDS
    original = pd.read_csv(real_rows.parent / "original.csv", index_col="ecg_id").loc[GOOD_IDS]
    np.testing.assert_array_equal(meta["patient_id"], original["patient_id"].astype(np.int64))
    np.testing.assert_array_equal(meta["fold"], original["strat_fold"])
    np.testing.assert_array_equal(meta["sex"], original["sex"])
    np.testing.assert_array_equal(meta["age"], original["age"])
    with pytest.raises(KeyError, match="ecg_id 7 .* rejected .*sex: 'male'"):
        dataset.record_path(7)


def test_a_file_missing_a_column_names_it(tmp_path):
    root = write_root(tmp_path, [{"NORM": 100.0}], [1])
    table = pd.read_csv(root / "ptbxl_database.csv").drop(columns="strat_fold")
    table.to_csv(root / "ptbxl_database.csv", index=False)
    with pytest.raises(ValueError, match=r"missing column\(s\) \['strat_fold'\]"):
        _ = PTBXL(root).metadata
