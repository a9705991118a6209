"""Waveform synthesis, vectorised over the records of a chunk and their beats: digital frames at
500 Hz, the 100 Hz release, R-peak samples.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from cyclejepa.data.preprocess import decimate
from cyclejepa.data.ptbxl import FS, N_SAMPLES
from cyclejepa.data.synthetic.heart import (
    _LEAD_MATRIX,
    _LIMB_FIELD,
    _QRS_WAVES,
    _RATE_ADAPTIVE,
    _TO_LEADS,
    _direction,
    _SignalPlan,
)

FS_LR = 100
GAIN = 1000.0  # adc units per mV: 1 µV steps, as in PTB-XL
_DURATION = N_SAMPLES / FS
_MARGIN = 1.0  # s of beats rendered beyond each end of the record


class _Events(NamedTuple):
    record: np.ndarray  # (K,) record of each event
    time: np.ndarray  # (K,) s
    rr: np.ndarray  # (K,) preceding interval, s
    gain: np.ndarray  # (K,) amplitude factor (respiratory modulation)

    def where(self, mask: np.ndarray, times: np.ndarray, rr: np.ndarray, gain: np.ndarray) -> _Events:
        """These events followed by those of the (n, B) arrays at ``mask``."""
        record = np.broadcast_to(np.arange(len(mask))[:, None], mask.shape)[mask]
        new = (record, times[mask], rr[mask], gain[mask])
        return _Events(*(np.concatenate(pair) for pair in zip(self, new, strict=True)))


_NO_EVENTS = _Events(np.zeros(0, dtype=np.int64), *(np.zeros(0) for _ in range(3)))


def _beat_series(
    rate: np.ndarray, irregular: np.ndarray, plan: _SignalPlan, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Event times and preceding intervals (n, B) from about 1 s before the record to past it.

    Regular series carry respiratory sinus arrhythmia and log-normal jitter; ``irregular``
    ones (atrial fibrillation) have independent log-normal intervals.
    """
    rr = 60 / rate
    beats = int(np.ceil((_DURATION + 2 * _MARGIN) / (0.5 * rr.min()))) + 2  # twice what is needed
    t0 = -_MARGIN - rng.random(len(rr)) * rr
    approx = t0[:, None] + np.arange(beats) * rr[:, None]
    breathing = np.sin(2 * np.pi * plan.resp_freq[:, None] * approx + plan.resp_phase[:, None])
    z = rng.standard_normal((len(rr), beats))
    sinus = (1 + plan.sinus_arrhythmia[:, None] * breathing) * np.exp(plan.rr_jitter[:, None] * z)
    fibrillation = np.exp(0.2 * z - 0.02)
    intervals = np.clip(rr[:, None] * np.where(irregular[:, None], fibrillation, sinus), 0.3, None)
    return t0[:, None] + np.cumsum(intervals, axis=1) - intervals[:, :1], intervals


def _events(plan: _SignalPlan, rng: np.random.Generator) -> tuple[_Events, _Events]:
    """Ventricular (R-peak) and atrial (P) events of every record near the record's span."""
    n = len(plan.hr)
    times, rr = _beat_series(plan.hr, plan.afib, plan, rng)
    free_atrial, _ = _beat_series(plan.atrial_rate, np.zeros(n, dtype=bool), plan, rng)
    beat = np.arange(times.shape[1]) + rng.integers(0, 4, (n, 1))
    blocked = (plan.block[:, None] >= 2) & (beat % np.maximum(plan.block, 1)[:, None] == 0)
    breathing = np.sin(2 * np.pi * plan.resp_freq[:, None] * times + plan.resp_phase[:, None])
    gain = 1 + plan.qrs_modulation[:, None] * breathing

    def near(t: np.ndarray) -> np.ndarray:
        return (t > -_MARGIN) & (t < _DURATION + _MARGIN)

    ventricular = _NO_EVENTS.where(near(times) & ~blocked, times, rr, gain)
    coupled = (~plan.afib & (plan.block != -1))[:, None]
    conducted_p = times - plan.pr[:, None]
    ones = np.ones_like(times)
    atrial = _NO_EVENTS.where(near(conducted_p) & coupled, conducted_p, ones, ones)
    dissociated = (plan.block == -1)[:, None] & near(free_atrial)
    free_ones = np.ones_like(free_atrial)
    atrial = atrial.where(dissociated, free_atrial, free_ones, free_ones)
    return ventricular, atrial


