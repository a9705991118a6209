"""Token-by-token encoding for bedside monitoring and the causal transport monitor.

`StreamingEncoder` runs the deployed path on one chunk (one token) at a time. Everything but
the causal convolutions acts on each token alone, so the only state is each convolution's last
(k − 1)·d inputs, starting at the zeros the offline convolution pads with: every streamed token
equals the offline ``model(x)`` at that token. `CausalPhaseTracker` gives the phase from the
beats confirmed so far; `TransportMonitor` scores each token against a template of dephased ones.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Literal, cast, overload

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cyclejepa.models.encoder import CausalConv1d, CausalConvEncoder, ContextBlock
from cyclejepa.models.jepa import JEPAModel
from cyclejepa.phase import causal_phase, token_times
from cyclejepa.symmetry import PhaseSymmetry


def conv_step(conv: CausalConv1d, u: Tensor, past: Tensor) -> tuple[Tensor, Tensor]:
    """Output of ``conv`` at the current input ``u`` (batch, channels) after ``past`` (batch,
    channels, (k − 1)·d; oldest first), and the next past: the window [past | u] holds
    u_{t−(k−1)d} … u_t, its every d-th frame is a tap (one matrix product with the kernel)."""
    window = torch.cat((past, u.unsqueeze(-1)), dim=-1)
    taps = window[:, :, :: conv.dilation[0]]
    return F.linear(taps.flatten(1), conv.weight.flatten(1), conv.bias), window[:, :, 1:]


class StreamingEncoder(nn.Module):
    """Streams ``model(x)`` of a `JEPAModel` with a `CausalConvEncoder`: one chunk in, one token out.

    Adds no parameters. ``forward(chunk, state)`` is one step as a pure function of an explicit
    state (what `cyclejepa.export` exports); `reset` (before a stream, and after moving the model
    to another device or dtype) and `step` keep the state in the object. Chunks are (batch, leads,
    patch), e.g. (B, 12, 8) for the paper at 100 Hz, several patients at once.
    """

    def __init__(self, model: JEPAModel):
        super().__init__()
        if not isinstance(model.encoder, CausalConvEncoder):
            raise TypeError(f"StreamingEncoder needs a CausalConvEncoder, got {type(model.encoder).__name__}")
        self.model = model
        self.batch = 0
        self.tokens_seen = 0
        self._state: list[Tensor] = []

    @property
    def _encoder(self) -> CausalConvEncoder:
        return cast(CausalConvEncoder, self.model.encoder)  # checked at construction

    @property
    def patch(self) -> int:
        """Samples per chunk (one token)."""
        return self._encoder.patch

    def _convs(self) -> dict[str, CausalConv1d]:
        return {f"encoder.{name}": module for name, module in self._encoder.named_modules() if isinstance(module, CausalConv1d)}

    def state_layout(self) -> dict[str, int]:
        """Frames kept per convolution, (k − 1)·d, keyed by module path."""
        return {name: conv.left_pad for name, conv in self._convs().items()}

    @property
    def state(self) -> dict[str, Tensor]:
        """The whole state: the kept inputs (batch, channels, frames) per convolution (empty before `reset`)."""
        return dict(zip(self._convs(), self._state, strict=True)) if self._state else {}

    def initial_state(self, batch: int) -> list[Tensor]:
        """Zeros (batch, channels, (k − 1)·d) per convolution in `state_layout` order (the offline padding)."""
        return [conv.weight.new_zeros(batch, conv.in_channels, conv.left_pad) for conv in self._convs().values()]

    def forward(self, chunk: Tensor, state: list[Tensor]) -> tuple[Tensor, Tensor, list[Tensor]]:
        """(z_t, h_t, next state) of ``chunk`` (batch, leads, patch) after ``state`` (`initial_state` first)."""
        encoder = self._encoder
        h = encoder.patch_mlp(encoder.patchify(chunk)[:, 0])
        after = []
        blocks = cast(Iterable[ContextBlock], encoder.blocks)  # a ModuleList of ContextBlocks
        for index, block in enumerate(blocks):
            inner, first = conv_step(block.conv1, F.gelu(block.norm1(h)), state[2 * index])
            update, second = conv_step(block.conv2, F.gelu(block.norm2(inner)), state[2 * index + 1])
            h = h + update
            after += [first, second]
        return self.model.project(h), h, after

    def reset(self, batch: int = 1) -> None:
        """Start ``batch`` new streams: the zero state (the offline left padding), token 0."""
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        with torch.inference_mode():
            self._state = self.initial_state(batch)
        self.batch, self.tokens_seen = batch, 0

    def _check_chunk(self, chunk: Tensor) -> None:
        if not self.batch:
            raise RuntimeError("StreamingEncoder.step before reset(batch): call reset first")
        expected = (self.batch, self._encoder.leads, self.patch)
        if tuple(chunk.shape) != expected:
            raise ValueError(
                f"chunk must have shape (batch, leads, patch) = {expected}, got "
                f"{tuple(chunk.shape)} at token {self.tokens_seen} (reset(batch) changes batch)"
            )

    @torch.inference_mode()
    @overload
    def step(self, chunk: Tensor, *, return_h: Literal[False] = False) -> Tensor: ...

    @overload
    def step(self, chunk: Tensor, *, return_h: Literal[True]) -> tuple[Tensor, Tensor]: ...

    @overload
    def step(self, chunk: Tensor, *, return_h: bool) -> Tensor | tuple[Tensor, Tensor]: ...

    def step(self, chunk: Tensor, *, return_h: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Projected token z_t (batch, K) of the next chunk; with ``return_h`` also h_t."""
        self._check_chunk(chunk)
        z, h, self._state = self(chunk, self._state)
        self.tokens_seen += 1
        return (z, h) if return_h else z

    def encode_stream(self, chunks: Iterable[Tensor], *, return_h: bool = False) -> Iterator[Tensor | tuple[Tensor, Tensor]]:
        """Yield `step` of each chunk, after a `reset` to the first one's batch; e.g.
        ``encode_stream(x.split(patch, dim=-1))`` for a stored record x (B, leads, samples)."""
        for index, chunk in enumerate(chunks):
            if index == 0:
                self.reset(chunk.shape[0])
            yield self.step(chunk, return_h=return_h)


