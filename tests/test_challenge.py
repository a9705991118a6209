"""The PhysioNet/CinC Challenge 2020/2021 reader on a corpus written in that format at test time."""

import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest
import scipy.io
from scipy.signal import resample_poly

from cyclejepa import pipeline
from cyclejepa.config import load_config
from cyclejepa.data.challenge import Challenge2021
from cyclejepa.data.datasets import conform
from cyclejepa.data.ptbxl import LEADS
from cyclejepa.data.synthetic import generate_records
from test_ptbxl_dev import SMALL_MODEL

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ptbxl_dev.yaml"
GAIN = 1000.0
DX = ["426783006", "164889003", "59118001", "270492004"]


def write_challenge(path: Path, signal_mv: np.ndarray, fs: float, dx: list[str], kind: str, *, leads=LEADS,
                    age="63", sex="Female", field: str | None = None) -> np.ndarray:  # fmt: skip
    """One record in the Challenge layout (``kind`` "mat" or "dat"), its header written exactly as
    the 2021 release writes it (``E07500.mat 16x1+24 1000.0(0)/mV 16 0 -68 1250 0 I``: the .mat
    file's 24-byte offset, one sample per frame); a .dat file is plain format 16. ``field``
    replaces the format field. Returns the stored values."""
    digital = np.round(signal_mv * GAIN).astype(np.int16)
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "mat":
        scipy.io.savemat(path.with_suffix(".mat"), {"val": digital})
    else:
        digital.T.astype("<i2").tofile(path.with_suffix(".dat"))
    lines = [f"{path.name} {len(leads)} {fs:g} {digital.shape[1]} 05-Feb-2020 11:39:16"]
    checksums = np.mod(digital.astype(np.int64).sum(axis=1), 65536)
    field = field or ("16x1+24" if kind == "mat" else "16")
    lines += [f"{path.name}.{kind} {field} {GAIN:.1f}(0)/mV 16 0 {digital[i, 0]} {checksums[i]} 0 {lead}"
              for i, lead in enumerate(leads)]  # fmt: skip
    lines += [f"# Age: {age}", f"# Sex: {sex}", f"# Dx: {','.join(dx)}", "# Rx: Unknown"]
    path.with_suffix(".hea").write_text("\n".join(lines) + "\n")
    return digital


