"""The JEPA model container, the registered "winder" preset and its parameter breakdown."""

from __future__ import annotations

import inspect
from typing import Any, cast

import torch
from torch import nn

from cyclejepa.models.projector import ProjectorMLP
from cyclejepa.registry import ENCODERS, MODELS, PREDICTORS


class JEPAModel(nn.Module):
    """Encoder + projector (the deployed path) and the training-only predictor (None when deployed)."""

    def __init__(self, encoder: nn.Module, projector: nn.Module, predictor: nn.Module | None):
        super().__init__()
        self.encoder, self.projector, self.predictor = encoder, projector, predictor

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Signal (B, leads, samples) → encoder tokens h (B, T, width)."""
        return self.encoder(x)

    def project(self, h: torch.Tensor) -> torch.Tensor:
        """Encoder tokens h → projected tokens z (B, T, K)."""
        return self.projector(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The deployed path: signal → projected tokens z."""
        return self.project(self.encode(x))


def _build(registry: Any, section: str, config: dict[str, Any]) -> nn.Module:
    """Build ``config["name"]`` from ``registry``; unknown keys raise naming ``model.section``."""
    kwargs = dict(config)
    component = registry.get(kwargs.pop("name"))
    try:
        inspect.signature(component).bind(**kwargs)
    except TypeError as error:
        raise TypeError(f"model.{section}: {error}") from None
    return component(**kwargs)


def _derived(config: dict[str, Any], key: str, value: int, section: str, source: str) -> None:
    """Set ``config[key] = value``, refusing an explicit different value."""
    given = config.setdefault(key, value)
    if given != value:
        raise ValueError(f"model.{section}.{key}={given} must equal {source}={value}")


@MODELS.register("winder")
def winder_model(
    encoder: dict[str, Any] | None = None, projector: dict[str, Any] | None = None, predictor: dict[str, Any] | None = None
) -> JEPAModel:
    """The paper's model; each dict overrides that component's constructor arguments (``"name"``
    picks another registered encoder or predictor). Unless overridden the projector is
    width → 2·width → width and the predictor has ``dim`` = projector output and ``ffn`` = 4·dim:
    the paper's 256 → 512 → 256 projector and FFN 1,024."""
    enc = _build(ENCODERS, "encoder", {"name": "winder-conv", **(encoder or {})})
    width = cast(int, enc.width)  # every registered encoder states its token width
    proj_cfg = {"hidden": 2 * width, "out_dim": width, **(projector or {})}
    _derived(proj_cfg, "in_dim", width, "projector", "encoder width")
    proj = ProjectorMLP(**proj_cfg)
    pred_cfg = {"name": "causal-transformer", "ffn": 4 * proj.out_dim, **(predictor or {})}
    _derived(pred_cfg, "dim", proj.out_dim, "predictor", "projector out_dim")
    return JEPAModel(enc, proj, _build(PREDICTORS, "predictor", pred_cfg))


def build_model(name: str = "winder", *, seed: int | None = None, **overrides: Any) -> JEPAModel:
    """Build the registered model ``name`` (e.g. ``build_model("winder", encoder={"width": 32})``).

    With ``seed`` it is built under ``torch.random.fork_rng`` seeded with it: the weights depend on
    ``seed`` alone and the global RNG is untouched; without, they draw from torch's global generator.
    """
    builder = MODELS.get(name)
    if seed is None:
        return builder(**overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return builder(**overrides)


def _count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _part_counts(prefix: str, module: nn.Module) -> dict[str, int]:
    """Counts per child module (ModuleLists item by item) and per direct parameter."""
    counts = {}
    for name, child in module.named_children():
        if isinstance(child, nn.ModuleList):
            counts.update({f"{prefix}.{name}.{i}": _count(item) for i, item in enumerate(child)})
        else:
            counts[f"{prefix}.{name}"] = _count(child)
    for name, parameter in module.named_parameters(recurse=False):
        counts[f"{prefix}.{name}"] = parameter.numel()
    return counts


def parameter_breakdown(model: JEPAModel) -> dict[str, int]:
    """Parameter counts by part, keyed by module path, plus the totals.

    Keys (paper values): ``encoder.patch_mlp`` 180,992, ``encoder.blocks.0`` and ``.1``
    394,240 each, ``encoder`` 969,472, ``projector`` 262,912, ``deployed`` 1,232,384,
    ``predictor.blocks.0``…``.3`` 789,760 each, ``predictor.output`` 65,792,
    ``predictor.mask_token`` 256, ``predictor.relative_bias`` 1,996, ``predictor`` 3,227,084,
    ``optimised`` 4,459,468.
    """
    if model.predictor is None:
        raise ValueError("parameter_breakdown needs the training model: this one has no predictor (a deployed model)")
    encoder, projector, predictor = (_count(m) for m in (model.encoder, model.projector, model.predictor))
    return {
        **_part_counts("encoder", model.encoder),
        "encoder": encoder,
        "projector": projector,
        "deployed": encoder + projector,
        **_part_counts("predictor", model.predictor),
        "predictor": predictor,
        "optimised": encoder + projector + predictor,
    }
