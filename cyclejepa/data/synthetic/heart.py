"""The ECG model: heart-frame geometry, electrode lead fields and the waves of a normal beat,
with each record's signal plan.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np


def _unit(*v: float) -> np.ndarray:
    a = np.asarray(v, dtype=float)
    return a / np.linalg.norm(a)


def _direction(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


_TERRITORY = {
    "anterior": _unit(0, 0.1, 1),
    "anteroseptal": _unit(-0.35, 0.1, 1),
    "anterolateral": _unit(0.7, 0, 0.7),
    "lateral": _unit(1, -0.35, 0.1),
    "inferior": _unit(0, 1, 0),
    "inferolateral": _unit(0.6, 0.8, 0),
    "posterior": _unit(0, 0, -1),
    "inferoposterior": _unit(0, 0.8, -0.6),
    "inferoposterolateral": _unit(0.5, 0.7, -0.5),
}
# Limb electrodes RA, LA, LL on the Einthoven triangle, scaled so that lead I = x.
_LIMB_FIELD = np.array([[np.cos(a), np.sin(a), 0.0] for a in np.deg2rad([-150, -30, 90])]) / 3**0.5
# Chest electrodes V1…V6: angle from the left (+x) towards anterior (+z), proximity gain.
_CHEST_ANGLES = np.deg2rad([115.0, 95.0, 72.0, 52.0, 25.0, 0.0])
_CHEST_GAINS = np.array([1.7, 2.8, 2.8, 2.55, 2.05, 1.55])
# Leads from electrode potentials (RA, LA, LL, V1…V6); V_i is taken against Wilson's terminal.
_LEAD_MATRIX = np.zeros((12, 9))
_LEAD_MATRIX[:6, :3] = np.array(
    [
        [-1, 1, 0],
        [-1, 0, 1],
        [0, -1, 1],
        [1, -0.5, -0.5],
        [-0.5, 1, -0.5],
        [-0.5, -0.5, 1],
    ]
)
_LEAD_MATRIX[6:, :3] = -1 / 3
_LEAD_MATRIX[6:, 3:] = np.eye(6)
_TO_LEADS = np.ascontiguousarray(_LEAD_MATRIX.T, dtype=np.float32)  # right-multiplies frames


def _rotations(angle: np.ndarray, axis: np.ndarray) -> np.ndarray:
    """Rodrigues rotation matrices (n, 3, 3) by ``angle`` about unit ``axis``."""
    k = np.zeros((len(angle), 3, 3))
    k[:, 0, 1], k[:, 0, 2], k[:, 1, 2] = -axis[:, 2], axis[:, 1], -axis[:, 0]
    k -= k.transpose(0, 2, 1)
    s, c = np.sin(angle)[:, None, None], np.cos(angle)[:, None, None]
    return np.eye(3) + s * k + (1 - c) * k @ k


# ----------------------------------------------------------------------------------------------
# Beat model: waves as (centre s from the R peak, width s, amplitude mV, direction)
# ----------------------------------------------------------------------------------------------

_V_WAVES = {
    "delta": (-0.045, 0.016, 0.0, (0.55, 0.65, -0.2)),  # pre-excitation (WPW only)
    "q": (-0.024, 0.007, 0.16, (-0.55, 0.2, 0.8)),  # septal: rightward, anterior
    "R": (0.0, 0.010, 1.1, (0.55, 0.62, -0.2)),  # main left-inferior force, axis ~50°
    "S": (0.026, 0.010, 0.5, (-0.35, -0.3, -0.9)),  # late basal forces: posterior, superior
    "R2": (0.05, 0.015, 0.0, (-0.6, -0.1, 0.8)),  # late second force (RBBB R', LBBB notch)
    "Qmi": (-0.028, 0.013, 0.0, (0.0, 0.0, 1.0)),  # initial force away from an infarct
    "ST": (0.12, 0.045, 0.0, (0.6, 0.5, 0.45)),  # plateau shift (injury current)
    "T1": (0.25, 0.045, 0.24, (0.6, 0.5, 0.45)),  # ascending limb of T
    "T2": (0.30, 0.030, 0.15, (0.6, 0.5, 0.45)),  # steeper descending limb of T
}
_A_WAVES = {
    "P1": (0.0, 0.022, 0.13, (0.5, 0.8, 0.15)),
    "P2": (0.035, 0.022, 0.0, (0.3, 0.2, -0.93)),  # terminal posterior P (left atrium)
}
DELTA, Q, R, S, R2, QMI, ST, T1, T2 = range(len(_V_WAVES))
_QRS_WAVES = np.array([DELTA, Q, R, S, R2, QMI])  # stretched by the QRS width factor
_RATE_ADAPTIVE = np.isin(np.arange(len(_V_WAVES)), [ST, T1, T2])  # centres follow RR^(1/3)
_T_SHARE = (0.62, 0.38)  # how a change of the T vector splits over T1, T2


@dataclass
class _SignalPlan:
    """Everything each record's waveform depends on besides its random stream; arrays (n, ...)."""

    vec: np.ndarray  # (n, 9, 3) ventricular wave vectors, mV
    mu: np.ndarray  # (n, 9) wave centres from the R peak, s (ST/T at RR = 1 s)
    sd: np.ndarray  # (n, 9) wave widths, s
    pvec: np.ndarray  # (n, 2, 3) atrial wave vectors, mV
    pmu: np.ndarray  # (n, 2) centres from the atrial event, s
    psd: np.ndarray  # (n, 2)
    width: np.ndarray  # (n,) QRS stretch factor
    pr: np.ndarray  # (n,) atrial event to R peak, s
    block: np.ndarray  # (n,) 0 conducted, k >= 2 every k-th P blocked, -1 complete block
    hr: np.ndarray  # (n,) ventricular rate, bpm
    atrial_rate: np.ndarray  # (n,) bpm, for complete block
    afib: np.ndarray  # (n,) bool
    sinus_arrhythmia: np.ndarray  # (n,) relative RR modulation at the breathing rate
    resp_freq: np.ndarray  # (n,) Hz
    resp_phase: np.ndarray  # (n,) rad
    rr_jitter: np.ndarray  # (n,) log-sd of beat-to-beat RR
    qrs_modulation: np.ndarray  # (n,) relative amplitude modulation by breathing
    chest_angles: np.ndarray  # (n, 6) rad
    chest_gains: np.ndarray  # (n, 6)
    noise_mv: np.ndarray  # (n,) white electrode noise sd
    wander_mv: np.ndarray  # (n,) baseline wander amplitude
    mains_mv: np.ndarray  # (n,) 50 Hz amplitude (0: none)
    burst: np.ndarray  # (n, 3) EMG burst start s, length s, sd mV (sd 0: none)
    fwave_mv: np.ndarray  # (n,) atrial fibrillation f-wave amplitude

    def take(self, rows: slice) -> _SignalPlan:
        return _SignalPlan(**{f.name: getattr(self, f.name)[rows] for f in fields(self)})


