"""Frozen token embeddings and record representations.

A record's representation is the unweighted mean of its phase-valid projected tokens (the
paper's "mean-pooled phase-valid projected tokens"); records failing phase QC, or with no valid
token, get none and are counted by reason. `embed_records` pools batch by batch, so a corpus's
(N, T, K) token array never exists at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from torch import nn

from cyclejepa.progress import progress_bar

__all__ = [
    "NonFiniteOutputs",
    "Representations",
    "embed_records",
    "extract_tokens",
    "record_representations",
    "require_finite_outputs",
]

QC_FAILED = "qc_failed"  # exclusion reasons
NO_VALID_PHASE = "no_valid_phase"

Transform = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class Representations:
    """``features`` (M, K) float64 of the input ``rows`` (M,) ascending, and records ``excluded`` by reason."""

    features: np.ndarray
    rows: np.ndarray
    excluded: dict[str, int]

    def lookup(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Features of ``rows`` that have a representation, and the (len(rows),) found mask."""
        rows = np.asarray(rows, dtype=np.int64)
        position = np.clip(np.searchsorted(self.rows, rows), 0, max(len(self.rows) - 1, 0))
        found = self.rows[position] == rows if len(self.rows) else np.zeros(len(rows), bool)
        return self.features[position[found]], found


def extract_tokens(
    model: nn.Module,
    signals: np.ndarray,
    *,
    batch_size: int = 256,
    device: str | torch.device = "cpu",
    pre_projection: bool = False,
    progress: bool = False,
    transform: Transform | None = None,
) -> np.ndarray:
    """(N, T, K) float32 tokens z (encoder output h when ``pre_projection``) of ``signals``
    (N, channels, samples), ``batch_size`` records at a time on ``device`` (the model is not
    moved), each batch passed through ``transform`` first."""
    n = _check_signals(signals)
    tokens: list[np.ndarray] = []  # one (N, T, K) array, allocated at the first batch

    def store(start: int, batch: np.ndarray) -> None:
        if not tokens:
            tokens.append(np.empty((n, *batch.shape[1:]), dtype=np.float32))
        tokens[0][start : start + len(batch)] = batch

    _run_batches(model, signals, np.arange(n), store, batch_size, device, pre_projection, progress, transform)
    return tokens[0]


def record_representations(tokens: np.ndarray, phases: np.ndarray, qc_ok: np.ndarray | None = None) -> Representations:
    """Mean of each record's phase-valid tokens (N, T, K); ``qc_ok`` (N,) None: every record passes."""
    tokens, phases = np.asarray(tokens), np.asarray(phases)
    if tokens.ndim != 3 or phases.shape != tokens.shape[:2]:
        raise ValueError(f"tokens must be (N, T, K) and phases (N, T); got {tokens.shape} and {phases.shape}")
    rows, excluded = _included_rows(phases, qc_ok, np.arange(len(tokens)))
    return Representations(_pool(tokens[rows], ~np.isnan(phases[rows])), rows, excluded)


def embed_records(
    model: nn.Module,
    signals: np.ndarray,
    phases: np.ndarray,
    qc_ok: np.ndarray | None = None,
    *,
    rows: np.ndarray | None = None,
    batch_size: int = 256,
    device: str | torch.device = "cpu",
    pre_projection: bool = False,
    progress: bool = False,
    transform: Transform | None = None,
) -> Representations:
    """`record_representations` of `extract_tokens` of the ``rows`` (default all), batch by
    batch; phases (N, T) or (N, T, C) cover every row of ``signals``; excluded records never run."""
    n = _check_signals(signals)
    phases = np.asarray(phases)
    if phases.ndim == 3:  # only which tokens are defined matters here
        phases = np.where(np.isfinite(phases).all(axis=-1), 0.0, np.nan)
    if phases.ndim != 2 or len(phases) != n:
        raise ValueError(f"phases must be (N, T) or (N, T, C) with N = {n} records like signals, got {phases.shape}")
    candidates = np.arange(n) if rows is None else np.unique(np.asarray(rows, dtype=np.int64))
    if len(candidates) and (candidates[0] < 0 or candidates[-1] >= n):
        raise IndexError(f"rows must lie in [0, {n}), got {candidates[0]}..{candidates[-1]}")
    included, excluded = _included_rows(phases, qc_ok, candidates)
    pooled: list[np.ndarray] = []

    def pool(start: int, batch: np.ndarray) -> None:
        valid = ~np.isnan(phases[included[start : start + len(batch)]])
        if valid.shape != batch.shape[:2]:
            raise ValueError(f"the model gives {batch.shape[1]} tokens per record but phases have {valid.shape[1]}")
        pooled.append(_pool(batch, valid))

    _run_batches(model, signals, included, pool, batch_size, device, pre_projection, progress, transform)
    features = np.concatenate(pooled) if pooled else np.zeros((0, 0))
    return Representations(features, included, excluded)