pytestmark = pytest.mark.xdist_group("challenge")  # one worker builds the module's fixtures (`--dist loadgroup`)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """24 synthetic records: .mat and .dat, at 500, 257 and 1000 Hz, 10 s to 20 s, one 6 s
    record (shorter than a window) and one corrupt header."""
    root = tmp_path_factory.mktemp("challenge")
    source = generate_records(26, seed=3)
    stored = {}
    for i in range(24):
        signal = source.signals[i]
        if i % 6 == 5:  # a 20 s record: two source records back to back
            signal = np.concatenate([signal, source.signals[24]], axis=1)
        fs = (500, 257, 1000)[i % 3]
        signal = resample_poly(signal.astype(np.float64), fs, 500, axis=1) if fs != 500 else signal
        name = f"{'g1' if i < 12 else 'g2'}/{'A' if i % 2 else 'HR'}{i:05d}"
        stored[name] = (fs, write_challenge(root / name, signal, fs, [DX[i % 4], DX[(i + 1) % 4]], ("mat", "dat")[i % 2]))
    write_challenge(root / "g2" / "S00024", source.signals[25][:, :3000], 500, [DX[0]], "dat")  # 6 s
    bad = root / "g2" / "X00025"
    write_challenge(bad, source.signals[25], 500, [DX[0]], "mat")
    header = bad.with_suffix(".hea").read_text().replace("X00025 12 500", "X00025 12 fivehundred")
    bad.with_suffix(".hea").write_text(header)
    return root, stored


def test_records_read_as_stored_in_mv_at_their_rate(corpus):
    root, stored = corpus
    dataset = Challenge2021(root)
    entries = {e.name: e for e in dataset.entries()}
    assert set(entries) == set(stored) | {"g2/S00024"}
    for name in ("HR00000", "A00001", "HR00002", "A00005"):
        name = f"g1/{name}"
        record = dataset.read(entries[name])
        fs, digital = stored[name]
        assert record.fs == fs and record.channels == LEADS
        np.testing.assert_allclose(record.signal, digital / GAIN, atol=1e-6)
    entry = entries["g1/A00001"]
    assert (entry.age, entry.sex, entry.labels) == (63.0, 1, {"dx": frozenset({DX[1], DX[2]})})
    assert dataset.label_levels[0].classes == tuple(sorted(DX, key=int))


def test_corrupt_header_rejected_with_reason(corpus):
    root, _ = corpus
    [rejection] = Challenge2021(root).rejected()
    assert rejection.record_id == "g2/X00025" and rejection.check == "unreadable"
    assert "line 1" in rejection.detail and "sampling frequency 'fivehundred'" in rejection.detail


def test_fingerprint_and_entries_without_a_root_say_which_folder_is_missing(monkeypatch):
    from cyclejepa.data.datasets import DatasetNotFound

    monkeypatch.delenv("CYCLEJEPA_CHALLENGE2021", raising=False)
    dataset = Challenge2021(None)
    for read in (dataset.fingerprint, dataset.entries):
        with pytest.raises(DatasetNotFound, match=r"folder None does not exist \(set data.root or \$CYCLEJEPA_CHALLENGE2021"):
            read()


def test_resampling_against_the_analytic_signal(tmp_path):
    """Sines of 3 and 11 Hz stored at 257 Hz, resampled to 500 Hz, equal the sines sampled at 500 Hz."""
    t_in = np.arange(round(12 * 257)) / 257
    wave = lambda t: 0.8 * np.sin(2 * np.pi * 3 * t) + 0.3 * np.cos(2 * np.pi * 11 * t + 0.4)  # noqa: E731
    write_challenge(tmp_path / "R1", np.tile(wave(t_in), (12, 1)), 257, [DX[0]], "dat")
    dataset = Challenge2021(tmp_path)
    x = conform(dataset.read(dataset.entries()[0]), ("II", "V5"), 500.0)
    t_out = np.arange(x.shape[1]) / 500
    assert x.shape == (2, int(np.ceil(len(t_in) * 500 / 257)))
    inner = slice(250, -250)  # edge padding bends the first and last half second
    np.testing.assert_allclose(x[:, inner], np.tile(wave(t_out[inner]), (2, 1)), atol=3e-3)


def test_folds_are_deterministic_hashes_of_the_record(corpus):
    root, _ = corpus
    first, second = Challenge2021(root).entries(), Challenge2021(root).entries()
    assert [(e.name, e.fold, e.patient_id) for e in first] == [(e.name, e.fold, e.patient_id) for e in second]
    for entry in first:
        expected = int(hashlib.sha256(entry.name.encode()).hexdigest()[:12], 16) % 10 + 1
        assert entry.fold == expected
    assert len({e.patient_id for e in first}) == len(first)  # no patient ids: one record, one patient


@pytest.fixture(scope="module")
def prepared(corpus, tmp_path_factory):
    root, _ = corpus
    out = tmp_path_factory.mktemp("run")
    cfg = load_config(EXAMPLE, [f"data.root={root}", "data.dataset=challenge2021", f"output_dir={out}",
                                "data.train_folds=[1,2,3,4,5,6,7,8,9]", "data.eval_folds=[10]", "data.workers=2", *SMALL_MODEL])  # fmt: skip
    return cfg, pipeline.prepare(cfg, progress=False)


def test_prepare_windows_resamples_and_counts_rejections(prepared, corpus):
    _, stored = corpus
    cfg, cache = prepared
    # named by their path below the root, not numbered
    assert {r.record_id: r.check for r in cache.rejections} == {"g2/X00025": "unreadable", "g2/S00024": "extent"}
    short = next(r for r in cache.rejections if r.record_id == "g2/S00024")
    assert "lasts 6.00 s, shorter than one 10 s window" in short.detail
    names, windows = cache.columns["record"], cache.columns["window"]
    expected = {name: 2 if name.endswith(("05", "11", "17", "23")) else 1 for name in stored}
    assert {n: int((names == n).sum()) for n in set(names)} == expected
    assert cache.signals.shape[1:] == (12, 1000) and cache.manifest["geometry"]["model_fs"] == 100
    assert cache.manifest["counts"] | {} == {"records": 26, "records_kept": 24, "kept": 28, "rejected": 2,
                                              "qc_failed": cache.manifest["counts"]["qc_failed"]}  # fmt: skip
    for name in expected:  # windows of one record share its patient and fold
        rows = names == name
        assert len(set(cache.columns["patient_id"][rows])) == 1 and len(set(cache.columns["fold"][rows])) == 1
        assert sorted(windows[rows]) == list(range(expected[name]))
    labels = cache.labels("dx")
    assert labels.shape == (28, 4) and (labels.sum(axis=1) == 2).all()


def test_a_few_training_steps_on_the_challenge_cache(prepared):
    cfg, cache = prepared
    directory = Path(cfg.output_dir) / "runs" / "winder-seed0"
    pipeline.train_run(cfg, cache, directory, seed=0, transport_weight=1.0, progress=False)
    rows = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2, 3]
    assert all(np.isfinite([row[k] for k in ("loss", "prediction", "regulariser", "transport")]).all() for row in rows)


# --------------------------------------------------------------- the real release and hostile files


@pytest.mark.parametrize(("kind", "field"), [("mat", "16x1+24"), ("mat", "16+24"), ("mat", "16"), ("mat", "16x1"),
                                             ("dat", "16"), ("dat", "16x1"), ("dat", "16:0")])  # fmt: skip
def test_every_format_field_of_the_specification_is_read(tmp_path, kind, field):
    signal = generate_records(1, seed=5).signals[0]
    digital = write_challenge(tmp_path / "E07500", signal, 500, [DX[0]], kind, field=field)
    dataset = Challenge2021(tmp_path)
    assert dataset.rejected() == []
    np.testing.assert_allclose(dataset.read(dataset.entries()[0]).signal, digital / GAIN, atol=1e-6)


def hostile_corpus(root: Path) -> None:
    """Five good records, then one of each attack: absurd rates, a signal file outside the root, a
    path to a system file, and a .mat whose variable table declares 12 x 40,000,000 samples (a
    decompression bomb's shape: the reader must refuse it from the table, before loading; the
    file is a 120 kB one whose declared dimensions were rewritten, cheaper to make than 960 MB of
    compressed zeros and refused at the same point)."""
    source = generate_records(6, seed=7)
    for i in range(5):
        write_challenge(root / f"ok/G{i:05d}", source.signals[i], 500, [DX[i % 4]], "mat")
    for name, rate in (("tiny", "0.0001"), ("huge", "1e12"), ("large", "1e9")):
        write_challenge(root / f"bad/{name}", source.signals[5], 500, [DX[0]], "dat")
        header = root / f"bad/{name}.hea"
        header.write_text(header.read_text().replace(f"{name} 12 500 ", f"{name} 12 {rate} ", 1))
    (root.parent / "secret.dat").write_bytes(np.zeros((5000, 12), "<i2").tobytes())
    write_challenge(root / "bad/escape", source.signals[5], 500, [DX[0]], "dat")
    escape = root / "bad/escape.hea"
    escape.write_text(escape.read_text().replace("escape.dat ", "../../secret.dat "))
    system = root / "bad/system.hea"
    system.write_text(escape.read_text().replace("escape 12", "system 12").replace("../../secret.dat ", "/etc/passwd "))
    bomb = root / "bad/bomb"
    scipy.io.savemat(bomb.with_suffix(".mat"), {"val": np.zeros((12, 5000), np.int16)}, do_compression=False)
    dims = struct.pack("<iiii", 5, 8, 12, 5000)  # miINT32 tag of 8 bytes, then the two dimensions
    raw = bomb.with_suffix(".mat").read_bytes()
    assert raw.count(dims) == 1
    bomb.with_suffix(".mat").write_bytes(raw.replace(dims, struct.pack("<iiii", 5, 8, 12, 40_000_000)))
    header_lines = ["bomb 12 500 5000"] + [f"bomb.mat 16x1+24 1000.0(0)/mV 16 0 0 0 0 {lead}" for lead in LEADS]
    bomb.with_suffix(".hea").write_text("\n".join(header_lines + ["# Dx: 164889003"]) + "\n")


def test_hostile_records_are_rejected_by_name_and_the_rest_go_on(tmp_path):
    import resource

    root = tmp_path / "corpus"
    hostile_corpus(root)
    assert (root / "bad/bomb.mat").stat().st_size < 200_000
    assert scipy.io.whosmat(root / "bad/bomb.mat") == [("val", (12, 40_000_000), "int16")]
    out = tmp_path / "run"
    cfg = load_config(EXAMPLE, [f"data.root={root}", "data.dataset=challenge2021", f"output_dir={out}",
                                "data.train_folds=[1,2,3,4,5,6,7,8,9,10]", "data.eval_folds=[]", "evaluation.unseal=true",
                                *SMALL_MODEL])  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cache = pipeline.prepare(cfg, progress=False)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    checks = {r.record_id: r.check for r in cache.rejections}
    assert checks == {"bad/tiny": "sampling_rate", "bad/huge": "sampling_rate", "bad/large": "sampling_rate",
                      "bad/escape": "outside_root", "bad/system": "outside_root", "bad/bomb": "extent"}  # fmt: skip
    assert sorted(set(cache.columns["record"])) == [f"ok/G{i:05d}" for i in range(5)]
    bomb = next(r for r in cache.rejections if r.record_id == "bad/bomb")
    assert "(12, 40000000)" in bomb.detail and grown_mb < 1000  # refused from the variable table, never loaded


def test_all_records_rejected_still_writes_the_rejections_and_points_to_them(tmp_path):
    root = tmp_path / "corpus"
    hostile_corpus(root)
    import shutil

    shutil.rmtree(root / "ok")
    out = tmp_path / "run"
    cfg = load_config(EXAMPLE, [f"data.root={root}", "data.dataset=challenge2021", f"output_dir={out}",
                                "data.train_folds=[1,2,3,4,5,6,7,8,9,10]", "data.eval_folds=[]", "evaluation.unseal=true",
                                *SMALL_MODEL])  # fmt: skip
    with pytest.raises(ValueError, match=r"each record's reason is in .*cache\.rejections\.csv") as caught:
        pipeline.prepare(cfg, progress=False)
    report = Path(str(caught.value).rsplit(" ", 1)[-1])
    rows = report.read_text().splitlines()
    assert rows[0] == "id,check,detail" and len(rows) == 1 + 6
