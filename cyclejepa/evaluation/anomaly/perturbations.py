"""The perturbation families of the anomaly battery, registered in `PERTURBATIONS`.

Each family perturbs z-scored records (N, channels, samples) from a per-record onset on at
severity s in [0, 2] (s = 0 is the identity), with durations converted at `BeatTimes.fs`, and
declares the signal kinds and fewest channels it applies to (`perturbation`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from cyclejepa.data.augment import record_rms
from cyclejepa.evaluation.anomaly.beats import BeatTimes
from cyclejepa.phase import TWO_PI
from cyclejepa.registry import PERTURBATIONS

FAMILIES = ("ectopic", "t-inversion", "st-shift", "attenuation", "lead-dropout", "baseline-wander")
"""The paper's six families in table order: the battery's default."""
ANY_SIGNAL = "any"
SEVERITIES = (0.0, 0.5, 1.0, 1.5, 2.0)
MAX_SEVERITY = 2.0


class Perturbed(NamedTuple):
    """A perturbed batch and, per record, the first sample the family changes (independent of severity)."""

    signals: Tensor
    onset: Tensor


Perturbation = Callable[[Tensor, float, Tensor, BeatTimes, np.random.Generator], Perturbed]
"""``family(signals (N, L, S), severity, onset (N,) samples, beats, rng) -> Perturbed``."""


def perturbation(
    name: str, *, signals: Sequence[str] = (ANY_SIGNAL,), min_channels: int = 1
) -> Callable[[Perturbation], Perturbation]:
    """Register a family as ``name``, for the signal kinds ``signals`` (`PhaseProvider.signal`;
    ``"any"``) and at least ``min_channels`` channels (``PERTURBATIONS.register`` alone: any)."""

    def decorate(family: Perturbation) -> Perturbation:
        # attributes of the function, read back by getattr (setattr: the Callable type declares none)
        setattr(family, "signals", tuple(signals))  # noqa: B010
        setattr(family, "min_channels", int(min_channels))  # noqa: B010
        return PERTURBATIONS.register(name)(family)

    return decorate


def applicable_families(families: Sequence[str], signal_kind: str | None, n_channels: int) -> tuple[list[str], dict[str, str]]:
    """The ``families`` that apply to ``signal_kind`` (None: not checked) and ``n_channels``
    channels, and why each other one does not; an unknown name raises `UnknownComponentError`."""
    kept, skipped = [], {}
    for name in families:
        family = PERTURBATIONS.get(name)
        signals = getattr(family, "signals", (ANY_SIGNAL,))
        needs = getattr(family, "min_channels", 1)
        if signal_kind is not None and ANY_SIGNAL not in signals and signal_kind not in signals:
            skipped[name] = f"applies to {' or '.join(signals)} signals; the phase provider's signal is {signal_kind!r}"
        elif n_channels < needs:
            skipped[name] = f"needs at least {needs} channels; the records have {n_channels}"
        else:
            kept.append(name)
    return kept, skipped


def _check_family_input(name: str, x: Tensor, severity: float, onset: Tensor, beats: BeatTimes) -> None:
    if x.dim() != 3 or not x.is_floating_point():
        raise ValueError(f"{name}: signals must be a floating (N, channels, samples) tensor, got {tuple(x.shape)}")
    if not 0.0 <= severity <= MAX_SEVERITY:
        raise ValueError(f"{name}: severity must lie in [0, {MAX_SEVERITY}], got {severity}")
    if onset.shape != x.shape[:1] or len(beats) != x.shape[0]:
        raise ValueError(
            f"{name}: need one onset and one beat train per record: {x.shape[0]} records, "
            f"onset {tuple(onset.shape)}, beats for {len(beats)}"
        )


def _rise(u: Tensor) -> Tensor:
    """Raised-cosine ramp: 0 for u ≤ 0, 1 for u ≥ 1 (NaN stays NaN)."""
    return 0.5 * (1.0 - torch.cos(math.pi * u.clamp(0.0, 1.0)))


def _sample_times(x: Tensor) -> Tensor:
    """(N, S) float64 sample indices."""
    return torch.arange(x.shape[-1], dtype=torch.float64).expand(x.shape[0], -1)


def _after(x: Tensor, onset: Tensor) -> Tensor:
    """(N, S) bool: sample at or after the record's onset."""
    return torch.arange(x.shape[-1]) >= onset[:, None]


