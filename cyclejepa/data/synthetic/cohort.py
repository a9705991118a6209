"""The cohort of a corpus: patients, statements, folds, ``ptbxl_database.csv`` rows and the
signal plan they imply.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, NamedTuple

import numpy as np

from cyclejepa.data.ptbxl import SUBCLASSES, SUPERCLASSES
from cyclejepa.data.synthetic.heart import (
    R,
    _direction,
    _normal_plan,
    _rotations,
    _SignalPlan,
)
from cyclejepa.data.synthetic.pathology import _COMPANION_FORMS, _EFFECTS
from cyclejepa.data.synthetic.statements import (
    _AFIB_P,
    _CONFLICT_GROUP,
    _DEVICES,
    _FEMALE_P,
    _FIRST_DATE,
    _LAST_DATE,
    _LIKELIHOOD_P,
    _LIKELIHOODS,
    _RECORDS_PER_PATIENT,
    _SARRH_P,
    _SECOND_STATEMENT_P,
    _STADIUM,
    _STATEMENT_COUNTS,
    _SUPERCLASS_COMBOS,
    _diagnostic_codes,
    scp_statements,
)


def _rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))


def _draw_patients(n: int, rng: np.random.Generator) -> np.ndarray:
    """Patient index of each record in ecg_id order: ~1.16 records per patient, scattered."""
    per_patient = rng.geometric(1 / _RECORDS_PER_PATIENT, size=n)
    per_patient = per_patient[: np.searchsorted(np.cumsum(per_patient), n) + 1]
    per_patient[-1] -= per_patient.sum() - n
    return np.repeat(np.arange(len(per_patient)), per_patient)[rng.permutation(n)]


def _draw_statements(n_patients: int, rng: np.random.Generator) -> np.ndarray:
    """Likelihood (n_patients, 44) of each diagnostic statement, NaN where absent.

    A superclass combination is drawn with PTB-XL's frequency; each superclass in it gets one
    statement drawn with PTB-XL's statement frequency and, sometimes, a second compatible one.
    """
    codes, table = _diagnostic_codes(), scp_statements()
    weight = np.array(list(_SUPERCLASS_COMBOS.values()), dtype=float)
    member = np.array([[k in combo for k in SUPERCLASSES] for combo in _SUPERCLASS_COMBOS])
    chosen = member[rng.choice(len(weight), n_patients, p=weight / weight.sum())]
    likelihood = np.full((n_patients, len(codes)), np.nan)
    for k, superclass in enumerate(SUPERCLASSES):
        rows = np.flatnonzero(chosen[:, k])
        members = [c for c in codes if table[c]["diagnostic_class"] == superclass]
        p = np.array([_STATEMENT_COUNTS[c] for c in members], dtype=float)
        group = np.array([_CONFLICT_GROUP.get(c, table[c]["diagnostic_subclass"]) for c in members])
        first, second = rng.choice(len(members), (2, len(rows)), p=p / p.sum())
        wanted = rng.random(len(rows)) < _SECOND_STATEMENT_P[superclass]
        keep = wanted & (group[first] != group[second])
        columns = np.array([codes.index(c) for c in members])
        for picked, where in ((first, rows), (second[keep], rows[keep])):
            values = rng.choice(_LIKELIHOODS, len(where), p=_LIKELIHOOD_P)
            likelihood[where, columns[picked]] = 100.0 if superclass == "NORM" else values
    return likelihood


Forms = dict[str, tuple[np.ndarray, float]]  # form statement -> (records carrying it, likelihood)


def _form_statements(present: np.ndarray, rng: np.random.Generator) -> Forms:
    """Form statements of each record.

    Companion forms go with their diagnostic family; records without a diagnostic statement
    (PTB-XL's unlabeled 1.9 %) carry low QRS voltage (LVOLT) or an abnormal QRS (ABQRS).
    """
    table = scp_statements()
    codes = np.array(_diagnostic_codes())
    subclass = np.array([table[c]["diagnostic_subclass"] for c in codes])
    family = {
        "MI": np.array([table[c]["diagnostic_class"] == "MI" for c in codes]),
        "LVH": codes == "LVH",
        "ISC": np.isin(subclass, ["ISC_", "ISCA", "ISCI"]),
        "NDT": codes == "NDT",
    }
    forms = {
        code: ((present & family[name]).any(1) & (rng.random(len(present)) < p), 0.0)
        for name, companions in _COMPANION_FORMS.items()
        for code, p in companions
    }
    unlabeled = ~present.any(1)
    low = unlabeled & (rng.random(len(present)) < 0.6)
    forms["LVOLT"] = (low, 100.0)
    forms["ABQRS"] = (forms["ABQRS"][0] | (unlabeled & ~low), 0.0)
    return forms


def _label_matrix(present: np.ndarray) -> np.ndarray:
    """(n, 5 + 23 + 1) superclass, subclass and unlabeled indicators from (n, 44) statements."""
    codes, table = _diagnostic_codes(), scp_statements()
    to_super = np.array([[table[c]["diagnostic_class"] == k for k in SUPERCLASSES] for c in codes])
    to_sub = np.array([[table[c]["diagnostic_subclass"] == k for k in SUBCLASSES] for c in codes])
    labels = np.concatenate([present @ to_super, present @ to_sub], axis=1) > 0
    return np.concatenate([labels, ~labels.any(1, keepdims=True)], axis=1)


def _assign_folds(labels: np.ndarray, sizes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Greedy iterative stratification of patients into folds 1–10 (patient-disjoint).

    ``labels`` (P, L) counts each label over a patient's records and ``sizes`` (P,) counts
    the records. Patients with the rarest labels go first, each to the fold with the largest
    remaining need for its labels (relative to the per-fold target) and for records.
    """
    target = labels.sum(0) / 10
    need = np.tile(target, (10, 1))
    size_need = np.full(10, sizes.sum() / 10)
    weight = 1 / np.maximum(target, 1e-9)
    rarity = np.where(labels > 0, labels.sum(0), np.inf).min(1)
    folds = np.empty(len(sizes), dtype=int)
    for patient in np.lexsort((rng.random(len(sizes)), rarity)):
        has = labels[patient] > 0
        score = need[:, has] @ weight[has] + size_need / (sizes.sum() / 10)
        fold = int(np.argmax(score))
        need[fold] -= labels[patient]
        size_need[fold] -= sizes[patient]
        folds[patient] = fold + 1
    return folds


def _rhythm_codes(plan: _SignalPlan, sarrh: np.ndarray) -> np.ndarray:
    """SR, SBRAD, STACH, SARRH or AFIB per record, consistent with the planned rhythm."""
    sinus = np.where(plan.hr < 55, "SBRAD", np.where(plan.hr > 100, "STACH", "SR"))
    sinus = np.where(plan.block != 0, "SR", sinus)
    return np.where(plan.afib, "AFIB", np.where(sarrh & (sinus == "SR"), "SARRH", sinus))


def _frontal_axis_category(r_vectors: np.ndarray) -> np.ndarray:
    """PTB-XL ``heart_axis`` (German axis types) from the frontal angle of the R vector."""
    angle = np.degrees(np.arctan2(r_vectors[:, 1], r_vectors[:, 0]))
    names = np.array(["ALAD", "LAD", "MID", "RAD", "ARAD"])
    return names[np.digitize(angle, [-30, 30, 90, 120])]


class _Cohort(NamedTuple):
    patient: np.ndarray  # (n,) patient index
    sex: np.ndarray  # (P,) 0 male, 1 female
    likelihood: np.ndarray  # (n, 44) diagnostic statements, NaN where absent
    forms: Forms
    rhythm: np.ndarray  # (n,) rhythm statement
    fold: np.ndarray  # (n,) strat_fold


def _plan(n: int, seed: int) -> tuple[list[dict[str, Any]], _SignalPlan]:
    """The metadata rows and the signal plan of a corpus of ``n`` records."""
    rng = _rng(seed, 0)
    codes = _diagnostic_codes()
    patient = _draw_patients(n, rng)
    n_patients = patient.max() + 1
    likelihood = _draw_statements(n_patients, rng)[patient]  # a patient's records share them
    present = ~np.isnan(likelihood)

    plan = _normal_plan(n, rng)
    av_relation = present[:, [codes.index(c) for c in ("1AVB", "2AVB", "3AVB", "WPW")]].any(1)
    plan.afib = (rng.random(n) < _AFIB_P) & ~av_relation
    plan.hr[plan.afib] = np.clip(rng.lognormal(np.log(85), 0.2, plan.afib.sum()), 50, 130)
    sarrh = ~plan.afib & (rng.random(n) < _SARRH_P)
    plan.sinus_arrhythmia[sarrh] = rng.uniform(0.08, 0.15, sarrh.sum())
    forms = _form_statements(present, rng)
    severity = rng.uniform(0.7, 1.2, (n, len(codes))) * (0.55 + 0.0045 * np.nan_to_num(likelihood))
    carriers = {c: (present[:, j], severity[:, j]) for j, c in enumerate(codes)}
    carriers |= {c: (mask, np.ones(n)) for c, (mask, _) in forms.items()}
    for code, effect in _EFFECTS.items():
        mask, strength = carriers[code]
        rows = np.flatnonzero(mask)
        effect(plan, rows, strength[rows], rng)

    # patient anatomy, shared by a patient's records: heart orientation and voltage
    sex = (rng.random(n_patients) < _FEMALE_P).astype(int)
    axis = _direction(rng.normal(size=(n_patients, 3)))
    turn = _rotations(np.deg2rad(rng.normal(0, 40, n_patients)), axis)[patient]
    voltage = (rng.lognormal(0, 0.35, n_patients) * np.where(sex == 1, 0.9, 1.0))[patient]
    plan.vec = np.einsum("nij,nwj->nwi", turn, plan.vec) * voltage[:, None, None]
    plan.pvec = np.einsum("nij,nwj->nwi", turn, plan.pvec)

    labels = _label_matrix(present)
    patient_labels = np.zeros((n_patients, labels.shape[1]))
    np.add.at(patient_labels, patient, labels)
    fold = _assign_folds(patient_labels, np.bincount(patient), rng)[patient]
    cohort = _Cohort(patient, sex, likelihood, forms, _rhythm_codes(plan, sarrh), fold)
    return _metadata_rows(cohort, plan, rng), plan


def _metadata_rows(c: _Cohort, plan: _SignalPlan, rng: np.random.Generator) -> list[dict[str, Any]]:
    """One ``ptbxl_database.csv`` row per record, typed (None where PTB-XL leaves a cell empty)."""
    n, n_patients = len(c.patient), len(c.sex)
    table, codes = scp_statements(), _diagnostic_codes()
    seconds = np.sort(rng.uniform(0, (_LAST_DATE - _FIRST_DATE).total_seconds(), n))
    first_seen = np.full(n_patients, np.inf)
    np.minimum.at(first_seen, c.patient, seconds)
    years_since_first = (seconds - first_seen[c.patient]) / 3.156e7
    age = rng.beta(6.2, 4.1, n_patients)[c.patient] * 100 + years_since_first
    age = np.where(age >= 90, 300.0, np.floor(age))  # PTB-XL's sentinel for patients over 89
    id_pool = np.arange(1, int(n_patients * 1.16) + 2)
    patient_id = rng.choice(id_pool, n_patients, replace=False)[c.patient]
    sex = c.sex[c.patient]
    height = np.round(np.where(sex == 1, 163, 174) + rng.normal(0, 7, n_patients)[c.patient])
    weight = np.round(np.where(sex == 1, 68, 78) + rng.normal(0, 13, n_patients)[c.patient])
    draws = rng.random((n, 11))
    axis = _frontal_axis_category(plan.vec[:, R])
    mi = np.array([table[code]["diagnostic_class"] == "MI" for code in codes])
    has_mi = (~np.isnan(c.likelihood[:, mi])).any(1)
    dates = [f"{_FIRST_DATE + timedelta(seconds=int(t)):%Y-%m-%d %H:%M:%S}" for t in seconds]
    stadium = np.array(_STADIUM)[(draws[:, 6] * len(_STADIUM)).astype(int)]
    rows = []
    for r in range(n):
        ecg_id, folder = r + 1, f"{(r + 1) // 1000 * 1000:05d}"
        scp = {code: float(v) for code, v in zip(codes, c.likelihood[r], strict=True) if not np.isnan(v)}
        scp |= {code: value for code, (mask, value) in c.forms.items() if mask[r]}
        scp[str(c.rhythm[r])] = 0.0
        rows.append(
            {
                "ecg_id": ecg_id,
                "patient_id": float(patient_id[r]),
                "age": float(age[r]),
                "sex": int(sex[r]),
                "height": float(height[r]) if draws[r, 0] < 0.32 else None,
                "weight": float(weight[r]) if draws[r, 1] < 0.43 else None,
                "nurse": float(int(draws[r, 2] * 12)) if draws[r, 2] < 0.93 else None,
                "site": float(int(draws[r, 3] * 3)),
                "device": _DEVICES[int(draws[r, 4] * len(_DEVICES))],
                "recording_date": dates[r],
                "report": ". ".join(table[code]["description"].lower() for code in reversed(scp)) + ".",
                "scp_codes": scp,
                "heart_axis": str(axis[r]) if draws[r, 5] < 0.6 else None,
                "infarction_stadium1": str(stadium[r]) if has_mi[r] else None,
                "infarction_stadium2": "Stadium III" if has_mi[r] and draws[r, 10] < 0.05 else None,
                "validated_by": float(int(draws[r, 7] * 12)) if draws[r, 7] < 0.7 else None,
                "second_opinion": bool(draws[r, 8] < 0.02),
                "initial_autogenerated_report": bool(draws[r, 8] > 0.75),
                "validated_by_human": bool(c.fold[r] >= 9 or draws[r, 9] < 0.7),  # as in PTB-XL
                "baseline_drift": ", alles," if plan.wander_mv[r] > 0.35 else None,
                "static_noise": ", alles," if plan.noise_mv[r] > 0.045 else None,
                "burst_noise": ", alles," if plan.burst[r, 2] > 0 else None,
                "electrodes_problems": None,
                "extra_beats": None,
                "pacemaker": None,
                "strat_fold": int(c.fold[r]),
                "filename_lr": f"records100/{folder}/{ecg_id:05d}_lr",
                "filename_hr": f"records500/{folder}/{ecg_id:05d}_hr",
            }
        )
    return rows
