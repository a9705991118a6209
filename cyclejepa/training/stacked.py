"""Several runs of one experiment stepped as one stacked ensemble.

The runs of an experiment (arms × seeds) share every shape, so their parameters can be stacked
along a new leading axis i (``torch.func.stack_module_state``) and one step computes all of them:

    terms_i = L(θ_i; x_i, φ_i, c_i, r_i)             (one vmap of the objective over i)
    loss    = Σ_i w_pred P_i + w_reg R_i + λ_i T_i     (λ_i: run i's transport weight)
    g_i     ← g_i · min(1, clip / (‖g_i‖ + 10⁻⁶))      (each run's own norm, as clip_grad_norm_)
    θ       ← AdamW(θ, g)                              (elementwise: each run's own AdamW)

Each run keeps its `Trainer`'s streams, batches, augmentations and cutoffs (`Trainer.step_inputs`),
so the ensemble computes what the separate runs compute, to float tolerance (tested on the CPU);
`StackedRuns.unstack` hands the state back for `Trainer.save`. On one GPU it is the alternative to
side-by-side processes (`runs.at_once`): one launch per kernel for all runs. Not yet a `runs` mode:
`cyclejepa benchmark throughput` measures it against one run (see the performance docs).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch.func import functional_call, stack_module_state, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from cyclejepa.objectives.prediction import check_cutoffs
from cyclejepa.symmetry.bases import manifold_parameters
from cyclejepa.training.schedule import learning_rate, set_learning_rate
from cyclejepa.training.trainer import Trainer


class StackedRuns:
    """The runs of ``trainers`` (one experiment, any arms and seeds, one device, one process)
    stepped as one; ``train_step`` returns their metrics rows, ``unstack`` hands the state back."""

    def __init__(self, trainers: Sequence[Trainer]):
        self.trainers = list(trainers)
        _check_stackable(self.trainers)
        first = self.trainers[0]
        self.device, self.spec = first.device, first.spec
        objectives = [t.objective for t in self.trainers]
        self.params, self.buffers = stack_module_state(objectives)
        self.template = copy.deepcopy(first.objective).to("meta")
        self.template.weights = {**first.objective.weights, "transport": 1.0}  # λ_i applied outside
        self.transport_weights = torch.tensor([o.weights["transport"] for o in objectives], device=self.device)
        self.weights = first.objective.weights
        settings = first.spec.optimiser
        self.optimiser = torch.optim.AdamW(
            list(self.params.values()),
            lr=settings.lr,
            betas=settings.betas,
            eps=settings.eps,
            weight_decay=settings.weight_decay,
            fused=self.device.type == "cuda" or None,
        )
        self._stack_optimiser_state()

    @property
    def step(self) -> int:
        return self.trainers[0].step

    def _objective(self, params, buffers, x, phi, cutoff, regulariser_inputs):
        return functional_call(self.template, (params, buffers), (x, phi, cutoff, regulariser_inputs))

    def train_step(self) -> torch.Tensor:
        """One step of every run: (runs, 6) metrics rows (loss, prediction, regulariser,
        transport, gradient norm, learning rate), one device tensor (no host sync)."""
        inputs = [t.step_inputs() for t in self.trainers]
        x, phi, cutoff = (torch.stack(parts) for parts in zip(*(i[:3] for i in inputs), strict=True))
        draws = {name: torch.stack([i[3][name] for i in inputs]) for name in inputs[0][3]}
        check_cutoffs(cutoff, phi.shape[2])
        lr = learning_rate(self.step, self.spec.training.steps, self.spec.optimiser)
        set_learning_rate([self.optimiser], lr)
        # Attention by the math backend, softmax(q kᵀ/√d + mask) v in batched matmuls that vmap
        # stacks: CUDA's fused kernels have no batching rule, vmap falls back to one call per run,
        # and that backward fails on CUDA ("LSE is not correctly aligned (strideH)", torch 2.11).
        with sdpa_kernel(SDPBackend.MATH):
            terms = vmap(self._objective)(self.params, self.buffers, x, phi, cutoff, draws)
        loss = (
            self.weights["prediction"] * terms["prediction"]
            + self.weights["regulariser"] * terms["regulariser"]
            + self.transport_weights * terms["transport"]
        )
        self.optimiser.zero_grad(set_to_none=True)
        loss.sum().backward()
        norms = self._clip_each_run(self.spec.optimiser.grad_clip)
        self.optimiser.step()
        for trainer in self.trainers:
            trainer.step += 1
        columns = [loss, terms["prediction"], terms["regulariser"], terms["transport"], norms]
        rows = torch.stack([c.detach().float() for c in columns], dim=1)
        return torch.cat([rows, torch.full((len(self.trainers), 1), lr, device=rows.device)], dim=1)

    def _clip_each_run(self, max_norm: float) -> torch.Tensor:
        """Scale each run's gradient to norm ≤ ``max_norm`` as `clip_grad_norm_`; the (runs,) norms before."""
        grads = [p.grad for p in self.params.values() if p.grad is not None]
        norms = torch.linalg.vector_norm(torch.stack([g.flatten(1).norm(dim=1) for g in grads]), dim=0)
        scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(scale.view(-1, *[1] * (g.dim() - 1)))
        return norms

    def _stack_optimiser_state(self) -> None:
        """The runs' AdamW state (after `Trainer.resume`), stacked into the ensemble's."""
        for name, stacked in self.params.items():
            own = [t.optimisers[0].state.get(p, {}) for t, p in zip(self.trainers, self._own(name), strict=True)]
            if all(own):
                self.optimiser.state[stacked] = {
                    "step": own[0]["step"].clone(),
                    "exp_avg": torch.stack([s["exp_avg"] for s in own]),
                    "exp_avg_sq": torch.stack([s["exp_avg_sq"] for s in own]),
                }

    def _own(self, name: str) -> list[torch.nn.Parameter]:
        """Each run's own parameter ``name``, in run order."""
        return [t.objective.get_parameter(name) for t in self.trainers]

    def unstack(self) -> None:
        """Write each run's slice of the parameters, the AdamW state and the rate back into its trainer."""
        lr = self.optimiser.param_groups[0]["lr"]
        with torch.no_grad():
            for name, stacked in self.params.items():
                state = self.optimiser.state.get(stacked)
                for i, (trainer, parameter) in enumerate(zip(self.trainers, self._own(name), strict=True)):
                    parameter.copy_(stacked[i])
                    if state:
                        trainer.optimisers[0].state[parameter] = {
                            "step": state["step"].clone(),
                            "exp_avg": state["exp_avg"][i].clone(),
                            "exp_avg_sq": state["exp_avg_sq"][i].clone(),
                        }
        for trainer in self.trainers:
            set_learning_rate(trainer.optimisers, lr)


