"""Devices: config names to indexed `torch.device`s, the GPUs and threads of child processes.

``torch.device("cuda") != torch.device("cuda:0")``, although a tensor created on ``"cuda"`` lives
on ``cuda:0``: every device the library creates carries an index, compared with `same_device`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""What sizes the thread pools of torch, numpy, scipy and scikit-learn, read once when loaded."""


def current_cuda_index() -> int:
    """The index of the current CUDA device (0 when CUDA is not initialised or absent)."""
    return torch.cuda.current_device() if torch.cuda.is_available() else 0


def indexed(device: torch.device | str) -> torch.device:
    """``device`` with an explicit index: ``cuda`` → ``cuda:<current>``; the CPU is unchanged."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", current_cuda_index())
    return device


def same_device(a: torch.device | str, b: torch.device | str) -> bool:
    """Whether ``a`` and ``b`` name the same device (``cuda`` is the current CUDA device)."""
    return indexed(a) == indexed(b)


def resolve_device(name: str | torch.device, local_rank: int | None = None) -> torch.device:
    """The device a config names, with an index: ``auto`` is CUDA when present; under torchrun
    CUDA is ``cuda:<local_rank>``; a CUDA device this machine lacks raises a ValueError."""
    if str(name) == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise ValueError(f"unknown device {name!r}: use auto, cpu, cuda or cuda:N ({error})") from None
    if device.type != "cuda":
        return device
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = local_rank if local_rank is not None else device.index
    if index is None:
        index = current_cuda_index()
    if index >= count:
        raise ValueError(f"device {name!r}: this machine has {count} CUDA device(s)")
    return torch.device("cuda", index)


def device_type(name: str | torch.device) -> str:
    """The kind of device a config names (``auto``: CUDA when present), not checked against this machine."""
    if str(name) == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        return torch.device(name).type
    except RuntimeError:
        return str(name)


def resolved_precision(precision: str, device_type: str) -> str:
    """``training.precision`` on a ``device_type``: ``auto`` is ``bf16`` on CUDA, else ``float32``."""
    if precision == "auto":
        return "bf16" if device_type == "cuda" else "float32"
    return precision


def visible_gpus() -> list[str]:
    """This process's CUDA devices as a child's ``CUDA_VISIBLE_DEVICES`` names them."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [entry.strip() for entry in listed.split(",")] if listed else [str(i) for i in range(count)]
    return names[:count]


def child_gpus(device: str) -> list[str]:
    """The GPUs child processes are spread over: every visible one for a CUDA ``device`` without
    an index, none for the CPU or a ``cuda:N`` (every child uses it as named)."""
    if device_type(device) != "cuda" or (str(device) != "auto" and torch.device(device).index is not None):
        return []
    return visible_gpus()


@dataclass(frozen=True)
class Placement:
    """Where a stage runs, resolved once from its device ``setting``: this process's ``device``
    and the ``gpus`` its children are spread over (each resolves ``setting`` anew among them)."""

    setting: str
    device: torch.device
    gpus: tuple[str, ...]


def place(setting: str) -> Placement:
    """The `Placement` of a device setting on this machine."""
    return Placement(setting, resolve_device(setting), tuple(child_gpus(setting)))


def thread_environment(threads: int) -> dict[str, str]:
    """`THREAD_VARIABLES`, each set to ``threads``."""
    return {name: str(threads) for name in THREAD_VARIABLES}
