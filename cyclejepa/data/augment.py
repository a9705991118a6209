"""Training-time signal augmentations, batched on the training device.

The six transforms of the paper's augmentation table (appendix "Augmentation provenance"). A
transform's ``sample`` draws its random parameters for every record and ``apply`` uses them;
calling it does both: ``transform(x, rms, generator, fs) -> x`` with ``x`` (B, channels,
samples), ``rms`` the records' clean RMS (B,) and ``fs`` in Hz. `Augmenter` chains them, each gated per record.

Nothing here synchronises with the host, and every call draws the same number of random values
whatever the gates say: the generator's state after a call depends only on the batch shape.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from pydantic import ValidationError

from cyclejepa.devices import same_device
from cyclejepa.registry import AUGMENTATIONS

__all__ = [
    "AmplitudeModulation",
    "Augmentation",
    "AugmentationStep",
    "AugmentationTrace",
    "Augmenter",
    "DEFAULT_AUGMENTATIONS",
    "Drift",
    "GaussianNoise",
    "LeadDropout",
    "LeadGain",
    "Tone",
    "check_batch",
    "record_rms",
]

Params = dict[str, Tensor]

DEFAULT_AUGMENTATIONS = tuple(AUGMENTATIONS.builtins)
"""The paper's six transforms, in the order of its table (and of application): the built-ins."""


def record_rms(x: Tensor) -> Tensor:
    """RMS of each record over all its channels and samples (one scale per record), shape (B,)."""
    return x.square().mean(dim=(1, 2)).sqrt()


def check_batch(x: Tensor, generator: torch.Generator) -> None:
    """Raise a ValueError unless ``x`` is a floating (B, channels, samples) batch on the generator's device."""
    if x.dim() != 3 or not x.is_floating_point():
        raise ValueError(
            f"augmentations take a floating batch of shape (B, channels, samples), got {x.dtype} of shape {tuple(x.shape)}"
        )
    if not same_device(generator.device, x.device):
        raise ValueError(
            f"the augmentation generator is on {generator.device} but the batch is on {x.device}; "
            f"create the stream on the batch's device, torch.Generator(device=x.device)"
        )


def _bounds(
    name: str,
    value: Sequence[float],
    *,
    low: float,
    high: float = math.inf,
    integer: bool = False,
) -> tuple:
    """``value`` as a (lower, upper) pair with low <= lower <= upper <= high, else ValueError."""
    pair = tuple(value) if isinstance(value, Sequence) else ()
    valid = len(pair) == 2 and all(isinstance(v, (int, float)) for v in pair)
    if not valid or not low <= pair[0] <= pair[1] <= high:
        raise ValueError(f"{name} must be a pair (lower, upper) with {low} <= lower <= upper <= {high}, got {value!r}")
    if integer and not all(float(v).is_integer() for v in pair):
        raise ValueError(f"{name} must be a pair of integers, got {value!r}")
    return tuple(int(v) for v in pair) if integer else pair


def _uniform(generator: torch.Generator, shape: tuple[int, ...], bounds: tuple[float, float], like: Tensor) -> Tensor:
    """Draws uniform on [bounds[0], bounds[1]) of the given shape, in ``like``'s dtype."""
    unit = torch.rand(shape, generator=generator, device=generator.device, dtype=like.dtype)
    return bounds[0] + (bounds[1] - bounds[0]) * unit


def _phase(generator: torch.Generator, shape: tuple[int, ...], like: Tensor) -> Tensor:
    """Phase offsets uniform on [0, 2π)."""
    return _uniform(generator, shape, (0.0, 2 * math.pi), like)


def _sinusoids(x: Tensor, amplitude: Tensor, frequency: Tensor, phase: Tensor, fs: float) -> Tensor:
    """Σ_c amplitude_c · sin(2π frequency_c t + phase_c) on the sample times of ``x``: (B, C) -> (B, 1, samples)."""
    t = torch.arange(x.shape[-1], device=x.device, dtype=x.dtype) / fs
    waves = torch.sin(2 * math.pi * frequency.unsqueeze(-1) * t + phase.unsqueeze(-1))
    return (amplitude.unsqueeze(-1) * waves).sum(dim=1, keepdim=True)


def _check_below_nyquist(name: str, frequency: float, fs: float) -> None:
    if not frequency < fs / 2:
        raise ValueError(f"{name}: frequency {frequency} Hz is not below the Nyquist frequency {fs / 2} Hz")