def _check_signals(signals: np.ndarray) -> int:
    if np.ndim(signals) != 3 or len(signals) == 0:
        raise ValueError(f"signals must be a non-empty (N, channels, samples) array, got {np.shape(signals)}")
    return len(signals)


def _included_rows(phases: np.ndarray, qc_ok: np.ndarray | None, candidates: np.ndarray) -> tuple[np.ndarray, dict[str, int]]:
    """The ``candidates`` that get a representation, and the exclusion counts by reason."""
    n = len(phases)
    passed = np.ones(n, dtype=bool) if qc_ok is None else np.asarray(qc_ok, dtype=bool)
    if passed.shape != (n,):
        raise ValueError(f"qc_ok must be ({n},), one verdict per record, got {passed.shape}")
    passed = passed[candidates]
    has_token = ~np.isnan(phases[candidates]).all(axis=1)
    excluded = {QC_FAILED: int((~passed).sum()), NO_VALID_PHASE: int((passed & ~has_token).sum())}
    return candidates[passed & has_token], excluded


def _pool(tokens: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """(n, T, K) tokens, (n, T) bool → (n, K) float64 mean over the valid tokens."""
    sums = np.einsum("ntk,nt->nk", tokens, valid, dtype=np.float64)
    return sums / valid.sum(axis=1, keepdims=True)


def _run_batches(
    model: nn.Module,
    signals: np.ndarray,
    rows: np.ndarray,
    consume: Callable[[int, np.ndarray], None],
    batch_size: int,
    device: str | torch.device,
    pre_projection: bool,
    progress: bool,
    transform: Transform | None,
) -> None:
    """``consume(offset into rows, float32 tokens)`` for each batch of ``rows`` (ascending) of ``signals``."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    # nn.Module types its attributes as Tensor | Module; encode is the model's method x -> h
    network = cast(Callable[[torch.Tensor], torch.Tensor], model.encode) if pre_projection else model
    with _eval_mode(model), torch.inference_mode(), progress_bar(len(rows), "embedding", enabled=progress) as advance:
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            contiguous = chunk[-1] - chunk[0] + 1 == len(chunk)
            block = signals[chunk[0] : chunk[-1] + 1] if contiguous else signals[chunk]
            x = torch.from_numpy(np.array(block, dtype=np.float32)).to(device)
            consume(start, network(x if transform is None else transform(x)).float().cpu().numpy())
            advance(len(chunk))


@contextlib.contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode inside, the model's previous mode restored after."""
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)


class NonFiniteOutputs(ValueError):
    """A model whose outputs on the evaluation data hold NaN or infinite values."""


def require_finite_outputs(values: np.ndarray, rows: np.ndarray, what: str) -> None:
    """Raise `NonFiniteOutputs` naming ``what`` and the first ``rows`` whose ``values`` are not finite."""
    bad = ~np.isfinite(values.reshape(len(values), -1)).all(axis=1)
    if bad.any():
        raise NonFiniteOutputs(
            f"non-finite (NaN or infinite) {what} for {int(bad.sum())} of {len(bad)} windows, e.g. cache rows {rows[bad][:5].tolist()}"
        )
