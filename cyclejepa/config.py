"""Typed experiment schema, loaded from YAML with ``--set a.b=c`` overrides.

Every section defaults to the paper's values, so ``{}`` is the Winder configuration. Errors
name the key path, the allowed values and the closest match::

    model.encoder.widht: unknown key; allowed: dilations, hidden, ... Did you mean 'width'?
"""

from __future__ import annotations

import copy
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    JsonValue,
    field_validator,
    model_validator,
)

from cyclejepa import registry
from cyclejepa.declarations.options import UNKNOWN_OPTION, OpenOptions, Options, typed_options
from cyclejepa.facts import cycle_band, data_facts, declared_provider
from cyclejepa.grid import grid_cells, grid_size, grid_size_problem
from cyclejepa.registry import did_you_mean

if TYPE_CHECKING:  # pydantic's own dependency, named for its type only
    from pydantic_core import ErrorDetails

PAPER_SPECTRUM = "4x0+24x1+24x2+20x3+16x4+12x5+10x6+8x7+6x8+4x9+2x10"
REMOVED_KEYS = {
    "data.synthetic_records": "the synthetic corpus is a dataset: data.dataset: synthetic, data.options: {records: N, seed: S}",
    "data.synthetic_seed": "the synthetic corpus is a dataset: data.dataset: synthetic, data.options: {records: N, seed: S}",
    "data.fs": "the cache rate is data.cache_fs (Hz; the model's rate is data.cache_fs / data.decimation)",
}
"""Keys of earlier versions, with what replaces them."""


def _registered(reg: registry.Registry):
    """A validator that accepts only names registered in ``reg``."""

    def check(name: str) -> str:
        if name not in reg:
            raise ValueError(registry.unknown_name_message(reg.kind, name, reg.names()))
        return name

    return AfterValidator(check)


def _options_of(key: str, name_field: str, field: str = "options") -> Any:
    """A validator typing a section's options by the component ``name_field`` names in registry ``key``."""

    def typed(cls: type, value: Any, info: ValidationInfo) -> Options:
        return typed_options(key, info.data.get(name_field), value)

    return field_validator(field, mode="before")(classmethod(typed))


TypedOptions = SerializeAsAny[Options]
"""A component's options: validated into the model it declares (`_options_of`)."""


class Section(BaseModel):
    """Base of every config section: unknown keys and non-finite floats are errors."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


MAX_WORKERS = 256
"""Most worker processes ``data.workers`` may ask for (a pool never starts more than its tasks)."""


class PhaseQcConfig(Section):
    """Shares of windows that must pass phase QC (`cyclejepa.pipeline.checks.phase_qc_verdict`)."""

    refuse_below: float = Field(0.5, ge=0, le=1, description="share of training windows passing phase QC under which run refuses")
    flag_below: float = Field(
        0.8, ge=0, le=1, description="share of training or evaluation windows under which the run is flagged"
    )

    @model_validator(mode="after")
    def _refuse_not_above_flag(self) -> PhaseQcConfig:
        if self.refuse_below > self.flag_below:
            raise ValueError(
                f"refuse_below {self.refuse_below:g} is above flag_below {self.flag_below:g}; a share that "
                "refuses a run must also flag it"
            )
        return self


class DataConfig(Section):
    """The corpus and its cache; keys left out (None) take the dataset's own facts."""

    dataset: Annotated[str, _registered(registry.DATASETS)] = "ptbxl"
    options: TypedOptions = Field(
        default_factory=OpenOptions, validate_default=True, description="keyword options of the dataset"
    )
    root: Path | None = Field(None, description="dataset root; None: the dataset's own environment variable")
    cache_fs: float | None = Field(None, gt=0, description="cache rate (Hz): records are resampled to it and phased at it")
    decimation: int | None = Field(None, ge=1, description="the model sees its rate model_fs = cache_fs / decimation")
    token_patch: int | None = Field(None, ge=1, description="samples per token at the model rate")
    window_s: float | None = Field(None, gt=0, description="window (model record length) in seconds; longer records are cut")
    cache_dir: Path | None = Field(None, description="default: <output_dir>/cache")
    train_folds: list[Annotated[int, Field(ge=1)]] | None = Field(None, description="folds of the dataset's FoldProtocol")
    eval_folds: list[Annotated[int, Field(ge=1)]] | None = Field(None, description="folds of the dataset's FoldProtocol")
    workers: int = Field(
        1, ge=1, le=MAX_WORKERS, description="processes reading records (a pool never starts more than its tasks)"
    )
    amplitude_limits: dict[str, Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict,
        description="unit -> largest sample magnitude, over the defaults (mV: 200, mmHg: 1000, other units: 1e8)",
    )
    phase_qc: PhaseQcConfig = Field(default_factory=PhaseQcConfig)

    _options = _options_of("datasets", "dataset")