class Augmentation(ABC):
    """A batched random transform, ``sample`` then ``apply`` on every record (gating is `Augmenter`'s)."""

    @abstractmethod
    def sample(self, x: Tensor, generator: torch.Generator) -> Params:
        """Draw this transform's parameters for every record of ``x`` (B, channels, samples)."""

    @abstractmethod
    def apply(self, x: Tensor, rms: Tensor, params: Params, fs: float) -> Tensor:
        """Transform ``x`` with drawn ``params``; ``rms`` (B,) is the records' clean RMS."""

    def __call__(self, x: Tensor, rms: Tensor, generator: torch.Generator, fs: float) -> Tensor:
        check_batch(x, generator)
        return self.apply(x, rms, self.sample(x, generator), fs)


@AUGMENTATIONS.register("gaussian-noise")
@dataclass
class GaussianNoise(Augmentation):
    """Add white Gaussian noise of standard deviation ``std`` × record RMS. Params: ``noise`` (standard normal)."""

    std: float = 0.05

    def __post_init__(self) -> None:
        if not self.std >= 0:
            raise ValueError(f"gaussian-noise: std must be >= 0, got {self.std!r}")

    def sample(self, x: Tensor, generator: torch.Generator) -> Params:
        noise = torch.randn(x.shape, generator=generator, device=generator.device, dtype=x.dtype)
        return {"noise": noise}

    def apply(self, x: Tensor, rms: Tensor, params: Params, fs: float) -> Tensor:
        return x + (self.std * rms)[:, None, None] * params["noise"]


@AUGMENTATIONS.register("tone")
@dataclass
class Tone(Augmentation):
    """Add one sinusoid at ``frequency`` Hz (None: `default_frequency`), shared across channels,
    of amplitude U(``amplitude``) × record RMS and phase U[0, 2π). Params: ``amplitude``, ``phase`` (B,).
    """

    frequency: float | None = None
    amplitude: tuple[float, float] = (0.05, 0.20)

    def __post_init__(self) -> None:
        if self.frequency is not None and not self.frequency > 0:
            raise ValueError(f"tone: frequency must be > 0 Hz, got {self.frequency!r}")
        self.amplitude = _bounds("tone: amplitude", self.amplitude, low=0.0)

    @staticmethod
    def default_frequency(fs: float) -> float:
        """The tone's frequency at rate ``fs`` when none is given: 25 Hz if 25 < fs / 2, else fs / 4."""
        return 25.0 if fs / 2 > 25.0 else fs / 4

    def sample(self, x: Tensor, generator: torch.Generator) -> Params:
        batch = (x.shape[0],)
        return {
            "amplitude": _uniform(generator, batch, self.amplitude, x),
            "phase": _phase(generator, batch, x),
        }

    def apply(self, x: Tensor, rms: Tensor, params: Params, fs: float) -> Tensor:
        chosen = self.frequency if self.frequency is not None else self.default_frequency(fs)
        _check_below_nyquist("tone", chosen, fs)
        amplitude = (params["amplitude"] * rms).unsqueeze(1)
        frequency = torch.full_like(amplitude, chosen)
        return x + _sinusoids(x, amplitude, frequency, params["phase"].unsqueeze(1), fs)


@AUGMENTATIONS.register("drift")
@dataclass
class Drift(Augmentation):
    """Add a baseline wander: k ~ U{``components``} sinusoids shared across channels, each of
    frequency U(``frequency``) Hz, amplitude U(``amplitude``) × record RMS, phase U[0, 2π).
    All C = ``components[1]`` are drawn, those beyond k masked. Params: ``count`` (B,), ``active``,
    ``frequency``, ``amplitude``, ``phase`` (B, C).
    """

    components: tuple[int, int] = (1, 3)
    frequency: tuple[float, float] = (0.05, 0.4)
    amplitude: tuple[float, float] = (0.05, 0.20)

    def __post_init__(self) -> None:
        self.components = _bounds("drift: components", self.components, low=0, integer=True)
        self.frequency = _bounds("drift: frequency", self.frequency, low=0.0)
        self.amplitude = _bounds("drift: amplitude", self.amplitude, low=0.0)

    def sample(self, x: Tensor, generator: torch.Generator) -> Params:
        low, high = self.components
        shape = (x.shape[0], high)
        count = torch.randint(low, high + 1, shape[:1], generator=generator, device=generator.device)
        return {
            "count": count,
            "active": torch.arange(high, device=generator.device) < count.unsqueeze(1),
            "frequency": _uniform(generator, shape, self.frequency, x),
            "amplitude": _uniform(generator, shape, self.amplitude, x),
            "phase": _phase(generator, shape, x),
        }

    def apply(self, x: Tensor, rms: Tensor, params: Params, fs: float) -> Tensor:
        _check_below_nyquist("drift", self.frequency[1], fs)
        amplitude = params["amplitude"] * params["active"] * rms.unsqueeze(1)
        return x + _sinusoids(x, amplitude, params["frequency"], params["phase"], fs)


