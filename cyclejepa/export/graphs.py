"""The deployed encoder (encoder + projector) as TorchScript and ONNX graphs, offline and streaming.

Offline: ``x`` (batch, channels, samples), the normalised signal at the model rate, gives ``z``
(batch, samples / patch, K); the axes ``batch`` and ``samples`` / ``tokens`` are dynamic (any
multiple of the patch; exported at the training window's length).
Streaming: one ``chunk`` (batch, channels, patch) and the state, one tensor ``state_i`` of shape
(batch, width, (k − 1)·d) per causal convolution (`StreamingEncoder.state_layout` order,
zeros at the start of a stream), give the token ``z`` (batch, K) and the next state
``next_state_i``: `StreamingEncoder.forward` with the state explicit, so a device keeps the
state itself and nothing else. Both graphs are traced from the eager modules: TorchScript with
`torch.jit.trace`, ONNX with the TorchScript-based `torch.onnx.export` (opset `OPSET`; the
newer exporter would need onnxscript), so they compute what eager PyTorch computes.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from cyclejepa.models import CausalConvEncoder, JEPAModel, StreamingEncoder

__all__ = ["OPSET", "deployed", "export_onnx", "export_torchscript", "graph_inputs", "require_onnx", "state_names"]

OPSET = 17
"""ONNX opset of the exported graphs (LayerNormalization is an operator from 17 on)."""


def deployed(model: JEPAModel) -> JEPAModel:
    """The deployed path of ``model`` (its encoder and projector, no predictor), in eval mode."""
    return JEPAModel(model.encoder, model.projector, None).eval()


class _StreamingGraph(nn.Module):
    """`StreamingEncoder.forward` with flat tensors: (chunk, *state) → (z, *next_state)."""

    def __init__(self, model: JEPAModel):
        super().__init__()
        self.streaming = StreamingEncoder(deployed(model))

    def forward(self, chunk: torch.Tensor, *state: torch.Tensor) -> tuple[torch.Tensor, ...]:
        z, _, after = self.streaming(chunk, list(state))
        return (z, *after)


def state_names(model: JEPAModel) -> dict[str, str]:
    """Graph input name → module path of each convolution's state (``state_0`` … in order)."""
    return {f"state_{i}": name for i, name in enumerate(StreamingEncoder(model).state_layout())}


def graph_inputs(model: JEPAModel, *, samples: int | None = None, batch: int = 2) -> tuple[torch.Tensor, ...]:
    """Example inputs: the offline ``x`` when ``samples`` is given, else the streaming chunk and
    its zero state (``initial_state``)."""
    encoder = _conv_encoder(model)
    weight = next(model.parameters())
    length = encoder.patch if samples is None else samples
    x = torch.randn(batch, encoder.leads, length, generator=torch.Generator().manual_seed(0)).to(weight)
    return (x,) if samples is not None else (x, *StreamingEncoder(model).initial_state(batch))


def _conv_encoder(model: JEPAModel) -> CausalConvEncoder:
    """The model's encoder, which export needs to be the winder-conv `CausalConvEncoder` (TypeError otherwise)."""
    if not isinstance(model.encoder, CausalConvEncoder):
        raise TypeError(f"export needs the winder-conv CausalConvEncoder, got {type(model.encoder).__name__}")
    return model.encoder


def _graph(model: JEPAModel, samples: int | None) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The module to trace and example inputs: offline with ``samples``, else streaming."""
    patch = _conv_encoder(model).patch
    if samples is not None and (samples < 1 or samples % patch):
        raise ValueError(f"samples must be a positive multiple of the patch {patch}, got {samples}")
    module = deployed(model) if samples is not None else _StreamingGraph(model).eval()
    return module, graph_inputs(model, samples=samples)


@contextmanager
def _quiet() -> Iterator[None]:
    """Hide the tracer's notes on the encoder's shape checks (constants of a graph of fixed
    length), the TorchScript-based exporter's deprecation notice and its constant-folding notes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", "Constant folding", UserWarning)
        yield


def export_torchscript(model: JEPAModel, path: str | os.PathLike, *, samples: int | None = None) -> Path:
    """Write the deployed path of ``model`` as TorchScript to ``path`` (``torch.jit.load`` reads it).

    ``samples`` (a multiple of the patch): the offline graph ``x → z`` for inputs of that length;
    None: the streaming step ``(chunk, state_0, …) → (z, next_state_0, …)``.
    """
    module, inputs = _graph(model, samples)
    with _quiet(), torch.no_grad():
        traced = torch.jit.trace(module, inputs)
    path = Path(path)
    traced.save(str(path))
    return path


def require_onnx() -> None:
    """Raise ImportError with the install line when the ``onnx`` package is missing."""
    try:
        import onnx  # noqa: F401  (torch.onnx.export writes through it)
    except ImportError:
        raise ImportError("ONNX export needs onnx: pip install 'cyclejepa[export]'") from None


def export_onnx(
    model: JEPAModel, path: str | os.PathLike, *, samples: int | None = None, metadata: dict[str, str] | None = None
) -> Path:
    """Write the deployed path of ``model`` as ONNX to ``path``, the batch axis dynamic.

    ``samples``: the offline graph, input ``x`` (batch, channels, samples), output ``z`` (batch,
    tokens, K), ``samples`` and ``tokens`` dynamic too (any multiple of the patch); None: the
    streaming step, inputs ``chunk`` and ``state_i``, outputs ``z`` and ``next_state_i``
    (`state_names`). ``metadata`` goes into the model's ``metadata_props``. Needs the ``onnx``
    package (``pip install 'cyclejepa[export]'``).
    """
    require_onnx()
    module, inputs = _graph(model, samples)
    if samples is not None:
        names, outputs = ["x"], ["z"]
        axes = {"x": {0: "batch", 2: "samples"}, "z": {0: "batch", 1: "tokens"}}
    else:
        states = list(state_names(model))
        names, outputs = ["chunk", *states], ["z", *(f"next_{name}" for name in states)]
        axes = {name: {0: "batch"} for name in names + outputs}
    path = Path(path)
    with _quiet():
        torch.onnx.export(
            module,
            inputs,
            str(path),
            input_names=names,
            output_names=outputs,
            opset_version=OPSET,
            dynamic_axes=axes,
            dynamo=False,
        )
    if metadata:
        _describe(path, metadata)
    return path


def _describe(path: Path, metadata: dict[str, str]) -> None:
    """Set ``metadata`` as the ``metadata_props`` of the ONNX model at ``path``."""
    import onnx

    graph = onnx.load(str(path))
    onnx.helper.set_model_props(graph, metadata)
    onnx.save(graph, str(path))