class PhaseConfig(Section):
    provider: Annotated[str, _registered(registry.PHASE_PROVIDERS)] | None = Field(
        None, description="None: the dataset's own (Dataset.phase_provider)"
    )
    options: TypedOptions = Field(default_factory=OpenOptions, validate_default=True)
    convention: Literal["centre", "causal"] = "centre"

    _options = _options_of("phase_providers", "provider")


class SymmetryConfig(Section):
    name: Annotated[str, _registered(registry.SYMMETRIES)] = "u1"
    spectrum: str = PAPER_SPECTRUM
    basis: Annotated[str, _registered(registry.BASES)] = "canonical"
    basis_options: TypedOptions = Field(default_factory=OpenOptions, validate_default=True)

    _options = _options_of("bases", "basis", "basis_options")


class EncoderConfig(Section):
    name: Annotated[str, _registered(registry.ENCODERS)] = "winder-conv"
    leads: int | None = Field(None, ge=1, description="input channels; None: the dataset's channel count")
    patch: int | None = Field(None, ge=1, description="samples per token; None: data.token_patch")
    width: int = Field(256, ge=1)
    hidden: int = Field(512, ge=1)
    kernel: int = Field(3, ge=1)
    dilations: list[Annotated[int, Field(ge=1)]] = [1, 2]


class ProjectorConfig(Section):
    hidden: int = Field(512, ge=1)
    dim: int = Field(256, ge=2)


class PredictorConfig(Section):
    name: Annotated[str, _registered(registry.PREDICTORS)] = "causal-transformer"
    depth: int = Field(4, ge=1)
    heads: int = Field(4, ge=1)
    ffn: int = Field(1024, ge=1)
    max_relative_position: int | None = Field(
        None, ge=1, description="relative-position bias range; None: 2T - 1 for T tokens per window (paper: 249)"
    )


class ModelConfig(Section):
    name: Annotated[str, _registered(registry.MODELS)] = "winder"
    encoder: EncoderConfig = Field(default_factory=EncoderConfig)
    projector: ProjectorConfig = Field(default_factory=ProjectorConfig)
    predictor: PredictorConfig = Field(default_factory=PredictorConfig)


class RegulariserConfig(Section):
    name: Annotated[str, _registered(registry.REGULARISERS)] = "sigreg"
    weight: float = Field(0.15, ge=0)
    options: TypedOptions = Field(default_factory=OpenOptions, validate_default=True)

    _options = _options_of("regularisers", "name")


class PredictionConfig(Section):
    weight: float = Field(1.0, ge=0)
    stop_gradient: bool = False


class ObjectivesConfig(Section):
    prediction: PredictionConfig = Field(default_factory=PredictionConfig)
    regulariser: RegulariserConfig = Field(default_factory=RegulariserConfig)
    transport_weight: float = Field(1.0, ge=0, description="overridden per arm")


MAX_STEPS = 100_000_000
"""Most optimiser steps one run may take (training.steps, optimiser.warmup_steps, evaluation.steps)."""