def _render(events: _Events, vec: np.ndarray, mu: np.ndarray, sd: np.ndarray, adaptive: np.ndarray, n: int) -> np.ndarray:
    """Heart vector (n, N_SAMPLES, 3) of Gaussian waves placed at the events.

    ``vec`` (n, W, 3), ``mu`` and ``sd`` (n, W) describe each record's waves; centres of the
    ``adaptive`` waves scale with the cube root of the preceding RR (Fridericia). Every event
    gets one window of samples covering its waves to 4.5 sd, and the windows are summed into
    the records with one ``bincount`` per coordinate.
    """
    active = np.flatnonzero(np.abs(vec).max(axis=(0, 2)) > 0)
    if len(events.time) == 0 or len(active) == 0:
        return np.zeros((n, N_SAMPLES, 3), dtype=np.float32)
    stretch = np.where(adaptive[active], np.cbrt(events.rr)[:, None], 1.0)  # (K, W)
    centre = (mu[events.record][:, active] * stretch).astype(np.float32)
    width = sd[events.record][:, active].astype(np.float32)
    lo = int(np.floor((centre - 4.5 * width).min() * FS))
    hi = int(np.ceil((centre + 4.5 * width).max() * FS)) + 1
    offsets = np.arange(lo, hi)
    start = np.rint(events.time * FS).astype(np.int64)
    tau = ((start[:, None] + offsets) / FS - events.time[:, None]).astype(np.float32)  # (K, L)
    shapes = np.exp(-0.5 * ((tau[:, None, :] - centre[:, :, None]) / width[:, :, None]) ** 2)
    vectors = (vec[events.record][:, active] * events.gain[:, None, None]).astype(np.float32)
    waves = np.matmul(vectors.transpose(0, 2, 1), shapes)  # (K, 3, L)
    pad = int(np.ceil(_MARGIN * FS)) + max(-lo, hi)
    length = N_SAMPLES + 2 * pad
    index = (events.record[:, None] * length + start[:, None] + offsets + pad).ravel()
    summed = [np.bincount(index, waves[:, c].ravel(), minlength=n * length) for c in range(3)]
    return np.stack(summed, -1).reshape(n, length, 3)[:, pad : pad + N_SAMPLES].astype(np.float32)


def _fibrillation_waves(plan: _SignalPlan, rng: np.random.Generator) -> np.ndarray:
    """f-waves (n, N_SAMPLES, 3): 4–8 Hz atrial activity along the P axis, zero without AF."""
    n = len(plan.hr)
    t = np.arange(N_SAMPLES, dtype=np.float32) / FS
    bounds: tuple[tuple[float, float], ...] = ((4, 8), (0.1, 0.4), (0, 2 * np.pi), (0, 2 * np.pi))
    freq, wobble, phase, wobble_phase = (rng.uniform(*b, (n, 1)).astype(np.float32) for b in bounds)
    modulation = 0.8 * np.sin(2 * np.pi * wobble * t + wobble_phase)
    wave = np.sin(2 * np.pi * freq * t + phase + modulation)
    axis = (plan.fwave_mv * plan.afib)[:, None] * _direction(plan.pvec[:, 0])
    return wave[:, :, None] * axis[:, None, :].astype(np.float32)


def _lead_field(plan: _SignalPlan) -> np.ndarray:
    """Electrode lead vectors (n, 9, 3): RA, LA, LL on Einthoven's triangle, then V1…V6."""
    angle = plan.chest_angles
    chest = np.stack([np.cos(angle), np.full_like(angle, 0.05), np.sin(angle)], -1)
    limb = np.broadcast_to(_LIMB_FIELD, (len(angle), 3, 3))
    return np.concatenate([limb, chest * plan.chest_gains[..., None]], axis=1)


def _frame_matrix(per_record: np.ndarray) -> np.ndarray:
    """(n, 12, k) lead weights as the contiguous float32 (n, k, 12) that right-multiplies frames."""
    return np.ascontiguousarray(per_record.transpose(0, 2, 1), dtype=np.float32)


