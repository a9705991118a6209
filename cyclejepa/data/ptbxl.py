"""PTB-XL 1.0.3 reader: metadata, diagnostic labels, verified 500 Hz records, download helper.

The layout is PhysioNet's release of PTB-XL 1.0.3::

    ROOT/ptbxl_database.csv      one row per recording (ecg_id, patient_id, age, sex, scp_codes,
                                 strat_fold, filename_lr, filename_hr, ...)
    ROOT/scp_statements.csv      the 71 SCP-ECG statements and their diagnostic hierarchy
    ROOT/records500/00000/00001_hr.{hea,dat}   WFDB format 16, 12 leads, 5,000 samples
    ROOT/records100/...          the 100 Hz release (unused: decimation happens locally)

`read_verified` is steps 1-3 of the paper's preprocessing chain (physical mV; checksum, extent,
rate and lead order verified); a failed check raises `RecordRejected`; nothing is repaired.
"""

from __future__ import annotations

import ast
import csv
import math
import os
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from cyclejepa.data import datasets
from cyclejepa.data.datasets import (
    MV_PER_UNIT,
    Dataset,
    DownloadFailed,
    Entry,
    LabelLevel,
    Record,
    RecordRejected,
    sha256_of,
)
from cyclejepa.data.samples import INVALID, SampleError, read_samples
from cyclejepa.data.wfdb_format import HeaderError, WfdbHeader, read_header, regular_file, resolve_inside, to_physical
from cyclejepa.declarations.datasets import PTBXLDeclaration
from cyclejepa.registry import DATASETS

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CHECKS",
    "PTBXLNotFound",
    "DownloadFailed",
    "FS",
    "LEADS",
    "N_SAMPLES",
    "PTBXL",
    "RecordRejected",
    "SUBCLASSES",
    "SUPERCLASSES",
    "check_database",
    "checksum16",
    "diagnostic_labels",
    "diagnostic_map",
    "download_ptbxl",
    "eligible_subclasses",
    "parse_scp_codes",
    "read_ptbxl_record",
    "read_record_fast",
    "read_verified",
    "resolve_root",
]

FS = int(PTBXLDeclaration.fs)
"""Sampling rate every record must declare (Hz): the declared native rate, 500."""
N_SAMPLES = 5000
"""Samples per lead of a 10 s record at `FS`."""
LEADS = PTBXLDeclaration.channels
"""The required lead order: the declared channels, I … V6 (compared with each header case-insensitively)."""
SUPERCLASSES = ("NORM", "MI", "STTC", "CD", "HYP")
"""The five diagnostic superclasses, in the paper's order."""
SUBCLASSES = (
    "AMI",
    "CLBBB",
    "CRBBB",
    "ILBBB",
    "IMI",
    "IRBBB",
    "ISCA",
    "ISCI",
    "ISC_",
    "IVCD",
    "LAFB/LPFB",
    "LAO/LAE",
    "LMI",
    "LVH",
    "NORM",
    "NST_",
    "PMI",
    "RAO/RAE",
    "RVH",
    "SEHYP",
    "STTC",
    "WPW",
    "_AVB",
)
"""The 23 diagnostic subclasses of PTB-XL 1.0.3, sorted."""
CHECKS = (
    "metadata",
    "unreadable",
    "sampling_rate",
    "extent",
    "lead_order",
    "format",
    "checksum",
    "calibration",
    "non_finite",
)
"""`RecordRejected.check` names, in the order the checks run (``metadata``: `check_database`)."""

DATABASE_CSV = "ptbxl_database.csv"
STATEMENTS_CSV = "scp_statements.csv"
ROOT_ENV = "CYCLEJEPA_PTBXL"
"""The environment variable naming the PTB-XL folder when ``data.root`` is not set."""
PHYSIONET_SLUG = "ptb-xl"
PHYSIONET_URL = "https://physionet.org/content/ptb-xl/1.0.3/"


class PTBXLNotFound(datasets.DatasetNotFound):
    """PTB-XL is missing or incomplete; the message says where it must be and how to get it."""

    def __init__(self, root: Path | None, missing: str):
        self.root = root
        where = f"at {root}" if root is not None else "(no root given)"
        super().__init__(
            f"PTB-XL 1.0.3 not found {where}: {missing}.\n"
            f"Point `data.root` in the config (or the {ROOT_ENV} environment variable) at "
            f"the folder that holds {DATABASE_CSV}, {STATEMENTS_CSV} and records500/.\n"
            f"To get it: `cyclejepa download ptbxl --dest DIR` (wraps "
            f"wfdb.dl_database('{PHYSIONET_SLUG}', DIR)), or download the zip from "
            f"{PHYSIONET_URL} and unpack it so that {DATABASE_CSV} sits directly in DIR.\n"
            f"Without PTB-XL, `cyclejepa synth --out DIR --records N` writes a synthetic corpus "
            f"in the same layout."
        )


