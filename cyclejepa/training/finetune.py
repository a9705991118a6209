"""Supervised multi-label training of the deployed path (fine-tuning, or from scratch) with early
stopping; nested label subsets.

`Classifier`: logits W z̄ + b of the mean z̄ of the tokens z = projector(encoder(x)). `FineTuner`
minimises the mean binary cross-entropy with AdamW, the head at the schedule's rate
(`learning_rate`), the backbone at ``backbone_scale`` times it (1: from scratch). Every
``eval_every`` steps ``validate`` scores held-out records; the best state is kept, and training
stops after ``patience`` evaluations without improvement or at ``steps``. Device, bf16 and
compilation follow ``training.*`` as in pre-training. A checkpoint at every evaluation (the latest
only) lets `FineTuner.resume` go on exactly. `label_subset` draws nested, stratified label fractions.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from cyclejepa.config import OptimiserConfig
from cyclejepa.devices import resolve_device
from cyclejepa.jsonio import flat_json, identity_differences
from cyclejepa.outputs import RunFolder
from cyclejepa.training.batches import BatchSampler
from cyclejepa.training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from cyclejepa.training.rng import RNGStreams
from cyclejepa.training.schedule import learning_rate, set_learning_rate
from cyclejepa.training.trainer import bf16_autocast, compile_mode, replays_cuda_graphs, uses_bf16

__all__ = ["CheckpointMismatch", "Classifier", "FineTuner", "FinetuneSettings", "label_subset", "predict_logits"]


class CheckpointMismatch(ValueError):
    """A fine-tuning checkpoint written with another identity than the run that would resume it."""


@dataclass(frozen=True)
class FinetuneSettings:
    """Optimisation of one supervised run (what its result depends on besides data and seed)."""

    steps: int = 5000
    """Most optimisation steps."""
    batch_size: int = 64
    lr: float = 1e-3
    """Peak learning rate of the head (the schedule's ``lr``)."""
    backbone_scale: float = 0.1
    """Encoder and projector rate / head rate (fine-tuning; the from-scratch baseline uses 1)."""
    weight_decay: float = 1e-2
    warmup_steps: int = 50
    eval_every: int = 250
    patience: int = 5
    """Evaluations without improvement before training stops."""
    grad_clip: float = 1.0

    def __post_init__(self):
        bad = [name for name in ("steps", "batch_size", "eval_every", "patience") if getattr(self, name) < 1]
        bad += [name for name in ("lr", "grad_clip") if not getattr(self, name) > 0]
        bad += [name for name in ("backbone_scale", "weight_decay", "warmup_steps") if getattr(self, name) < 0]
        if bad:
            raise ValueError(f"fine-tuning settings out of range: {', '.join(f'{name} = {getattr(self, name)}' for name in bad)}")

    def schedule(self) -> OptimiserConfig:
        """The learning-rate schedule: warm-up to ``lr``, cosine to lr / 100 at ``steps``."""
        return OptimiserConfig(
            lr=self.lr,
            min_lr=self.lr / 100,
            warmup_steps=self.warmup_steps,
            weight_decay=self.weight_decay,
            grad_clip=self.grad_clip,
        )


class Classifier(nn.Module):
    """Encoder → projector → mean over tokens → linear head: (B, channels, samples) → (B, C) logits;
    the head drawn from ``seed`` (torch's default initialisation, the global RNG untouched)."""

    def __init__(self, encoder: nn.Module, projector: nn.Module, classes: int, seed: int = 0):
        super().__init__()
        self.encoder, self.projector = encoder, projector
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.head = nn.Linear(cast(int, projector.out_dim), classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """z̄: the mean of the projected tokens, (B, K)."""
        return self.projector(self.encoder(x)).mean(dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))

    def backbone_parameters(self) -> list[nn.Parameter]:
        return [*self.encoder.parameters(), *self.projector.parameters()]

    @torch.no_grad()
    def set_head(self, weight: np.ndarray, bias: np.ndarray) -> None:
        """Start the head from a fitted linear map (e.g. `LinearProbe.linear_map`): logits = z̄ Wᵀ + b."""
        self.head.weight.copy_(torch.as_tensor(weight, dtype=self.head.weight.dtype))
        self.head.bias.copy_(torch.as_tensor(bias, dtype=self.head.bias.dtype))


def predict_logits(
    classifier: Classifier, signals: np.ndarray, *, device: torch.device | str = "cpu", batch_size: int = 256, bf16: bool = False
) -> np.ndarray:
    """(N, C) float64 logits of ``signals`` (N, channels, samples), in eval mode, without gradients."""
    device = torch.device(device)
    training = classifier.training
    classifier.eval()
    out = []
    try:
        with torch.inference_mode(), bf16_autocast(bf16, device.type):
            for start in range(0, len(signals), batch_size):
                x = torch.from_numpy(np.asarray(signals[start : start + batch_size], dtype=np.float32)).to(device)
                out.append(classifier(x).double().cpu().numpy())
    finally:
        classifier.train(training)
    return np.concatenate(out) if out else np.zeros((0, classifier.head.out_features))


class FineTuner:
    """Trains a `Classifier` on (signals, labels) with early stopping (module docstring).

    Parameters
    ----------
    classifier : the network; its head and (unless ``backbone_scale`` is 0) its backbone are trained.
    signals, labels : (N, channels, samples) training records and their (N, C) multi-hot labels.
    directory : where the checkpoints go.
    validate : classifier → score on held-out records, higher is better (called in eval mode).
    settings : the optimisation; ``backbone_scale`` overrides ``settings.backbone_scale``.
    seed : the batch order (the ``data`` RNG stream of `RNGStreams`).
    device, precision, compile : ``training.device``, ``training.precision``, ``training.compile``.
    identity : what this run depends on; a checkpoint of another identity is refused on resume.
    """

    def __init__(
        self,
        classifier: Classifier,
        signals: np.ndarray,
        labels: np.ndarray,
        directory: str | Path,
        *,
        validate: Callable[[Classifier], float],
        settings: FinetuneSettings = FinetuneSettings(),
        backbone_scale: float | None = None,
        seed: int = 0,
        device: str | torch.device = "auto",
        precision: str = "auto",
        compile: bool | str = False,
        identity: dict[str, Any] | None = None,
    ):
        self.settings, self.directory, self.validate = settings, Path(directory), validate
        self.device = resolve_device(device)
        self.classifier = classifier.to(self.device)
        self.bf16 = uses_bf16(precision, self.device.type)
        mode = compile_mode(compile, self.device.type)
        self.cuda_graphs = replays_cuda_graphs(mode, self.device.type)
        self.step_model = classifier if mode is None else torch.compile(classifier, mode=mode)
        self.streams = RNGStreams(seed, self.device)
        batch = min(settings.batch_size, len(signals))
        self.batches = BatchSampler(signals, np.asarray(labels, dtype=np.float32), batch, self.streams["data"], self.device)
        scale = settings.backbone_scale if backbone_scale is None else backbone_scale
        self.backbone_scale = scale
        groups = [{"params": list(classifier.head.parameters()), "lr_scale": 1.0}]
        if scale > 0:
            groups.append({"params": classifier.backbone_parameters(), "lr_scale": scale})
        else:
            classifier.encoder.requires_grad_(False)
            classifier.projector.requires_grad_(False)
        fused = self.device.type == "cuda" or None
        self.optimiser = torch.optim.AdamW(groups, lr=settings.lr, weight_decay=settings.weight_decay, fused=fused)
        self.identity = {**(identity or {}), "settings": asdict(settings), "backbone_scale": scale, "seed": seed}
        self.step, self.best_score, self.best_step, self.stale = 0, -math.inf, 0, 0
        self.best_state: dict[str, torch.Tensor] | None = None
        self.history: list[dict[str, float]] = []

    def train_step(self) -> torch.Tensor:
        """One optimisation step on a batch; returns its loss (a device tensor, no host sync)."""
        x, y = self.batches.next()
        set_learning_rate([self.optimiser], learning_rate(self.step, self.settings.steps, self.settings.schedule()))
        if self.cuda_graphs:  # a new step: the graphs may overwrite the last step's outputs
            torch.compiler.cudagraph_mark_step_begin()
        with bf16_autocast(self.bf16, self.device.type):
            logits = self.step_model(x)
        loss = F.binary_cross_entropy_with_logits(logits.float(), y)
        self.optimiser.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_([p for g in self.optimiser.param_groups for p in g["params"]], self.settings.grad_clip)
        self.optimiser.step()
        self.step += 1
        return loss.detach()

    @property
    def finished(self) -> bool:
        return self.step >= self.settings.steps or self.stale >= self.settings.patience

    def fit(self) -> float:
        """Train until early stopping or ``steps``; leaves the best state in the classifier and
        returns its validation score."""
        losses: list[torch.Tensor] = []
        while not self.finished:
            losses.append(self.train_step())
            if self.step % self.settings.eval_every == 0 or self.step == self.settings.steps:
                self._evaluate(float(torch.stack(losses).mean()))
                losses = []
                self.save()
        if self.best_state is not None:
            self.classifier.load_state_dict(self.best_state)
        return self.best_score

    def _evaluate(self, loss: float) -> None:
        score = float(self.validate(self.classifier))
        if not math.isfinite(score):
            raise ValueError(f"validation score at step {self.step} is {score}; the validation records cannot rank the classes")
        self.history.append({"step": self.step, "train_loss": loss, "score": score})
        if score > self.best_score:
            self.best_score, self.best_step, self.stale = score, self.step, 0
            self.best_state = {k: v.detach().clone() for k, v in self.classifier.state_dict().items()}
        else:
            self.stale += 1

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "classifier": self.classifier.state_dict(),
            "optimiser": self.optimiser.state_dict(),
            "rng": self.streams.state_dict(),
            "batches": self.batches.state_dict(),
            "identity": self.identity,
            "best": {"score": self.best_score, "step": self.best_step, "stale": self.stale, "state": self.best_state},
            "history": copy.deepcopy(self.history),
        }

    def save(self) -> Path:
        """Write the checkpoint of the current step and remove the older ones."""
        run = RunFolder(self.directory)
        path = save_checkpoint(self.state_dict(), run.checkpoint(self.step))
        for old in run.checkpoint_files():
            if old != path:
                old.unlink()
        return path

    def resume(self) -> bool:
        """Continue from the latest checkpoint in ``directory`` (False when there is none); raises
        `CheckpointMismatch` when it belongs to a run of another identity."""
        last = latest_checkpoint(RunFolder(self.directory))
        if last is None:
            return False
        state = load_checkpoint(last, map_location=self.device)
        differences = identity_differences(_flat(state["identity"]), _flat(self.identity))
        if differences:
            raise CheckpointMismatch(f"{last} was written by a run with other settings: " + "; ".join(differences))
        self.classifier.load_state_dict(state["classifier"])
        self.optimiser.load_state_dict(state["optimiser"])
        self.streams.load_state_dict(state["rng"])
        self.batches.load_state_dict(state["batches"])
        best = state["best"]
        self.step, self.best_score, self.best_step, self.stale = int(state["step"]), best["score"], best["step"], best["stale"]
        self.best_state, self.history = best["state"], state["history"]
        return True


