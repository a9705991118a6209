"""Frozen token embeddings and record representations (mean of the phase-valid tokens).

`extract_tokens` runs the deployed path (encoder → projector) over a signal array in batches,
reading a memmap chunk by chunk, in eval mode under `torch.inference_mode`. A record's
representation is the unweighted mean of its tokens whose phase is defined (the paper's
"mean-pooled phase-valid projected tokens"); records failing phase QC, or with no valid
token, get none and are counted by reason. `record_representations` pools tokens already in
memory; `embed_records` extracts and pools chunk by chunk, so the (N, T, K) token array of a
whole corpus never exists at once.
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

QC_FAILED = "qc_failed"
"""Exclusion reason: the record failed phase QC (``qc_ok`` False)."""
NO_VALID_PHASE = "no_valid_phase"
"""Exclusion reason: the record passed QC but no token has a defined phase."""

Transform = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class Representations:
    """Record representations and what was left out.

    Attributes
    ----------
    features : (M, K) float64, one row per represented record.
    rows : (M,) int64 row indices of those records in the input arrays, ascending.
    excluded : reason (`QC_FAILED`, `NO_VALID_PHASE`) -> number of records left out.
    """

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
    """Tokens of every record: projected z, or encoder output h when ``pre_projection``.

    Parameters
    ----------
    model : a `JEPAModel` (``model(x)`` → z, ``model.encode(x)`` → h); left in its mode.
    signals : (N, channels, samples) array or memmap; read ``batch_size`` records at a time.
    batch_size, device : batching and where the model runs (the model is not moved).
    pre_projection : return h instead of z.
    progress : show a rich progress bar.
    transform : applied to each input batch on ``device`` before the model (e.g. channel zeroing).

    Returns
    -------
    (N, T, K) float32 array.
    """
    n = _check_signals(signals)
    tokens: list[np.ndarray] = []  # one (N, T, K) array, allocated at the first batch

    def store(start: int, batch: np.ndarray) -> None:
        if not tokens:
            tokens.append(np.empty((n, *batch.shape[1:]), dtype=np.float32))
        tokens[0][start : start + len(batch)] = batch

    _run_batches(model, signals, np.arange(n), store, batch_size, device, pre_projection, progress, transform)
    return tokens[0]


def record_representations(tokens: np.ndarray, phases: np.ndarray, qc_ok: np.ndarray | None = None) -> Representations:
    """Mean of each record's phase-valid tokens (NaN phase = invalid), unweighted.

    Parameters
    ----------
    tokens : (N, T, K) token array.
    phases : (N, T) token phases, NaN where undefined.
    qc_ok : (N,) bool phase-QC verdicts; None counts every record as passing.
    """
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
    """`record_representations` of `extract_tokens`, computed batch by batch.

    Parameters
    ----------
    model, signals, batch_size, device, pre_projection, progress, transform : as in `extract_tokens`.
    phases : (N, T) token phases of every row of ``signals`` (T = tokens per record), NaN undefined;
        (N, T, C) for C cyclic coordinates, a token counting when every coordinate is defined.
    qc_ok : (N,) bool phase-QC verdicts, or None.
    rows : rows of ``signals`` to embed (default all); ``Representations.rows`` index ``signals``.
        Excluded records are counted and never run through the model.
    """
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
    """The ``candidates`` rows that get a representation, and the exclusion counts by reason."""
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
    """Raise `NonFiniteOutputs` naming ``what`` and the first cache ``rows`` whose ``values``
    (one row each) hold a NaN or an infinite value."""
    bad = ~np.isfinite(values.reshape(len(values), -1)).all(axis=1)
    if bad.any():
        raise NonFiniteOutputs(
            f"non-finite (NaN or infinite) {what} for {int(bad.sum())} of {len(bad)} windows, e.g. cache rows {rows[bad][:5].tolist()}"
        )
