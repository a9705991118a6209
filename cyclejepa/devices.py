"""Devices: names from a config to `torch.device`s with an index, device equality, the GPUs
and CPU threads handed to child processes, and a stage's `Placement` (all of these, resolved once).

``torch.device("cuda") != torch.device("cuda:0")``, although a tensor created on ``"cuda"``
lives on ``cuda:0`` (the current device). So every device the library creates carries an
explicit index, and devices are compared with `same_device`, never with ``==``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""What sizes the thread pools of torch (OpenMP), numpy, scipy and scikit-learn (BLAS, OpenMP).
Each library reads them once, when it is loaded: a child process gets them in its environment."""


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
    """The device a config names, with an index.

    ``auto`` is CUDA when present, else the CPU. Under torchrun (``local_rank`` given) CUDA is
    this process's GPU, ``cuda:<local_rank>``, whatever index the name carries. A CUDA device
    that this machine does not have raises a ValueError that says what there is.
    """
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
    """The kind of device a config names (``cpu``, ``cuda``): ``auto`` is CUDA when present.

    Unlike `resolve_device`, it does not check that this machine has the device: a run's
    identity names the kind of device it was trained on wherever it is read.
    """
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
    """The CUDA devices of this process as a child's ``CUDA_VISIBLE_DEVICES`` names them: the
    entries of this process's own variable when it is set, else ``0`` … ``count − 1``."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [entry.strip() for entry in listed.split(",")] if listed else [str(i) for i in range(count)]
    return names[:count]


def child_gpus(device: str) -> list[str]:
    """The GPUs that child processes (side-by-side runs, evaluation workers) are spread over:
    every visible one (`visible_gpus`) when ``device`` is CUDA without an index (``auto`` on a
    CUDA machine, ``cuda``); none for the CPU or a ``cuda:N``, which every child uses as named."""
    if device_type(device) != "cuda" or (str(device) != "auto" and torch.device(device).index is not None):
        return []
    return visible_gpus()


@dataclass(frozen=True)
class Placement:
    """Where a stage runs, resolved once from its device ``setting`` (``training.device``,
    ``evaluation.device``): ``device``, this process's (`resolve_device`), and ``gpus``, the GPUs
    its child processes are spread over (`child_gpus`); each child resolves ``setting`` anew
    among the GPUs it is given."""

    setting: str
    device: torch.device
    gpus: tuple[str, ...]


def place(setting: str) -> Placement:
    """The `Placement` of a device setting on this machine; a device it lacks raises the
    ValueError of `resolve_device`."""
    return Placement(setting, resolve_device(setting), tuple(child_gpus(setting)))


def thread_environment(threads: int) -> dict[str, str]:
    """`THREAD_VARIABLES`, each set to ``threads``: the environment of a child process that
    shares the cores with others."""
    return {name: str(threads) for name in THREAD_VARIABLES}
