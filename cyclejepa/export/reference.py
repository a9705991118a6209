"""Reference preparation and streaming encoding of a record, with numpy and onnxruntime only.

Copied into every package as ``reference.py``; it reads the package's ``config.json`` and
``encoder_streaming.onnx`` beside it and imports neither torch, scipy nor cyclejepa::

    python PKG/reference.py SIGNAL.npy --fs FS --channels I --channels II ... --out TOKENS.npy

SIGNAL is (channels, samples) of real numbers in the dataset's units at FS Hz, FS at least the
rate the model reads (``model_fs``); ``--channels`` names its rows, one option per row (a single
``--channels A,B,C`` is split at commas when that gives one non-empty name per row). Each sample
goes, as it arrives (with step 3, once the record has ended), through the preparation that
``cyclejepa embed`` applies to the whole record:

1. the package's channels, in its order (names matched ignoring case, surrounding space and
   trailing punctuation: ``PLETH,`` is ``PLETH``), as float32;
2. resampling to ``cache_fs`` when FS differs: polyphase FIR, up/down = cache_fs / FS with each rate taken to
   1/1000 Hz, taps h = firwin(20·m + 1, 1/m, Kaiser β) · up with m = max(up, down); output
   y[n] = Σ_j h[j] · u[n·down + 10·m − j], u the input zero-stuffed by ``up`` and extended at
   both ends of the record by its first and last sample; float32;
3. the dataset's preparation before windowing, when the package has one (``preparation``, e.g.
   the ``wfdb`` dataset's): the first round(drop_s · cache_fs) samples dropped; each channel with a
   cut-off high-passed with the package's ``highpass_filter.sos``, forward and backward
   (scipy's ``sosfiltfilt``: odd extension by 3 · (2 · sections + 1) samples at both ends, each
   pass started from the steady state of its first sample, float64); with scope ``record`` each
   channel z-scored by its own mean and std (ddof 0); float32. The backward pass starts at the
   record's end, so these samples are held until the record ends (`RecordPreparation`): the
   tokens of such a package come after the whole record, not as it streams;
4. consecutive windows of ``window`` samples at ``cache_fs`` from the first sample, a shorter tail
   dropped; with scope ``window`` each channel of a window z-scored by its own mean and std (the
   window is held until its last sample);
5. per window, decimation by q with the package's taps h (101 for q = 5, group delay 10·q):
   y[n] = Σ_k h[k] · x[q·n + 10·q − k], x extended at both ends *of the window* by its first and
   last sample; so y[n] is final once x[q·n + 10·q] has arrived, and the last 10 outputs of a
   window when the window ends; float32;
6. z-score with the package's per-channel mean and std; float32;
7. every ``token_patch`` prepared samples are one chunk through ``encoder_streaming.onnx``, whose
   state starts at zeros at every window start.

The tokens written are (windows, tokens, K) float32: those of ``cyclejepa embed`` for the same
record (no warm-up: the state restarts with each window, as the offline encoding does).
``--mean-tokens FILE`` also writes the mean of all tokens of all windows (K,) float64, the record
embedding that needs no phase (``Embeddings.mean_tokens``).

A record whose prepared samples are far from the training normalisation (the package's
``input_range``: per channel max(|log10 s|, log10(1 + |m|)) above ``out_of_range_decades``, m
and s the mean and std of its normalised samples) is encoded and flagged with an
``out_of_range: ...`` line on stderr, as ``cyclejepa embed`` flags it in ``qc_reason``. Anything
it cannot prepare as the library does (a package or signal it does not understand, a rate below
``model_fs``, tokens that are not finite) is refused: one ``error:`` line, exit status 1, no
output written.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

STEPS = ["channels", "resample", "prepare", "cut_windows", "decimate", "normalise", "encode"]
"""The preparation steps this reference implements, in order; a package listing others is refused."""
STEPS_WITHOUT_PREPARATION = [step for step in STEPS if step != "prepare"]
"""The steps of packages written before the ``prepare`` step existed (read when they have no ``preparation``)."""
KNOWN = {
    "steps",
    "channels",
    "units",
    "cache_fs",
    "fs",
    "window",
    "window_s",
    "decimation",
    "model_fs",
    "token_patch",
    "n_tokens",
    "normalisation",
    "resampling",
    "decimation_filter",
    "phase_provider",
    "phase_options",
    "phase_convention",
    "phase_coordinates",
    "phase_revision",
    "cache_hash",
    "dataset",
    "input_range",
    "preparation",
    "highpass_filter",
}
"""Keys of ``preprocessing`` this reference understands; any other is a step it would skip."""


MAX_RATIO_TERM = 1_000_000
"""Largest up or down factor of the resampling, as the library allows."""
MIN_FS, MAX_FS = 0.01, 1e6
"""Sampling rates (Hz) the library accepts."""
MIN_STD, MAX_ABS_MEAN = 1e-9, 1e12
"""Bounds of the normalisation's std and |mean|, as the library's package checks."""
MAX_SIZE = {"window": 100_000_000, "decimation": 1000, "token_patch": 4096}
"""Largest value of each size a package may declare, as the library's package checks."""
OUT_OF_RANGE_DECADES = 1.0
"""The library's limit of the input distance, for a package whose config has no ``input_range``."""
TRAILING = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~" + " \t\n\r\x0b\x0c"
"""Stripped from the end of a channel name (string.punctuation and string.whitespace, as the library)."""
"""Characters a channel name may end with that do not change which channel it names."""
SCOPES = ("corpus", "record", "window")
"""The library's normalisation scopes (`cyclejepa.data.preprocess.SCOPES`)."""
MAX_SECTIONS = 64
"""Most second-order sections a high-pass of a package may have."""


