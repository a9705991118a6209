"""Cycle quality of the ``pulse`` and ``breath`` providers: noise, flat lines with jitter and
aperiodic signals fail; real BIDMC records pass and lose only the cycles a glitch touches; each
cycle's quality, the periodicity measures and the rates against independent recomputations; the
``phase`` command's rates, quality, table and figure in a fresh interpreter."""

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import SHARED
from cyclejepa.data.samples import read_record
from cyclejepa.phase import BreathProvider, EcgRPeakProvider, PhaseTrack, PulseProvider
from cyclejepa.phase.cycles import assess_cycles, autocorrelation_at

BIDMC = SHARED / "data" / "bidmc-samples"
bidmc = pytest.mark.skipif(not (BIDMC / "bidmc44.hea").is_file(), reason=f"shared BIDMC records not found at {BIDMC}")
FS = 125.0
PROVIDERS = {"pulse": (PulseProvider, "PLETH"), "breath": (BreathProvider, "RESP")}


def generated(kind: str, seed: int, seconds: float = 120.0) -> np.ndarray:
    """A signal with no cycle in it: noises, a flat line with 1e-12 jitter, a random walk, a
    chirp sweeping 3 to 240 per minute."""
    rng = np.random.default_rng(seed)
    n = int(FS * seconds)
    return {
        "white": lambda: rng.standard_normal(n),
        "flat": lambda: 1.0 + 1e-12 * rng.standard_normal(n),
        "quantised": lambda: np.round(0.7 * rng.standard_normal(n)),
        "random walk": lambda: np.cumsum(rng.standard_normal(n)),
        "chirp": lambda: np.sin(2 * np.pi * np.cumsum(np.linspace(0.05, 4.0, n)) / FS),
    }[kind]()


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
@pytest.mark.parametrize("kind", ["white", "flat", "quantised", "random walk", "chirp"])
def test_noise_flat_lines_and_aperiodic_signals_fail_for_every_seed(provider, kind):
    make, lead = PROVIDERS[provider]
    for seed in range(3):
        track = make(lead=lead).phase(generated(kind, seed)[None], FS, [lead])
        assert not track.qc.ok, (seed, track.qc.metrics)
        assert {"few_good_cycles", "aperiodic"} & set(track.qc.reasons), track.qc.reasons


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_the_phase_table_gives_noise_no_rate(provider):
    """White noise passes a few cycles as good, whose mean would read as a rate (about 100/min
    for pulse): the table says n/a where QC fails, and gives a passing track its good cycles'
    mean rate."""
    from cyclejepa.cli import _rates_and_good_cycles

    make, lead = PROVIDERS[provider]
    noise = make(lead=lead).phase(generated("white", 0)[None], FS, [lead])
    assert np.isfinite(noise.mean_rate()) and _rates_and_good_cycles(noise)[0] == "n/a"
    t = np.arange(int(FS * 120)) / FS
    clean = make(lead=lead).phase(np.sin(2 * np.pi * (1.2 if provider == "pulse" else 0.25) * t)[None], FS, [lead])
    assert clean.qc.ok, clean.qc.reasons
    assert _rates_and_good_cycles(clean)[0] == f"{clean.mean_rate():.1f}"


def test_a_45_per_minute_sine_is_no_breathing_at_half_its_rate():
    """``breath`` reads a 45/min sine (above its 42/min band) as 22.5/min, two sine cycles per
    detected cycle: the template's first harmonic is empty. ``pulse`` takes it as 45 beats/min."""
    t = np.arange(int(120 * FS)) / FS
    sine = np.sin(2 * np.pi * 0.75 * t)[None]
    breath = BreathProvider(lead="RESP").phase(sine, FS, ["RESP"])
    assert "no_fundamental" in breath.qc.reasons and breath.qc.metrics["fundamental_share"] < 0.05
    assert np.median(breath.rates().per_min) == pytest.approx(22.5, abs=0.5)
    pulse = PulseProvider(lead="PLETH").phase(sine, FS, ["PLETH"])
    assert pulse.qc.ok and np.median(pulse.rates().per_min) == pytest.approx(45.0, abs=0.5)


