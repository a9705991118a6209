"""Channel names as the releases write them (one matching rule: `cyclejepa.data.channels`),
records slower than the phase provider needs, and the subjects file of a ``wfdb`` folder; on
the BIDMC and MIT-BIH records of ../shared/data exactly as released, commands in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cyclejepa.data.channels import ChannelError, channel_key, match_channels
from cyclejepa.data.wfdb_folder import WfdbFolder
from cyclejepa.phase.breath import BreathProvider
from cyclejepa.phase.ecg.provider import EcgRPeakProvider
from cyclejepa.phase.pulse import PulseProvider
from cyclejepa.phase.records import choose_provider, phase_record

from conftest import SAMPLES, SHARED

BIDMC = SHARED / "data" / "bidmc-samples"
bidmc = pytest.mark.skipif(not (BIDMC / "bidmc44.hea").is_file(), reason="shared bidmc-samples absent")
mitdb = pytest.mark.skipif(not (SAMPLES / "100.hea").is_file(), reason="shared physionet-samples absent")
ROOT = Path(__file__).resolve().parents[1]


def cyclejepa(*args: object) -> subprocess.CompletedProcess:
    """``python -m cyclejepa ARGS`` in a fresh interpreter, from the repository root."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "cyclejepa", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)  # fmt: skip


def write(folder: Path, name: str, signal: np.ndarray, fs: float, names: list[str], units: list[str] | None = None) -> Path:
    """(samples, channels) ``signal`` as a WFDB record (format 16) named ``names``."""
    import wfdb

    wfdb.wrsamp(name, fs=fs, units=units or ["mV"] * len(names), sig_name=names, p_signal=signal,
                fmt=["16"] * len(names), write_dir=str(folder))  # fmt: skip
    return folder / name


def test_channel_key_ignores_case_space_and_trailing_punctuation_and_match_refuses_two():
    assert [channel_key(n) for n in ("PLETH,", " Resp ", "II;", "mod.V1", "V1-V2")] == ["pleth", "resp", "ii", "mod.v1", "v1-v2"]
    assert match_channels(["pleth", "II"], ["PLETH,", "RESP,", "II,"]) == [0, 2]
    with pytest.raises(ChannelError, match=r"'PLETH' matches 2 channels, \['PLETH', 'pleth,'\]"):
        match_channels("PLETH", ["PLETH", "RESP", "pleth,"])
    with pytest.raises(ChannelError, match=r"no channel \['ABP'\] \(the record has \['PLETH,', 'RESP,'\]\)"):
        match_channels(["PLETH", "ABP"], ["PLETH,", "RESP,"])
    with pytest.raises(ValueError, match="name the same channel"):
        match_channels(["PLETH", "pleth,"], ["PLETH"])


def test_provider_choice_knows_release_and_holter_lead_names():
    """PhysioNet's ECG databases' lead names (MIT-BIH, QT, European ST-T, BIDMC's ``II,``) choose
    the R-peak provider; a monitor's pulse, respiration and numerics channels never count as ECG."""
    leads = ["II,", "ECG1", "ECG2", "MLII", "ML5", "CM5", "CC5", "D3", "mod.V1", "V1-V2", "V4-V5", "MCL1", "aVR,", "V,"]
    assert [n for n in leads if not EcgRPeakProvider.reads_channel(n)] == []
    assert [n for n in ("PLETH,", "RESP,", "ABP,", "HR,", "PULSE,", "SpO2,", "CVP,") if EcgRPeakProvider.reads_channel(n)] == []
    assert choose_provider(["PLETH,", "RESP,", "II,"]) == "ecg-rpeak"
    assert choose_provider(["V1-V2", "V4-V5"]) == "ecg-rpeak"
    assert PulseProvider.reads_channel("PLETH,") and BreathProvider.reads_channel("RESP,")