# --------------------------------------------------------------------------------------------
# dataset root and metadata


def resolve_root(root: str | os.PathLike | None = None) -> Path:
    """The PTB-XL folder: ``root``, else ``$CYCLEJEPA_PTBXL``; raises `PTBXLNotFound`."""
    if root is None:
        env = os.environ.get(ROOT_ENV)
        if not env:
            raise PTBXLNotFound(None, f"neither `data.root` nor ${ROOT_ENV} is set")
        root = env
    root = Path(root).expanduser()
    if not root.is_dir():
        raise PTBXLNotFound(root, "the folder does not exist")
    missing = [name for name in (DATABASE_CSV, STATEMENTS_CSV) if not (root / name).is_file()]
    if missing:
        raise PTBXLNotFound(root, f"missing {', '.join(missing)}")
    return root


def parse_scp_codes(text: str) -> dict[str, float]:
    """The ``scp_codes`` cell (a Python dict literal, statement -> likelihood %) as a dict."""
    codes = ast.literal_eval(text)
    if not isinstance(codes, dict):
        raise ValueError(f"scp_codes is not a dict literal: {text!r}")
    return {str(code): float(likelihood) for code, likelihood in codes.items()}


def diagnostic_map(statements: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """Diagnostic statement code -> (superclass, subclass), from scp_statements.csv."""
    diagnostic = statements[statements["diagnostic"] == 1]
    classes = zip(diagnostic["diagnostic_class"], diagnostic["diagnostic_subclass"], strict=True)
    return dict(zip(diagnostic.index, classes, strict=True))


def diagnostic_labels(scp_codes: Mapping[str, float], diagnostic: Mapping[str, tuple[str, str]]) -> tuple[set[str], set[str]]:
    """(superclasses, subclasses) of one record: every diagnostic statement in ``scp_codes``
    counts, whatever its likelihood (PTB-XL benchmark convention); ``diagnostic``: `diagnostic_map`."""
    present = [diagnostic[code] for code in scp_codes if code in diagnostic]
    return {sup for sup, _ in present}, {sub for _, sub in present}


def eligible_subclasses(meta: pd.DataFrame, fold: int = 9, min_positives: int = 20) -> list[str]:
    """Subclasses with ≥ ``min_positives`` positives in ``fold`` of ``meta`` (``fold``,
    ``sub_<SUBCLASS>`` columns): the "17-class" set."""
    in_fold = meta["fold"].to_numpy() == fold
    if not in_fold.any():
        raise ValueError(f"no record in fold {fold}; folds present: {sorted(set(meta['fold']))}")
    return [s for s in SUBCLASSES if int(meta.loc[in_fold, f"sub_{s}"].sum()) >= min_positives]


REQUIRED_COLUMNS = ("ecg_id", "patient_id", "age", "sex", "scp_codes", "strat_fold", "filename_lr", "filename_hr")
"""Columns of ptbxl_database.csv the reader needs."""


def check_database(path: Path, codes: set[str]) -> tuple[pd.DataFrame, list[RecordRejected]]:
    """The rows of a ptbxl_database.csv indexed by ``ecg_id``, converted, and a `RecordRejected`
    (``metadata``, detail ``column: reason (line N)``) per row failing a check: ``ecg_id`` a
    positive unrepeated integer; ``patient_id`` ≥ 0; ``strat_fold`` 1..10; ``sex`` 0 or 1;
    ``age`` empty or ≥ 0; ``scp_codes`` a dict literal of statements in ``codes``;
    ``filename_hr`` relative, inside the root; every cell UTF-8. ValueError for a missing column.
    """
    import pandas as pd

    with path.open(newline="", encoding="utf-8", errors="surrogateescape") as stream:  # a byte that is not UTF-8: its row
        reader = csv.DictReader(stream)
        missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}; PTB-XL 1.0.3 has {list(REQUIRED_COLUMNS)}")
        rows = [(reader.line_num, row) for row in reader]
    lines_of: dict[int | None, list[int]] = {}  # None: the rows whose ecg_id is not an integer
    for line, row in rows:
        lines_of.setdefault(_integer(row["ecg_id"]), []).append(line)
    kept, rejections = [], []
    for line, row in rows:
        try:
            kept.append(_checked_row(row, lines_of, codes))
        except _BadCell as bad:
            ecg_id = _integer(row["ecg_id"])
            record_id = ecg_id if ecg_id is not None and ecg_id > 0 else f"line {line}"
            rejections.append(RecordRejected(record_id, "metadata", f"{bad.column}: {bad.reason} (line {line})"))
    columns = list(rows[0][1]) if rows else list(REQUIRED_COLUMNS)
    table = pd.DataFrame(kept, columns=columns).set_index("ecg_id")
    return table, rejections


