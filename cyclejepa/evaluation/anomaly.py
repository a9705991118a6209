"""The anomaly battery: six synthetic perturbation families scored by one causal detector.

Each family perturbs z-scored 100 Hz records (N, 12, 1000) from a per-record onset onward at a
severity s in [0, 2]; s = 0 runs the same pipeline at zero amplitude and is the identity. A
detector from `DETECTORS` emits one score per 80 ms token (T = 125) that reads only tokens
≤ t. Per family and severity, `anomaly_battery` compares the perturbed records with the same
records unperturbed: AUROC of the record scores (maximum over the tokens from the onset on),
its excess over the family's zero-severity reference, and, at a threshold calibrated on the
clean records only, the alarm rate, the localisation hit rate and the median latency.

Phases come from a causal tracker on the clean record's R-peaks (`causal_token_phases`): the
phase of token t uses only the beats at or before the token's last sample.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cyclejepa.data.augment import record_rms
from cyclejepa.evaluation.embeddings import extract_tokens
from cyclejepa.evaluation.geometry import dephase
from cyclejepa.evaluation.mechanism import record_chunks
from cyclejepa.models.predictor import CausalTransformerPredictor
from cyclejepa.phase import TWO_PI, causal_phase, token_times
from cyclejepa.registry import DETECTORS, unknown_name_message
from cyclejepa.symmetry import PhaseSymmetry

__all__ = [
    "PERTURBATIONS",
    "SEVERITIES",
    "AnomalyCell",
    "BeatTimes",
    "Perturbed",
    "alarm_threshold",
    "anomaly_battery",
    "attenuation",
    "auroc",
    "baseline_wander",
    "causal_token_phases",
    "draw_onsets",
    "ectopic",
    "evaluate_cell",
    "first_alarms",
    "lead_dropout",
    "next_token_predictions",
    "predictor_error",
    "record_scores",
    "st_shift",
    "strongest_cell",
    "t_inversion",
    "to_table",
    "transport_violation",
]

FS = 100.0
"""Rate of the z-scored signals (Hz)."""
PATCH = 8
"""Samples per token; one token is PATCH / FS = 80 ms."""
TOKEN_MS = 1000.0 * PATCH / FS
RPEAK_FS = 500.0
"""Rate of the cached R-peak indices (Hz)."""
SEVERITIES = (0.0, 0.5, 1.0, 1.5, 2.0)
MAX_SEVERITY = 2.0

ArrayLike = Union[np.ndarray, Tensor]


# --------------------------------------------------------------------------------------------
# beats and the causal phase tracker


@dataclass(frozen=True, eq=False)
class BeatTimes:
    """R-peak times of N records, padded: ``peaks`` (N, B + 1) float64, +inf after the last.

    Times are in samples of the signal they index (100 Hz by default), possibly fractional.
    The extra +inf column makes "the beat after" defined for every time.
    """

    peaks: Tensor

    @classmethod
    def from_rpeaks(
        cls, rpeaks: Sequence[np.ndarray], *, rpeak_fs: float = RPEAK_FS, fs: float = FS
    ) -> BeatTimes:
        """From one array of R-peak indices at ``rpeak_fs`` per record, rescaled to ``fs``."""
        lengths = np.array([len(r) for r in rpeaks], dtype=np.int64)
        flat = np.concatenate([np.asarray(r, dtype=np.float64) for r in rpeaks] + [np.zeros(0)])
        rows = np.repeat(np.arange(len(lengths)), lengths)
        starts = np.cumsum(lengths) - lengths
        columns = np.arange(len(flat)) - np.repeat(starts, lengths)
        same_record = rows[1:] == rows[:-1]
        unsorted = same_record & (np.diff(flat) <= 0)
        if unsorted.any():
            raise ValueError(f"R-peaks of record {rows[1:][unsorted][0]} are not strictly increasing")
        peaks = np.full((len(lengths), lengths.max(initial=0) + 1), np.inf)
        peaks[rows, columns] = flat * (fs / rpeak_fs)
        return cls(torch.from_numpy(peaks))

    def __len__(self) -> int:
        return self.peaks.shape[0]

    def count_at(self, times: Tensor) -> Tensor:
        """Number of beats at or before each of ``times`` (N, Q), int64."""
        return torch.searchsorted(self.peaks, times.to(self.peaks).contiguous(), right=True)

    def take(self, index: Tensor) -> Tensor:
        """Beat times at per-record ``index`` (N, Q): NaN where index < 0, +inf past the last."""
        times = self.peaks.gather(1, index.clamp(0, self.peaks.shape[1] - 1))
        return times.masked_fill(index < 0, math.nan)


def causal_token_phases(
    rpeaks: Sequence[np.ndarray] | BeatTimes,
    n_tokens: int = 125,
    *,
    patch: int = PATCH,
    fs: float = FS,
    rpeak_fs: float = RPEAK_FS,
) -> np.ndarray:
    """Causal phase of every token: φ = 2π (τ − R_last) / (R_last − R_prev), clipped below 2π.

    τ is the token's last sample (the causal convention); R_last, R_prev are the last two
    R-peaks at or before τ, so no later beat is read: the previous RR interval stands in for the
    current cycle length, as on a bedside monitor (`cyclejepa.phase.causal_phase`). For a
    perfectly regular rhythm this equals the offline phase map. Vectorised over records and
    tokens (one batched searchsorted).

    Parameters
    ----------
    rpeaks
        One array of R-peak indices at ``rpeak_fs`` per record, or `BeatTimes` at ``fs``.

    Returns
    -------
    (N, n_tokens) float64 radians in [0, 2π), NaN until two beats have been seen.
    """
    beats = rpeaks if isinstance(rpeaks, BeatTimes) else BeatTimes.from_rpeaks(rpeaks, rpeak_fs=rpeak_fs, fs=fs)
    times = torch.from_numpy(token_times(n_tokens, patch, "causal")).expand(len(beats), -1)
    count = beats.count_at(times)
    return causal_phase(times, beats.take(count - 1), beats.take(count - 2)).numpy()


# --------------------------------------------------------------------------------------------
# perturbation families


class Perturbed(NamedTuple):
    """A perturbed batch and, per record, the first sample the family changes (its onset).

    ``onset`` does not depend on the severity; it is the number of samples where the family
    changes nothing in that record.
    """

    signals: Tensor
    onset: Tensor


Perturbation = Callable[[Tensor, float, Tensor, BeatTimes, np.random.Generator], Perturbed]
"""``family(signals (N, L, S), severity, onset (N,) samples, beats, rng) -> Perturbed``."""


def _check_family_input(name: str, x: Tensor, severity: float, onset: Tensor, beats: BeatTimes) -> None:
    if x.dim() != 3 or not x.is_floating_point():
        raise ValueError(f"{name}: signals must be a floating (N, leads, samples) tensor, got {tuple(x.shape)}")
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


def _ms(milliseconds: float) -> float:
    return milliseconds * FS / 1000.0


def _beat_window(
    x: Tensor, onset: Tensor, beats: BeatTimes, window_ms: tuple[float, float], ramp_ms: float, guard_ms: float
) -> Tensor:
    """(N, S) weight of a window ``window_ms`` after each R-peak, 0 before the record's onset.

    Raised-cosine ramps of ``ramp_ms`` at both ends (1 in between); the window also ramps down
    ``guard_ms`` before the next R-peak, so it never reaches the next QRS. Only beats whose
    window starts at or after the onset take part.
    """
    t = _sample_times(x)
    count = beats.count_at(t)
    previous, following = beats.take(count - 1), beats.take(count)
    start, end, ramp, guard = _ms(window_ms[0]), _ms(window_ms[1]), _ms(ramp_ms), _ms(guard_ms)
    since = t - previous
    weight = _rise((since - start) / ramp) * _rise((end - since) / ramp) * _rise((following - t - guard) / ramp)
    return weight.nan_to_num(0.0) * (previous + start >= onset[:, None])


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
    """ST segments raised by s · ``fraction`` · record RMS · w on every lead (w: `_beat_window`)."""
    _check_family_input("st-shift", x, severity, onset, beats)
    weight = _beat_window(x, onset, beats, window_ms, ramp_ms, guard_ms)
    shift = severity * fraction * record_rms(x).double()[:, None] * weight
    return Perturbed(x + shift.to(x.dtype)[:, None], _first_nonzero(weight))


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
    """A premature, widened, inverted copy of each cycle's own QRS-T, added with amplitude s.

    Cycle k = [R_k, R_{k+1}) gets a complex centred at c_k = round(R_k + (1 − p)(R_{k+1} − R_k))
    (premature by the fraction p of the RR interval):

        x'(c_k + u) = x(c_k + u) − s · taper(u) · x(R_k + u / γ),   −γ a ≤ u ≤ γ b,

    where (a, b) = ``complex_ms`` spans the native complex around R_k, γ = ``widening`` and the
    Tukey taper ramps over ``taper_ms`` at both ends; x between samples is linearly
    interpolated. Cycles whose inserted span starts before the onset are left alone;
    overlapping spans add up.
    """
    _check_family_input("ectopic", x, severity, onset, beats)
    n, leads, samples = x.shape
    current, following = beats.peaks[:, :-1], beats.peaks[:, 1:]
    complete = torch.isfinite(following)
    centre = torch.where(complete, current + (1 - prematurity) * (following - current), 0.0).round()
    u = torch.arange(-math.ceil(widening * _ms(complex_ms[0])), math.ceil(widening * _ms(complex_ms[1])) + 1)
    u = u.double()
    taper = _rise((u - u[0]) / _ms(taper_ms)) * _rise((u[-1] - u) / _ms(taper_ms))
    target = centre[..., None] + u  # (N, M, W)
    source = torch.where(complete, current, 0.0)[..., None] + u / widening
    included = complete & (centre + u[0] >= onset[:, None])
    inside = included[..., None] & (target >= 0) & (target < samples) & (source >= 0) & (source <= samples - 1)
    weight = (taper * inside).flatten(1)  # (N, M·W)
    target = target.clamp(0, samples - 1).long().flatten(1)
    low = source.floor().clamp(0, samples - 2).long().flatten(1)
    fraction = (source.flatten(1) - low).to(x.dtype)[:, None]
    def at(index: Tensor) -> Tensor:
        return x.gather(2, index[:, None].expand(n, leads, -1))

    copy = (1 - fraction) * at(low) + fraction * at(low + 1)
    added = -severity * weight.to(x.dtype)[:, None] * copy
    support = torch.zeros(n, samples, dtype=torch.float64).scatter_add(1, target, weight)
    return Perturbed(x.scatter_add(2, target[:, None].expand(n, leads, -1), added), _first_nonzero(support))


def attenuation(
    x: Tensor, severity: float, onset: Tensor, beats: BeatTimes, rng: np.random.Generator
) -> Perturbed:
    """Every lead multiplied by 1 − s / 2.5 from the onset on (s = 2 keeps 0.2 of the signal)."""
    _check_family_input("attenuation", x, severity, onset, beats)
    gain = 1.0 - (severity / 2.5) * _after(x, onset).to(x.dtype)
    return Perturbed(x * gain[:, None], onset.clamp(max=x.shape[-1]))


def lead_dropout(
    x: Tensor, severity: float, onset: Tensor, beats: BeatTimes, rng: np.random.Generator
) -> Perturbed:
    """k = ⌈1.5 s⌉ leads set to 0 from the onset on (s = 2 drops 3).

    The leads are the first k of a per-record random permutation drawn from ``rng``, so the
    dropped sets are nested across severities drawn from equal generators.
    """
    _check_family_input("lead-dropout", x, severity, onset, beats)
    k = min(math.ceil(round(1.5 * severity, 9)), x.shape[1])
    order = torch.from_numpy(np.argsort(rng.random((x.shape[0], x.shape[1])), axis=1))
    dropped = torch.zeros(x.shape[:2], dtype=torch.bool).scatter(1, order[:, :k], True)
    silent = dropped[:, :, None] & _after(x, onset)[:, None]
    return Perturbed(x.masked_fill(silent, 0.0), onset.clamp(max=x.shape[-1]))


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
    """Add s · RMS · ramp(t) · sin(2π f (t − onset) + θ) on every lead from the onset on.

    f uniform on ``frequency_hz`` and θ uniform on [0, 2π) per record (from ``rng``); the ramp
    is a raised cosine rising from 0 at the onset to 1 after ``ramp_s`` seconds.
    """
    _check_family_input("baseline-wander", x, severity, onset, beats)
    frequency = torch.from_numpy(rng.uniform(*frequency_hz, size=(x.shape[0], 1)))
    phase = torch.from_numpy(rng.uniform(0.0, TWO_PI, size=(x.shape[0], 1)))
    since = (_sample_times(x) - onset[:, None]) / FS
    wave = _rise(since / ramp_s) * torch.sin(TWO_PI * frequency * since + phase)
    wander = severity * record_rms(x).double()[:, None] * wave
    return Perturbed(x + wander.to(x.dtype)[:, None], onset.clamp(max=x.shape[-1]))


PERTURBATIONS: dict[str, Perturbation] = {
    "ectopic": ectopic,
    "t-inversion": t_inversion,
    "st-shift": st_shift,
    "attenuation": attenuation,
    "lead-dropout": lead_dropout,
    "baseline-wander": baseline_wander,
}
"""The six families by name; add an entry to battery-test another perturbation."""


def draw_onsets(n: int, token_range: tuple[int, int] = (40, 100), seed: int = 0) -> np.ndarray:
    """(n,) onset tokens uniform on the integers of ``token_range`` (inclusive), seeded."""
    low, high = token_range
    if not 0 < low <= high:
        raise ValueError(f"onset token range must satisfy 0 < low <= high, got {token_range}")
    return np.random.default_rng([seed, 0]).integers(low, high + 1, size=n)


def _family_rng(seed: int, family: str) -> np.random.Generator:
    """The family's generator: equal for every severity, so that only the amplitude changes."""
    return np.random.default_rng([seed, 1, zlib.crc32(family.encode())])