def _check_stackable(trainers: Sequence[Trainer]) -> None:
    """Raise a ValueError naming why ``trainers`` cannot be stepped as one ensemble."""
    if not trainers:
        raise ValueError("a stacked ensemble needs at least one run")
    first = trainers[0]
    problems = []
    for t in trainers:
        name = t.directory.name
        if _shared_settings(t) != _shared_settings(first):
            problems.append(f"{name}: another experiment than {first.directory.name} (runs stack within one config)")
        if t.device != first.device:
            problems.append(f"{name}: on {t.device}, {first.directory.name} on {first.device}")
        if t.dist.enabled:
            problems.append(f"{name}: under torchrun (a stacked ensemble is one process)")
        if t.compile_mode is not None:
            problems.append(f"{name}: compiled (training.compile {t.spec.training.compile!r}); build the trainers eager")
        if t.step != first.step:
            problems.append(f"{name}: at step {t.step}, {first.directory.name} at step {first.step}")
    if manifold_parameters(first.objective):
        basis = first.spec.objective.symmetry.basis
        problems.append(f"symmetry.basis {basis!r} has manifold parameters (Riemannian Adam): stack Euclidean ones")
    if problems:
        raise ValueError("cannot stack these runs: " + "; ".join(problems))


def _shared_settings(trainer: Trainer) -> tuple:
    """What the runs of one ensemble share: every setting of the run but its seed, λ_trans and folder."""
    spec = trainer.spec
    return spec.objective, spec.optimiser, spec.augmentations, spec.training