class _BadCell(ValueError):
    def __init__(self, column: str, reason: str):
        self.column, self.reason = column, reason
        super().__init__(f"{column}: {reason}")


def _checked_row(row: dict[str, str], lines_of: dict[int | None, list[int]], codes: set[str]) -> dict:
    """``row`` with its checked cells converted; raises `_BadCell` at the first bad cell."""

    def integer(column: str, allowed: range) -> int:
        text = row[column].strip()
        value = _integer(text)
        if value is None or value not in allowed:
            shown = "is empty" if not text else f"{text!r} is not an integer in {allowed.start}..{allowed.stop - 1}"
            raise _BadCell(column, shown)
        return value

    for column, text in row.items():
        try:
            (text or "").encode("utf-8")
        except UnicodeEncodeError:
            raise _BadCell(column, f"{os.fsencode(text)!r} is not UTF-8 text") from None
    checked: dict[str, Any] = dict(row)
    checked["ecg_id"] = integer("ecg_id", range(1, 10**9))
    if len(lines_of[checked["ecg_id"]]) > 1:
        raise _BadCell("ecg_id", f"{checked['ecg_id']} is repeated on lines {lines_of[checked['ecg_id']]}")
    checked["patient_id"] = integer("patient_id", range(0, 10**9))
    checked["strat_fold"] = integer("strat_fold", range(1, 11))
    checked["sex"] = integer("sex", range(0, 2))
    checked["age"] = _age(row["age"])
    checked["scp_codes"] = _scp_codes(row["scp_codes"], codes)
    checked["filename_hr"] = _inside_root(row["filename_hr"])
    return checked


def _integer(text: str) -> int | None:
    """``text`` as an integer ("3" and "3.0" alike), None when it is not one."""
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if math.isfinite(value) and value == int(value) else None


def _age(text: str) -> float:
    if not text.strip():
        return math.nan  # PTB-XL leaves a few ages empty
    try:
        age = float(text)
    except ValueError:
        age = -1.0
    if not (math.isfinite(age) and age >= 0):
        raise _BadCell("age", f"{text!r} is not a non-negative number")
    return age