class PreparationError(ValueError):
    """A package or a signal this reference cannot prepare as the library does."""


class StreamingFIR:
    """Polyphase FIR resampling by up/down, fed one sample (channels,) at a time.

    Output n is Σ_j h[j] · u[n·down + half − j] (u: the input zero-stuffed by ``up``, extended by
    its first and last sample), the ``padtype="edge"`` convention of scipy's resample_poly; it is
    given as soon as the input it needs has arrived, the rest by `finish`.
    """

    def __init__(self, taps: np.ndarray, up: int, down: int):
        self.taps, self.up, self.down, self.half = np.asarray(taps, np.float64) * up, up, down, (len(taps) - 1) // 2
        self.history: list[np.ndarray] = []  # the inputs from index `self.first` on
        self.first, self.received, self.emitted = 0, 0, 0
        self.start: np.ndarray | None = None  # the first input, which extends the record before it

    def push(self, sample: np.ndarray) -> list[np.ndarray]:
        if self.start is None:
            self.start = sample
        self.history.append(sample)
        self.received += 1
        ready = []
        while (self.emitted * self.down + self.half) // self.up < self.received:
            ready.append(self._output(self.emitted))
            self.emitted += 1
        self._forget()
        return ready

    def finish(self) -> list[np.ndarray]:
        """The outputs still owed: ceil(inputs · up / down) in all."""
        total = -(-self.received * self.up // self.down)
        ready = [self._output(n) for n in range(self.emitted, total)]
        self.emitted = total
        return ready

    def _output(self, n: int) -> np.ndarray:
        position = n * self.down + self.half
        j = np.arange(position % self.up, len(self.taps), self.up)
        index = np.clip((position - j) // self.up, 0, self.received - 1)
        start = self.start
        assert start is not None, "an output is computed only after the first input (push sets start)"
        values = np.stack([start if i == 0 else self.history[i - self.first] for i in index])
        return self.taps[j] @ values

    def _forget(self) -> None:
        """Drop inputs no later output reads (the first sample is kept for the edge)."""
        oldest = max(0, (self.emitted * self.down + self.half - len(self.taps) + 1) // self.up)
        if oldest > self.first:
            del self.history[: oldest - self.first]
            self.first = oldest


def design_taps(up: int, down: int, beta: float) -> np.ndarray:
    """firwin(20·m + 1, 1/m, ("kaiser", β)) with m = max(up, down): windowed sinc, unit DC gain."""
    m = max(up, down)
    k = np.arange(20 * m + 1) - 10 * m
    taps = np.sinc(k / m) / m * np.kaiser(20 * m + 1, beta)
    return taps / taps.sum()


def ratio(fs_in: float, fs: float) -> Fraction:
    """fs / fs_in with each rate to 1/1000 Hz, as the library resamples."""
    return Fraction(fs).limit_denominator(1000) / Fraction(fs_in).limit_denominator(1000)


def cache_fs(prep: dict) -> float:
    """The package's cache rate (Hz) from its signal geometry (`cyclejepa.signal_geometry.SignalGeometry.to_dict`:
    ``channels``, ``cache_fs``, ``decimation``, ``token_patch``, ``window_s`` and the derived
    ``model_fs``, ``window``, ``n_tokens``); a package of format 2 or 3 names it ``fs``."""
    return float(prep["cache_fs"] if "cache_fs" in prep else prep["fs"])


def check_package(prep: Any) -> None:
    """Refuse a package whose preparation has a step or a key this reference does not implement,
    or a value the library would refuse (sizes, rates, normalisation, filters)."""
    if not isinstance(prep, dict):
        raise PreparationError("config.json preprocessing: must be an object")
    steps = prep.get("steps")
    if steps != STEPS and not (steps == STEPS_WITHOUT_PREPARATION and "preparation" not in prep):
        raise PreparationError(f"config.json preprocessing.steps is {steps}; this reference implements {STEPS} only")
    unknown = sorted(set(prep) - KNOWN)
    if unknown:
        raise PreparationError(f"config.json preprocessing has {unknown}, which this reference does not implement")
    channels = prep.get("channels")
    if not isinstance(channels, list) or not channels or not all(isinstance(c, str) and c.strip() for c in channels):
        raise _invalid("channels", f"must be a list of non-empty strings, got {str(channels)[:200]}")
    _number(prep, "cache_fs" if "cache_fs" in prep else "fs", MIN_FS, MAX_FS)
    window, q, patch = (_integer(prep, key) for key in ("window", "decimation", "token_patch"))
    if window % (q * patch):
        raise _invalid("window", f"{window} samples are not whole tokens of {q} × {patch} samples")
    norm = prep.get("normalisation")
    for key, low, high in (("mean", -MAX_ABS_MEAN, MAX_ABS_MEAN), ("std", MIN_STD, 1 / MIN_STD)):
        values = norm.get(key) if isinstance(norm, dict) else None
        if not isinstance(values, list) or len(values) != len(channels):
            raise _invalid(f"normalisation.{key}", f"must be a list of {len(channels)} numbers, got {str(values)[:200]}")
        for channel, value in zip(channels, values, strict=True):
            if not _real(value) or not low <= value <= high:
                raise _invalid(
                    f"normalisation.{key} of {channel}", f"must be a finite number in [{low:g}, {high:g}], got {value!r}"
                )
    resampling = prep.get("resampling")
    kaiser = resampling.get("window") if isinstance(resampling, dict) else None
    beta = kaiser[1] if isinstance(kaiser, list) and len(kaiser) == 2 else None
    if not _real(beta):
        raise _invalid("resampling.window", f"must be ['kaiser', β] with β a finite number, got {beta!r}")
    _check_decimation_filter(prep.get("decimation_filter"), q)
    if "preparation" in prep:
        _check_preparation(prep["preparation"], prep.get("highpass_filter"), channels, cache_fs(prep))
    if "input_range" in prep:
        limits = prep["input_range"] if isinstance(prep["input_range"], dict) else {}
        _number(limits, "out_of_range_decades", 0, 1e6, "input_range.")


def _check_decimation_filter(fir, q: int) -> None:
    """``decimation_filter``: "none" when q is 1, else 20·q + 1 finite coefficients."""
    if q == 1 and fir == "none":
        return
    taps = fir.get("coefficients") if isinstance(fir, dict) else None
    if not isinstance(taps, list) or len(taps) != 20 * q + 1 or not all(_real(t) for t in taps):
        raise _invalid("decimation_filter.coefficients", f"must be {20 * q + 1} finite numbers (decimation {q})")


def _check_preparation(found: Any, fir: Any, channels: list[str], fs: float) -> None:
    """``preparation`` as the library writes it (`SignalPreparation.to_dict`: ``drop_s`` >= 0, ``scope``
    one of `SCOPES`, ``highpass_hz`` none or one cut-off or null per channel, each below fs / 2),
    and for each cut-off its sections in ``highpass_filter.sos``."""
    if not isinstance(found, dict):
        raise _invalid("preparation", f"must be an object, got {str(found)[:80]}")
    _number(found, "drop_s", 0, math.inf, "preparation.")
    if found.get("scope") not in SCOPES:
        raise _invalid("preparation.scope", f"must be one of {', '.join(SCOPES)}, got {str(found.get('scope'))[:80]!r}")
    cutoffs = found.get("highpass_hz")
    if not isinstance(cutoffs, list) or len(cutoffs) not in (0, len(channels)):
        raise _invalid(
            "preparation.highpass_hz", f"must be a list of {len(channels)} cut-offs (Hz or null), got {str(cutoffs)[:200]}"
        )
    for channel, cutoff in zip(channels, cutoffs, strict=False):
        if cutoff is not None and not (_real(cutoff) and 0 < cutoff < fs / 2):
            raise _invalid(f"preparation.highpass_hz of {channel}", f"must be null or in (0, {fs / 2:g}) Hz, got {cutoff!r}")
    if any(c is not None for c in cutoffs):
        sos = fir.get("sos") if isinstance(fir, dict) else None
        if not isinstance(sos, list) or len(sos) != len(channels):
            raise _invalid(
                "highpass_filter.sos",
                f"must hold the sections of each of the {len(channels)} channels "
                "(a package written before the high-pass was in config.json: export it again)",
            )
        for channel, cutoff, sections in zip(channels, cutoffs, sos, strict=True):
            if (cutoff is None) != (sections is None) or (sections is not None and not _sections(sections)):
                raise _invalid(
                    f"highpass_filter.sos of {channel}",
                    f"must be null without a cut-off, else 1 to "
                    f"{MAX_SECTIONS} sections [b0, b1, b2, 1, a1, a2] of finite numbers",
                )


def _sections(sections: Any) -> bool:
    """Whether ``sections`` are second-order sections [b0, b1, b2, 1, a1, a2] of finite numbers."""
    return (
        isinstance(sections, list)
        and 1 <= len(sections) <= MAX_SECTIONS
        and all(isinstance(s, list) and len(s) == 6 and all(map(_real, s)) and s[3] == 1 for s in sections)
    )


def _invalid(field: str, problem: str) -> PreparationError:
    return PreparationError(f"config.json preprocessing.{field}: {problem}")


def _real(value) -> bool:
    """Whether ``value`` is a finite JSON number (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number(section: dict, key: str, low: float, high: float, where: str = "") -> float:
    value: Any = section.get(key)
    if not _real(value) or not low <= value <= high:
        raise _invalid(f"{where}{key}", f"must be a finite number in [{low:g}, {high:g}], got {value!r}")
    return float(value)


def _integer(section: dict, key: str) -> int:
    value, high = section.get(key), MAX_SIZE[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise _invalid(key, f"must be an integer in [1, {high}], got {str(value)[:80]}")
    return value


def sosfilt(sos: np.ndarray, x: np.ndarray, zi: np.ndarray) -> np.ndarray:
    """(L,) ``x`` through second-order sections ``sos`` (sections, 6) from state ``zi`` (sections, 2),
    direct form II transposed as scipy's ``sosfilt``: y = b0·x + z1, z1' = b1·x − a1·y + z2,
    z2' = b2·x − a2·y; float64."""
    y = [float(v) for v in x]
    for (b0, b1, b2, _, a1, a2), (z1, z2) in zip(sos.tolist(), zi.tolist(), strict=True):
        for n, v in enumerate(y):
            out = b0 * v + z1
            z1, z2 = b1 * v - a1 * out + z2, b2 * v - a2 * out
            y[n] = out
    return np.asarray(y, dtype=np.float64)


def sosfilt_zi(sos: np.ndarray) -> np.ndarray:
    """(sections, 2) state of each section at rest under a unit step (scipy's ``sosfilt_zi``):
    per section z = (I − Aᵀ)⁻¹ (b[1:] − a[1:]·b0), A the companion matrix of a, times the DC gain
    of the sections before it."""
    zi, scale = np.empty((len(sos), 2)), 1.0
    for row, (b0, b1, b2, _, a1, a2) in enumerate(sos):
        zi[row] = scale * np.linalg.solve(np.array([[1 + a1, -1.0], [a2, 1.0]]), np.array([b1 - a1 * b0, b2 - a2 * b0]))
        scale *= (b0 + b1 + b2) / (1 + a1 + a2)
    return zi


def sosfiltfilt(sos: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(L,) ``x`` filtered forward and backward by ``sos`` as scipy's ``sosfiltfilt`` (``padtype="odd"``):
    x extended at both ends by p = 3 · (2 · sections + 1) samples mirrored through its end value
    (2·x[0] − x[p..1], 2·x[−1] − x[−2..−p−1]; a section ending in b2 = a2 = 0 counts one tap less),
    each pass started from `sosfilt_zi` times its first sample, the extension cut off; float64."""
    pad = 3 * (2 * len(sos) + 1 - min(int((sos[:, 2] == 0).sum()), int((sos[:, 5] == 0).sum())))
    if len(x) <= pad:
        raise PreparationError(f"{len(x)} samples are too few for the high-pass (more than {pad} needed)")
    x = np.asarray(x, dtype=np.float64)
    extended = np.concatenate([2 * x[0] - x[pad:0:-1], x, 2 * x[-1] - x[-2 : -(pad + 2) : -1]])
    zi = sosfilt_zi(sos)
    forward = sosfilt(sos, extended, zi * extended[0])
    backward = sosfilt(sos, forward[::-1], zi * forward[-1])[::-1]
    return backward[pad:-pad]


def zscore_rows(x: np.ndarray) -> np.ndarray:
    """(C, L) ``x`` minus each row's mean, divided by its standard deviation (ddof 0); float64."""
    x = np.asarray(x, dtype=np.float64)
    return (x - x.mean(axis=-1, keepdims=True)) / x.std(axis=-1, keepdims=True)


def check_spread(x: np.ndarray, channels: list[str], where: str) -> None:
    """Refuse (C, L) ``x`` with a constant channel, which a z-score of its own cannot scale (the library's ``flat``)."""
    flat = [channels[c] for c in np.flatnonzero(np.asarray(x, dtype=np.float64).std(axis=-1) <= 0)]
    if flat:
        raise PreparationError(f"{where} channel {flat} is constant, which cannot be z-scored")


class RecordPreparation:
    """Step 3: the package's ``preparation`` of a whole record (C, L) at ``cache_fs`` (the library's
    `SignalPreparation`): leading seconds dropped, zero-phase high-pass, per-record z-score."""

    def __init__(self, prep: dict):
        found, self.channels, fs = prep["preparation"], list(prep["channels"]), cache_fs(prep)
        self.drop, self.scope = round(float(found["drop_s"]) * fs), found["scope"]
        cutoffs = found["highpass_hz"] or [None] * len(self.channels)
        sos = prep["highpass_filter"]["sos"] if any(c is not None for c in cutoffs) else cutoffs
        self.sos = [None if c is None else np.asarray(s, np.float64) for c, s in zip(cutoffs, sos, strict=True)]
        self.window = int(prep["window"])

    def apply(self, x: np.ndarray) -> np.ndarray:
        """(C, L) float32 -> the prepared (C, L − dropped) float32; a record left shorter than one
        window is returned as it is (it has no window to encode)."""
        x = x[:, self.drop :]
        if x.shape[-1] < self.window:
            return x
        out = np.asarray(x, dtype=np.float64).copy()
        for row, sos in enumerate(self.sos):
            if sos is not None:
                out[row] = sosfiltfilt(sos, out[row])
        if self.scope == "record":
            check_spread(out, self.channels, "the record's")
            out = zscore_rows(out)
        return out.astype(np.float32)


class StreamingInput:
    """Steps 1–6 for one record, fed sample by sample; `push` returns the prepared (channels,)
    samples now final and marks window starts (``None`` before a window's first sample). With a
    ``preparation`` (step 3) the samples are held until `finish`, which prepares the whole record."""

    def __init__(self, prep: dict, fs_in: float):
        self.window, self.q = int(prep["window"]), int(prep["decimation"])
        scale = ratio(fs_in, cache_fs(prep))
        if max(scale.numerator, scale.denominator) > MAX_RATIO_TERM:
            raise PreparationError(
                f"resampling {fs_in:g} Hz to {cache_fs(prep):g} Hz needs factors {scale} (at most {MAX_RATIO_TERM})"
            )
        beta = float(prep["resampling"]["window"][1])
        self.resampler = (
            None
            if scale == 1
            else StreamingFIR(design_taps(scale.numerator, scale.denominator, beta), scale.numerator, scale.denominator)
        )
        self.taps = None if self.q == 1 else np.asarray(prep["decimation_filter"]["coefficients"], np.float64)
        self.mean = np.asarray(prep["normalisation"]["mean"], np.float64)
        self.std = np.asarray(prep["normalisation"]["std"], np.float64)
        self.channels = list(prep["channels"])
        self.preparation = RecordPreparation(prep) if "preparation" in prep else None
        self.by_window = self.preparation is not None and self.preparation.scope == "window"
        self.held: list[np.ndarray] = []  # samples at fs held for the preparation (of the record, or of a window)
        self.in_window = 0
        self.decimator: StreamingFIR | None = None

    def push(self, sample: np.ndarray) -> list:
        at_fs = [sample] if self.resampler is None else self.resampler.push(sample.astype(np.float64))
        if self.preparation is not None:
            self.held += [np.float32(x) for x in at_fs]
            return []
        return [out for x in at_fs for out in self._windowed(np.float32(x))]

    def finish(self) -> list:
        """The samples owed at the end of the record (its last window, if complete); with a
        preparation, every sample of the record, prepared."""
        tail = [np.float32(x) for x in ([] if self.resampler is None else self.resampler.finish())]
        if self.preparation is None or not self.held + tail:
            return [out for x in tail for out in self._windowed(x)]
        record, self.held = np.stack(self.held + tail, axis=-1), []
        prepared = self.preparation.apply(record)
        return [out for t in range(prepared.shape[-1]) for out in self._windowed(prepared[:, t])]

    def _windowed(self, x: np.ndarray) -> list:
        out: list[np.ndarray | None] = []
        if self.in_window == 0:
            out.append(None)
            self.decimator = None if self.taps is None else StreamingFIR(self.taps, 1, self.q)  # taps is None iff q == 1
        self.in_window += 1
        if self.by_window:  # the window's own z-score needs its last sample: held until then
            self.held.append(x)
            decimated = []
            if self.in_window == self.window:
                window, self.held = np.stack(self.held, axis=-1), []
                check_spread(window, self.channels, "a window of")
                decimated = [y for t in zscore_rows(window).astype(np.float32).T for y in self._decimated(t)]
        else:
            decimated = self._decimated(x)
        if self.in_window == self.window:
            decimated += [] if self.decimator is None else self.decimator.finish()
            self.in_window = 0
        return out + [self._normalise(np.float32(y)) for y in decimated]

    def _decimated(self, x: np.ndarray) -> list:
        """The decimated samples final once ``x`` (channels,) of the current window has arrived."""
        return [x] if self.decimator is None else self.decimator.push(x.astype(np.float64))

    def _normalise(self, y: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused after the record (check_prepared)
            return ((y.astype(np.float64) - self.mean) / self.std).astype(np.float32)


def name_key(name: str) -> str:
    """What a channel name is matched by: case, surrounding space and trailing punctuation aside
    (the library's `channel_key`, copied: this script imports nothing of cyclejepa)."""
    return str(name).casefold().strip().rstrip(TRAILING)


def check_signal_dtype(signal: np.ndarray) -> np.ndarray:
    """``signal`` if it is (channels, samples) of real numbers; bool, complex, dates, text are refused."""
    if signal.dtype.kind not in "iuf":
        raise PreparationError(f"the signal must hold real numbers (integers or floats), not dtype {signal.dtype}")
    if signal.ndim != 2:
        raise PreparationError(f"the signal must be (channels, samples), got shape {signal.shape}")
    return signal


def select_channels(signal: np.ndarray, names: list[str], channels: list[str]) -> np.ndarray:
    """The package's ``channels`` of ``signal`` (rows named ``names``), in order, as float32;
    two rows that match one channel are refused, naming both."""
    keys = [name_key(name) for name in names]
    missing = [c for c in channels if name_key(c) not in keys]
    if missing:
        raise PreparationError(f"no channel {missing} (the signal has {names})")
    rows = []
    for channel in channels:
        matching = [i for i, key in enumerate(keys) if key == name_key(channel)]
        if len(matching) > 1:
            raise PreparationError(f"rows {[names[i] for i in matching]} all match channel {channel!r}: name one of them only")
        rows.append(matching[0])
    x = check_signal_dtype(np.asarray(signal))[rows]
    with np.errstate(over="ignore"):
        x32 = x.astype(np.float32)
    bad = [channels[i] for i in np.flatnonzero(~np.isfinite(x).all(axis=1))]
    if bad:
        raise PreparationError(f"non-finite samples on {bad}")
    bad = [channels[i] for i in np.flatnonzero(~np.isfinite(x32).all(axis=1))]
    if bad:
        raise PreparationError(f"samples on {bad} exceed the float32 range the model computes in")
    return x32


def load_package(folder: Path) -> tuple[dict, object]:
    """``config.json`` and an onnxruntime session of ``encoder_streaming.onnx`` (checksum verified)."""
    import onnxruntime as ort

    config = json.loads((folder / "config.json").read_text())
    if not isinstance(config, dict):
        raise PreparationError("config.json: must be an object")
    check_package(config.get("preprocessing"))
    graph = folder / "encoder_streaming.onnx"
    if not graph.is_file():
        raise PreparationError(f"{graph} is missing: export the package with `cyclejepa export --onnx`")
    expected = config.get("files", {}).get(graph.name)
    if expected != hashlib.sha256(graph.read_bytes()).hexdigest():
        raise PreparationError(f"{graph} does not match its sha256 in config.json")
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return config, ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])


def check_input_rate(fs: float, prep: dict) -> None:
    """Refuse a rate below the one the model reads (``fs / decimation``), as the library does."""
    model_fs = cache_fs(prep) / int(prep["decimation"])
    if not (math.isfinite(fs) and MIN_FS <= fs <= MAX_FS):
        raise PreparationError(f"--fs {fs:g} is outside [{MIN_FS:g}, {MAX_FS:g}] Hz")
    if fs < model_fs:
        raise PreparationError(
            f"the record is sampled at {fs:g} Hz, below the {model_fs:g} Hz the encoder reads (content up to "
            f"{model_fs / 2:g} Hz); give it at {model_fs:g} Hz or more"
        )


def encode(signal: np.ndarray, fs: float, names: list[str], config: dict, session) -> np.ndarray:
    """(windows, tokens, K) float32 tokens of ``signal`` fed sample by sample (steps 1–6)."""
    return encode_record(signal, fs, names, config, session)[0]


def encode_record(signal: np.ndarray, fs: float, names: list[str], config: dict, session) -> tuple[np.ndarray, np.ndarray]:
    """The tokens (windows, tokens, K) float32 of ``signal`` fed sample by sample (steps 1–6) and
    the prepared input they come from, (windows, channels, samples) float32."""
    prep = config["preprocessing"]
    check_input_rate(fs, prep)
    x = select_channels(signal, names, prep["channels"])
    stream, patch = StreamingInput(prep, fs), int(prep["token_patch"])
    state_shapes = {s.name: s.shape for s in session.get_inputs() if s.name.startswith("state_")}
    windows: list[tuple[list[np.ndarray], list[np.ndarray]]] = []  # (tokens, prepared samples) per window
    chunk: list[np.ndarray] = []
    state: dict[str, np.ndarray] = {}

    def feed(prepared: list) -> None:
        nonlocal chunk, state
        for y in prepared:
            if y is None:  # a window starts: zero state
                chunk = []
                windows.append(([], []))
                state = {name: np.zeros((1, *shape[1:]), np.float32) for name, shape in state_shapes.items()}
                continue
            chunk.append(y)
            windows[-1][1].append(y)
            if len(chunk) == patch:
                z, *after = session.run(None, {"chunk": np.stack(chunk, axis=-1)[None], **state})
                state, chunk = dict(zip(state, after, strict=True)), []
                windows[-1][0].append(z[0])

    for t in range(x.shape[1]):
        feed(stream.push(x[:, t]))
    feed(stream.finish())
    per_window = int(prep["window"]) // int(prep["decimation"]) // patch
    complete = [w for w in windows if len(w[0]) == per_window]  # a shorter tail is dropped
    if not complete:
        drop = float(prep.get("preparation", {}).get("drop_s", 0))
        raise PreparationError(
            f"the signal lasts {x.shape[1] / fs:.2f} s, shorter than one {prep['window_s']:g} s window"
            + (f" after dropping its first {drop:g} s" if drop else "")
        )
    tokens = np.stack([np.stack(t) for t, _ in complete]).astype(np.float32)
    inputs = np.stack([np.stack(samples, axis=-1) for _, samples in complete])
    check_prepared(inputs, prep["channels"])
    return tokens, inputs


def check_prepared(prepared: np.ndarray, channels: list[str]) -> None:
    """Refuse prepared windows (W, C, L) whose normalised samples overflow float32, naming the channels."""
    bad = [channels[c] for c in np.flatnonzero(~np.isfinite(prepared).all(axis=(0, 2)))]
    if bad:
        raise PreparationError(
            f"the normalised samples of {bad} overflow float32: the input is far outside the training normalisation"
        )


def distance_from_normalisation(prepared: np.ndarray) -> tuple[float, int]:
    """How far prepared windows (W, C, L) are from the normalisation, in decades, and the channel
    row furthest: max_c max(|log10 s_c|, log10(1 + |m_c|)) (+inf for a constant channel)."""
    x = np.asarray(prepared, dtype=np.float64)
    mean, std = x.mean(axis=(0, 2)), x.std(axis=(0, 2))
    with np.errstate(divide="ignore"):
        per_channel = np.maximum(np.abs(np.log10(std)), np.log10(1 + np.abs(mean)))
    worst = int(np.argmax(per_channel))
    return float(per_channel[worst]), worst


def out_of_range(prepared: np.ndarray, prep: dict) -> str:
    """The library's ``out_of_range: ...`` reason for ``prepared`` windows, or ''."""
    limit = float(prep.get("input_range", {}).get("out_of_range_decades", OUT_OF_RANGE_DECADES))
    distance, row = distance_from_normalisation(prepared)
    if distance <= limit:
        return ""
    return (
        f"out_of_range: channel {prep['channels'][row]} is {distance:.2f} decades from the run's normalisation (limit {limit:g})"
    )


def check_tokens(tokens: np.ndarray, reason: str) -> None:
    """Refuse tokens holding a NaN or an infinity, naming the windows."""
    bad = np.flatnonzero(~np.isfinite(tokens).all(axis=(1, 2)))
    if len(bad):
        cause = reason or "input far outside the training range?"
        raise PreparationError(f"the encoder's output is not finite in windows {bad.tolist()} ({cause})")


def channel_names(given: list[str], rows: int) -> list[str]:
    """The names of ``--channels``: one per option; a single option is split at commas when that
    gives ``rows`` non-empty names and ``rows`` is more than one."""
    if len(given) == 1 and rows > 1:
        parts = given[0].split(",")
        if len(parts) == rows and all(part.strip() for part in parts):
            return parts
    if len(given) != rows:
        raise PreparationError(
            f"{len(given)} channel names {given} for a signal of {rows} rows: give one --channels per row, in order"
        )
    return given


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("signal", type=Path, help="(channels, samples) .npy in the dataset's units")
    parser.add_argument("--fs", type=float, required=True, help="its sampling rate, Hz")
    parser.add_argument(
        "--channels",
        required=True,
        action="append",
        help="the name of a row, once per row in order (--channels I --channels II); A,B,C once is split at commas",
    )
    parser.add_argument("--out", type=Path, required=True, help="tokens, (windows, tokens, K) .npy")
    parser.add_argument("--mean-tokens", type=Path, help="also write the mean of all tokens, (K,) .npy")
    args = parser.parse_args(argv)
    try:
        signal = check_signal_dtype(np.load(args.signal, allow_pickle=False))
        names = channel_names(args.channels, len(signal))
        config, session = load_package(Path(__file__).resolve().parent)
        check_input_rate(args.fs, config["preprocessing"])
        for out in filter(None, (args.out, args.mean_tokens)):
            out.parent.mkdir(parents=True, exist_ok=True)
        tokens, prepared = encode_record(signal, args.fs, names, config, session)
        reason = out_of_range(prepared, config["preprocessing"])
        check_tokens(tokens, reason)
        np.save(args.out, tokens)
        if args.mean_tokens:
            np.save(args.mean_tokens, tokens.reshape(-1, tokens.shape[-1]).astype(np.float64).mean(axis=0))
    except (PreparationError, OSError, KeyError, ValueError) as error:
        print(f"error: {args.signal}: {_one_line(error)}", file=sys.stderr)
        return 1
    if reason:
        print(f"{args.signal}: {reason}; tokens written, flagged as cyclejepa embed flags them", file=sys.stderr)
    return 0


def _one_line(error: BaseException) -> str:
    """The error's message on one line (a KeyError: the missing key named)."""
    text = f"config.json lacks {error}" if isinstance(error, KeyError) else str(error)
    return " ".join(text.split())[:500]


if __name__ == "__main__":
    sys.exit(main())