@AUGMENTATIONS.register("amplitude-modulation")
@dataclass
class AmplitudeModulation(Augmentation):
    """Multiply by 1 + a sin(2π f t + ξ), a ~ U(``depth``), f ~ U(``frequency``) Hz, ξ ~ U[0, 2π),
    shared across channels. Params: ``depth``, ``frequency``, ``phase`` (B,).
    """

    depth: tuple[float, float] = (0.02, 0.10)
    frequency: tuple[float, float] = (0.05, 0.3)

    def __post_init__(self) -> None:
        self.depth = _bounds("amplitude-modulation: depth", self.depth, low=0.0, high=1.0)
        self.frequency = _bounds("amplitude-modulation: frequency", self.frequency, low=0.0)

    def sample(self, x: Tensor, generator: torch.Generator) -> Params:
        batch = (x.shape[0],)
        return {
            "depth": _uniform(generator, batch, self.depth, x),
            "frequency": _uniform(generator, batch, self.frequency, x),
            "phase": _phase(generator, batch, x),
        }

    def apply(self, x: Tensor, rms: Tensor, params: Params, fs: float) -> Tensor:
        _check_below_nyquist("amplitude-modulation", self.frequency[1], fs)
        depth, frequency, phase = (params[key].unsqueeze(1) for key in ("depth", "frequency", "phase"))
        return x * (1 + _sinusoids(x, depth, frequency, phase, fs))


@AUGMENTATIONS.register("lead-dropout")
@dataclass
class LeadDropout(Augmentation):
    """Zero k ~ U{``count``} channels (None: `default_count`), the k of smallest i.i.d. uniform
    score, so every k-subset is equally likely. Params: ``count`` (B,), ``dropped`` (B, channels).
    """

    count: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.count is not None:
            self.count = _bounds("lead-dropout: count", self.count, low=0, integer=True)

    @staticmethod
    def default_count(channels: int) -> tuple[int, int]:
        """(min(1, C - 1), min(3, C - 1)) for C channels: the paper's (1, 3), one channel always kept."""
        return min(1, channels - 1), min(3, channels - 1)

    def sample(self, x: Tensor, generator: torch.Generator) -> Params:
        batch, channels = x.shape[:2]
        low, high = self.count if self.count is not None else self.default_count(channels)
        if channels < high:
            raise ValueError(f"lead-dropout: cannot drop up to {high} of {channels} channels")
        count = torch.randint(low, high + 1, (batch,), generator=generator, device=generator.device)
        scores = torch.rand((batch, channels), generator=generator, device=generator.device)
        rank = scores.argsort(dim=1).argsort(dim=1)
        return {"count": count, "dropped": rank < count.unsqueeze(1)}

    def apply(self, x: Tensor, rms: Tensor, params: Params, fs: float) -> Tensor:
        return x.masked_fill(params["dropped"].unsqueeze(-1), 0.0)


@AUGMENTATIONS.register("lead-gain")
@dataclass
class LeadGain(Augmentation):
    """Scale each channel of each record by its own gain U(``gain``). Params: ``gain`` (B, channels)."""

    gain: tuple[float, float] = (0.7, 1.3)

    def __post_init__(self) -> None:
        self.gain = _bounds("lead-gain: gain", self.gain, low=0.0)

    def sample(self, x: Tensor, generator: torch.Generator) -> Params:
        return {"gain": _uniform(generator, tuple(x.shape[:2]), self.gain, x)}

    def apply(self, x: Tensor, rms: Tensor, params: Params, fs: float) -> Tensor:
        return x * params["gain"].unsqueeze(-1)