@bidmc
@pytest.mark.parametrize(("provider", "start_s"), [("pulse", 200.0), ("breath", 200.0)])
def test_a_real_record_passes_and_a_glitch_marks_only_its_cycles_bad(provider, start_s):
    """bidmc45 (PLETH, RESP as released): QC passes; 3 s flattened to the channel's maximum (a
    sensor off its finger, a saturated amplifier) marks bad the cycles that overlap it, the record
    still passes, and the other cycles keep their verdict."""
    record = read_record(BIDMC / "bidmc45")
    make, lead = PROVIDERS[provider]
    row = record.names.index(f"{lead},")
    clean = make(lead=lead).phase(record.signal, record.fs, record.names)
    assert clean.qc.ok and clean.cycle_ok.mean() > 0.9
    signal = record.signal.copy()
    glitch = slice(int(start_s * record.fs), int((start_s + 3.0) * record.fs))
    signal[row, glitch] = np.nanmax(signal[row])
    track = make(lead=lead).phase(signal, record.fs, record.names)
    assert track.qc.ok, track.qc.details
    starts, ends = track.events[:-1], track.events[1:]
    touched = (ends > glitch.start) & (starts < glitch.stop)
    assert touched.any() and not track.cycle_ok[touched].all()
    far = (ends < glitch.start - 30 * record.fs) | (starts > glitch.stop + 30 * record.fs)
    clean_cycles = dict(zip(clean.events[:-1].tolist(), clean.cycle_ok.tolist(), strict=True))
    same = [clean_cycles.get(int(s)) == ok for s, ok in zip(starts[far], track.cycle_ok[far], strict=True)]
    assert np.mean(same) > 0.95


@bidmc
@pytest.mark.parametrize("name", ["bidmc44", "bidmc52"])
def test_an_implausible_interval_marks_its_cycle_bad_not_the_record(name):
    """bidmc44's PLETH holds a 2.304 s interval, bidmc52's a 0.264 s one, outside the plausible
    0.27-2 s: record QC failed on them before (``implausible_pulse_interval``); now those cycles
    are bad and the records pass."""
    record = read_record(BIDMC / name)
    track = PulseProvider(lead="PLETH").phase(record.signal, record.fs, record.names)
    outside = (track.intervals_s < 0.27) | (track.intervals_s > 2.0)
    assert outside.any() and not track.cycle_ok[outside].any()
    assert track.qc.ok and track.qc.metrics["n_implausible_intervals"] >= outside.sum()


def test_each_cycles_quality_is_its_correlation_with_the_median_template():
    """Against a float64 recomputation, one cycle at a time: resampled with np.interp, the
    template the median of the plausible cycles, the quality np.corrcoef clipped at 0."""
    rng = np.random.default_rng(3)
    t = np.arange(int(60 * FS)) / FS
    wave = np.sin(2 * np.pi * 1.2 * t) + 0.4 * np.sin(2 * np.pi * 2.4 * t + 1.0) + 0.3 * rng.standard_normal(len(t))
    events = np.flatnonzero((wave[1:-1] > wave[:-2]) & (wave[1:-1] >= wave[2:]) & (wave[1:-1] > 1.0)) + 1
    events = events[np.concatenate([[True], np.diff(events) > 0.4 * FS])]
    assessed = assess_cycles(wave, events, FS, (0.27, 2.0), 2.5)
    cycles = []
    for start, end in zip(events[:-1], events[1:], strict=True):
        cycles.append(np.interp(np.linspace(start, end, 64), np.arange(len(wave)), wave))
    plausible = [0.27 <= (end - start) / FS <= 2.0 for start, end in zip(events[:-1], events[1:], strict=True)]
    template = np.median(np.array(cycles)[plausible], axis=0)
    expected = np.array([max(np.corrcoef(cycle, template)[0, 1], 0.0) for cycle in cycles])
    np.testing.assert_allclose(assessed.quality, expected, rtol=0, atol=1e-12)
    assert 0.05 < expected.min() < 0.95 < expected.max()  # the check sees a spread of qualities