class OptimiserConfig(Section):
    """AdamW's settings, each bounded to what trains."""

    lr: float = Field(3e-4, gt=0, le=1e4)  # a sanity bound (1e308 is a typo); divergence is caught in training
    min_lr: float = Field(1e-6, ge=0, le=1)
    warmup_steps: int = Field(5, ge=0, le=MAX_STEPS)
    betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = (0.9, 0.95)
    eps: float = Field(1e-8, gt=0, le=1)
    weight_decay: float = Field(1e-4, ge=0, le=1)
    grad_clip: float = Field(1.0, gt=0, le=1e12)

    @model_validator(mode="after")
    def _min_lr_below_lr(self) -> OptimiserConfig:
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr {self.min_lr:g} is above lr {self.lr:g}; the schedule decays from lr to min_lr")
        return self


MAX_BATCH = 65_536
"""Largest ``training.batch_size`` (records per step)."""


class TrainingConfig(Section):
    steps: int = Field(30_000, ge=1, le=MAX_STEPS)
    batch_size: int = Field(64, ge=1, le=MAX_BATCH)
    checkpoint_every: int = Field(2_500, ge=1)
    device: str = "auto"
    precision: Literal["auto", "float32", "bf16"] = Field("auto", description="auto: bf16 autocast on CUDA, float32 on the CPU")
    compile: bool | Literal["auto", "default", "reduce-overhead", "max-autotune"] = Field(
        False,
        description="torch.compile mode (true = default); auto: reduce-overhead (CUDA graphs) on CUDA, eager on the CPU",
    )
    tensorboard: bool = Field(False, description="write TensorBoard events beside metrics.jsonl (the tensorboard extra)")
    diagnostics_every: int = Field(250, ge=1, description="steps between the held-batch diagnostics in the TensorBoard events")
    memory_budget_gb: float = Field(
        2.0,
        ge=0,
        le=1e6,
        allow_inf_nan=False,
        description="host memory (GB) the training set may take; a larger one streams from shards beside the cache "
        "(each rank reads its share); 0: always stream",
    )
    skip_nonfinite_steps: int = Field(
        0,
        ge=0,
        description="steps with a non-finite loss or gradient norm to skip (no update) before training stops; "
        "above 0 every step is checked on the host (one synchronisation per step)",
    )


class AugmentationConfig(Section):
    name: Annotated[str, _registered(registry.AUGMENTATIONS)]
    p: float = Field(0.5, ge=0, le=1)
    options: TypedOptions = Field(default_factory=OpenOptions, validate_default=True)

    _options = _options_of("augmentations", "name")


def _paper_augmentations() -> list[AugmentationConfig]:
    return [AugmentationConfig(name=name) for name in registry.AUGMENTATIONS.builtins]  # in the paper's order


MAX_ARM_NAME = 64
"""Longest arm name: it names folders (``runs/<arm>-seed<seed>``) and result files."""
_ARM_NAME = re.compile(r"\w[\w.+-]*")


def _folder_safe(name: str) -> str:
    """``name`` if it can name a folder in the output directory (``\\w[\\w.+-]*``, no ``..``, at
    most `MAX_ARM_NAME` characters); else a ValueError saying why."""
    if not name:
        raise ValueError("an arm name may not be empty; it names the run's folder runs/<arm>-seed<seed>")
    if len(name) > MAX_ARM_NAME:
        raise ValueError(f"an arm name has at most {MAX_ARM_NAME} characters, got {len(name)}")
    if not _ARM_NAME.fullmatch(name) or ".." in name:
        raise ValueError(
            f"arm name {name!r} cannot name a folder inside output_dir: use letters, digits and _ . + - "
            "(a letter, digit or _ first; no path separator, no '..')"
        )
    return name


class ArmConfig(Section):
    name: Annotated[str, AfterValidator(_folder_safe)]
    transport_weight: float = Field(ge=0)