@dataclass(frozen=True)
class AugmentationStep:
    """One gated transform of an `Augmenter`: applied to each record with probability ``p``."""

    name: str
    transform: Augmentation
    p: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.p <= 1.0:
            raise ValueError(f"augmentation {self.name!r}: p must lie in [0, 1], got {self.p!r}")


@dataclass
class AugmentationTrace:
    """What an `Augmenter` call drew: the clean ``rms`` (B,), and per transform name its gate
    (B,) bool and its parameters (drawn for every record, gated or not)."""

    rms: Tensor
    applied: dict[str, Tensor] = field(default_factory=dict)
    params: dict[str, Params] = field(default_factory=dict)


class Augmenter:
    """Apply gated ``steps`` (distinct names) in order to batches sampled at ``fs`` Hz, additive
    amplitudes relative to the clean RMS."""

    def __init__(self, steps: Sequence[AugmentationStep], fs: float):
        names = [step.name for step in steps]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"Augmenter: each augmentation may appear once; repeated {duplicates}")
        if not fs > 0:
            raise ValueError(f"Augmenter: fs must be > 0 Hz, got {fs!r}")
        self.steps = tuple(steps)
        self.fs = float(fs)

    @classmethod
    def from_config(cls, specs: Sequence[Mapping[str, Any]] | None = None, *, fs: float) -> Augmenter:
        """Build from ``[{"name": "tone", "p": 0.5, "amplitude": [0.05, 0.2]}, ...]`` (p defaults
        to 0.5); ``None``: the paper's six transforms, ``[]``: the identity."""
        if specs is None:
            specs = [{"name": name} for name in DEFAULT_AUGMENTATIONS]
        return cls([_step_from_spec(i, spec) for i, spec in enumerate(specs)], fs=fs)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(step.name for step in self.steps)

    def __call__(
        self, x: Tensor, generator: torch.Generator, *, return_params: bool = False
    ) -> Tensor | tuple[Tensor, AugmentationTrace]:
        """``apply`` of ``draw``: the augmented batch, and its `AugmentationTrace` with ``return_params``."""
        trace = self.draw(x, generator)
        x = self.apply(x, trace.rms, trace.applied, trace.params)
        return (x, trace) if return_params else x

    def draw(self, x: Tensor, generator: torch.Generator) -> AugmentationTrace:
        """Everything random of one call: a gate per record and step (uniform < ``p``), then each step's parameters."""
        check_batch(x, generator)
        trace = AugmentationTrace(rms=record_rms(x))
        gates = torch.rand((x.shape[0], len(self.steps)), generator=generator, device=generator.device)
        for gate, step in zip(gates.unbind(dim=1), self.steps, strict=True):
            trace.params[step.name] = step.transform.sample(x, generator)
            trace.applied[step.name] = gate < step.p
        return trace

    def apply(self, x: Tensor, rms: Tensor, applied: Mapping[str, Tensor], params: Mapping[str, Params]) -> Tensor:
        """The steps in order with the draws of `draw`, each where its gate fired (no generator: it compiles whole)."""
        for step in self.steps:
            augmented = step.transform.apply(x, rms, params[step.name], self.fs)
            x = torch.where(applied[step.name][:, None, None], augmented, x)
        return x

    def __repr__(self) -> str:
        steps = ", ".join(f"{step.transform!r}@p={step.p}" for step in self.steps)
        return f"Augmenter([{steps}], fs={self.fs})"


def _reason(error: Exception) -> str:
    """One line for a refused option: each of a `ValidationError`'s errors as ``key: message``."""
    if isinstance(error, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'options'}: {e['msg']}" for e in error.errors())
    return str(error)


def _step_from_spec(index: int, spec: Mapping[str, Any]) -> AugmentationStep:
    """An `AugmentationStep` from one config entry; errors name the entry."""
    if "name" not in spec:
        raise ValueError(f"augmentations[{index}]: missing 'name' in {dict(spec)!r}")
    params = {key: value for key, value in spec.items() if key not in ("name", "p")}
    name = spec["name"]
    try:
        transform = AUGMENTATIONS.build(name, **params)
    except (TypeError, ValueError) as error:
        reason = _reason(error)
        raise ValueError(f"augmentations[{index}] ({name}): bad parameters {params!r}: {reason}") from None
    return AugmentationStep(name, transform, float(spec.get("p", 0.5)))