def _wave_table(waves: dict, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectors (n, W, 3), centres and widths (n, W) of a wave dictionary, for n records."""
    mu, sd, amplitude, direction = (np.array(c, dtype=float) for c in zip(*waves.values(), strict=True))
    vec = amplitude[:, None] * _direction(direction)
    vec_n, mu_n, sd_n = (np.repeat(a[None], n, axis=0) for a in (vec, mu, sd))
    return vec_n, mu_n, sd_n


def _normal_plan(n: int, rng: np.random.Generator) -> _SignalPlan:
    """Normal beats with per-record variation of amplitudes, intervals, rhythm and noise."""
    vec, mu, sd = _wave_table(_V_WAVES, n)
    pvec, pmu, psd = _wave_table(_A_WAVES, n)
    vec[:, Q] *= rng.uniform(0.5, 1.5, (n, 1))
    vec[:, R] *= rng.lognormal(0, 0.35, (n, 1))
    vec[:, S] *= rng.lognormal(0, 0.3, (n, 1))
    vec[:, T1:] += rng.normal(0, 0.03, (n, 1, 3))
    vec[:, T1:] *= rng.lognormal(0, 0.45, (n, 1, 1))
    pvec *= rng.lognormal(0, 0.2, (n, 1, 1))
    mu[:, T1:] *= rng.uniform(0.93, 1.07, (n, 1))
    strong_wander = np.where(rng.random(n) < 0.08, 6.0, 1.0)
    burst_sd = (rng.random(n) < 0.03) * 0.05
    burst = np.stack([rng.uniform(0, 8, n), rng.uniform(0.5, 2, n), burst_sd], 1)
    return _SignalPlan(
        vec=vec,
        mu=mu,
        sd=sd,
        pvec=pvec,
        pmu=pmu,
        psd=psd,
        width=rng.uniform(0.92, 1.08, n),
        pr=rng.uniform(0.13, 0.17, n),
        block=np.zeros(n, dtype=int),
        hr=np.clip(rng.lognormal(np.log(73), 0.17, n), 48, 115),
        atrial_rate=rng.uniform(68, 95, n),
        afib=np.zeros(n, dtype=bool),
        sinus_arrhythmia=rng.uniform(0.005, 0.04, n),
        resp_freq=rng.uniform(0.15, 0.35, n),
        resp_phase=rng.uniform(0, 2 * np.pi, n),
        rr_jitter=rng.uniform(0.008, 0.025, n),
        qrs_modulation=rng.uniform(0.02, 0.08, n),
        chest_angles=_CHEST_ANGLES + np.deg2rad(rng.normal(0, 4, (n, 6))),
        chest_gains=_CHEST_GAINS * rng.lognormal(0, 0.25, (n, 6)),
        noise_mv=rng.lognormal(np.log(0.02), 0.8, n),
        wander_mv=rng.lognormal(np.log(0.1), 0.6, n) * strong_wander,
        mains_mv=np.where(rng.random(n) < 0.15, rng.uniform(0.005, 0.03, n), 0.0),
        burst=burst,
        fwave_mv=rng.uniform(0.02, 0.07, n),
    )