# --------------------------------------------------------------------------------------------
# detectors


def _detector_tokens(
    model: nn.Module, signals: ArrayLike, phases: ArrayLike, device: str | torch.device, batch_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Projected tokens (N, T, K) of ``signals`` and the phases as float64, shapes checked."""
    x = signals.detach().cpu().numpy() if isinstance(signals, Tensor) else signals
    tokens = extract_tokens(model, x, batch_size=batch_size, device=device)
    phases = np.asarray(phases.cpu() if isinstance(phases, Tensor) else phases, dtype=np.float64)
    if phases.shape != tokens.shape[:2]:
        raise ValueError(f"phases must be (N, T) = {tokens.shape[:2]} like the model's tokens, got {phases.shape}")
    return tokens, phases


def _completed_cycles(phases: Tensor) -> Tensor:
    """(N, T) number of phase wraps (a decrease between consecutive valid tokens) up to each token.

    On a causal phase track the first valid token comes with the second beat and every later
    beat shows as one wrap, so this counts the beats seen beyond the first two.
    """
    valid = torch.isfinite(phases)
    position = torch.arange(phases.shape[1]).expand_as(phases)
    last_valid = torch.where(valid, position, -1).cummax(1).values
    before = torch.cat((torch.full_like(last_valid[:, :1], -1), last_valid[:, :-1]), 1)
    previous = phases.gather(1, before.clamp_min(0))
    wraps = valid & (before >= 0) & (phases < previous)
    return wraps.cumsum(1)


@DETECTORS.register("transport-violation")
def transport_violation(
    model: nn.Module,
    symmetry: PhaseSymmetry,
    signals: ArrayLike,
    phases: ArrayLike,
    *,
    device: str | torch.device = "cpu",
    batch_size: int = 64,
    warmup_beats: int = 2,
) -> np.ndarray:
    """Cosine distance of each dephased token from the causal template of the earlier ones.

    With w_t = ρ(φ_t)⁻¹ z_t / ‖z_t‖, the score is 1 − ⟨w_t, m_t⟩ / ‖m_t‖ where m_t = Σ w_s over
    the valid tokens s < t (the cumulative mean's direction). It is NaN where φ_t is undefined
    and until ``warmup_beats`` cycles have completed after the first valid token (phase wraps,
    `_completed_cycles`), i.e. from the (2 + ``warmup_beats``)-th beat on: the batch form of
    `cyclejepa.models.streaming.TransportMonitor`.

    Parameters
    ----------
    model
        Deployed path ``model(x) -> z`` (a `JEPAModel`), on ``device``; used in eval mode.
    symmetry
        ρ acting on z (rank 1).
    signals
        (N, leads, samples) array, memmap or tensor.
    phases
        (N, T) causal token phases (`causal_token_phases`), NaN where undefined.

    Returns
    -------
    (N, T) float64 scores in [0, 2], NaN where undefined.
    """
    if warmup_beats < 0:
        raise ValueError(f"transport-violation: warmup_beats must be >= 0, got {warmup_beats}")
    tokens, phases = _detector_tokens(model, signals, phases, device, batch_size)
    scores = []
    for chunk in record_chunks(len(tokens)):
        phi = torch.from_numpy(phases[chunk])
        w = F.normalize(dephase(tokens[chunk], phi, symmetry), dim=-1).nan_to_num(0.0)
        template = F.pad(w.cumsum(1)[:, :-1], (0, 0, 1, 0))  # Σ of the earlier w
        cosine = (w * F.normalize(template, dim=-1)).sum(-1)
        seen = torch.isfinite(phi).cumsum(1) - torch.isfinite(phi).long()
        scored = torch.isfinite(phi) & (seen > 0) & (_completed_cycles(phi) >= warmup_beats)
        scores.append(torch.where(scored, 1.0 - cosine, math.nan))
    return torch.cat(scores).numpy()


def _one_pass_predictions(predictor: CausalTransformerPredictor, z: Tensor) -> Tensor:
    """All next-token predictions of the causal Transformer in one forward of 2T tokens.

    The sequence is [z_0 … z_{T−1}, mask_0 … mask_{T−1}] with mask_t at position t. Token z_i
    attends to z_j, j ≤ i (the training mask); mask_t attends to z_j, j < t, and to itself, with
    the same relative biases. Each mask_t thus computes exactly what the training forward with
    cutoff t − 1 computes at position t, and real tokens never see a mask token.
    """
    batch, tokens, dim = z.shape
    x = torch.cat((z, predictor.mask_token.to(z.dtype).expand(batch, tokens, dim)), 1)
    position = torch.arange(tokens, device=z.device).repeat(2)
    is_mask = torch.arange(2 * tokens, device=z.device) >= tokens
    offset = position[None, :] - position[:, None]  # key − query
    sees_real = ~is_mask[None, :] & ((offset < 0) | ((offset == 0) & ~is_mask[:, None]))
    sees_itself = torch.eye(2 * tokens, dtype=torch.bool, device=z.device) & is_mask[:, None]
    m = predictor.max_relative_position
    bias = predictor.relative_bias[:, offset.clamp(-m, m) + m]
    bias = bias.masked_fill(~(sees_real | sees_itself), float("-inf"))
    for block in predictor.blocks:
        x = block(x, bias)
    return predictor.output(x[:, tokens:])


def next_token_predictions(predictor: nn.Module, z: Tensor) -> Tensor:
    """(B, T, K) predictions of z_t from z_{<t}, in the training convention.

    Output t equals ``predictor(z, cutoff=t − 1)[:, t]``: inputs after t − 1 replaced by the
    mask token, read at t. A `CausalTransformerPredictor` does all t in one forward
    (`_one_pass_predictions`); any other predictor is run once per cutoff (T forwards).
    """
    if isinstance(predictor, CausalTransformerPredictor):
        return _one_pass_predictions(predictor, z)
    cutoffs = torch.arange(-1, z.shape[1] - 1, device=z.device)
    return torch.stack(
        [predictor(z, c.expand(z.shape[0]))[:, c + 1] for c in cutoffs], dim=1
    )


@DETECTORS.register("predictor-error")
def predictor_error(
    model: nn.Module,
    symmetry: PhaseSymmetry,
    signals: ArrayLike,
    phases: ArrayLike,
    *,
    device: str | torch.device = "cpu",
    batch_size: int = 64,
) -> np.ndarray:
    """The predictor's next-token error ‖ẑ_t − z_t‖², ẑ_t predicted from z_{<t}.

    ``symmetry`` and ``phases`` are not used (the signature is the detectors' common one);
    token 0 has no context and scores NaN.

    Returns
    -------
    (N, T) float64 squared errors summed over the latent dimensions.
    """
    tokens, _ = _detector_tokens(model, signals, phases, device, batch_size)
    errors = []
    with torch.inference_mode():
        for start in range(0, len(tokens), batch_size):
            z = torch.from_numpy(tokens[start : start + batch_size]).to(device)
            prediction = next_token_predictions(model.predictor, z)
            errors.append((prediction - z).double().square().sum(-1).cpu())
    scores = torch.cat(errors)
    scores[:, 0] = math.nan
    return scores.numpy()


# --------------------------------------------------------------------------------------------
# metrics


def record_scores(scores: np.ndarray, onset_tokens: np.ndarray) -> np.ndarray:
    """(N,) maximum of each record's token scores from its onset token on (NaN ignored).

    NaN for a record with no defined score in that window.
    """
    scores = np.asarray(scores, dtype=np.float64)
    window = np.arange(scores.shape[1]) >= np.asarray(onset_tokens)[:, None]
    return np.fmax.reduce(np.where(window, scores, np.nan), axis=1)


def alarm_threshold(clean_record_scores: np.ndarray, false_alarm_rate: float = 0.05) -> float:
    """The (1 − ``false_alarm_rate``) quantile of the clean records' scores (NaN ignored)."""
    if not 0.0 < false_alarm_rate < 1.0:
        raise ValueError(f"false_alarm_rate must lie in (0, 1), got {false_alarm_rate}")
    finite = np.asarray(clean_record_scores, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        raise ValueError("alarm_threshold: no clean record has a defined score")
    return float(np.quantile(finite, 1.0 - false_alarm_rate))


def first_alarms(
    scores: np.ndarray, threshold: float, onset_tokens: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """First token at or after the onset whose score exceeds ``threshold`` (−1: none), and
    whether any token before the onset does (an early alarm).

    Returns
    -------
    first : (N,) int64; early : (N,) bool.
    """
    above = np.asarray(scores) > threshold  # NaN: no alarm
    after = np.arange(above.shape[1]) >= np.asarray(onset_tokens)[:, None]
    alarmed = above & after
    first = np.where(alarmed.any(1), alarmed.argmax(1), -1)
    return first, (above & ~after).any(1)


def auroc(negative: np.ndarray, positive: np.ndarray) -> float:
    """AUROC of ``positive`` against ``negative`` scores (ties count ½)."""
    from cyclejepa.evaluation.probe import weighted_auroc

    scores = np.concatenate([negative, positive])[:, None]
    labels = np.r_[np.zeros(len(negative)), np.ones(len(positive))][:, None]
    return float(weighted_auroc(labels, scores)[0, 0])


@dataclass
class AnomalyCell:
    """Detection of one perturbation family at one severity.

    Attributes
    ----------
    family, severity, detector : the cell.
    records : records with a defined record score clean and perturbed (the others are left out).
    auroc : AUROC of the perturbed against the clean record scores.
    reference_auroc : the family's AUROC at severity 0; ``excess`` = auroc − reference_auroc.
    threshold : alarm threshold, the (1 − false-alarm rate) quantile of the clean record scores.
    clean_alarm_rate : fraction of clean records above it (≈ the false-alarm rate).
    alarm_rate : fraction of perturbed records with an alarm at or after the onset.
    hit_rate : fraction of perturbed records whose first alarm from the onset on falls within
        ``hit_tokens`` tokens of the onset, with no alarm before it.
    median_latency_ms : median over alarmed records of (first alarm − onset + 1) × 80 ms; NaN
        when none alarms.
    alarmed : number of alarmed perturbed records.
    """

    family: str
    severity: float
    detector: str
    records: int
    auroc: float
    reference_auroc: float
    excess: float
    threshold: float
    clean_alarm_rate: float
    alarm_rate: float
    hit_rate: float
    median_latency_ms: float
    alarmed: int


def evaluate_cell(
    clean: np.ndarray,
    perturbed: np.ndarray,
    onset_tokens: np.ndarray,
    *,
    family: str = "",
    severity: float = math.nan,
    detector: str = "",
    false_alarm_rate: float = 0.05,
    hit_tokens: int = 3,
) -> AnomalyCell:
    """Metrics of one cell from token scores (N, T) of the clean and perturbed records.

    Records without a defined record score in either version are left out. The threshold uses
    the clean record scores only; the reference is left NaN (`anomaly_battery` fills it in).
    """
    if hit_tokens < 1:
        raise ValueError(f"hit_tokens must be >= 1, got {hit_tokens}")
    onset_tokens = np.asarray(onset_tokens)
    clean_max, perturbed_max = record_scores(clean, onset_tokens), record_scores(perturbed, onset_tokens)
    kept = np.isfinite(clean_max) & np.isfinite(perturbed_max)
    if not kept.any():
        raise ValueError(f"{family or 'cell'} at severity {severity}: no record has a defined score after its onset")
    clean_max, perturbed_max, onset_tokens = clean_max[kept], perturbed_max[kept], onset_tokens[kept]
    threshold = alarm_threshold(clean_max, false_alarm_rate)
    first, early = first_alarms(np.asarray(perturbed)[kept], threshold, onset_tokens)
    alarmed = first >= 0
    delay = first - onset_tokens
    latency = (delay[alarmed] + 1) * TOKEN_MS
    return AnomalyCell(
        family=family,
        severity=float(severity),
        detector=detector,
        records=int(kept.sum()),
        auroc=auroc(clean_max, perturbed_max),
        reference_auroc=math.nan,
        excess=math.nan,
        threshold=threshold,
        clean_alarm_rate=float(np.mean(clean_max > threshold)),
        alarm_rate=float(alarmed.mean()),
        hit_rate=float(np.mean(alarmed & ~early & (delay < hit_tokens))),
        median_latency_ms=float(np.median(latency)) if latency.size else math.nan,
        alarmed=int(alarmed.sum()),
    )


# --------------------------------------------------------------------------------------------
# the battery


def anomaly_battery(
    model: nn.Module,
    symmetry: PhaseSymmetry,
    signals: ArrayLike,
    rpeaks: Sequence[np.ndarray],
    phases_causal: np.ndarray | None = None,
    *,
    families: Sequence[str] | None = None,
    severities: Sequence[float] = SEVERITIES,
    detector: str = "transport-violation",
    detector_options: dict[str, Any] | None = None,
    onset_range: tuple[int, int] = (40, 100),
    false_alarm_rate: float = 0.05,
    hit_tokens: int = 3,
    seed: int = 0,
    device: str | torch.device = "cpu",
    batch_size: int = 64,
) -> list[AnomalyCell]:
    """Every family at every severity (severity 0 always included), scored by one detector.

    Parameters
    ----------
    model, symmetry
        The frozen model (on ``device``) and its phase action.
    signals
        (N, 12, 1000) z-scored 100 Hz records (e.g. ``cache.signals[rows]``).
    rpeaks
        Per record, its R-peak indices at 500 Hz (``cache.rpeaks(i)``).
    phases_causal
        (N, 125) token phases for the detector; default `causal_token_phases` of ``rpeaks``.
        Perturbed records keep the clean record's phases (the rhythm reference is not re-detected).
    families
        Names in `PERTURBATIONS` (default all six, in table order).
    detector, detector_options
        A `DETECTORS` name and its keyword options (e.g. ``{"warmup_beats": 2}``).
    onset_range
        Inclusive token range of the drawn onsets; each family then starts at its first
        affected sample at or after it (`Perturbed.onset`), whose token is the cell's onset.
    false_alarm_rate, hit_tokens
        Alarm calibration and localisation window (see `evaluate_cell`).
    seed
        Seeds the onsets and every family's draws (equal across severities).

    Returns
    -------
    One `AnomalyCell` per (family, severity), families in order, severities ascending.
    """
    families = list(PERTURBATIONS) if families is None else list(families)
    unknown = [f for f in families if f not in PERTURBATIONS]
    if unknown:
        raise KeyError(unknown_name_message("perturbation family", unknown[0], list(PERTURBATIONS)))
    levels = sorted({0.0, *map(float, severities)})
    if not all(0.0 <= s <= MAX_SEVERITY for s in levels):
        raise ValueError(f"severities must lie in [0, {MAX_SEVERITY}], got {list(severities)}")
    x = torch.as_tensor(np.asarray(signals, dtype=np.float32))
    if x.dim() != 3 or len(rpeaks) != len(x):
        raise ValueError(f"signals must be (N, leads, samples) with one R-peak array per record; got {tuple(x.shape)} and {len(rpeaks)}")
    beats = BeatTimes.from_rpeaks(rpeaks)
    tokens = x.shape[-1] // PATCH
    phases = causal_token_phases(beats, tokens) if phases_causal is None else np.asarray(phases_causal)
    score_fn = DETECTORS.get(detector)
    options = dict(detector_options or {})

    def score(batch: Tensor) -> np.ndarray:
        return score_fn(model, symmetry, batch, phases, device=device, batch_size=batch_size, **options)

    clean = score(x)
    requested = torch.from_numpy(draw_onsets(len(x), onset_range, seed) * PATCH)
    cells = []
    for family in families:
        row = []
        for severity in levels:
            perturbed = PERTURBATIONS[family](x, severity, requested, beats, _family_rng(seed, family))
            onset_tokens = (perturbed.onset // PATCH).numpy()
            row.append(
                evaluate_cell(
                    clean, score(perturbed.signals), onset_tokens, family=family, severity=severity,
                    detector=detector, false_alarm_rate=false_alarm_rate, hit_tokens=hit_tokens,
                )
            )
        reference = row[0].auroc
        cells += [replace(c, reference_auroc=reference, excess=c.auroc - reference) for c in row]
    return cells


def strongest_cell(cells: Sequence[AnomalyCell], severity: float | None = None) -> AnomalyCell:
    """The cell with the largest excess at ``severity`` (default: the highest present), the
    paper's bottom-line row ("strongest of six families")."""
    severity = max(c.severity for c in cells) if severity is None else severity
    candidates = [c for c in cells if c.severity == severity and math.isfinite(c.excess)]
    if not candidates:
        raise ValueError(f"no cell with a finite excess at severity {severity}")
    return max(candidates, key=lambda c: c.excess)


def to_table(cells: Sequence[AnomalyCell]) -> str:
    """A Markdown table of the cells, one row each."""
    header = (
        "| family | severity | AUROC | reference | excess | alarm rate | hit rate | median latency (ms) | records |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    rows = [
        f"| {c.family} | {c.severity:.1f} | {c.auroc:.4f} | {c.reference_auroc:.4f} | {c.excess:+.4f} | "
        f"{c.alarm_rate:.3f} | {c.hit_rate:.3f} | {c.median_latency_ms:.0f} | {c.records} |"
        for c in cells
    ]
    return "\n".join([header, *rows])
