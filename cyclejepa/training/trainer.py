"""The JEPA trainer: encoder → projector → prediction + regulariser + transport."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from cyclejepa import registry
from cyclejepa.config import ModelConfig, ObjectivesConfig, SymmetryConfig
from cyclejepa.data.augment import Augmenter
from cyclejepa.devices import resolve_device, resolved_precision
from cyclejepa.jsonio import flat_json, identity_differences, writing
from cyclejepa.models import build_model
from cyclejepa.objectives import prediction_loss, sample_cutoffs, transport_loss
from cyclejepa.objectives.transport import valid_tokens
from cyclejepa.outputs import RunFolder
from cyclejepa.progress import progress_bar
from cyclejepa.interrupts import Stopped, StopRequest, deferred_stops
from cyclejepa.training.batches import BatchSampler
from cyclejepa.training.checkpoint import latest_checkpoint, load_checkpoint, require_finite, save_checkpoint
from cyclejepa.training.distributed import Distributed
from cyclejepa.training.rng import RNGStreams
from cyclejepa.training.shards import StreamBatches
from cyclejepa.training.schedule import build_optimisers, learning_rate, set_learning_rate
from cyclejepa.training.spec import ObjectiveSpec, TrainingSpec

log = logging.getLogger(__name__)

TERMS = ("loss", "prediction", "regulariser", "transport")
COMPONENTS = ("prediction", "regulariser", "transport")
FLUSH_EVERY = 25  # steps between host syncs, where metrics are written and checked (`Diverged`)


class Diverged(ValueError):
    """Training met a non-finite loss term or gradient norm (or weights, at a checkpoint).

    Raised at the next flush of the metrics or checkpoint, whichever comes first (no step adds a
    host sync): ``metrics.jsonl`` ends with the first bad step (non-finite values as "nan", "inf",
    "-inf"), and ``checkpoint`` is the last (finite) one on disk. With
    ``training.skip_nonfinite_steps`` the first ``skipped`` bad steps were skipped instead.
    """

    def __init__(self, step: int, what: str, checkpoint: Path | None, skipped: int = 0):
        self.step, self.what, self.checkpoint = step, what, checkpoint
        kept = f"the last finite checkpoint is {checkpoint}" if checkpoint else "no checkpoint was written before it"
        after = f" after skipping {skipped} (training.skip_nonfinite_steps)" if skipped else ""
        super().__init__(
            f"training diverged at step {step}: non-finite {what}{after}; stopped, {kept} "
            "(lower optimiser.lr or optimiser.grad_clip)"
        )


def uses_bf16(precision: str, device_type: str) -> bool:
    """Whether ``training.precision`` means bf16 autocast on ``device_type`` (``auto``: on CUDA)."""
    return resolved_precision(precision, device_type) == "bf16"


def bf16_autocast(bf16: bool, device_type: str):
    """bf16 autocast on ``device_type`` when ``bf16``, else a context that does nothing."""
    return torch.autocast(device_type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def compile_mode(setting: bool | str, device_type: str, distributed: bool = False) -> str | None:
    """The ``torch.compile`` mode of ``training.compile`` on ``device_type`` (None: eager): ``true``
    is ``default``; ``auto`` is ``reduce-overhead`` (CUDA graphs) on one CUDA device, ``default``
    on CUDA under torchrun (``distributed``), eager elsewhere."""
    if setting == "auto":
        if device_type != "cuda":
            return None
        return "default" if distributed else "reduce-overhead"
    if isinstance(setting, bool):
        return "default" if setting else None
    return setting


def replays_cuda_graphs(mode: str | None, device_type: str) -> bool:
    """Whether a module compiled in ``mode`` on ``device_type`` replays CUDA graphs."""
    return device_type == "cuda" and mode in ("reduce-overhead", "max-autotune")


def build_configured_model(model: ModelConfig, seed: int) -> nn.Module:
    """The model of the ``model`` section (encoder, projector, predictor), its weights drawn from ``seed``."""
    return build_model(
        model.name,
        seed=seed,
        encoder=model.encoder.model_dump(),
        projector={"hidden": model.projector.hidden, "out_dim": model.projector.dim},
        predictor=model.predictor.model_dump(),
    )


def draw_init_seed(streams: RNGStreams) -> int:
    """The seed of a run's initial weights: the first draw of its ``init`` stream (on the CPU)."""
    return int(torch.randint(2**62, (1,), generator=streams["init"]))