def _first_nonzero(weight: Tensor) -> Tensor:
    """(N,) first sample where ``weight`` (N, S) > 0; S where there is none."""
    positive = weight > 0
    return torch.where(positive.any(1), positive.int().argmax(1), weight.shape[1])


def _beat_window(
    x: Tensor, onset: Tensor, beats: BeatTimes, window_ms: tuple[float, float], ramp_ms: float, guard_ms: float
) -> Tensor:
    """(N, S) weight of a window ``window_ms`` after each R-peak whose window starts at or after
    the onset: raised-cosine ramps of ``ramp_ms``, ending ``guard_ms`` before the next R-peak."""
    t = _sample_times(x)
    count = beats.count_at(t)
    previous, following = beats.take(count - 1), beats.take(count)
    start, end, ramp, guard = (beats.samples(ms) for ms in (*window_ms, ramp_ms, guard_ms))
    since = t - previous
    weight = _rise((since - start) / ramp) * _rise((end - since) / ramp) * _rise((following - t - guard) / ramp)
    return weight.nan_to_num(0.0) * (previous + start >= onset[:, None])


@perturbation("t-inversion", signals=("ecg",))
def t_inversion(
    x: Tensor,
    severity: float,
    onset: Tensor,
    beats: BeatTimes,
    rng: np.random.Generator,
    *,
    window_ms: tuple[float, float] = (150.0, 400.0),
    ramp_ms: float = 50.0,
    guard_ms: float = 80.0,
) -> Perturbed:
    """T waves multiplied by 1 − s·w: w is the `_beat_window` (s = 2 inverts the plateau)."""
    _check_family_input("t-inversion", x, severity, onset, beats)
    weight = _beat_window(x, onset, beats, window_ms, ramp_ms, guard_ms)
    return Perturbed(x * (1.0 - severity * weight).to(x.dtype)[:, None], _first_nonzero(weight))


@perturbation("st-shift", signals=("ecg",))
def st_shift(
    x: Tensor,
    severity: float,
    onset: Tensor,
    beats: BeatTimes,
    rng: np.random.Generator,
    *,
    window_ms: tuple[float, float] = (60.0, 160.0),
    ramp_ms: float = 20.0,
    guard_ms: float = 80.0,
    fraction: float = 0.25,
) -> Perturbed:
    """ST segments raised by s · ``fraction`` · record RMS · w on every channel (w: `_beat_window`)."""
    _check_family_input("st-shift", x, severity, onset, beats)
    weight = _beat_window(x, onset, beats, window_ms, ramp_ms, guard_ms)
    shift = severity * fraction * record_rms(x).double()[:, None] * weight
    return Perturbed(x + shift.to(x.dtype)[:, None], _first_nonzero(weight))


@perturbation("ectopic", signals=("ecg",))
def ectopic(
    x: Tensor,
    severity: float,
    onset: Tensor,
    beats: BeatTimes,
    rng: np.random.Generator,
    *,
    prematurity: float = 0.3,
    complex_ms: tuple[float, float] = (60.0, 360.0),
    widening: float = 1.5,
    taper_ms: float = 30.0,
) -> Perturbed:
    """A premature, widened, inverted copy of each cycle's QRS-T, centred at
    c_k = round(R_k + (1 − p)(R_{k+1} − R_k)):

        x'(c_k + u) = x(c_k + u) − s · taper(u) · x(R_k + u / γ),   −γ a ≤ u ≤ γ b,

    (a, b) = ``complex_ms``, γ = ``widening``, a Tukey taper of ``taper_ms``, x linearly
    interpolated; spans starting before the onset are skipped, overlaps add up.
    """
    _check_family_input("ectopic", x, severity, onset, beats)
    n, channels, samples = x.shape
    current, following = beats.peaks[:, :-1], beats.peaks[:, 1:]
    complete = torch.isfinite(following)
    centre = torch.where(complete, current + (1 - prematurity) * (following - current), 0.0).round()
    u = torch.arange(-math.ceil(widening * beats.samples(complex_ms[0])), math.ceil(widening * beats.samples(complex_ms[1])) + 1)
    u = u.double()
    taper = _rise((u - u[0]) / beats.samples(taper_ms)) * _rise((u[-1] - u) / beats.samples(taper_ms))
    target = centre[..., None] + u  # (N, M, W)
    source = torch.where(complete, current, 0.0)[..., None] + u / widening
    included = complete & (centre + u[0] >= onset[:, None])
    inside = included[..., None] & (target >= 0) & (target < samples) & (source >= 0) & (source <= samples - 1)
    weight = (taper * inside).flatten(1)  # (N, M·W)
    target = target.clamp(0, samples - 1).long().flatten(1)
    low = source.floor().clamp(0, samples - 2).long().flatten(1)
    fraction = (source.flatten(1) - low).to(x.dtype)[:, None]

    def at(index: Tensor) -> Tensor:
        return x.gather(2, index[:, None].expand(n, channels, -1))

    copy = (1 - fraction) * at(low) + fraction * at(low + 1)
    added = -severity * weight.to(x.dtype)[:, None] * copy
    support = torch.zeros(n, samples, dtype=torch.float64).scatter_add(1, target, weight)
    return Perturbed(x.scatter_add(2, target[:, None].expand(n, channels, -1), added), _first_nonzero(support))


@perturbation("attenuation")
def attenuation(x: Tensor, severity: float, onset: Tensor, beats: BeatTimes, rng: np.random.Generator) -> Perturbed:
    """Every channel multiplied by 1 − s / 2.5 from the onset on (s = 2 keeps 0.2 of the signal)."""
    _check_family_input("attenuation", x, severity, onset, beats)
    gain = 1.0 - (severity / 2.5) * _after(x, onset).to(x.dtype)
    return Perturbed(x * gain[:, None], onset.clamp(max=x.shape[-1]))


@perturbation("lead-dropout", min_channels=2)
def channel_dropout(x: Tensor, severity: float, onset: Tensor, beats: BeatTimes, rng: np.random.Generator) -> Perturbed:
    """``lead-dropout``: the first k = ⌈1.5 s⌉ channels of a per-record random permutation set to 0
    from the onset on (nested across severities from equal generators)."""
    _check_family_input("lead-dropout", x, severity, onset, beats)
    k = min(math.ceil(round(1.5 * severity, 9)), x.shape[1])
    order = torch.from_numpy(np.argsort(rng.random((x.shape[0], x.shape[1])), axis=1))
    dropped = torch.zeros(x.shape[:2], dtype=torch.bool).scatter(1, order[:, :k], True)
    silent = dropped[:, :, None] & _after(x, onset)[:, None]
    return Perturbed(x.masked_fill(silent, 0.0), onset.clamp(max=x.shape[-1]))


@perturbation("baseline-wander")
def baseline_wander(
    x: Tensor,
    severity: float,
    onset: Tensor,
    beats: BeatTimes,
    rng: np.random.Generator,
    *,
    frequency_hz: tuple[float, float] = (0.1, 0.5),
    ramp_s: float = 1.0,
) -> Perturbed:
    """Add s · RMS · ramp(t) · sin(2π f (t − onset) + θ) from the onset on: f uniform on
    ``frequency_hz``, θ on [0, 2π) per record, a raised-cosine ramp over ``ramp_s``."""
    _check_family_input("baseline-wander", x, severity, onset, beats)
    frequency = torch.from_numpy(rng.uniform(*frequency_hz, size=(x.shape[0], 1)))
    phase = torch.from_numpy(rng.uniform(0.0, TWO_PI, size=(x.shape[0], 1)))
    since = (_sample_times(x) - onset[:, None]) / beats.fs
    wave = _rise(since / ramp_s) * torch.sin(TWO_PI * frequency * since + phase)
    wander = severity * record_rms(x).double()[:, None] * wave
    return Perturbed(x + wander.to(x.dtype)[:, None], onset.clamp(max=x.shape[-1]))