def _lead_noise(plan: _SignalPlan, rng: np.random.Generator) -> np.ndarray:
    """Electrode noise as seen in the leads, (n, N_SAMPLES, 12) mV.

    Each electrode gets white noise (with an occasional EMG burst), a mix of three baseline
    wander sources (breathing, slow drift, a faster sway) and 50 Hz mains pick-up; the lead
    matrix maps electrodes to leads, so the noise obeys the lead identities exactly.
    """
    n = len(plan.hr)
    t = np.arange(N_SAMPLES, dtype=np.float32) / FS
    start, length, burst_sd = plan.burst.T
    in_burst = (t >= start[:, None]) & (t < (start + length)[:, None])
    envelope = (plan.noise_mv[:, None] + burst_sd[:, None] * in_burst).astype(np.float32)
    white = rng.standard_normal((n, N_SAMPLES, 9), dtype=np.float32) * envelope[..., None]
    noise = white @ _TO_LEADS
    freqs = np.stack([plan.resp_freq, rng.uniform(0.03, 0.12, n), rng.uniform(0.15, 0.6, n)], 1)
    phase = rng.uniform(0, 2 * np.pi, (n, 1, 3))
    sources = np.sin((2 * np.pi * freqs[:, None, :] * t[:, None] + phase).astype(np.float32))
    mixing = rng.normal(size=(n, 9, 3)) * (plan.wander_mv / np.sqrt(3))[:, None, None]
    noise += sources @ _frame_matrix(_LEAD_MATRIX @ mixing)
    mains = np.sin(2 * np.pi * 50 * t + rng.uniform(0, 2 * np.pi, (n, 1)).astype(np.float32))
    pickup = (plan.mains_mv[:, None] * rng.uniform(0.3, 1, (n, 9))) @ _LEAD_MATRIX.T
    noise += mains[:, :, None] * pickup[:, None, :].astype(np.float32)
    return noise


def _synthesise(plan: _SignalPlan, seed: int, chunk: int, noise: bool = True) -> tuple[np.ndarray, list[np.ndarray]]:
    """Digital 500 Hz frames (n, N_SAMPLES, 12) int16 (µV) and R-peak samples of one chunk."""
    beats_seed, noise_seed = np.random.SeedSequence(seed, spawn_key=(1, chunk)).spawn(2)
    rng = np.random.default_rng(beats_seed)
    n = len(plan.hr)
    ventricular, atrial = _events(plan, rng)
    mu, sd = plan.mu.copy(), plan.sd.copy()
    mu[:, _QRS_WAVES] *= plan.width[:, None]
    sd[:, _QRS_WAVES] *= plan.width[:, None]
    heart = _render(ventricular, plan.vec, mu, sd, _RATE_ADAPTIVE, n)
    heart += _render(atrial, plan.pvec, plan.pmu, plan.psd, np.zeros(2, dtype=bool), n)
    heart += _fibrillation_waves(plan, rng)
    leads = heart @ _frame_matrix(_LEAD_MATRIX @ _lead_field(plan))
    leads -= leads.mean(axis=1, keepdims=True)  # AC-coupled front end: the beats carry no DC
    if noise:
        leads += _lead_noise(plan, np.random.default_rng(noise_seed))
    frames = np.clip(np.rint(leads * GAIN), -32767, 32767).astype(np.int16)
    sample = np.rint(ventricular.time * FS).astype(np.int64)
    inside = (sample >= 0) & (sample < N_SAMPLES)
    per_record = np.bincount(ventricular.record[inside], minlength=n)
    return frames, np.split(sample[inside], np.cumsum(per_record)[:-1])


def _decimate(frames: np.ndarray) -> np.ndarray:
    """The 100 Hz release (n, 1000, 12) int16: the library's 500 → 100 Hz decimation of the frames."""
    low = decimate(frames.transpose(0, 2, 1), FS // FS_LR).transpose(0, 2, 1)
    return np.clip(np.rint(low), -32767, 32767).astype(np.int16)


@contextlib.contextmanager
def _single_threaded_blas() -> Iterator[None]:
    """One BLAS thread: the many small products here only lose time to thread start-up."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # threadpoolctl comes with scikit-learn; without it, run as configured
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield
