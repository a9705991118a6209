"""Reference preparation and streaming encoding of a record, with numpy and onnxruntime only.

Copied into every package as ``reference.py``; it reads the package's ``config.json`` and
``encoder_streaming.onnx`` beside it and imports neither torch nor cyclejepa::

    python PKG/reference.py SIGNAL.npy --fs FS --channels I,II,... --out TOKENS.npy

SIGNAL is (channels, samples) in the dataset's units at FS Hz. Each sample goes, as it arrives,
through the preparation that ``cyclejepa embed`` applies to the whole record:

1. the package's channels, in its order (names matched case-insensitively), as float32;
2. resampling to ``fs`` when FS differs: polyphase FIR, up/down = fs / FS with each rate taken to
   1/1000 Hz, taps h = firwin(20·m + 1, 1/m, Kaiser β) · up with m = max(up, down); output
   y[n] = Σ_j h[j] · u[n·down + 10·m − j], u the input zero-stuffed by ``up`` and extended at
   both ends of the record by its first and last sample; float32;
3. consecutive windows of ``window`` samples at ``fs`` from the first sample, a shorter tail dropped;
4. per window, decimation by q with the package's taps h (101 for q = 5, group delay 10·q):
   y[n] = Σ_k h[k] · x[q·n + 10·q − k], x extended at both ends *of the window* by its first and
   last sample; so y[n] is final once x[q·n + 10·q] has arrived, and the last 10 outputs of a
   window when the window ends; float32;
5. z-score with the package's per-channel mean and std; float32;
6. every ``token_patch`` prepared samples are one chunk through ``encoder_streaming.onnx``, whose
   state starts at zeros at every window start.

The tokens written are (windows, tokens, K) float32: those of ``cyclejepa embed`` for the same
record (no warm-up: the state restarts with each window, as the offline encoding does).
``--mean-tokens FILE`` also writes the mean of all tokens of all windows (K,) float64, the record
embedding that needs no phase (``Embeddings.mean_tokens``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np

STEPS = ["channels", "resample", "cut_windows", "decimate", "normalise", "encode"]
"""The preparation steps this reference implements, in order; a package listing others is refused."""
KNOWN = {
    "steps", "channels", "units", "fs", "window", "window_s", "decimation", "model_fs", "token_patch",
    "normalisation", "resampling", "decimation_filter", "phase_provider", "phase_options", "phase_convention",
    "phase_coordinates", "phase_revision", "cache_hash", "dataset",
}  # fmt: skip
"""Keys of ``preprocessing`` this reference understands; any other is a step it would skip."""


MAX_RATIO_TERM = 1_000_000
"""Largest up or down factor of the resampling, as the library allows."""


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


def check_package(prep: dict) -> None:
    """Refuse a package whose preparation has a step or a key this reference does not implement."""
    steps = prep.get("steps")
    if steps != STEPS:
        raise PreparationError(f"config.json preprocessing.steps is {steps}; this reference implements {STEPS} only")
    unknown = sorted(set(prep) - KNOWN)
    if unknown:
        raise PreparationError(f"config.json preprocessing has {unknown}, which this reference does not implement")
    if prep["decimation_filter"] != "none" and len(prep["decimation_filter"]["coefficients"]) != 20 * prep["decimation"] + 1:
        raise PreparationError("config.json preprocessing.decimation_filter.coefficients do not fit the decimation")


class Preparer:
    """Steps 1–5 for one record, fed sample by sample; `push` returns the prepared (channels,)
    samples now final and marks window starts (``None`` before a window's first sample)."""

    def __init__(self, prep: dict, fs_in: float):
        self.window, self.q = int(prep["window"]), int(prep["decimation"])
        scale = ratio(fs_in, float(prep["fs"]))
        if max(scale.numerator, scale.denominator) > MAX_RATIO_TERM:
            raise PreparationError(
                f"resampling {fs_in:g} Hz to {prep['fs']:g} Hz needs factors {scale} (at most {MAX_RATIO_TERM})"
            )
        beta = float(prep["resampling"]["window"][1])
        self.resampler = None if scale == 1 else StreamingFIR(
            design_taps(scale.numerator, scale.denominator, beta), scale.numerator, scale.denominator
        )  # fmt: skip
        self.taps = None if self.q == 1 else np.asarray(prep["decimation_filter"]["coefficients"], np.float64)
        self.mean = np.asarray(prep["normalisation"]["mean"], np.float64)
        self.std = np.asarray(prep["normalisation"]["std"], np.float64)
        self.in_window = 0
        self.decimator: StreamingFIR | None = None

    def push(self, sample: np.ndarray) -> list:
        at_fs = [sample] if self.resampler is None else self.resampler.push(sample.astype(np.float64))
        return [out for x in at_fs for out in self._windowed(np.float32(x))]

    def finish(self) -> list:
        """The samples owed at the end of the record (its last window, if complete)."""
        tail = [] if self.resampler is None else self.resampler.finish()
        return [out for x in tail for out in self._windowed(np.float32(x))]

    def _windowed(self, x: np.ndarray) -> list:
        out: list[np.ndarray | None] = []
        if self.in_window == 0:
            out.append(None)
            self.decimator = None if self.taps is None else StreamingFIR(self.taps, 1, self.q)  # taps is None iff q == 1
        self.in_window += 1
        decimated = [x] if self.decimator is None else self.decimator.push(x.astype(np.float64))
        if self.in_window == self.window:
            decimated += [] if self.decimator is None else self.decimator.finish()
            self.in_window = 0
        return out + [self._normalise(np.float32(y)) for y in decimated]

    def _normalise(self, y: np.ndarray) -> np.ndarray:
        return ((y.astype(np.float64) - self.mean) / self.std).astype(np.float32)


def select_channels(signal: np.ndarray, names: list[str], channels: list[str]) -> np.ndarray:
    """The package's ``channels`` of ``signal`` (rows named ``names``), in order, as float32."""
    lower = [name.lower() for name in names]
    missing = [c for c in channels if c.lower() not in lower]
    if missing:
        raise PreparationError(f"no channel {missing} (the signal has {names})")
    x = np.asarray(signal)[[lower.index(c.lower()) for c in channels]]
    bad = [channels[i] for i in np.flatnonzero(~np.isfinite(x).all(axis=1))]
    if bad:
        raise PreparationError(f"non-finite samples on {bad}")
    return x.astype(np.float32)


def load_package(folder: Path) -> tuple[dict, object]:
    """``config.json`` and an onnxruntime session of ``encoder_streaming.onnx`` (checksum verified)."""
    import onnxruntime as ort

    config = json.loads((folder / "config.json").read_text())
    check_package(config["preprocessing"])
    graph = folder / "encoder_streaming.onnx"
    if not graph.is_file():
        raise PreparationError(f"{graph} is missing: export the package with `cyclejepa export --onnx`")
    expected = config.get("files", {}).get(graph.name)
    if expected != hashlib.sha256(graph.read_bytes()).hexdigest():
        raise PreparationError(f"{graph} does not match its sha256 in config.json")
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return config, ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])


def encode(signal: np.ndarray, fs: float, names: list[str], config: dict, session) -> np.ndarray:
    """(windows, tokens, K) float32 tokens of ``signal`` fed sample by sample (steps 1–6)."""
    prep = config["preprocessing"]
    x = select_channels(signal, names, prep["channels"])
    preparer, patch = Preparer(prep, fs), int(prep["token_patch"])
    state_shapes = {s.name: s.shape for s in session.get_inputs() if s.name.startswith("state_")}
    windows: list[list[np.ndarray]] = []
    tokens: list[np.ndarray] = []
    chunk: list[np.ndarray] = []
    state: dict[str, np.ndarray] = {}

    def feed(prepared: list) -> None:
        nonlocal tokens, chunk, state
        for y in prepared:
            if y is None:  # a window starts: zero state
                tokens, chunk = [], []
                windows.append(tokens)
                state = {name: np.zeros((1, *shape[1:]), np.float32) for name, shape in state_shapes.items()}
                continue
            chunk.append(y)
            if len(chunk) == patch:
                z, *after = session.run(None, {"chunk": np.stack(chunk, axis=-1)[None], **state})
                state, chunk = dict(zip(state, after)), []
                tokens.append(z[0])

    for t in range(x.shape[1]):
        feed(preparer.push(x[:, t]))
    feed(preparer.finish())
    per_window = int(prep["window"]) // int(prep["decimation"]) // patch
    complete = [w for w in windows if len(w) == per_window]  # a shorter tail is dropped
    if not complete:
        raise PreparationError(f"the signal lasts {x.shape[1] / fs:.2f} s, shorter than one {prep['window_s']:g} s window")
    return np.stack([np.stack(w) for w in complete]).astype(np.float32)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("signal", type=Path, help="(channels, samples) .npy in the dataset's units")
    parser.add_argument("--fs", type=float, required=True, help="its sampling rate, Hz")
    parser.add_argument("--channels", required=True, help="its channel names, comma-separated, one per row")
    parser.add_argument("--out", type=Path, required=True, help="tokens, (windows, tokens, K) .npy")
    parser.add_argument("--mean-tokens", type=Path, help="also write the mean of all tokens, (K,) .npy")
    args = parser.parse_args(argv)
    try:
        signal = np.load(args.signal)
        names = args.channels.split(",")
        if signal.ndim != 2 or len(names) != len(signal):
            raise PreparationError(f"{len(names)} channel names for a signal of shape {signal.shape}")
        if not (np.isfinite(args.fs) and 0.01 <= args.fs <= 1e6):
            raise PreparationError(f"--fs {args.fs} is outside [0.01, 1e6] Hz")
        config, session = load_package(Path(__file__).resolve().parent)
        tokens = encode(signal, args.fs, names, config, session)
    except (PreparationError, OSError, KeyError, ValueError) as error:
        print(f"error: {args.signal}: {error}", file=sys.stderr)
        return 1
    np.save(args.out, tokens)
    if args.mean_tokens:
        np.save(args.mean_tokens, tokens.reshape(-1, tokens.shape[-1]).astype(np.float64).mean(axis=0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