MAX_RUNS = 1024
"""Most runs one config may train: arms × seeds × grid cells (each run is trained and evaluated in full)."""


class RunsConfig(Section):
    arms: list[ArmConfig] = Field(
        max_length=MAX_RUNS,
        default_factory=lambda: [
            ArmConfig(name="winder", transport_weight=1.0),
            ArmConfig(name="control", transport_weight=0.0),
        ],
    )
    seeds: list[Annotated[int, Field(ge=0, lt=2**32)]] = Field([0, 1], max_length=MAX_RUNS)
    at_once: Annotated[int, Field(ge=1, le=MAX_WORKERS)] | Literal["auto"] = Field(
        1, description="runs trained side by side, one process each; auto: all on CUDA, one on the CPU"
    )


class EvaluationConfig(Section):
    steps: list[Annotated[int, Field(ge=1, le=MAX_STEPS)]] = [5_000, 15_000, 30_000]
    unseal: bool = False
    bootstrap: int = Field(1_000, ge=1, le=1_000_000)
    seed: int = 0
    device: str = "auto"
    at_once: Annotated[int, Field(ge=1, le=MAX_WORKERS)] | Literal["auto"] = Field(
        1, description="checkpoints evaluated side by side, one process each; auto: half the cores on CUDA, one on the CPU"
    )
    probe_c: float | Literal["cv"] = Field(1.0, description="logistic-regression C, or 'cv' within the training folds")
    detector: Annotated[str, _registered(registry.DETECTORS)] = "transport-violation"
    families: list[str] = ["ectopic", "t-inversion", "st-shift", "attenuation", "lead-dropout", "baseline-wander"]
    severities: list[Annotated[float, Field(ge=0, le=2)]] = [0.0, 0.5, 1.0, 1.5, 2.0]
    anomaly_records: int | None = Field(None, ge=2, description="evaluation records in the anomaly battery (None: all)")
    eligible_min_positives: int = Field(20, ge=1, description="positives in fold 9 for the eligible-subclass task")
    umap: bool = Field(True, description="draw the token UMAP figure (needs umap-learn; slow to start)")
    umap_points: int = Field(20_000, ge=100)
    headline_step: int | None = Field(None, description="step of the report's first table (None: the first evaluated)")
    random_baseline: bool = Field(
        True, description="also evaluate each seed's untrained weights (the arm 'random', step 0): no training"
    )


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
    grid: dict[str, list[JsonValue]] = Field(
        default_factory=dict, description="key.path -> values: `run` trains every combination"
    )
    _derived: set[str] = PrivateAttr(default_factory=set)
    """Key paths filled from the dataset's facts (left out of a grid cell's base)."""

    @model_validator(mode="after")
    def _derive_from_data(self) -> ExperimentConfig:
        """Fill the keys left out from the dataset's facts; one not derivable stays None (see `consistency_problems`)."""
        declared = declared_provider(self.data.dataset)
        if self.phase.provider is None and declared is not None:
            self.phase.provider = declared
            self._derived.add("phase.provider")
            self.phase.options = typed_options("phase_providers", declared, self.phase.options, ("phase", "options"))
        facts = data_facts(self.data, cycle_band(self.phase.provider))
        if isinstance(facts, str):
            return self
        derived = {
            "data.cache_fs": facts.cache_fs,
            "data.decimation": facts.decimation,
            "data.token_patch": facts.token_patch,
            "data.window_s": facts.window_s,
            "data.train_folds": list(facts.folds.train),
            "data.eval_folds": list(facts.folds.evaluation),
            "model.encoder.leads": len(facts.channels),
            "model.encoder.patch": facts.token_patch,
            "model.predictor.max_relative_position": 2 * facts.n_tokens - 1,
        }
        for key, value in derived.items():
            *parents, leaf = key.split(".")
            section = self
            for part in parents:
                section = getattr(section, part)
            if getattr(section, leaf) is None:
                setattr(section, leaf, value)
                self._derived.add(key)
        return self


