"""How diagnostic statements change the beat: one effect per statement, editing the signal plan
of the records that carry it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from cyclejepa.data.synthetic.heart import (
    _T_SHARE,
    _TERRITORY,
    DELTA,
    QMI,
    R2,
    ST,
    T1,
    T2,
    Q,
    R,
    S,
    _direction,
    _SignalPlan,
    _unit,
)

Rows = np.ndarray  # indices of the records carrying a statement
Effect = Callable[[_SignalPlan, Rows, np.ndarray, np.random.Generator], None]


def _col(x: np.ndarray | float) -> np.ndarray:
    return np.reshape(x, (-1, 1))


def _add_t(p: _SignalPlan, i: Rows, v: np.ndarray) -> None:
    p.vec[i, T1] += _T_SHARE[0] * v
    p.vec[i, T2] += _T_SHARE[1] * v


def _scale_t(p: _SignalPlan, i: Rows, factor: np.ndarray | float) -> None:
    p.vec[i, T1:] *= np.reshape(factor, (-1, 1, 1))


def _widen(p: _SignalPlan, i: Rows, rng: np.random.Generator, lo: float, hi: float) -> None:
    p.width[i] = np.maximum(p.width[i], rng.uniform(lo, hi, len(i)))


def _size(v: np.ndarray) -> np.ndarray:
    return np.linalg.norm(v, axis=-1, keepdims=True)


def _infarct(territory: str) -> Effect:
    """Old infarct: initial force away from the territory (Q waves), R forces toward it lost."""
    u = _TERRITORY[territory]

    def effect(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
        p.vec[i, QMI] -= _col(0.2 + 0.25 * s) * u
        toward = np.clip(p.vec[i, R] @ u, 0, None)
        p.vec[i, R] -= _col(0.7 * np.minimum(s, 1) * toward) * u
        _add_t(p, i, -_col(0.3 * s * (rng.random(len(i)) < 0.6)) * u)

    return effect


def _injury(territory: str) -> Effect:
    """Subendocardial injury: ST depression and T inversion in the territory, a small Q."""
    u = _TERRITORY[territory]

    def effect(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
        p.vec[i, ST] -= _col(0.12 * s) * u
        p.vec[i, QMI] -= _col(0.1 * s) * u
        _add_t(p, i, -_col(0.25 * s) * u)

    return effect


def _ischaemia(territory: str) -> Effect:
    """Ischaemic ST-T change: ST and T vectors turned away from the territory."""
    u = _TERRITORY[territory]

    def effect(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
        p.vec[i, ST] -= _col(0.08 * s) * u
        _add_t(p, i, -_col(0.5 * s) * u)

    return effect


def _nonspecific_st(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    p.vec[i, ST] -= _col(0.05 * s) * _direction(p.vec[i, R])
    _scale_t(p, i, 0.6)


def _flat_t(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    _scale_t(p, i, rng.uniform(0.15, 0.45, len(i)))
    _add_t(p, i, -_col(0.05 * s) * _TERRITORY["lateral"])


def _digitalis(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    """Sagging ST depression, small T, short QT."""
    p.vec[i, ST] -= _col(0.1 * s) * _direction(p.vec[i, R])
    p.sd[i, ST] = 0.06
    _scale_t(p, i, 0.4)
    p.mu[i, T1:] *= 0.9


def _long_qt(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    p.mu[i, T1:] *= _col(rng.uniform(1.25, 1.4, len(i)))
    p.sd[i, T1:] *= 1.2


def _aneurysm(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    """Persistent anterior ST elevation over an old anterior scar."""
    p.vec[i, ST] += _col(0.2 * s) * _TERRITORY["anterior"]
    p.vec[i, QMI] -= _col(0.25 * s) * _TERRITORY["anterior"]


def _electrolyte(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    """Tall narrow (peaked) T waves."""
    p.sd[i, T1:] *= 0.65
    _scale_t(p, i, 1.8)


def _lbbb(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    """Complete LBBB: no septal q, broad notched leftward-posterior R, discordant ST-T."""
    _widen(p, i, rng, 1.6, 1.9)
    main = _unit(0.85, 0.2, -0.5)
    r_size, t_size = _size(p.vec[i, R]), _size(p.vec[i, T1] + p.vec[i, T2])
    p.vec[i, Q] = 0.12 * _unit(0.9, 0.1, -0.4)
    p.vec[i, R] = 1.1 * r_size * main
    p.vec[i, R2] = 0.55 * r_size * _unit(0.9, 0.0, -0.45)
    p.mu[i, R2], p.sd[i, R2] = 0.035, 0.014
    p.vec[i, S] *= 0.3
    p.vec[i, ST] = -0.1 * main
    p.vec[i, T1:] = 0
    _add_t(p, i, -1.3 * t_size * main)


def _incomplete_lbbb(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    _widen(p, i, rng, 1.2, 1.35)
    p.vec[i, Q] = 0
    p.vec[i, R] = _size(p.vec[i, R]) * _direction(_direction(p.vec[i, R]) + _unit(0.85, 0.2, -0.5))


def _rbbb(complete: bool) -> Effect:
    """RBBB: late rightward-anterior R' (rsR' in V1, wide S in I and V6), T inverted in V1–V2."""

    def effect(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
        _widen(p, i, rng, *((1.3, 1.45) if complete else (1.08, 1.2)))
        size = rng.uniform(*((0.5, 0.8) if complete else (0.2, 0.35)), len(i))
        p.vec[i, R2] = _col(size) * _unit(-0.6, -0.1, 0.8)
        p.mu[i, R2] = 0.05 if complete else 0.042
        if complete:
            p.vec[i, S] = 1.3 * _size(p.vec[i, S]) * _unit(-0.8, -0.2, -0.4)
            p.sd[i, S] *= 1.5
            _add_t(p, i, -0.15 * _TERRITORY["anteroseptal"])

    return effect


def _ivcd(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    _widen(p, i, rng, 1.3, 1.5)
    p.vec[i, R] *= 0.85


def _fascicular(frontal_deg: float, q_direction: tuple[float, float, float]) -> Effect:
    """Fascicular block: frontal QRS axis turned to ``frontal_deg``, initial force opposite."""
    angle = np.deg2rad(frontal_deg)

    def effect(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
        _widen(p, i, rng, 1.0, 1.1)
        frontal = np.linalg.norm(p.vec[i, R, :2], axis=1)
        p.vec[i, R, 0], p.vec[i, R, 1] = frontal * np.cos(angle), frontal * np.sin(angle)
        p.vec[i, Q] = 0.12 * _unit(*q_direction)

    return effect


def _first_degree_block(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    p.pr[i] = rng.uniform(0.24, 0.34, len(i))


def _second_degree_block(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    """Mobitz II: every 2nd, 3rd or 4th P wave is not conducted."""
    p.block[i] = rng.choice([2, 3, 4], len(i))
    p.pr[i] = rng.uniform(0.16, 0.2, len(i))


def _complete_block(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    """Third-degree block: P waves and a slow wide escape rhythm, independent of each other."""
    p.block[i] = -1
    p.hr[i] = rng.uniform(35, 48, len(i))
    _widen(p, i, rng, 1.2, 1.4)


def _wpw(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    """Pre-excitation: short PR, slurred delta wave, secondary T change."""
    p.pr[i] = rng.uniform(0.09, 0.11, len(i))
    p.vec[i, DELTA] = _col(rng.uniform(0.25, 0.4, len(i))) * _direction(p.vec[i, R])
    _widen(p, i, rng, 1.1, 1.2)
    _add_t(p, i, -0.1 * _direction(p.vec[i, R]))


def _lvh(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    """High QRS voltage (tall R in V5–V6, deep S in V1–V2), strain ST-T in 40 %."""
    p.vec[i, R] *= _col(rng.uniform(1.7, 2.4, len(i)))
    p.vec[i, S] *= _col(rng.uniform(1.5, 2.1, len(i)))
    strain = _col(rng.random(len(i)) < 0.4) * _TERRITORY["lateral"]
    p.vec[i, ST] -= 0.06 * strain
    _add_t(p, i, -0.35 * strain)


def _rvh(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    """Rightward-anterior QRS forces (tall R in V1, right axis), T inverted in V1–V3."""
    p.vec[i, R] += _col(rng.uniform(0.6, 0.9, len(i))) * _unit(-0.6, 0.45, 0.65)
    _add_t(p, i, -0.15 * _TERRITORY["anteroseptal"])


def _left_atrial(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    """Wide bifid P with a terminal negative part in V1."""
    p.pvec[i, 1] = _col(rng.uniform(0.08, 0.12, len(i))) * _unit(0.3, 0.2, -0.93)
    p.pmu[i, 0] = -0.015
    p.psd[i] *= 1.25


def _right_atrial(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    """Tall peaked P in the inferior leads."""
    p.pvec[i, 0] = _size(p.pvec[i, 0]) * _col(rng.uniform(1.8, 2.4, len(i))) * _unit(0.15, 0.9, 0.4)


def _septal_hypertrophy(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    p.vec[i, Q] *= _col(rng.uniform(2.5, 3.5, len(i)))


def _low_voltage(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    p.vec[i, : QMI + 1] *= 0.45


def _abnormal_qrs(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    _widen(p, i, rng, 1.1, 1.2)
    p.vec[i, Q] *= 1.5


def _no_change(p: _SignalPlan, i: Rows, s: np.ndarray, rng: np.random.Generator) -> None:
    """NORM and the companion form statements describe what the other effects already drew."""


# Applied in this order: conduction first, since it replaces vectors that hypertrophy, infarct
# and ST-T effects then modify.
_EFFECTS: dict[str, Effect] = {
    "CLBBB": _lbbb,
    "ILBBB": _incomplete_lbbb,
    "CRBBB": _rbbb(True),
    "IRBBB": _rbbb(False),
    "IVCD": _ivcd,
    "LAFB": _fascicular(-50, (-0.3, 0.8, 0.3)),
    "LPFB": _fascicular(115, (0.5, -0.8, 0.2)),
    "1AVB": _first_degree_block,
    "2AVB": _second_degree_block,
    "3AVB": _complete_block,
    "WPW": _wpw,
    "LVH": _lvh,
    "RVH": _rvh,
    "LAO/LAE": _left_atrial,
    "RAO/RAE": _right_atrial,
    "SEHYP": _septal_hypertrophy,
    "IMI": _infarct("inferior"),
    "ILMI": _infarct("inferolateral"),
    "IPMI": _infarct("inferoposterior"),
    "IPLMI": _infarct("inferoposterolateral"),
    "ASMI": _infarct("anteroseptal"),
    "AMI": _infarct("anterior"),
    "ALMI": _infarct("anterolateral"),
    "LMI": _infarct("lateral"),
    "PMI": _infarct("posterior"),
    "INJAS": _injury("anteroseptal"),
    "INJAL": _injury("anterolateral"),
    "INJLA": _injury("lateral"),
    "INJIN": _injury("inferior"),
    "INJIL": _injury("inferolateral"),
    "ISC_": _ischaemia("inferolateral"),
    "ISCAL": _ischaemia("anterolateral"),
    "ISCAS": _ischaemia("anteroseptal"),
    "ISCLA": _ischaemia("lateral"),
    "ISCAN": _ischaemia("anterior"),
    "ISCIN": _ischaemia("inferior"),
    "ISCIL": _ischaemia("inferolateral"),
    "NST_": _nonspecific_st,
    "NDT": _flat_t,
    "DIG": _digitalis,
    "LNGQT": _long_qt,
    "ANEUR": _aneurysm,
    "EL": _electrolyte,
    "NORM": _no_change,
    "LVOLT": _low_voltage,
    "ABQRS": _abnormal_qrs,
    "QWAVE": _no_change,
    "VCLVH": _no_change,
    "STD_": _no_change,
    "INVT": _no_change,
    "NT_": _no_change,
    "LOWT": _no_change,
}
# Form statements reported (likelihood 0) alongside a family of diagnostic ones, with odds.
_COMPANION_FORMS = {
    "MI": (("ABQRS", 0.5), ("QWAVE", 0.15)),
    "LVH": (("VCLVH", 0.25),),
    "ISC": (("STD_", 0.4), ("INVT", 0.3)),
    "NDT": (("NT_", 0.3), ("LOWT", 0.2)),
}
