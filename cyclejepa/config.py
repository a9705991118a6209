"""Typed experiment schema, loaded from YAML with ``--set a.b=c`` overrides.

One YAML file describes one experiment: the data, the phase provider, the symmetry, the model,
the objectives and their weights, the optimiser, the arms and seeds, and the evaluation grid.
Every section has the paper's values as defaults, so ``{}`` is the Winder configuration.

Errors name the key path, the allowed values and the closest match::

    model.encoder.widht: unknown key; allowed: dilations, hidden, ... Did you mean 'width'?
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from cyclejepa import registry
from cyclejepa.registry import closest_match

PAPER_SPECTRUM = "4x0+24x1+24x2+20x3+16x4+12x5+10x6+8x7+6x8+4x9+2x10"
PTBXL_ENV = "CYCLEJEPA_PTBXL"


def _registered(reg: registry.Registry):
    """A validator that accepts only names registered in ``reg``."""

    def check(name: str) -> str:
        if name not in reg:
            raise ValueError(registry.unknown_name_message(reg.kind, name, reg.names()))
        return name

    return AfterValidator(check)


def _component(reg: registry.Registry):
    return Annotated[str, _registered(reg)]


class Section(BaseModel):
    """Base of every config section: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class DataConfig(Section):
    dataset: _component(registry.DATASETS) = "ptbxl"
    root: Path | None = Field(None, description=f"PTB-XL root; None reads ${PTBXL_ENV}")
    synthetic_records: int | None = Field(
        None, ge=20, description="write a synthetic corpus of this size at `root` if none exists"
    )
    synthetic_seed: int = 0
    cache_dir: Path | None = Field(None, description="default: <output_dir>/cache")
    train_folds: list[Annotated[int, Field(ge=1, le=10)]] = list(range(1, 10))
    eval_folds: list[Annotated[int, Field(ge=1, le=10)]] = [10]
    workers: int = Field(1, ge=1)

    def resolved_root(self) -> Path | None:
        """The dataset root from the config, else from the environment, else None."""
        if self.root is not None:
            return self.root
        env = os.environ.get(PTBXL_ENV)
        return Path(env) if env else None


class PhaseConfig(Section):
    provider: _component(registry.PHASE_PROVIDERS) = "ecg-rpeak"
    options: dict[str, Any] = Field(default_factory=dict)
    convention: Literal["centre", "causal"] = "centre"


class SymmetryConfig(Section):
    name: _component(registry.SYMMETRIES) = "u1"
    spectrum: str = PAPER_SPECTRUM
    basis: _component(registry.BASES) = "canonical"
    basis_options: dict[str, Any] = Field(default_factory=dict)


class EncoderConfig(Section):
    name: _component(registry.ENCODERS) = "winder-conv"
    leads: int = Field(12, ge=1)
    patch: int = Field(8, ge=1)
    width: int = Field(256, ge=1)
    hidden: int = Field(512, ge=1)
    kernel: int = Field(3, ge=1)
    dilations: list[Annotated[int, Field(ge=1)]] = [1, 2]


class ProjectorConfig(Section):
    hidden: int = Field(512, ge=1)
    dim: int = Field(256, ge=2)


class PredictorConfig(Section):
    name: _component(registry.PREDICTORS) = "causal-transformer"
    depth: int = Field(4, ge=1)
    heads: int = Field(4, ge=1)
    ffn: int = Field(1024, ge=1)
    max_relative_position: int = Field(249, ge=1)


class ModelConfig(Section):
    name: _component(registry.MODELS) = "winder"
    encoder: EncoderConfig = Field(default_factory=EncoderConfig)
    projector: ProjectorConfig = Field(default_factory=ProjectorConfig)
    predictor: PredictorConfig = Field(default_factory=PredictorConfig)


class RegulariserConfig(Section):
    name: _component(registry.REGULARISERS) = "sigreg"
    weight: float = Field(0.15, ge=0)
    options: dict[str, Any] = Field(default_factory=dict)


class PredictionConfig(Section):
    weight: float = Field(1.0, ge=0)
    stop_gradient: bool = False