@bidmc
def test_phase_command_chooses_the_r_peak_provider_for_an_only_ecg_channel_named_ii_comma(tmp_path):
    """30 s of bidmc44's PLETH, RESP and II as released (names with their commas): the lead II, is
    the ECG, so ``phase`` without --provider finds R-peaks (about 90 per minute on this record)."""
    import wfdb

    record = wfdb.rdrecord(str(BIDMC / "bidmc44"), channel_names=["PLETH,", "RESP,", "II,"], sampto=125 * 30)
    path = write(tmp_path, "monitor", record.p_signal, 125, list(record.sig_name), ["NU", "NU", "mV"])
    done = cyclejepa("phase", path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert "r_peaks" in result and 35 <= len(result["r_peaks"]) <= 55


@mitdb
def test_phase_command_reads_bipolar_lead_names_and_repeated_leads(tmp_path):
    """20 s of MIT-BIH record 100 (MLII, V5) renamed as the QT Database names sele0509's leads
    (V1-V2, V4-V5) is an ECG to ``phase``; ``--lead A --lead B`` names two leads (the timing
    lead first), as a comma list does."""
    import wfdb

    record = wfdb.rdrecord(str(SAMPLES / "100"), sampto=360 * 20)
    path = write(tmp_path, "sele", record.p_signal, 360, ["V1-V2", "V4-V5"])
    done = cyclejepa("phase", path, "--lead", "V4-V5", "--lead", "V1-V2")
    listed = cyclejepa("phase", path, "--lead", "V4-V5,V1-V2", "--format", "jsonl")
    assert done.returncode == listed.returncode == 0, done.stderr + listed.stderr
    expected = phase_record(path, lead=["V4-V5", "V1-V2"])["r_peaks"]
    assert 20 <= len(expected) <= 30 and json.loads(done.stdout)["r_peaks"] == json.loads(listed.stdout)["r_peaks"] == expected
    assert expected != phase_record(path, lead="V1-V2")["r_peaks"]  # the first named lead times the beats
    assert choose_provider(["V1-V2", "V4-V5"]) == "ecg-rpeak"


@bidmc
def test_phase_command_reads_a_lead_with_its_trailing_comma_and_refuses_a_1_hz_record():
    done = cyclejepa("phase", BIDMC / "bidmc44", "--lead", "PLETH,")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["provider"] == "pulse" and 650 <= len(result["events"]) <= 780  # about 90 per minute for 8 min
    numerics = cyclejepa("phase", BIDMC / "bidmc44n")
    assert numerics.returncode == 1 and not numerics.stdout
    message = " ".join(numerics.stderr.split())
    assert "bidmc44n" in message and "1 Hz" in message and "1.56 Hz phase provider 'breath' needs" in message


@pytest.mark.parametrize(
    ("provider", "fs", "need"),
    [(PulseProvider(), 10.0, "17.8 Hz"), (BreathProvider(), 1.0, "1.56 Hz"), (EcgRPeakProvider(), 50.0, "55.6 Hz")],
)
def test_each_provider_refuses_a_signal_slower_than_its_band_needs(provider, fs, need):
    """Each provider's requirement is its highest frequency / 0.45 (pulse: its 8 Hz band-pass;
    breath: 0.7 Hz; ECG: the 25 Hz QRS band); at that rate it reads, below it refuses."""
    signal = np.sin(np.arange(int(60 * fs)) / fs * 2 * np.pi * 0.25)[None]
    with pytest.raises(ValueError, match=rf"sampled at {fs:g} Hz, below the {need}"):
        provider.phase(signal, fs, ["x"] if isinstance(provider, EcgRPeakProvider) else ["PLETH" if fs == 10 else "RESP"])
    assert provider.rate_problem(provider.min_fs) is None


@bidmc
def test_a_bidmc_folder_prepares_with_pleth_and_rejects_each_numerics_record_by_name(tmp_path):
    """The documented minimal config on a folder laid out as PhysioNet lays out BIDMC (PLETH,
    with its comma; the 1 Hz numerics records beside the waveforms): every waveform record kept,
    every numerics record rejected by name for its rate, none upsampled into the corpus."""
    root = tmp_path / "bidmc"
    root.mkdir()
    for name in ("bidmc44", "bidmc44n", "bidmc47", "bidmc47n"):
        for suffix in (".hea", ".dat"):
            shutil.copy(BIDMC / (name + suffix), root)
    config = tmp_path / "bidmc.yaml"
    config.write_text(
        f"name: bidmc\noutput_dir: {tmp_path / 'out'}\n"
        f"data: {{dataset: wfdb, root: {root}, options: {{channels: [PLETH]}}}}\nphase: {{provider: pulse}}\n"
    )
    done = cyclejepa("prepare", config)
    assert done.returncode == 0, done.stderr
    (rejections,) = (tmp_path / "out").rglob("rejections.csv")
    rows = rejections.read_text().splitlines()[1:]
    assert sorted(row.split(",")[0] for row in rows) == ["bidmc44n", "bidmc47n"]
    assert all(",sampling_rate," in row and "1 Hz, below the 17.8 Hz phase provider 'pulse' needs" in row for row in rows)
    (manifest,) = (tmp_path / "out").rglob("manifest.json")
    counts = json.loads(manifest.read_text())["counts"]
    assert (counts["records"], counts["records_kept"], counts["rejected"]) == (4, 2, 2)
    assert "2 records kept" in " ".join((done.stdout + done.stderr).split())


def test_two_channels_matching_one_name_reject_the_record_naming_both(tmp_path):
    wave = np.sin(np.arange(125 * 20) / 125 * 2 * np.pi)[:, None]
    write(tmp_path, "twice", np.hstack([wave, 2 * wave]), 125, ["PLETH", "pleth,"], ["NU", "NU"])
    write(tmp_path, "once", wave, 125, ["PLETH,"], ["NU"])
    dataset = WfdbFolder(tmp_path, channels=["PLETH"])
    assert [e.name for e in dataset.entries()] == ["once"]
    (rejected,) = dataset.rejected()
    assert rejected.record_id == "twice" and rejected.check == "channel_order"
    assert "['PLETH', 'pleth,']" in rejected.detail
    with pytest.raises(ValueError, match="name the same channel"):
        WfdbFolder(tmp_path, channels=["PLETH", "Pleth,"])


def subjects_folder(tmp_path: Path, text: bytes | None = None) -> Path:
    root = tmp_path / "records"
    root.mkdir()
    wave = np.sin(np.arange(125 * 20) / 125 * 2 * np.pi)[:, None]
    for name in ("r1", "r2"):
        write(root, name, wave, 125, ["PLETH"], ["NU"])
    if text is not None:
        (root / "subjects.csv").write_bytes(text)
    return root


def test_subjects_file_with_a_byte_order_mark_is_read(tmp_path):
    """A spreadsheet's "CSV UTF-8" starts with a byte-order mark; its columns are still record,subject."""
    root = subjects_folder(tmp_path, "record,subject\nr1,anna\nr2,anna\n".encode("utf-8-sig"))
    entries = WfdbFolder(root, channels=["PLETH"]).entries()
    assert [e.name for e in entries] == ["r1", "r2"] and len({e.patient_id for e in entries}) == 1


def test_subjects_file_not_utf8_is_named(tmp_path):
    root = subjects_folder(tmp_path, b"record,subject\nr1,J\xf6rg\nr2,J\xf6rg\n")
    with pytest.raises(ValueError, match=r"subjects\.csv: not UTF-8 text"):
        WfdbFolder(root, channels=["PLETH"]).entries()


def test_subjects_file_linked_from_outside_the_root_is_refused_unread(tmp_path):
    secret = tmp_path / "private.txt"
    secret.write_text("root:SECRET-HASH:19000:0\n")
    root = subjects_folder(tmp_path)
    (root / "subjects.csv").symlink_to(secret)
    with pytest.raises(ValueError, match="outside the dataset root") as caught:
        WfdbFolder(root, channels=["PLETH"]).entries()
    assert "SECRET" not in str(caught.value)


def test_a_channel_dead_across_the_corpus_is_named_with_the_remedy(tmp_path):
    """A channel constant in every training record cannot be z-scored: prepare names it and says
    to drop it from the channels, instead of printing the std vector."""
    from cyclejepa.data.cache import CacheSpec, prepare_cache

    t = np.arange(125 * 30) / 125
    for k, name in enumerate(("r1", "r2", "r3")):
        pulse = np.sin(2 * np.pi * (1.1 + 0.1 * k) * t) ** 7
        write(tmp_path, name, np.stack([pulse, np.full_like(t, 97.0)], axis=1), 125, ["PLETH", "SpO2"], ["NU", "%"])
    dataset = WfdbFolder(tmp_path, channels=["PLETH", "SpO2"], highpass_hz=None)
    spec = CacheSpec(tmp_path / "cache", phase_provider="pulse", train_folds=tuple(range(1, 11)))
    with pytest.raises(ValueError, match=r"cannot normalise SpO2 \(std 0\).*drop it from the dataset's channels"):
        prepare_cache(dataset, spec, progress=False)


@bidmc
def test_numerics_records_are_refused_for_their_rate_before_their_units_or_channels():
    """With ``channels: [RESP]`` and the breath provider, each 1 Hz numerics record (its RESP, in
    bpm) is rejected for its rate (1 Hz, below breath's 1.56 Hz) while indexing, headers only."""
    dataset = WfdbFolder(BIDMC, channels=["RESP"])
    dataset.require_rate(BreathProvider().rate_problem)
    assert [e.name for e in dataset.entries()] == [f"bidmc{n}" for n in range(44, 54)]
    rejected = {r.record_id: r for r in dataset.rejected()}
    assert sorted(rejected) == [f"bidmc{n}n" for n in range(44, 54)]
    assert {r.check for r in rejected.values()} == {"sampling_rate"}
    assert "1 Hz, below the 1.56 Hz phase provider 'breath' needs" in rejected["bidmc50n"].detail