class ConfigError(ValueError):
    """A configuration that does not validate; one line per problem, each with its key path."""

    def __init__(self, problems: list[str], source: str = "config"):
        self.problems = problems
        listed = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"{source}: " + (problems[0] if len(problems) == 1 else f"{len(problems)} problems\n{listed}"))


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """Read a YAML experiment file, apply ``a.b=c`` overrides, and validate it."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError([f"no such file: {path}"], source=str(path))
    size = path.stat().st_size
    if size > MAX_YAML_BYTES:
        raise ConfigError([f"{size} bytes, more than the {MAX_YAML_BYTES} a config may hold"], source=str(path))
    try:
        raw = read_yaml(path.read_text()) or {}
    except UnicodeDecodeError as error:
        raise ConfigError([f"not UTF-8 text ({error})"], source=str(path)) from None
    except yaml.YAMLError as error:
        raise ConfigError([f"invalid YAML: {error}"], source=str(path)) from None
    if not isinstance(raw, dict):
        raise ConfigError(["the top level must be a mapping of sections"], source=str(path))
    raw = apply_overrides(raw, overrides)
    problems = long_integer_problems(raw)
    if problems:
        raise ConfigError(problems, source=str(path))
    return parse_config(raw, source=str(path))


MAX_NESTING = 100
"""Deepest nesting of lists and mappings read from YAML (deeper ones would exhaust the stack)."""
MAX_YAML_BYTES = 1 << 20
"""Largest YAML text read as a config (a real one is a few kB)."""
MAX_YAML_NODES = 100_000
"""Most nodes a YAML document may hold with its aliases expanded (refuses an "alias bomb")."""


class _LongInteger(str):
    """The digits of a YAML integer longer than Python converts (``sys.get_int_max_str_digits``)."""


class _Loader(yaml.SafeLoader):
    """``yaml.safe_load``'s loader, reading an over-long integer as a `_LongInteger` and refusing
    nesting deeper than `MAX_NESTING` or more than `MAX_YAML_NODES` expanded nodes (size = 1 +
    the children's sizes, an alias counting its anchor's size again)."""

    def compose_node(self, parent, index):
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_NESTING:
                raise yaml.YAMLError(f"nested more than {MAX_NESTING} levels deep")
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._count(node)
        return node

    def _count(self, node) -> None:
        sizes = self.__dict__.setdefault("_sizes", {})
        if id(node) in sizes:  # an alias: its anchor is counted again wherever it is used
            size = sizes[id(node)]
        elif isinstance(node, yaml.MappingNode):
            size = 1 + sum(sizes.get(id(part), 1) for pair in node.value for part in pair)
        elif isinstance(node, yaml.SequenceNode):
            size = 1 + sum(sizes.get(id(item), 1) for item in node.value)
        else:
            size = 1
        sizes[id(node)] = size
        if size > MAX_YAML_NODES:
            raise yaml.YAMLError(
                f"more than {MAX_YAML_NODES} nodes once its aliases are expanded "
                f"({size} at line {node.start_mark.line + 1}); a config needs a few hundred"
            )

    def construct_yaml_int(self, node):
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            return _LongInteger(node.value)


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


def read_yaml(text: str) -> Any:
    """``yaml.safe_load`` of ``text`` by `_Loader`; `yaml.YAMLError` beyond `MAX_YAML_BYTES` characters."""
    if len(text) > MAX_YAML_BYTES:
        raise yaml.YAMLError(f"{len(text)} characters, more than the {MAX_YAML_BYTES} a config may hold")
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader


def long_integer_problems(value: Any, key: str = "") -> list[str]:
    """One line for each integer of ``value`` too long for Python to read, with its key path."""
    if isinstance(value, _LongInteger):
        digits = sum(c.isdigit() for c in value)
        return [
            f"{key or '(top level)'}: an integer of {digits} digits, more than the {sys.get_int_max_str_digits()} Python reads"
        ]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in long_integer_problems(v, f"{key}.{k}" if key else str(k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in long_integer_problems(v, f"{key}[{i}]")]
    return []


def parse_config(raw: dict[str, Any], source: str = "config") -> ExperimentConfig:
    """Validate a nested mapping into an `ExperimentConfig`, each grid cell too; `ConfigError` lists the problems."""
    try:
        cfg = ExperimentConfig.model_validate(raw)
    except ValidationError as error:
        raise ConfigError([_describe(e) for e in error.errors()], source=source) from None
    if (problem := grid_size_problem(cfg.grid)) is not None:
        raise ConfigError([problem], source)
    cells = grid_size(cfg.grid)
    runs = len(cfg.runs.arms) * len(cfg.runs.seeds) * cells
    if runs > MAX_RUNS:
        raise ConfigError(
            [
                f"runs: {len(cfg.runs.arms)} arms × {len(cfg.runs.seeds)} seeds × {cells} grid cells = {runs} "
                f"runs, more than the {MAX_RUNS} one config may train; split it"
            ],
            source,
        )
    expand_grid(cfg)  # every combination must validate too
    return cfg


def expand_grid(cfg: ExperimentConfig) -> list[tuple[str, ExperimentConfig]]:
    """Every combination of ``cfg.grid`` as (label, config); without a grid, ``[("", cfg)]``."""
    if not cfg.grid:
        return [("", cfg)]
    return [
        (cell.label, parse_config(apply_overrides(cell.base, cell.overrides), source=cell.source))
        for cell in grid_cells(cfg.model_dump(mode="json"), cfg._derived)
    ]


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of ``raw`` with each ``a.b.c=value`` set, the value read as YAML."""
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
        try:
            node[leaf] = read_yaml(text)
        except yaml.YAMLError as error:
            reason = " ".join((getattr(error, "problem", None) or str(error)).split())
            raise ConfigError(
                [f"{key}: value {_abbreviated(text)} is not valid YAML ({reason}); quote it or fix it"],
                f"--set {_abbreviated(item, quote=False)}",
            ) from None
    return result