class ObjectivesConfig(Section):
    prediction: PredictionConfig = Field(default_factory=PredictionConfig)
    regulariser: RegulariserConfig = Field(default_factory=RegulariserConfig)
    transport_weight: float = Field(1.0, ge=0, description="overridden per arm")


class OptimiserConfig(Section):
    lr: float = Field(3e-4, gt=0)
    min_lr: float = Field(1e-6, ge=0)
    warmup_steps: int = Field(5, ge=0)
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = Field(1e-8, gt=0)
    weight_decay: float = Field(1e-4, ge=0)
    grad_clip: float = Field(1.0, gt=0)


class TrainingConfig(Section):
    steps: int = Field(30_000, ge=1)
    batch_size: int = Field(64, ge=1)
    checkpoint_every: int = Field(2_500, ge=1)
    device: str = "auto"
    precision: Literal["auto", "float32", "bf16"] = Field(
        "auto", description="auto: bf16 autocast on CUDA, float32 on the CPU"
    )
    compile: bool | Literal["auto", "default", "reduce-overhead", "max-autotune"] = Field(
        False,
        description="torch.compile mode (true = default); auto: reduce-overhead (CUDA graphs) on CUDA, eager on the CPU",
    )


class AugmentationConfig(Section):
    name: _component(registry.AUGMENTATIONS)
    p: float = Field(0.5, ge=0, le=1)
    options: dict[str, Any] = Field(default_factory=dict)


def _paper_augmentations() -> list[AugmentationConfig]:
    names = ["gaussian-noise", "tone", "drift", "amplitude-modulation", "lead-dropout", "lead-gain"]
    return [AugmentationConfig(name=name) for name in names]


class ArmConfig(Section):
    name: str
    transport_weight: float = Field(ge=0)


class RunsConfig(Section):
    arms: list[ArmConfig] = Field(
        default_factory=lambda: [
            ArmConfig(name="winder", transport_weight=1.0),
            ArmConfig(name="control", transport_weight=0.0),
        ]
    )
    seeds: list[int] = [0, 1]
    at_once: Annotated[int, Field(ge=1)] | Literal["auto"] = Field(
        1, description="runs trained side by side, one process each; auto: all on CUDA, one on the CPU"
    )


class EvaluationConfig(Section):
    steps: list[Annotated[int, Field(ge=1)]] = [5_000, 15_000, 30_000]
    unseal: bool = False
    bootstrap: int = Field(1_000, ge=1)
    seed: int = 0
    device: str = "auto"
    at_once: Annotated[int, Field(ge=1)] | Literal["auto"] = Field(
        1, description="checkpoints evaluated side by side, one process each; auto: half the cores on CUDA, one on the CPU"
    )
    probe_c: float | Literal["cv"] = Field(1.0, description="logistic-regression C, or 'cv' within the training folds")
    detector: _component(registry.DETECTORS) = "transport-violation"
    families: list[str] = ["ectopic", "t-inversion", "st-shift", "attenuation", "lead-dropout", "baseline-wander"]
    severities: list[Annotated[float, Field(ge=0, le=2)]] = [0.0, 0.5, 1.0, 1.5, 2.0]
    anomaly_records: int | None = Field(None, ge=2, description="evaluation records in the anomaly battery (None: all)")
    eligible_min_positives: int = Field(20, ge=1, description="positives in fold 9 for the eligible-subclass task")
    umap: bool = Field(True, description="draw the token UMAP figure (needs umap-learn; slow to start)")
    umap_points: int = Field(20_000, ge=100)
    headline_step: int | None = Field(None, description="step of the report's first table (None: the first evaluated)")


