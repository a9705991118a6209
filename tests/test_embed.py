"""Embeddings out: `cyclejepa embed` and `load_encoder` against the evaluation stage on a tiny trained run."""

import contextlib
import copy
import errno
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import cyclejepa
from conftest import TINY_MODEL, synthetic_data
from cyclejepa import pipeline
from cyclejepa.cli import app
from cyclejepa.config import parse_config
from cyclejepa.data.ptbxl import read_record_fast
from cyclejepa.data.preprocess import resample
from cyclejepa.data.ptbxl import LEADS, PTBXL
from cyclejepa.data.datasets import Record
from cyclejepa.embed import OUT_OF_RANGE_DECADES, Encoder, check_output, input_distance
from cyclejepa.evaluation.checkpoint_evaluation import record_embeddings
from cyclejepa.pipeline.evaluation import evaluation_spec


pytestmark = pytest.mark.xdist_group("embed")  # one worker builds the module's fixtures (`--dist loadgroup`)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny run: 40 synthetic records, one arm, two training steps; and its record paths."""
    out = tmp_path_factory.mktemp("embed")
    cfg = parse_config(
        {
            "name": "tiny",
            "output_dir": str(out / "run"),
            "data": synthetic_data(out, 40),
            **TINY_MODEL,
            "training": {"steps": 2, "batch_size": 4, "checkpoint_every": 1},
            "runs": {"seeds": [0], "arms": [{"name": "winder", "transport_weight": 1.0}]},
            "evaluation": {"steps": [1, 2], "headline_step": 1},
        }
    )
    pipeline.write_resolved_config(cfg)
    cache = pipeline.prepare(cfg, progress=False)
    pipeline.pretrain(cfg, cache, pipeline.plan_runs(cfg)[0], progress=False)
    meta = PTBXL(cfg.data.root).metadata
    paths = {int(i): str(cfg.data.root / name) for i, name in zip(meta["ecg_id"], meta["filename_hr"], strict=True)}
    return cfg, cache, paths


def evaluation_embeddings(cfg, cache, encoder):
    """The evaluation stage's record representations with the encoder's model, by ecg_id."""
    reps = record_embeddings(evaluation_spec(cfg, cache), cache, encoder.model, torch.device("cpu"))
    return cache.columns["record_id"][reps.rows], reps.features


def write_record(path, signal, fs, names):
    import wfdb

    wfdb.wrsamp(
        path.name,
        fs=fs,
        units=["mV"] * len(names),
        sig_name=list(names),
        p_signal=signal.T,
        fmt=["16"] * len(names),
        adc_gain=[1000.0] * len(names),
        baseline=[0] * len(names),
        write_dir=str(path.parent),
    )
    return str(path)


def test_cli_and_load_encoder_give_the_evaluation_stages_embeddings(trained, tmp_path):
    cfg, cache, paths = trained
    fewer = write_record(tmp_path / "fewer", np.full((5, 5000), 0.1), 500, LEADS[:5])
    short = write_record(tmp_path / "short", read_record_fast(paths[1])[:, :3000], 500, LEADS)
    bad = [str(tmp_path / "missing"), fewer, short]
    out = tmp_path / "all.npz"
    result = CliRunner().invoke(
        app, ["embed", str(cfg.output_dir), *paths.values(), *bad, "--out", str(out), "--device", "cpu", "--batch-size", "16"]
    )
    assert result.exit_code == 1, result.output  # some records failed
    assert "40 records embedded" in result.output and "3 failed" in result.output
    assert f"{bad[0]}: WFDB record {bad[0]!r} not found" in result.output
    saved = np.load(out)
    failed = json.loads(str(saved["failed"]))
    assert set(failed) == set(bad)
    assert failed[fewer].startswith("no channel ['aVF', 'V1', 'V2', 'V3', 'V4', 'V5', 'V6']")
    assert failed[short] == "the record lasts 6.00 s, shorter than one 10 s window"
    assert json.loads(str(saved["source"]))["step"] == 1  # evaluation.headline_step, not the latest (2)

    encoder = cyclejepa.load_encoder(cfg.output_dir, device="cpu")
    ids, features = evaluation_embeddings(cfg, cache, encoder)
    by_path = {p: i for i, p in enumerate(saved["records"])}
    rows = [by_path[paths[i]] for i in ids]
    np.testing.assert_allclose(saved["embeddings"][rows], features, rtol=1e-5, atol=1e-6)
    assert saved["qc_ok"][rows].all() and len(ids) > 30
    order = [by_path[paths[i]] for i in cache.columns["record_id"]]
    np.testing.assert_array_equal(saved["token_phases"][order], cache.phases("centre"))
    np.testing.assert_array_equal(saved["window_qc_ok"][order], cache.columns["qc_ok"])

    batch = np.stack([read_record_fast(paths[i]) for i in ids])  # arrays, not files
    direct = encoder.embed(batch, 500, [lead.lower() for lead in LEADS], batch_size=7)
    np.testing.assert_allclose(direct.embeddings, features, rtol=1e-5, atol=1e-6)
    single = encoder.embed(batch[3], 500.0, LEADS)
    np.testing.assert_allclose(single.embeddings[0], features[3], rtol=1e-5, atol=1e-6)
    assert single.tokens.shape == (1, 125, 16) and single.token_phases.shape == (1, 125)