def _abbreviated(text: str, limit: int = 60, quote: bool = True) -> str:
    """``text`` (its repr when ``quote``) cut to about ``limit`` characters, with its length."""
    shown = repr(text) if quote else text
    return shown if len(shown) <= limit else f"{shown[:limit]}… ({len(text)} characters)"


def _describe(error: ErrorDetails) -> str:
    """One line for one pydantic error: key path, what is wrong, allowed values, closest match."""
    loc = ".".join(str(part) for part in error["loc"]) or "(top level)"
    if error["type"] == "extra_forbidden" and loc in REMOVED_KEYS:
        return f"{loc}: no longer a key; {REMOVED_KEYS[loc]}"
    if error["type"] == UNKNOWN_OPTION:
        return f"{loc}: {error['msg']}"
    if error["type"] == "extra_forbidden":
        allowed = _allowed_keys(error["loc"][:-1])
        return f"{loc}: unknown key; allowed: {', '.join(allowed)}" + did_you_mean(str(error["loc"][-1]), allowed)
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "literal_error":
        expected = [s.strip(" '") for s in error["ctx"]["expected"].replace(" or ", ",").split(",")]
        message += did_you_mean(str(error["input"]), expected)
    return f"{loc}: {message} (got {_abbreviated(repr(error['input']), 80, quote=False)})"


def _allowed_keys(loc: tuple) -> list[str]:
    """The field names of the section at ``loc`` (list indices step into item models)."""
    model: type[BaseModel] = ExperimentConfig
    for part in loc:
        if isinstance(part, int):
            continue
        annotation: Any = model.model_fields[part].annotation  # a type form: X, list[X] or X | None
        model = getattr(annotation, "__args__", (annotation,))[0] if not isinstance(annotation, type) else annotation
    return sorted(model.model_fields)