def test_the_periodicity_measures_against_closed_forms():
    """A pure sine of period T: autocorrelation at T is (N - T) / N of the centred energy's
    sum (cos 2π = 1), all the template's power is in its first harmonic and the template explains
    every cycle."""
    period = 100
    x = np.sin(2 * np.pi * np.arange(20 * period) / period)
    direct = float((x[:-period] - x.mean()) @ (x[period:] - x.mean()) / ((x - x.mean()) @ (x - x.mean())))
    assert autocorrelation_at(x, period) == pytest.approx(direct, abs=1e-12)
    assert autocorrelation_at(x, period) == pytest.approx((len(x) - period) / len(x), abs=1e-9)
    assessed = assess_cycles(x, np.arange(0, len(x), period), 100.0, (0.25, 2.0), None)
    assert assessed.fundamental_share == pytest.approx(1.0, abs=1e-6)  # linear resampling: tiny harmonics
    assert assessed.template_share == pytest.approx(1.0, abs=1e-9)
    assert np.isnan(autocorrelation_at(np.ones(50), 5)) and np.isnan(autocorrelation_at(x, len(x)))


def test_rates_are_sixty_over_each_interval_and_start_at_each_cycle():
    events = np.array([10, 110, 190, 300, 420])
    track = PhaseTrack(events, fs=100.0, n_samples=500, cycle_ok=np.array([True, True, False, True]))
    rates = track.rates()
    np.testing.assert_allclose(rates.per_min, 60.0 / (np.diff(events) / 100.0))
    np.testing.assert_allclose(rates.time_s, events[:-1] / 100.0)
    assert track.mean_rate() == pytest.approx(np.mean([60.0, 75.0, 50.0]))
    assert PhaseTrack(events, fs=100.0, n_samples=500).mean_rate() == pytest.approx(np.mean(60.0 / (np.diff(events) / 100.0)))
    assert len(PhaseTrack(np.array([5]), fs=100.0, n_samples=50).rates().per_min) == 0
    with pytest.raises(ValueError, match=r"cycle_quality must have one entry per cycle, shape \(4,\)"):
        PhaseTrack(events, fs=100.0, n_samples=500, cycle_quality=np.ones(5))


def test_the_ecg_provider_assesses_no_cycles_and_keeps_its_verdict():
    """``ecg-rpeak`` hands back no waveform (`PhaseProvider.detect`): no cycle quality, the
    interval checks and metrics as before."""
    fs = 500.0
    t = np.arange(int(10 * fs)) / fs
    ecg = sum(np.exp(-(((t - beat) / 0.01) ** 2)) for beat in np.arange(0.5, 10, 0.8))
    track = EcgRPeakProvider(lead="II").phase(ecg[None], fs, ["II"])
    assert track.cycle_quality is None and track.cycle_ok is None
    assert set(track.qc.metrics) == {
        "n_events", "interval_min_s", "interval_median_s", "interval_max_s", "interval_ratio_max", "rate_per_min",
        "phase_yield",
    }  # fmt: skip
    assert len(track.rates().per_min) == len(track.events) - 1


def cyclejepa(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cyclejepa", *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@bidmc
def test_phase_command_prints_rates_and_cycle_quality_per_record():
    done = cyclejepa("phase", BIDMC / "bidmc44", "--provider", "pulse", "--lead", "PLETH", "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    events = np.array(row["events"])
    np.testing.assert_allclose(row["rates"]["per_min"], 60.0 * 125.0 / np.diff(events))
    np.testing.assert_allclose(row["rates"]["time_s"], events[:-1] / 125.0)
    assert len(row["cycle_quality"]) == len(row["cycle_ok"]) == len(events) - 1
    assert all(0.0 <= q <= 1.0 for q in row["cycle_quality"])
    assert row["qc"]["ok"] and 0.9 < np.mean(row["cycle_ok"]) < 1.0  # a few bad cycles, flagged
    assert row["qc"]["good_cycle_share"] == pytest.approx(np.mean(row["cycle_ok"]))


@pytest.mark.slow
@bidmc
def test_phase_command_table_and_plot(tmp_path):
    """The table's mean rate over good cycles and share of good cycles; --plot writes one PNG per
    record."""
    done = cyclejepa("phase", BIDMC / "bidmc44", BIDMC / "bidmc45", "--provider", "breath", "--lead", "RESP",
                     "--format", "table", "--plot", tmp_path / "figures")  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = read_record(BIDMC / "bidmc44")
    track = BreathProvider(lead="RESP").phase(record.signal, record.fs, record.names)
    line = next(line for line in done.stdout.splitlines() if "bidmc44" in line)
    assert f"{track.mean_rate():.1f}" in line and f"{track.cycle_ok.mean():.0%}" in line, done.stdout
    for name in ("bidmc44", "bidmc45"):
        png = (tmp_path / "figures" / f"{name}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and 10_000 < len(png) < 500_000