def test_a_long_record_is_cut_into_windows_of_the_training_length(trained, tmp_path):
    cfg, cache, paths = trained
    encoder = cyclejepa.load_encoder(cfg.output_dir, step=2, device="cpu")
    first, second = read_record_fast(paths[1]), read_record_fast(paths[2])
    long = np.concatenate([first, second, first[:, :2500]], axis=1)  # 25 s: two windows, 5 s dropped
    together = encoder.embed(long, 500, LEADS)
    alone = encoder.embed(np.stack([first, second]), 500, LEADS)
    assert together.windows.tolist() == [2] and together.window_start.tolist() == [0.0, 10.0]
    np.testing.assert_allclose(together.tokens, alone.tokens, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(together.token_phases, alone.token_phases)
    valid = ~np.isnan(alone.token_phases) & alone.window_qc_ok[:, None]
    np.testing.assert_allclose(together.embeddings[0], alone.tokens[valid].mean(axis=0), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="record 0: the record lasts 6.00 s, shorter than one 10 s window"):
        encoder.embed(np.stack([first[:, :3000], second[:, :3000]]), 500, LEADS)


def test_resample_matches_the_sampled_sine():
    for fs, fs_out in ((250, 500), (360, 500), (1000, 500)):
        t = np.arange(int(4 * fs)) / fs
        y = resample(np.sin(2 * np.pi * 7.0 * t)[None], fs, fs_out)
        t_out = np.arange(y.shape[-1]) / fs_out
        inner = slice(fs_out // 2, -fs_out // 2)  # away from the padded ends
        assert y.shape == (1, int(4 * fs_out)) and y.dtype == np.float32
        np.testing.assert_allclose(y[0, inner], np.sin(2 * np.pi * 7.0 * t_out)[inner], atol=2e-3)


def test_npz_and_parquet_round_trip(trained, tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    cfg, cache, paths = trained
    long = np.concatenate([read_record_fast(paths[i]) for i in (5, 6, 7)], axis=1)[:, :12500]  # 25 s
    fast = write_record(tmp_path / "fast", resample(long, 500, 1000).astype(np.float64), 1000, LEADS)
    encoder = cyclejepa.load_encoder(cfg.output_dir / "runs" / "winder-seed0", device="cpu")
    result = encoder.embed_files([paths[1], fast, paths[2]], batch_size=2)
    assert result.windows.tolist() == [1, 2, 1] and not result.failed
    npz = np.load(result.save(tmp_path / "e.npz"))
    for name in (
        "records",
        "embeddings",
        "qc_ok",
        "qc_reason",
        "mean_tokens",
        "input_distance",
        "windows",
        "window_start",
        "window_qc_ok",
        "window_qc_reason",
        "token_phases",
        "tokens",
        *EVENT_FIELDS,
    ):
        np.testing.assert_array_equal(npz[name], getattr(result, name), err_msg=name)
    table = pd.read_parquet(result.save(tmp_path / "e.parquet"))
    assert table["record"].tolist() == result.records.tolist()
    np.testing.assert_array_equal(np.stack(table["embedding"]), result.embeddings)
    np.testing.assert_array_equal(table["qc_ok"], result.qc_ok)
    np.testing.assert_array_equal(np.stack(table["mean_tokens"]), result.mean_tokens)
    np.testing.assert_array_equal(table["input_distance"], result.input_distance)
    np.testing.assert_array_equal(table["windows"], result.windows)
    for name in ("window_start", "window_qc_ok", "window_qc_reason", "token_phases", "tokens", *EVENT_FIELDS):
        flat = np.concatenate([nested_array(cell) for cell in table[name]])  # records' windows (events) in order
        np.testing.assert_array_equal(flat, getattr(result, name), err_msg=name)
    assert [len(cell) for cell in table["event_time_s"]] == [
        result.window_events[a : a + n].sum()
        for a, n in zip(np.cumsum(result.windows) - result.windows, result.windows, strict=True)
    ]
    light = encoder.embed_files([paths[1]], keep_tokens=False)  # --no-tokens
    np.testing.assert_allclose(light.embeddings, result.embeddings[:1], rtol=1e-5, atol=1e-6)  # another batch
    assert light.tokens is None and "tokens" not in np.load(light.save(tmp_path / "light.npz"))
    assert "tokens" not in pd.read_parquet(light.save(tmp_path / "light.parquet")).columns


EVENT_FIELDS = ("window_events", "event_time_s", "event_coordinate", "cycle_quality", "cycle_ok")


def test_the_events_of_an_embedded_record_are_the_caches_timed_in_the_record(trained, tmp_path):
    """A training record's events through `embed_files` equal the cache's (sample / cache rate);
    a 25 s record at 1000 Hz carries its second window's events 10 s on, each matching a beat
    of the same signal phased whole; the ECG provider judges no single cycle: NaN quality, each
    cycle the window's verdict, a window's last event none."""
    cfg, cache, paths = trained
    encoder = cyclejepa.load_encoder(cfg.output_dir / "runs" / "winder-seed0", device="cpu")
    row = int(np.flatnonzero(cache.columns["record_id"] == 1)[0])
    result = encoder.embed_files([paths[1]])
    np.testing.assert_allclose(result.event_time_s, cache.events(row) / cache.cache_fs, rtol=0, atol=1e-12)
    assert result.window_events.tolist() == [len(cache.events(row))] and set(result.event_coordinate) == {0}
    assert np.isnan(result.cycle_quality).all()
    assert result.cycle_ok.tolist() == [bool(cache.columns["qc_ok"][row])] * (len(result.cycle_ok) - 1) + [False]

    long = np.concatenate([read_record_fast(paths[i]) for i in (5, 6, 7)], axis=1)[:, :12500]  # 25 s at 500 Hz
    two = encoder.embed(resample(long, 500, 1000), 1000, list(LEADS))
    first, second = two.window_events
    assert first > 5 and second > 5 and two.windows.tolist() == [2]
    assert (two.event_time_s[:first] < 10).all() and (two.event_time_s[first:] >= 10).all()
    cache_fs = encoder.geometry.cache_fs
    whole = encoder.provider.phase(resample(long, 500, cache_fs), cache_fs, list(LEADS)).events / cache_fs
    distance = np.abs(two.event_time_s[:, None] - whole[None]).min(axis=1)
    assert np.median(distance) < 0.01, distance  # the same beats, found window by window


def nested_array(cell):
    """A parquet list cell as pandas gives it (object arrays of arrays) as one numpy array."""
    if cell.dtype == object and len(cell) and isinstance(cell[0], np.ndarray):
        return np.stack([nested_array(inner) for inner in cell])
    return np.array(cell.tolist())


def test_bad_arguments_fail_before_any_work(trained, tmp_path, monkeypatch):
    cfg, _, paths = trained
    with pytest.raises(ValueError, match=r"unknown format '\.csv'; use one of \.npz, \.parquet"):
        check_output(tmp_path / "e.csv")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ValueError, match=r"parquet needs pyarrow \(pip install pyarrow\)"):
        check_output(tmp_path / "e.parquet")
    with pytest.raises(FileNotFoundError, match=r"no checkpoint of step 3 .* it holds steps \[1, 2\]"):
        cyclejepa.load_encoder(cfg.output_dir, step=3, device="cpu")
    with pytest.raises(ValueError, match=r"has no run arm control"):
        cyclejepa.load_encoder(cfg.output_dir, arm="control", device="cpu")
    with pytest.raises(FileNotFoundError, match="no config.yaml"):
        cyclejepa.load_encoder(tmp_path, device="cpu")
    result = CliRunner().invoke(app, ["embed", str(cfg.output_dir), str(tmp_path / "missing"), "--out", str(tmp_path / "e.npz")])
    assert result.exit_code == 1 and "none of the 1 records could be embedded" in result.output
    assert not (tmp_path / "e.npz").exists()


def test_a_cache_rebuilt_for_another_experiment_is_refused_by_every_reader(trained, tmp_path):
    """A second experiment sharing the cache folder rebuilds it with 8 s windows: embedding the
    first run, evaluating it and its evaluation workers refuse, naming both sides."""
    import shutil

    from cyclejepa.data.cache import CacheMismatch
    from cyclejepa.pipeline import load_encoder

    cfg, _, _ = trained
    out = tmp_path / "first"
    shutil.copytree(cfg.output_dir, out)
    first = cfg.model_copy(update={"output_dir": out})
    pipeline.configured_cache(first)  # the cache it was built with is accepted
    second = parse_config({**first.model_dump(mode="json"), "data": {
        **{k: v for k, v in first.data.model_dump(mode="json").items() if k not in ("window_s",)},
        "window_s": 8.0, "cache_dir": str(out / "cache")}})  # fmt: skip
    pipeline.prepare(second, progress=False)
    expected = r"built for another experiment \(window_s: cache 8.0, config 10.0\)"
    with pytest.raises(CacheMismatch, match=expected):
        load_encoder(out)
    with pytest.raises(CacheMismatch, match=expected):
        pipeline.evaluate_experiment(first)
    result = CliRunner().invoke(app, ["evaluate", str(out / "config.yaml")])
    assert result.exit_code == 1 and "window_s: cache 8.0, config 10.0" in result.output and "Traceback" not in result.output


def test_input_distance_in_closed_form():
    x = np.zeros((2, 3, 400))
    x[:, 0] = np.tile([100.0, -100.0], 200)  # std 100: two decades
    x[:, 1] = np.tile([1.0, -1.0], 200) + 9.0  # std 1, mean 9: log10(1 + 9) = one decade
    x[:, 2] = np.tile([1.0, -1.0], 200)  # as trained: zero
    assert input_distance(x) == (2.0, 0)
    assert input_distance(x[:, 1:]) == (pytest.approx(1.0, abs=1e-12), 0)
    assert input_distance(x[:, 2:]) == (0.0, 0)
    x[:, 2] = 0.5  # a flat channel is infinitely far
    assert input_distance(x) == (np.inf, 2)


def test_a_record_far_outside_the_normalisation_is_flagged_not_refused(trained):
    cfg, _, paths = trained
    encoder = cyclejepa.load_encoder(cfg.output_dir, device="cpu")
    record = read_record_fast(paths[3])
    result = encoder.embed(np.stack([record, 200 * record, record + 40.0]), 500, LEADS)
    assert result.input_distance[0] <= OUT_OF_RANGE_DECADES and "out_of_range" not in result.qc_reason[0]
    assert result.input_distance[1] > 2 and result.input_distance[2] > 1
    for row in (1, 2):
        assert (
            "out_of_range: channel " in result.qc_reason[row] and "decades from the run's normalisation" in result.qc_reason[row]
        )
    assert result.qc_ok.tolist() == [result.qc_ok[0]] * 3  # flagged records keep their embeddings
    prepared = encoder.prepare(200 * record, 500, LEADS).signals.astype(np.float64)
    naive = max(max(abs(np.log10(prepared[:, c].std())), np.log10(1 + abs(prepared[:, c].mean()))) for c in range(12))
    assert result.input_distance[1] == pytest.approx(naive, rel=1e-9)


def test_non_finite_weights_and_tokens_are_refused_by_name(trained, monkeypatch):
    cfg, _, paths = trained
    encoder = cyclejepa.load_encoder(cfg.output_dir, device="cpu")
    broken = copy.deepcopy(encoder.model)
    with torch.no_grad():
        broken.projector[0].weight[0, 0] = float("inf")
    with pytest.raises(ValueError, match=r"holds non-finite \(NaN or infinite\) weights in 1 tensor\(s\): projector.0.weight"):
        Encoder(broken, encoder.settings, "cpu", {"run": "x"}, encoder.symmetry)
    record = read_record_fast(paths[3])
    huge = record * 1e30  # finite input whose tokens overflow
    with pytest.raises(ValueError, match=r"records \['1'\]: the encoder's output is not finite"):
        encoder.embed(np.stack([record, huge]), 500, LEADS)
    read = encoder.read
    monkeypatch.setattr(encoder, "read", lambda path: Record("huge", huge, 500.0, LEADS) if path == "huge" else read(path))
    result = encoder.embed_files([paths[3], "huge", paths[4]])
    assert result.records.tolist() == [paths[3], paths[4]] and list(result.failed) == ["huge"]
    assert "the encoder's output is not finite" in result.failed["huge"]


def odd_name_record(folder, source):
    """A copy of the WFDB record ``source`` whose file name holds a byte that is not UTF-8 (b"\\xff"),
    as a Linux file system allows; returns its path as Python holds it (surrogate escaped)."""
    import shutil
    from pathlib import Path

    source = Path(source)
    folder.mkdir()
    path = folder / os.fsdecode(b"ecg-\xff-1")
    shutil.copyfile(source.with_suffix(".hea"), path.with_suffix(".hea"))  # its header names the signal file
    shutil.copyfile(source.with_suffix(".dat"), folder / f"{source.name}.dat")
    return path


def cli(*arguments, **options):
    """``cyclejepa ARGUMENTS`` in a fresh interpreter (this copy of the library), as users run it."""
    return subprocess.run([sys.executable, "-m", "cyclejepa", *arguments], capture_output=True, text=True, **options)


def test_a_record_name_that_is_not_utf8_is_kept_in_both_formats(trained, tmp_path):
    """Parquet text is UTF-8: the name's stray byte is written as \\xff and every record is kept;
    the npz keeps the name exactly (os.fsencode gives back the file's bytes)."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    cfg, _, paths = trained
    odd = odd_name_record(tmp_path / "odd", paths[2])
    done = cli("embed", str(cfg.output_dir), str(odd), paths[3], "--out", str(tmp_path / "e.parquet"), "--device", "cpu")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "2 records embedded" in done.stdout and "0 failed" in done.stdout
    table = pd.read_parquet(tmp_path / "e.parquet")
    assert table["record"].tolist() == [f"{tmp_path}/odd/ecg-\\xff-1", paths[3]]
    encoder = cyclejepa.load_encoder(cfg.output_dir, device="cpu")
    saved = np.load(encoder.embed_files([odd, paths[3]]).save(tmp_path / "e.npz"))
    assert os.fsencode(str(saved["records"][0])) == os.fsencode(str(odd)) and saved["records"][1] == paths[3]
    np.testing.assert_array_equal(np.stack(table["embedding"]), saved["embeddings"])


def test_a_failed_write_keeps_the_previous_file_and_names_it(trained, tmp_path, monkeypatch):
    """A disk that fills half-way through the write: the previous output stays as it was, no
    partial file is left, and the error names the output (npz and parquet)."""
    pytest.importorskip("pyarrow")
    import pyarrow.parquet

    cfg, _, paths = trained
    result = cyclejepa.load_encoder(cfg.output_dir, device="cpu").embed_files([paths[1]])
    good = {out: out.read_bytes() for out in (result.save(tmp_path / "e.npz"), result.save(tmp_path / "e.parquet"))}
    for out, module, writer in ((tmp_path / "e.npz", np, "savez"), (tmp_path / "e.parquet", pyarrow.parquet, "write_table")):
        real = getattr(module, writer)

        def full_disk(*args, real=real, position=int(writer == "write_table"), **kwargs):
            real(*args, **kwargs)  # the disk fills before the file is complete: a truncated file
            file = args[position]
            with open(file, "r+b") if isinstance(file, str | os.PathLike) else contextlib.nullcontext(file) as handle:
                handle.truncate(100)
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(module, writer, full_disk)
        with pytest.raises(OSError, match=rf"{out}: could not be written \(No space left on device\); any previous file"):
            result.save(out)
        monkeypatch.setattr(module, writer, real)
        assert out.read_bytes() == good[out], f"{out.name} was replaced by a partial file"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["e.npz", "e.parquet"], "a partial file was left"


def test_embed_refuses_what_is_not_a_signal_a_rate_or_channel_names(trained):
    cfg, _, paths = trained
    encoder = cyclejepa.load_encoder(cfg.output_dir, device="cpu")
    record = read_record_fast(paths[3])
    dtypes = {object: "object: Python objects", bool: "bool: booleans", complex: r"complex128: complex numbers \(an imaginary",
              "datetime64[ms]": "datetime64\\[ms\\]: dates", str: "<U32: text"}  # fmt: skip
    for dtype, named in dtypes.items():
        with pytest.raises(ValueError, match=f"signal must be an array of real numbers .*got dtype {named}"):
            encoder.embed(record.astype(dtype), 500, LEADS)
    with pytest.raises(ValueError, match="signal must be a numeric array"):
        encoder.embed([record[0], record[1, :10]], 500, LEADS[:2])  # ragged
    for fs in ("500", True, -500, float("nan"), float("inf"), None):
        with pytest.raises(ValueError, match=r"fs must be a positive finite number of Hz, got"):
            encoder.embed(record, fs, LEADS)
    with pytest.raises(ValueError, match=r"channel names must be a list of strings, one per row, got str 'I'"):
        encoder.embed(record[:1], 500, "I")
    with pytest.raises(ValueError, match=r"channel names must be non-empty strings; not so at 0: 1, 3: ''"):
        encoder.embed(record[:4], 500, [1, "II", "III", ""])
    with pytest.raises(ValueError, match=r"channel names must be a list of strings"):
        encoder.prepare(record, 500, None)
    same = encoder.embed(record.astype(np.float32), np.float64(500), np.array(LEADS))  # numpy scalars and names are fine
    np.testing.assert_allclose(same.tokens, encoder.embed(record, 500, LEADS).tokens, rtol=0, atol=1e-5)


def test_a_record_slower_than_the_phase_provider_needs_is_refused_not_upsampled(trained, tmp_path):
    """The run's provider (R-peaks, 55.6 Hz at least) refuses a 40 Hz file, naming both rates, as
    `prepare` does; before, ``embed`` upsampled it to the cache rate."""
    from cyclejepa.data.datasets import RecordRejected
    from scipy.signal import resample_poly

    cfg, cache, paths = trained
    encoder = cyclejepa.load_encoder(cfg.output_dir, device="cpu")
    slow = resample_poly(read_record_fast(paths[1]), 2, 25, axis=1)  # 500 Hz -> 40 Hz
    path = write_record(tmp_path / "slow", slow, 40, LEADS)
    with pytest.raises(RecordRejected, match=r"40 Hz.*55\.6 Hz"):
        encoder.read(path)


def test_embed_reads_a_run_whose_corpus_was_copied_with_new_modification_times(trained):
    """``cp -r`` of the corpus gives its files new mtimes: embedding, which never reads the
    corpus, still loads the run; a reader of the corpus (evaluation) still refuses the cache."""
    import os

    from cyclejepa.data.cache import CacheMismatch
    from cyclejepa.pipeline import load_encoder

    cfg, _, _ = trained
    files = [path for path in Path(cfg.data.root).rglob("*") if path.is_file()]
    saved = {path: path.stat() for path in files}
    try:
        for path, stat in saved.items():
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
        with pytest.raises(CacheMismatch, match="corpus: cache"):
            pipeline.configured_cache(cfg)
        assert load_encoder(cfg.output_dir, device="cpu").model is not None
    finally:
        for path, stat in saved.items():
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def read_shards(folder):
    """Every parquet shard of a corpus embedding folder, in shard order, as one table."""
    import pyarrow.parquet as pq
    import pyarrow as pa

    return pa.concat_tables([pq.read_table(path) for path in sorted(folder.glob("part-*.parquet"))]).to_pandas()


def test_a_corpus_is_embedded_into_shards_equal_to_one_call_and_a_killed_run_resumes(trained, tmp_path):
    """40 records in shards of 16: three shards holding every record once, in the dataset's order,
    equal to one `embed_entries` call; two shards lost and a partial file left (a killed run):
    the rerun embeds those two only and removes the partial file; other arguments are refused."""
    from cyclejepa.pipeline.embedding import CORPUS_MANIFEST, embed_corpus

    cfg, _, _ = trained
    encoder = cyclejepa.load_encoder(cfg.output_dir / "runs" / "winder-seed0", device="cpu")
    dataset = encoder.corpus_dataset()
    entries = dataset.entries()
    whole = encoder.embed_entries(dataset, entries)
    done = embed_corpus(encoder, tmp_path / "corpus", records_per_shard=16, progress=False)
    assert [p.name for p in done.shards] == [f"part-0000{k}-of-00003.parquet" for k in range(3)]
    assert done.embedded == len(entries) == 40 and not done.failed and done.resumed == 0
    table = read_shards(tmp_path / "corpus")
    assert table["record"].tolist() == [entry.name for entry in entries] == whole.records.tolist()
    np.testing.assert_allclose(np.stack(table["embedding"]), whole.embeddings, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.concatenate(table["event_time_s"].tolist()), whole.event_time_s)
    assert "tokens" not in table.columns  # the default keeps record embeddings, phases, events, QC

    before = {p.name: p.read_bytes() for p in done.shards}
    for name in ("part-00000-of-00003.parquet", "part-00002-of-00003.parquet"):
        (tmp_path / "corpus" / name).unlink()
    (tmp_path / "corpus" / ".part-00002-of-00003.parquet.x1.partial").write_bytes(b"torn")
    again = embed_corpus(encoder, tmp_path / "corpus", records_per_shard=16, progress=False)
    assert again.resumed == 1 and again.embedded == 40 and not list((tmp_path / "corpus").glob(".*partial"))
    assert read_shards(tmp_path / "corpus")["record"].tolist() == table["record"].tolist()
    assert (tmp_path / "corpus" / "part-00001-of-00003.parquet").read_bytes() == before["part-00001-of-00003.parquet"]
    with pytest.raises(ValueError, match=r"other arguments \(records_per_shard differ\)"):
        embed_corpus(encoder, tmp_path / "corpus", records_per_shard=8, progress=False)
    assert (tmp_path / "corpus" / CORPUS_MANIFEST).is_file()


@pytest.mark.slow
def test_corpus_shards_embedded_by_two_worker_processes_equal_those_of_one(trained, tmp_path):
    from cyclejepa.pipeline.embedding import embed_corpus

    cfg, _, _ = trained
    encoder = cyclejepa.load_encoder(cfg.output_dir / "runs" / "winder-seed0", device="cpu")
    embed_corpus(encoder, tmp_path / "one", records_per_shard=20, progress=False)
    two = embed_corpus(encoder, tmp_path / "two", records_per_shard=20, workers=2, progress=False)
    assert len(two.shards) == 2 and two.embedded == 40
    one, both = read_shards(tmp_path / "one"), read_shards(tmp_path / "two")
    assert both["record"].tolist() == one["record"].tolist()
    np.testing.assert_allclose(np.stack(both["embedding"]), np.stack(one["embedding"]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("records", "out", "corpus", "root", "message"),
    [
        (["r"], "out", True, None, "give record files or --corpus, not both"),
        ([], "out", False, None, "give record files to embed, or --corpus"),
        (["r"], "out", False, "folder", "--root names the corpus folder of --corpus"),
        (None, "x.parquet", True, None, "--corpus writes a folder of parquet shards: give --out a folder, not x.parquet"),
    ],
)
def test_embed_arguments_that_cannot_work_are_refused(records, out, corpus, root, message):
    from cyclejepa.cli import _check_embed_arguments

    with pytest.raises(ValueError, match=re.escape(message)):
        _check_embed_arguments([Path(r) for r in records or []], Path(out), corpus, root and Path(root))


def test_embed_refuses_record_files_with_corpus_before_loading_the_run(tmp_path):
    """From a fresh process, before the (missing) run is looked at."""
    words = ["embed", str(tmp_path / "no-run"), str(tmp_path), "--corpus", "--out", str(tmp_path / "out")]
    done = subprocess.run([sys.executable, "-m", "cyclejepa", *words], capture_output=True, text=True)
    assert done.returncode == 1 and "give record files or --corpus, not both" in " ".join(done.stderr.split()), done.stderr