class ExperimentConfig(Section):
    name: str = "experiment"
    output_dir: Path = Path("runs/experiment")
    data: DataConfig = Field(default_factory=DataConfig)
    phase: PhaseConfig = Field(default_factory=PhaseConfig)
    symmetry: SymmetryConfig = Field(default_factory=SymmetryConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    objectives: ObjectivesConfig = Field(default_factory=ObjectivesConfig)
    optimiser: OptimiserConfig = Field(default_factory=OptimiserConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    augmentations: list[AugmentationConfig] = Field(default_factory=_paper_augmentations)
    runs: RunsConfig = Field(default_factory=RunsConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    grid: dict[str, list[Any]] = Field(
        default_factory=dict, description="key.path -> values: `run` trains every combination"
    )

    def config_hash(self) -> str:
        """A stable short hash of the whole configuration."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


class ConfigError(ValueError):
    """A configuration that does not validate; one line per problem, each with its key path."""

    def __init__(self, problems: list[str], source: str = "config"):
        self.problems = problems
        super().__init__(f"{source}: {len(problems)} problem(s)\n" + "\n".join(f"  {p}" for p in problems))


def load_config(path: str | Path, overrides: list[str] = ()) -> ExperimentConfig:
    """Read a YAML experiment file, apply ``a.b=c`` overrides, and validate it."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError([f"no such file: {path}"], source=str(path))
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise ConfigError([f"invalid YAML: {error}"], source=str(path)) from None
    if not isinstance(raw, dict):
        raise ConfigError(["the top level must be a mapping of sections"], source=str(path))
    return parse_config(apply_overrides(raw, overrides), source=str(path))


def parse_config(raw: dict[str, Any], source: str = "config") -> ExperimentConfig:
    """Validate a nested mapping into an `ExperimentConfig`, with readable errors."""
    try:
        cfg = ExperimentConfig.model_validate(raw)
    except ValidationError as error:
        raise ConfigError([_describe(e) for e in error.errors()], source=source) from None
    expand_grid(cfg)  # every combination must validate too
    return cfg


def expand_grid(cfg: ExperimentConfig) -> list[tuple[str, ExperimentConfig]]:
    """Every combination of ``cfg.grid`` as (label, config), each in ``<output_dir>/grid/<label>``."""
    import itertools

    if not cfg.grid:
        return [("", cfg)]
    base = cfg.model_dump(mode="json", exclude={"grid"})
    keys = sorted(cfg.grid)
    expanded = []
    for index, values in enumerate(itertools.product(*(cfg.grid[k] for k in keys))):
        label = f"g{index:02d}"
        overrides = [f"{key}={json.dumps(value)}" for key, value in zip(keys, values)]
        shared = [
            f"output_dir={json.dumps(str(cfg.output_dir / 'grid' / label))}",
            f"data.cache_dir={json.dumps(str(cfg.data.cache_dir or cfg.output_dir / 'cache'))}",
        ]
        raw = apply_overrides(base, overrides + shared)
        expanded.append((label, parse_config(raw, source=f"grid {label} ({', '.join(overrides)})")))
    return expanded


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of ``raw`` with each ``a.b.c=value`` set; values are parsed as YAML."""
    result = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError([f"override {item!r} is not of the form key.path=value"], "--set")
        *parents, leaf = key.strip().split(".")
        node = result
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError([f"{key}: {part!r} is not a section"], "--set")
            node = child
        node[leaf] = yaml.safe_load(text)
    return result


def _describe(error: dict[str, Any]) -> str:
    """One line for one pydantic error: key path, what is wrong, allowed values, closest match."""
    loc = ".".join(str(part) for part in error["loc"]) or "(top level)"
    if error["type"] == "extra_forbidden":
        allowed = _allowed_keys(error["loc"][:-1])
        hint = closest_match(str(error["loc"][-1]), allowed)
        message = f"{loc}: unknown key; allowed: {', '.join(allowed)}"
        return message + (f". Did you mean {hint!r}?" if hint else "")
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "literal_error":
        expected = [s.strip(" '") for s in error["ctx"]["expected"].replace(" or ", ",").split(",")]
        hint = closest_match(str(error["input"]), expected)
        message += f". Did you mean {hint!r}?" if hint else ""
    return f"{loc}: {message} (got {error['input']!r})"


def _allowed_keys(loc: tuple) -> list[str]:
    """The field names of the section at ``loc`` (list indices step into item models)."""
    model: type[BaseModel] = ExperimentConfig
    for part in loc:
        if isinstance(part, int):
            continue
        annotation = model.model_fields[part].annotation
        model = getattr(annotation, "__args__", (annotation,))[0] if not isinstance(
            annotation, type
        ) else annotation
    return sorted(model.model_fields)
