"""Tokens and phases as the evaluation's metrics read them: tensors on one device, in record chunks.

The mechanism and geometry metrics both take tokens (N, T, K) and phases (N, T) (or (N, T, C) on
a torus) as numpy arrays or tensors; `token_tensors` checks and converts them once per call, and
`record_chunks` bounds the float64 copies a metric makes to `RECORD_CHUNK` records at a time.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Union

import numpy as np
import torch
from torch import Tensor

__all__ = ["ArrayLike", "RECORD_CHUNK", "record_chunks", "token_tensors"]

ArrayLike = Union[np.ndarray, Tensor]

RECORD_CHUNK = 256
"""Records processed at once, so float64 copies of a corpus's tokens never exist whole."""


def token_tensors(tokens: ArrayLike, phases: ArrayLike, caller: str) -> tuple[Tensor, Tensor]:
    """Tokens (N, T, K) and phases (N, T) (or (N, T, d) on a torus) as tensors on one device.

    Read-only arrays (memmaps) are wrapped without a copy; nothing here writes into them.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The given NumPy array is not writable")
        tokens = torch.as_tensor(tokens)
        phases = torch.as_tensor(phases, device=tokens.device)
    if tokens.dim() != 3 or phases.dim() not in (2, 3) or phases.shape[:2] != tokens.shape[:2]:
        raise ValueError(
            f"{caller}: tokens must have shape (N, T, K) and phases (N, T) or (N, T, C) with the "
            f"same N and T; "
            f"got tokens {tuple(tokens.shape)} and phases {tuple(phases.shape)}"
        )
    if not torch.isfinite(tokens).all():
        raise ValueError(f"{caller}: tokens contain NaN or infinite values")
    return tokens, phases


def record_chunks(n: int) -> Iterator[slice]:
    """Consecutive slices of at most `RECORD_CHUNK` records."""
    return (slice(start, start + RECORD_CHUNK) for start in range(0, n, RECORD_CHUNK))