def _flat(identity: dict[str, Any]) -> dict[str, Any]:
    """``{a.b: value}`` of a nested identity (`flat_json` of each top-level key)."""
    return {path: leaf for key, value in identity.items() for path, leaf in flat_json(key, value).items()}


def label_subset(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Rows of a ``fraction`` of the records of ``labels`` (N, C): nested in ``fraction``, fixed by ``seed``.

    A fraction f takes the first ⌈f·N⌉ records of one seeded order (so smaller fractions nest). Each
    record's stratum is its rarest class (unlabelled records form their own); the n_s shuffled
    records of stratum s get keys (j + u_s) / n_s, j = 0 … n_s − 1, with a seeded u_s ∈ [0, 1), and
    the order sorts the keys: every prefix of k records holds k·n_s/N ± 1 of each stratum.
    Returns the rows in ascending order.
    """
    labels = np.asarray(labels)
    if labels.ndim != 2 or not len(labels):
        raise ValueError(f"labels must be a non-empty (N, C) array, got shape {labels.shape}")
    if not 0 < fraction <= 1:
        raise ValueError(f"a label fraction must lie in (0, 1], got {fraction}")
    rng = np.random.default_rng(seed)
    counts = labels.sum(axis=0)
    rarity = np.where(labels > 0, counts, np.inf)
    stratum = np.where(labels.any(axis=1), rarity.argmin(axis=1), -1)
    keys = np.empty(len(labels))
    for s in np.unique(stratum):
        members = rng.permutation(np.flatnonzero(stratum == s))
        keys[members] = (np.arange(len(members)) + rng.random()) / len(members)
    order = np.lexsort((rng.random(len(labels)), keys))
    return np.sort(order[: math.ceil(fraction * len(labels))])