class CausalPhaseTracker:
    """Cycle phase at the current time from the beats confirmed so far, for ``batch`` records.

    φ(t) = 2π (t − R_last) / (R_last − R_prev), clipped below 2π (`cyclejepa.phase.causal_phase`)
    with R_last, R_prev the last two confirmed beats; NaN until two are seen. Times are in any
    unit shared by peaks and queries (`TransportMonitor`: samples of the streamed signal).
    """

    def __init__(self, batch: int = 1):
        self.last = torch.full((batch,), math.nan, dtype=torch.float64)
        self.previous = torch.full((batch,), math.nan, dtype=torch.float64)
        self.beats = torch.zeros(batch, dtype=torch.int64)

    def add_peak(self, sample: float, record: int = 0) -> None:
        """Confirm a beat at time ``sample`` in record ``record`` (later than its last beat)."""
        if not 0 <= record < len(self.beats):
            raise IndexError(f"record {record} out of range for a tracker of {len(self.beats)}")
        if not math.isfinite(sample) or sample <= self.last[record]:
            raise ValueError(
                f"peak {sample} of record {record} must be finite and after its last confirmed peak {self.last[record].item()}"
            )
        self.previous[record] = self.last[record]
        self.last[record] = sample
        self.beats[record] += 1

    def phase(self, time: float | Tensor) -> Tensor:
        """(batch,) float64 phase at ``time`` (scalar or per record), NaN where undefined."""
        time = torch.as_tensor(time, dtype=torch.float64)
        if bool((time < self.last).any()):
            raise ValueError(
                f"phase queried at {time.tolist()} before a confirmed peak {self.last.tolist()}: "
                f"add peaks only once the stream has reached them"
            )
        return causal_phase(time, self.last, self.previous)