def _scp_codes(text: str, codes: set[str]) -> str:
    try:
        parsed = parse_scp_codes(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as error:
        raise _BadCell("scp_codes", f"{text!r} is not a dict literal of statement -> likelihood ({error})") from None
    unknown = sorted(set(parsed) - codes)
    if unknown:
        raise _BadCell("scp_codes", f"statement(s) {unknown} are not in {STATEMENTS_CSV}")
    return text


def _inside_root(name: str) -> str:
    normal = os.path.normpath(name) if name.strip() else ""
    if not normal or os.path.isabs(normal) or normal.split(os.sep)[0] == os.pardir:
        raise _BadCell("filename_hr", f"{name!r} is not a relative path inside the dataset root")
    return name


@DATASETS.register("ptbxl")
class PTBXL(PTBXLDeclaration, Dataset):
    """A PTB-XL 1.0.3 folder (a `Dataset`; facts `PTBXLDeclaration`'s): ``root`` holds
    ptbxl_database.csv (None: ``$CYCLEJEPA_PTBXL``), looked up when first needed."""

    licence = "CC-BY-4.0"
    citation = (
        "Wagner, P., Strodthoff, N., Bousseljot, R.-D., Kreiseler, D., Lunze, F. I., Samek, W., Schaeffter, T. (2020). "
        "PTB-XL, a large publicly available electrocardiography dataset. Scientific Data 7, 154. "
        "https://doi.org/10.1038/s41597-020-0495-6"
    )
    label_levels = (LabelLevel("superclass", "super", SUPERCLASSES), LabelLevel("subclass", "sub", SUBCLASSES))
    task_titles = MappingProxyType(
        {  # the paper's names of the three probe tasks
            "superclass": "Superclass macro-AUROC, 5 classes ↑",
            "subclass-eligible": "Subclass macro-AUROC, eligible (17 in PTB-XL) ↑",
            "subclass-all": "Subclass macro-AUROC, 23 classes ↑",
        }
    )
    root_env: str | None = ROOT_ENV

    def __init__(self, root: str | os.PathLike | None = None):
        self._root = root

    # ignore[override]: the root is never assigned through the base; mypy cannot declare Dataset.root read-only
    @cached_property
    def root(self) -> Path:  # type: ignore[override]
        """The PTB-XL folder (`resolve_root`); `PTBXLNotFound` says where to put it and how to get it."""
        return resolve_root(self._root)

    def entries(self) -> list[Entry]:
        """One `Entry` per kept row of ptbxl_database.csv, in ecg_id order (``strat_fold`` folds)."""
        meta = self.metadata
        hot = {level.name: (level.classes, meta[list(level.columns())].to_numpy(bool)) for level in self.label_levels}
        columns = ("ecg_id", "filename_hr", "patient_id", "fold", "age", "sex")
        return [
            Entry(
                int(ecg_id),
                name,
                int(patient),
                int(fold),
                float(age),
                int(sex),
                {level: frozenset(np.asarray(classes)[rows[i]]) for level, (classes, rows) in hot.items()},
            )
            for i, (ecg_id, name, patient, fold, age, sex) in enumerate(zip(*(meta[c] for c in columns), strict=True))
        ]

    def rejection_id(self, entry: Entry) -> int:
        """PTB-XL names a record by its ``ecg_id`` (the entry's id)."""
        return entry.id

    def read(self, entry: Entry) -> Record:
        """The verified 500 Hz record of ``entry`` (`read_verified`)."""
        return Record(entry.id, read_verified(self.root / entry.name, record_id=entry.id, root=self.root), FS, LEADS)

    def rejected(self) -> list[RecordRejected]:
        return self.row_rejections

    @classmethod
    def download(cls, dest: str | os.PathLike) -> Path:
        """PTB-XL 1.0.3 from PhysioNet into ``dest`` (`download_ptbxl`)."""
        return download_ptbxl(dest)

    def fingerprint(self) -> dict:
        """The root and the sha256 of its two CSV files."""
        csvs = [self.root / DATABASE_CSV, self.root / STATEMENTS_CSV]
        return {"root": str(self.root.resolve()), "csv_sha256": sha256_of(csvs, self.root)}

    def __repr__(self) -> str:
        return f"PTBXL({self._root!r})"

    @cached_property
    def database(self) -> pd.DataFrame:
        """The rows of ptbxl_database.csv that pass `check_database`, indexed by ``ecg_id``."""
        return self._checked_database[0]

    @cached_property
    def row_rejections(self) -> list[RecordRejected]:
        """The rows of ptbxl_database.csv that fail `check_database` (check ``metadata``)."""
        return self._checked_database[1]

    @cached_property
    def _checked_database(self) -> tuple[pd.DataFrame, list[RecordRejected]]:
        return check_database(self.root / DATABASE_CSV, set(self.statements.index))

    @cached_property
    def statements(self) -> pd.DataFrame:
        """scp_statements.csv indexed by statement code; checked against the 1.0.3 vocabulary."""
        import pandas as pd

        table = pd.read_csv(self.root / STATEMENTS_CSV, index_col=0)
        diagnostic = table[table["diagnostic"] == 1]
        for column, vocabulary in (
            ("diagnostic_class", SUPERCLASSES),
            ("diagnostic_subclass", SUBCLASSES),
        ):
            unknown = sorted(set(diagnostic[column]) - set(vocabulary))
            if unknown:
                raise ValueError(
                    f"{self.root / STATEMENTS_CSV}: {column} {unknown} is not in the PTB-XL 1.0.3 vocabulary {list(vocabulary)}"
                )
        return table

    @cached_property
    def metadata(self) -> pd.DataFrame:
        """One row per record by ecg_id: ecg_id, patient_id, age (300: over 89), sex (0 male, 1
        female), fold, filename_hr, filename_lr, multi-hot ``super_<CLASS>``, ``sub_<CLASS>``."""
        import pandas as pd

        db = self.database.sort_index()
        table = pd.DataFrame(
            {
                "ecg_id": db.index.astype(np.int64),
                "patient_id": db["patient_id"].to_numpy(dtype=np.int64),
                "age": db["age"].to_numpy(dtype=float),
                "sex": db["sex"].to_numpy(dtype=np.int64),
                "fold": db["strat_fold"].to_numpy(dtype=np.int64),
                "filename_hr": db["filename_hr"].to_numpy(),
                "filename_lr": db["filename_lr"].to_numpy(),
            }
        )
        diagnostic = diagnostic_map(self.statements)
        labels = [diagnostic_labels(parse_scp_codes(c), diagnostic) for c in db["scp_codes"]]
        columns = {f"super_{c}": [c in sup for sup, _ in labels] for c in SUPERCLASSES}
        columns |= {f"sub_{c}": [c in sub for _, sub in labels] for c in SUBCLASSES}
        multi_hot = pd.DataFrame(columns, dtype=np.uint8)
        return pd.concat([table, multi_hot], axis=1)

    def record_path(self, ecg_id: int) -> Path:
        """Path (no extension) of the 500 Hz record of ``ecg_id``."""
        try:
            filename = self.database.at[ecg_id, "filename_hr"]
        except KeyError:
            rejected = [str(r) for r in self.row_rejections if r.record_id == ecg_id]
            why = f": its row is rejected, {'; '.join(rejected)}" if rejected else ""
            raise KeyError(f"ecg_id {ecg_id} is not in {self.root / DATABASE_CSV}{why}") from None
        return self.root / filename

    def read_id(self, ecg_id: int) -> np.ndarray:
        """The verified record ``ecg_id``: (12, 5000) float32 mV (see `read_verified`)."""
        return read_verified(self.record_path(ecg_id), record_id=ecg_id)


def read_ptbxl_record(root: str | os.PathLike | None, record: int | str) -> np.ndarray:
    """Verified (12, 5000) float32 mV record ``record``: an ecg_id or a filename relative to
    ``root`` (``"records500/00000/00001_hr"``). Raises `RecordRejected`."""
    if isinstance(record, (int, np.integer)):
        return PTBXL(root).read_id(int(record))
    return read_verified(resolve_root(root) / record, record_id=record)


# --------------------------------------------------------------------------------------------
# verification: steps 1-3 of the preprocessing chain


def checksum16(digital: np.ndarray) -> np.ndarray:
    """WFDB checksum per signal of (samples, signals) stored integers: Σ samples mod 2¹⁶."""
    return np.mod(np.asarray(digital).sum(axis=0, dtype=np.int64), 65536)


def read_verified(path: str | os.PathLike, record_id: object = None, root: str | os.PathLike | None = None) -> np.ndarray:
    """Steps 1-3 of the chain on the WFDB record at ``path`` (no extension): (12, 5000) float32
    mV, (stored − baseline) / gain × unit factor in float64, rounded once.

    The first failed check raises `RecordRejected`: ``unreadable`` header, ``outside_root``
    signal file, ``sampling_rate`` ≠ 500, ``extent`` ≠ 12 × 5,000, ``lead_order`` ≠ `LEADS`
    (any case; never reordered), ``format`` ≠ 16 with one sample per frame, ``extent`` (file
    size), ``unreadable`` samples, ``checksum`` absent or different, ``calibration`` (unit,
    gain), ``non_finite`` (-32768 or a non-finite value).
    """
    path = Path(path)
    record_id = path.name if record_id is None else record_id

    def reject(check: str, detail: str) -> RecordRejected:
        return RecordRejected(record_id, check, detail)

    try:
        header = read_header(path)
    except (HeaderError, OSError) as error:
        raise reject("unreadable", f"header {path}.hea: {error}") from None
    if root is not None:
        for name in dict.fromkeys(s.file for s in header.signals):
            try:
                resolve_inside(path.parent, name, Path(root))
            except HeaderError as error:
                raise reject("outside_root", str(error)) from None
    _verify_header(header, reject)
    _verify_file_sizes(header, path.parent, reject)
    try:
        digital = np.stack(read_samples(path, header=header, root=root).digital)
    except (SampleError, HeaderError, OSError) as error:
        raise reject("unreadable", f"samples of {path}: {error}") from None
    _verify_checksums(header, digital, reject)
    return _physical_mv(header, digital, reject)


read_record_fast = read_verified
"""`read_verified` under its former name."""


def _verify_header(header: WfdbHeader, reject) -> None:
    """The checks of the header: rate, extent, lead order, format."""
    if header.fs != FS:
        raise reject("sampling_rate", f"header declares fs = {header.fs:g} Hz, expected {FS}")
    if header.n_signals != len(LEADS) or header.samples != N_SAMPLES:
        raise reject(
            "extent",
            f"header declares {header.n_signals} signals x {header.samples} samples, expected {len(LEADS)} x {N_SAMPLES}",
        )
    names = list(header.names)
    if [n.lower() for n in names] != [n.lower() for n in LEADS]:
        raise reject("lead_order", f"header leads {names}, expected {list(LEADS)}")
    layouts = sorted({(s.format, s.samples_per_frame) for s in header.signals})
    if layouts != [(16, 1)]:
        raise reject("format", f"WFDB format/samples per frame {layouts}, expected 16 with one sample per frame")


def _verify_file_sizes(header: WfdbHeader, folder: Path, reject) -> None:
    """Every .dat file holds exactly the header's samples (format 16: 2 bytes each)."""
    for file_name in dict.fromkeys(s.file for s in header.signals):
        signals = [s for s in header.signals if s.file == file_name]
        expected = signals[0].byte_offset + 2 * len(signals) * N_SAMPLES  # the extent checked by _verify_header
        file = folder / file_name
        try:
            size = regular_file(file).st_size
        except (HeaderError, OSError) as error:
            raise reject("unreadable", f"signal file {file}: {error}") from None
        if size != expected:
            raise reject("extent", f"{file.name} has {size} bytes, the header implies {expected}")


def _verify_checksums(header: WfdbHeader, digital: np.ndarray, reject) -> None:
    """Each signal's header checksum against its stored samples' (`checksum16`)."""
    stored = [s.checksum for s in header.signals]
    if any(value is None for value in stored):
        raise reject("checksum", "the header declares no checksum")
    computed = checksum16(digital.T)
    bad = np.flatnonzero(computed != np.mod(np.asarray(stored, dtype=np.int64), 65536))
    if bad.size:
        leads = ", ".join(f"{header.names[i]} (header {stored[i]}, samples {computed[i]})" for i in bad)
        raise reject("checksum", f"checksum mismatch on {leads}")


def _physical_mv(header: WfdbHeader, digital: np.ndarray, reject) -> np.ndarray:
    """(stored - baseline) / gain x unit factor of (leads, samples) ``digital``, float32."""
    units = [s.units.lower() for s in header.signals]
    unknown = sorted({u for u in units if u not in MV_PER_UNIT})
    if unknown:
        raise reject("calibration", f"unknown physical unit(s) {unknown}")
    gain = np.array([s.gain for s in header.signals], dtype=np.float64)
    if not np.all(np.isfinite(gain) & (gain > 0)):
        raise reject("calibration", f"ADC gains {gain.tolist()} are not all finite and positive")
    factor = np.array([MV_PER_UNIT[u] for u in units])
    invalid = digital == INVALID[16]
    signal = to_physical(digital, gain, [s.baseline for s in header.signals], factor)
    if invalid.any() or not np.isfinite(signal).all():
        leads = [header.names[i] for i in np.flatnonzero(invalid.any(axis=1))]
        raise reject(
            "non_finite",
            f"{int(invalid.sum())} invalid samples (-32768) on leads {leads}" if leads else "non-finite physical values",
        )
    return signal.astype(np.float32)


# --------------------------------------------------------------------------------------------
# download


def download_ptbxl(dest: str | os.PathLike, *, timeout: float = 10.0) -> Path:
    """Download PTB-XL (about 3 GB, resumable) from PhysioNet into ``dest`` and return it; an
    unreachable PhysioNet (probed with a ``timeout``-second request) raises `DownloadFailed`."""
    import requests
    import wfdb

    dest = Path(dest).expanduser()
    try:
        requests.head(PHYSIONET_URL, timeout=timeout, allow_redirects=True).raise_for_status()
    except requests.RequestException as error:
        raise DownloadFailed(
            f"cannot reach PhysioNet ({PHYSIONET_URL}): {error}. Download the zip from that page "
            f"on a machine with network access and unpack it so that {DATABASE_CSV} sits "
            f"directly in {dest}."
        ) from error
    dest.mkdir(parents=True, exist_ok=True)
    try:
        wfdb.dl_files(PHYSIONET_SLUG, str(dest), [DATABASE_CSV, STATEMENTS_CSV])
        wfdb.dl_database(PHYSIONET_SLUG, str(dest))
    except (requests.RequestException, OSError) as error:
        raise DownloadFailed(
            f"download of PTB-XL into {dest} broke off: {error}. Run the same command again to resume."
        ) from error
    return dest