class JEPAObjective(nn.Module):
    """One training step's objective as one module (DDP wraps it), from the experiment's ``model``,
    ``symmetry``, ``objectives`` and ``training.precision``:
    ``L = w_pred L_pred + w_reg L_reg + transport_weight L_transport``."""

    def __init__(
        self,
        model: ModelConfig,
        symmetry: SymmetryConfig,
        objectives: ObjectivesConfig,
        *,
        transport_weight: float,
        init_seed: int,
        precision: str = "float32",
    ):
        super().__init__()
        self.model = build_configured_model(model, init_seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed + 1)
            self.symmetry = registry.SYMMETRIES.get(symmetry.name)(
                symmetry.spectrum, basis=symmetry.basis, **symmetry.basis_options.model_dump()
            )
        if self.symmetry.dim != model.projector.dim:
            raise ValueError(
                f"symmetry.spectrum has dimension {self.symmetry.dim}, but model.projector.dim is {model.projector.dim}"
            )
        reg = objectives.regulariser
        self.regulariser = registry.REGULARISERS.build(reg.name, reg.options)  # its statistic built and injected
        self.weights = {"prediction": objectives.prediction.weight, "regulariser": reg.weight, "transport": transport_weight}
        self.stop_gradient = objectives.prediction.stop_gradient
        self.precision = precision
        self.dist = Distributed()

    @classmethod
    def from_spec(cls, spec: ObjectiveSpec, transport_weight: float, init_seed: int) -> JEPAObjective:
        """The objective of an `ObjectiveSpec`."""
        return cls(
            spec.model,
            spec.symmetry,
            spec.objectives,
            transport_weight=transport_weight,
            init_seed=init_seed,
            precision=spec.precision,
        )

    def _autocast(self, device_type: str):
        return bf16_autocast(uses_bf16(self.precision, device_type), device_type)

    def _predict(self, z: torch.Tensor, cutoff: torch.Tensor) -> torch.Tensor:
        with self._autocast(z.device.type):
            return cast(nn.Module, self.model.predictor)(z, cutoff).float()

    def forward(
        self, x: torch.Tensor, phi: torch.Tensor, cutoff: torch.Tensor, regulariser_inputs: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """Loss terms of one batch; ``regulariser_inputs`` from ``regulariser.draw``, drawn by the
        caller so that no random generator runs in compiled code."""
        with self._autocast(x.device.type):
            z = self.model(x)
        z = z.float()  # the objectives always run in float32
        terms = {
            "prediction": prediction_loss(self._predict, z, cutoff, stop_gradient=self.stop_gradient),
            "regulariser": self._regulariser(z, regulariser_inputs),
            "transport": self._transport(z, phi),
        }
        terms["loss"] = cast(torch.Tensor, sum(self.weights[name] * value for name, value in terms.items()))
        return terms

    def _regulariser(self, z: torch.Tensor, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.dist.enabled:
            return self.regulariser(z, **inputs, reduce=self.dist.ecf_reduce)
        return self.regulariser(z, **inputs)

    def _transport(self, z: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
        context = torch.no_grad() if self.weights["transport"] == 0 else contextlib.nullcontext()
        with context:
            loss = transport_loss(z, phi, self.symmetry)
        if not self.dist.enabled:
            return loss
        # Re-weight so the DDP average over ranks is the mean over the global batch's records.
        counted = (valid_tokens(phi).sum(1) >= 2).sum().to(loss.dtype)
        return loss * counted / self.dist.mean(counted).clamp_min(1)


class Trainer:
    """Pre-trains one arm × seed and writes checkpoints and ``metrics.jsonl`` to ``spec.directory``.

    ``signals`` (N, channels, samples) at ``model_fs`` Hz and their token phases (N, tokens), or
    (N, tokens, C) for a torus of rank C (NaN undefined), are held in memory, unless ``shards``
    names a shard folder or URL to stream them from (`write_shards`, `StreamBatches`).
    """

    def __init__(
        self,
        spec: TrainingSpec,
        signals: np.ndarray | torch.Tensor | None,
        phases: np.ndarray | torch.Tensor | None,
        *,
        model_fs: float,
        dist: Distributed | None = None,
        shards: str | Path | None = None,
    ):
        dist = dist or Distributed()
        self.spec, self.directory, self.dist = spec, Path(spec.directory), dist
        settings = spec.training
        self.device = resolve_device(settings.device, dist.local_rank if dist.enabled else None)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # index-less "cuda" tensors land here too
        if settings.batch_size % dist.world:
            raise ValueError(f"batch size {settings.batch_size} is not divisible by {dist.world} ranks")
        self.streams = RNGStreams(spec.seed, self.device)
        init_seed = draw_init_seed(self.streams)
        self.objective = JEPAObjective.from_spec(spec.objective, spec.transport_weight, init_seed).to(self.device)
        self.objective.dist = dist
        self.compile_mode = compile_mode(settings.compile, self.device.type, dist.enabled)
        self.step_module = self._wrap(self.objective)
        self.augmenter = Augmenter.from_config(
            [{"name": a.name, "p": a.p, **a.options.model_dump()} for a in spec.augmentations], fs=model_fs
        )
        self.augment = self._compiled(self.augmenter.apply)
        self.optimisers = build_optimisers(self.objective, spec.optimiser)
        self.batches: BatchSampler | StreamBatches
        if shards is None:
            if signals is None or phases is None:
                raise ValueError("the trainer needs signals and phases, or shards to stream them from")
            self.batches = BatchSampler(signals, phases, settings.batch_size, self.streams["data"], self.device)
        else:
            self.batches = StreamBatches(shards, settings.batch_size, self.streams["data"], self.device, dist)
        self.step = 0
        self.skipped: list[int] = []  # steps skipped for non-finite values (training.skip_nonfinite_steps)
        self.watchers: list[Callable[[Trainer, list[dict[str, float]]], None]] = []  # called with each flush's rows, rank 0
        self.meta = {
            "seed": spec.seed,
            "transport_weight": spec.transport_weight,
            "identity": spec.identity,
            "run_hash": spec.run_hash,
        }

    def _wrap(self, objective: JEPAObjective) -> nn.Module:
        """The module a step calls: in one process, the objective compiled whole (one graph). Under
        torchrun no collective (DDP's hooks, the objective's cross-rank reductions) may lie in a
        compiled region, so DDP wraps the eager objective and only the model's two networks are
        compiled, in place (parameter names unchanged)."""
        if not self.dist.enabled:
            return self._compiled(objective)
        from torch.nn.parallel import DistributedDataParallel

        if self.compile_mode is not None:
            for network in (objective.model, cast(nn.Module, objective.model.predictor)):  # encoder + projector; predictor
                network.compile(mode=self.compile_mode)
        ids = [self.device.index] if self.device.type == "cuda" else None
        unused = any(p.requires_grad for p in objective.symmetry.parameters())
        return DistributedDataParallel(objective, device_ids=ids, find_unused_parameters=unused)

    def _compiled(self, function):
        """``function`` under ``torch.compile`` in the configured mode (unchanged when eager)."""
        return function if self.compile_mode is None else torch.compile(function, mode=self.compile_mode)

    @property
    def cuda_graphs(self) -> bool:
        return replays_cuda_graphs(self.compile_mode, self.device.type)

    @property
    def model(self) -> nn.Module:
        """The JEPA model (encoder, projector, predictor) being trained."""
        return self.objective.model

    def train_step(self) -> torch.Tensor:
        """One optimisation step; returns the step's metrics as one device tensor (no host sync)."""
        lr = learning_rate(self.step, self.spec.training.steps, self.spec.optimiser)
        set_learning_rate(self.optimisers, lr)
        if self.cuda_graphs:  # a new step: the graphs may overwrite the last step's outputs
            torch.compiler.cudagraph_mark_step_begin()
        terms = self.step_module(*self.step_inputs())
        for optimiser in self.optimisers:
            optimiser.zero_grad(set_to_none=True)
        terms["loss"].backward()
        grad_norm = nn.utils.clip_grad_norm_(self.objective.parameters(), self.spec.optimiser.grad_clip)
        values = self.dist.mean(torch.stack([terms[name].detach() for name in TERMS] + [grad_norm.detach().float()]))
        if not self._skip(values):
            for optimiser in self.optimisers:
                optimiser.step()
        self.step += 1
        # torch.full passes lr as a kernel argument: no host-to-device copy, no synchronisation
        return torch.cat([values, torch.full((1,), lr, device=values.device)])

    def _skip(self, values: torch.Tensor) -> bool:
        """Whether to drop this step's update: a term or the gradient norm (``values``, the same on
        every rank) is non-finite and ``training.skip_nonfinite_steps`` has some left (host check)."""
        if len(self.skipped) >= self.spec.training.skip_nonfinite_steps or bool(torch.isfinite(values).all()):
            return False
        self.skipped.append(self.step + 1)
        what = _nonfinite(dict(zip((*TERMS, "grad_norm"), values.tolist(), strict=True)))
        log.warning(
            "%s: step %d has a non-finite %s; its update skipped (%d of training.skip_nonfinite_steps=%d)",
            self.directory.name,
            self.step + 1,
            what,
            len(self.skipped),
            self.spec.training.skip_nonfinite_steps,
        )
        return True

    def step_inputs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """This step's objective inputs, each from the run's own stream: the next batch augmented,
        its token phases, the cutoffs and the regulariser's draws (under torchrun, this rank's shard)."""
        x, phi = self.batches.next()
        draws = self.augmenter.draw(x, self.streams["augment"])
        cutoff = sample_cutoffs(self.spec.training.batch_size, phi.shape[1], self.streams["mask"], self.device)
        x = self.augment(x, draws.rms, draws.applied, draws.params)
        if not self.batches.local:
            x, phi = self.dist.shard(x), self.dist.shard(phi)
        return x, phi, self.dist.shard(cutoff), self.regulariser_inputs()

    def regulariser_inputs(self) -> dict[str, torch.Tensor]:
        """This step's random inputs of the regulariser, from the ``sigreg`` stream."""
        dim = self.spec.objective.model.projector.dim
        return self.objective.regulariser.draw(dim, self.streams["sigreg"], device=self.device)

    def fit(self, until: int | None = None, progress: bool = True) -> Path:
        """Train up to step ``until`` (default: the configured steps); returns the last checkpoint.

        ``metrics.jsonl`` first loses its rows after the current step and any torn line. A SIGTERM
        or SIGINT ends training at the next step boundary (under torchrun, the next flush): metrics
        flushed, a checkpoint written, `cyclejepa.interrupts.Stopped` raised naming both.
        """
        until = self.spec.training.steps if until is None else until
        if self.dist.is_main:
            keep_metrics_until(RunFolder(self.directory).metrics, self.step)
        pending: list[tuple[int, torch.Tensor]] = []
        last = RunFolder(self.directory).checkpoint(self.step)
        shown = progress and self.dist.is_main
        bar = progress_bar(
            until, self.directory.name, enabled=shown, completed=self.step, fields=("terms",), rate=True, unit="steps"
        )
        with bar as update, deferred_stops() as stop:
            while self.step < until:
                pending.append((self.step, self.train_step()))
                checkpoint = self.step % self.spec.training.checkpoint_every == 0 or self.step == self.spec.training.steps
                flush = len(pending) == FLUSH_EVERY or self.step == until
                signum = self._stop_signal(stop, flush)
                stopping = signum is not None
                if flush or stopping or (checkpoint and not _all_finite(pending)):  # a bad step: `_flush` stops
                    metrics = self._flush(pending)
                    update(completed=int(metrics["step"]), terms=_terms_text(metrics))
                    pending = []
                if checkpoint or stopping:
                    last = self.save()
                if signum is not None:
                    raise Stopped(signum, self.step, last)
        return last

    def _stop_signal(self, stop: StopRequest, flush: bool) -> int | None:
        """The signal to stop on after this step, if any (under torchrun: any rank's, agreed at flushes)."""
        if not self.dist.enabled:
            return stop.signum
        if not flush:
            return None
        return self.dist.largest(stop.signum or 0) or None

    def _flush(self, pending: list[tuple[int, torch.Tensor]]) -> dict[str, float]:
        """Write the ``pending`` steps' metrics, up to and raising `Diverged` at a non-finite one."""
        rows = torch.stack([values for _, values in pending]).tolist()
        records = [
            {"step": step + 1, **dict(zip((*TERMS, "grad_norm", "lr"), row, strict=True)), "time": time.time()}
            for (step, _), row in zip(pending, rows, strict=True)
        ]
        for record in records:
            if record["step"] in self.skipped:
                record["skipped"] = True
        bad = next((record for record in records if not record.get("skipped") and _nonfinite(record)), None)
        if bad is not None:
            self._write_metrics(records[: records.index(bad) + 1])
            raise Diverged(bad["step"], _nonfinite(bad), latest_checkpoint(RunFolder(self.directory)), len(self.skipped))
        self._write_metrics(records)
        return records[-1]

    def _write_metrics(self, records: list[dict[str, Any]]) -> None:
        """Append ``records`` to ``metrics.jsonl`` (rank 0) and pass them to the watchers."""
        if self.dist.is_main:
            path = RunFolder(self.directory).metrics
            with writing(path):
                self.directory.mkdir(parents=True, exist_ok=True)
                with open(path, "a") as stream:
                    stream.writelines(json.dumps(_json_safe(record), allow_nan=False) + "\n" for record in records)
            for watch in self.watchers:
                watch(self, records)

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "model": self.objective.state_dict(),
            "optimisers": [o.state_dict() for o in self.optimisers],
            "rng": self.streams.state_dict(),
            "batches": self.batches.state_dict(),
            "meta": self.meta,
            "skipped": list(self.skipped),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        differences = identity_differences(state["meta"].get("identity", {}), self.spec.identity)
        if differences:
            raise ValueError(
                f"checkpoint belongs to run {state['meta'].get('run_hash', '(no identity)')}, trained with other "
                f"settings than this run {self.meta['run_hash']}: " + "; ".join(differences)
            )
        self.objective.load_state_dict(state["model"])
        for optimiser, saved in zip(self.optimisers, state["optimisers"], strict=True):
            optimiser.load_state_dict(saved)
        self.streams.load_state_dict(state["rng"])
        self.batches.load_state_dict(state["batches"])
        self.step = int(state["step"])
        self.skipped = [int(step) for step in state.get("skipped", [])]

    def save(self) -> Path:
        """Write the current step's checkpoint (rank 0; every rank raises `Diverged` on non-finite weights)."""
        run = RunFolder(self.directory)
        path = run.checkpoint(self.step)
        try:  # on every rank (they hold the same weights), so that all of them stop
            require_finite(self.objective.state_dict(), f"the model after step {self.step}")
        except ValueError as error:
            raise Diverged(self.step, f"weights ({error})", latest_checkpoint(run)) from None
        if self.dist.is_main:
            save_checkpoint(self.state_dict(), path)
        return path

    def resume(self, path: str | Path) -> None:
        """Continue from a checkpoint written by `save`, exactly where it stopped."""
        self.load_state_dict(load_checkpoint(path, map_location=self.device))


def keep_metrics_until(path: Path, step: int) -> None:
    """Keep the metrics rows of ``path`` up to ``step``, dropping a torn line with a warning naming
    it; rewritten atomically when it changes."""
    if not path.exists():
        return
    text = path.read_text(errors="replace")
    lines = text.splitlines()
    kept = []
    for number, line in enumerate(lines, 1):
        try:
            if json.loads(line)["step"] <= step:
                kept.append(line)
        except (ValueError, TypeError, KeyError):
            log.warning("%s: line %d is not a metrics row (a write cut short?); dropped: %.60r", path, number, line)
    if len(kept) < len(lines) or not text.endswith("\n"):
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_text("".join(row + "\n" for row in kept))
        os.replace(temporary, path)


def _all_finite(pending: list[tuple[int, torch.Tensor]]) -> bool:
    """Whether every pending metrics row is finite (one host synchronisation)."""
    return not pending or bool(torch.isfinite(torch.stack([values for _, values in pending])).all())


def _nonfinite(record: dict[str, Any]) -> str:
    """What is non-finite in a metrics row ("prediction, transport loss", ...); empty when all is finite."""
    components = [name for name in COMPONENTS if not np.isfinite(record[name])]
    if components:
        return ", ".join(components) + " loss"
    if not np.isfinite(record["loss"]):
        return "weighted total loss (every term finite)"
    return "gradient norm (every loss term finite)" if not np.isfinite(record["grad_norm"]) else ""


def _json_safe(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with non-finite floats as the strings "nan", "inf", "-inf" (strict JSON)."""
    return {key: str(value) if isinstance(value, float) and not np.isfinite(value) else value for key, value in record.items()}


def _terms_text(metrics: dict[str, float]) -> str:
    """The loss terms of a metrics row, abbreviated for the progress bar."""
    return " ".join(f"{name[:5]} {metrics[name]:.3g}" for name in TERMS)


def initial_objective(spec: ObjectiveSpec, seed: int, device: str | torch.device = "cpu") -> JEPAObjective:
    """The untrained objective, in eval mode, that `Trainer` starts a run of ``seed`` from (any λ_trans)."""
    init_seed = draw_init_seed(RNGStreams(seed, "cpu"))
    return JEPAObjective.from_spec(spec, 0.0, init_seed).to(device).eval()


def load_trained(spec: ObjectiveSpec, path: str | Path, device: str | torch.device = "cpu") -> JEPAObjective:
    """The trained objective of a checkpoint (``.model``, ``.symmetry``), in eval mode.

    Raises a ValueError when its tensors do not fit the model ``spec`` builds (naming the changed
    ``model`` and ``symmetry`` keys and the first misfit tensors), `NonFiniteWeights` on NaN or inf.
    """
    state = load_checkpoint(path, map_location=device)
    require_finite(state["model"], f"checkpoint {path}")
    meta = state["meta"]
    objective = JEPAObjective.from_spec(spec, meta["transport_weight"], init_seed=0)
    misfits = _misfits(state["model"], objective.state_dict())
    if misfits:
        now = {
            **flat_json("model", spec.model.model_dump(mode="json")),
            **flat_json("symmetry", spec.symmetry.model_dump(mode="json")),
        }
        changed = [
            line for line in identity_differences(meta.get("identity", {}), now) if line.startswith(("model.", "symmetry."))
        ]
        keys = f"the config's {'; '.join(changed)} (trained → now); " if changed else ""
        raise ValueError(
            f"checkpoint {path} does not fit the config's model: {keys}{len(misfits)} tensors differ, e.g. {'; '.join(misfits[:2])}"
        )
    objective.load_state_dict(state["model"])
    return objective.to(device).eval()


def _misfits(saved: dict[str, torch.Tensor], built: dict[str, torch.Tensor]) -> list[str]:
    """How a checkpoint's ``saved`` tensors misfit the ``built`` model's: missing, extra, another shape."""
    misfits = [f"{name} missing from the checkpoint" for name in built if name not in saved]
    misfits += [f"{name} not in the config's model" for name in saved if name not in built]
    return misfits + [
        f"{name} {tuple(saved[name].shape)} in the checkpoint, {tuple(tensor.shape)} in the config's model"
        for name, tensor in built.items()
        if name in saved and saved[name].shape != tensor.shape
    ]