def _per_record(peaks: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
    """One sorted float64 array per record; a 1-D array of numbers is a single record."""
    if isinstance(peaks, np.ndarray) and peaks.ndim == 1:
        peaks = [peaks]
    return [np.asarray(record, dtype=np.float64) for record in peaks]


def peaks_due(peaks: np.ndarray | Sequence[np.ndarray], times: np.ndarray) -> Iterator[list[tuple[int, float]]]:
    """Offline detections in causal order: per query time, the (record, peak) pairs first known
    then (peaks in (previous time, time]; all up to the first time at the first)."""
    per_record = _per_record(peaks)
    known = np.stack([np.searchsorted(p, times, side="right") for p in per_record])
    fed = np.zeros(len(per_record), dtype=np.int64)
    for column in known.T:
        yield [
            (record, float(peak))
            for record, (start, stop) in enumerate(zip(fed, column, strict=True))
            for peak in per_record[record][start:stop]
        ]
        fed = column


def _confirming(tracker: CausalPhaseTracker, peaks: np.ndarray | Sequence[np.ndarray], times: np.ndarray) -> Iterator[float]:
    """Yield each of ``times`` once ``tracker`` has confirmed the peaks due by then (`peaks_due`)."""
    for time, due in zip(times, peaks_due(peaks, times), strict=True):
        for record, peak in due:
            tracker.add_peak(peak, record)
        yield time


def causal_phases(peaks: np.ndarray | Sequence[np.ndarray], times: np.ndarray) -> np.ndarray:
    """(records, len(times)) float64 phase a `CausalPhaseTracker` fed ``peaks`` causally reports at
    ``times`` (radians, NaN where undefined)."""
    times = np.asarray(times, dtype=np.float64)
    tracker = CausalPhaseTracker(len(_per_record(peaks)))
    phases = [tracker.phase(time) for time in _confirming(tracker, peaks, times)]
    return torch.stack(phases, dim=1).numpy()


class TransportMonitor(nn.Module):
    """Per-token transport-violation score of a streamed model, for bedside monitoring.

    At token t with phase φ_t (`CausalPhaseTracker`, causal token clock) the dephased unit token
    is w_t = ρ(φ_t)⁻¹ z_t / ‖z_t‖ and the score 1 − cos(w_t, m_t), with the template m_t the mean
    of the w_s of all earlier phase-valid tokens: 0 for an exactly equivariant model
    (z_t = ρ(φ_t) v). NaN where φ_t is undefined and until ``2 + warmup_beats`` beats are
    confirmed. ``symmetry`` is ρ on the projected tokens (rank 1, dim = projector output).
    """

    def __init__(self, model: JEPAModel, symmetry: PhaseSymmetry, *, warmup_beats: int = 2):
        super().__init__()
        if symmetry.rank != 1 or symmetry.dim != model.projector.out_dim:
            raise ValueError(
                f"symmetry must act on one phase in dim {model.projector.out_dim} (the "
                f"projector output), got rank {symmetry.rank}, dim {symmetry.dim}"
            )
        if warmup_beats < 0:
            raise ValueError(f"warmup_beats must be >= 0, got {warmup_beats}")
        self.encoder = StreamingEncoder(model)
        self.symmetry = symmetry
        self.warmup_beats = warmup_beats
        self.reset()

    def reset(self, batch: int = 1) -> None:
        """Start ``batch`` new streams: encoder state, beats and template all cleared."""
        self.encoder.reset(batch)
        self.tracker = CausalPhaseTracker(batch)
        device = next(self.encoder.model.parameters()).device
        self.template_sum = torch.zeros(batch, self.symmetry.dim, dtype=torch.float64, device=device)
        self.template_count = torch.zeros(batch, dtype=torch.int64, device=device)

    def add_peak(self, sample: float, record: int = 0) -> None:
        """Confirm a beat at ``sample`` (samples of the streamed signal, may be fractional)."""
        self.tracker.add_peak(sample, record)

    @torch.inference_mode()
    def update(self, z: Tensor, phi: Tensor) -> Tensor:
        """Scores (batch,) of tokens ``z`` (batch, K) at phases ``phi`` (batch,), which then join the template."""
        if z.shape != self.template_sum.shape or phi.shape != z.shape[:1]:
            raise ValueError(
                f"update needs z {tuple(self.template_sum.shape)} and phi "
                f"({len(self.template_sum)},), got z {tuple(z.shape)}, phi {tuple(phi.shape)}"
            )
        valid = torch.isfinite(phi).to(z.device)
        phi = torch.nan_to_num(phi, nan=0.0).to(z.device)
        w = self.symmetry.canonicalize(F.normalize(z.double(), dim=-1), phi)
        cosine = (w * F.normalize(self.template_sum, dim=-1)).sum(-1)
        warm = (self.tracker.beats >= 2 + self.warmup_beats).to(z.device)
        ready = valid & warm & (self.template_count > 0)
        self.template_sum += w * valid.unsqueeze(-1)
        self.template_count += valid
        return torch.where(ready, 1 - cosine, math.nan).to(z.dtype)

    @torch.inference_mode()
    def step(self, chunk: Tensor) -> Tensor:
        """Score (batch,) of the next chunk, its phase read at the chunk's last sample."""
        z = self.encoder.step(chunk)
        clock = self.encoder.tokens_seen * self.encoder.patch - 1  # the "causal" token time
        return self.update(z, self.tracker.phase(clock))

    def replay(self, x: Tensor, peaks: np.ndarray | Sequence[np.ndarray]) -> Tensor:
        """Scores (batch, T) of stored records x (batch, leads, samples) streamed chunk by chunk,
        ``peaks`` (one array per record, samples of x) confirmed as the stream reaches them."""
        self.reset(x.shape[0])
        chunks = x.split(self.encoder.patch, dim=-1)
        times = token_times(len(chunks), self.encoder.patch, "causal")
        confirmed = _confirming(self.tracker, peaks, times)  # peaks due by each chunk's end
        scores = [self.step(chunk) for chunk, _ in zip(chunks, confirmed, strict=True)]
        return torch.stack(scores, dim=1)
