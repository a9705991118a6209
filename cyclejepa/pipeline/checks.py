"""One preflight per command (`preflight`): every check the config and the files on disk allow,
before any work starts. `consistency_problems` finds from the config alone what makes a
valid-looking config fail later (spectrum and phase coordinates, evaluated steps and
checkpoints, folds, the dataset's options and facts, channels the phase provider reads, anomaly
families that cannot apply, names, component options); `preflight` adds devices, optional
packages, the corpus on disk and the runs already in the output directory.

A config check imports the modules of the components the config names only where it needs their
facts (the dataset's and the phase provider's classes); a built-in whose option names the
registry records (`Registry.options`: the torch-backed regulariser and augmentations) has its
options checked by name, and is constructed with them (their values) only with ``construct``,
which `cyclejepa validate` leaves off so that it never imports torch."""

from __future__ import annotations

from typing import Any

from cyclejepa import registry
from cyclejepa.config import PAPER_SPECTRUM, ConfigError, ExperimentConfig, expand_grid
from cyclejepa.facts import DataFacts, cycle_band, data_facts
from cyclejepa.jsonio import read_json
from cyclejepa.pipeline.identity import identity_differences
from cyclejepa.pipeline.plans import RunPlan, plan_runs
from cyclejepa.pipeline.preparation import build_dataset
from cyclejepa.registry import closest_match


def consistency_problems(cfg: ExperimentConfig, *, construct: bool = True) -> list[str]:
    """What makes a valid-looking config fail later, checked from the config alone: one line per
    problem with its key path, the allowed values and the closest match. A grid is checked cell
    by cell (`expand_grid`). ``construct``: also build the components whose option names the
    registry records, to check their option values (imports their modules)."""
    if cfg.grid:
        return [f"grid {label}: {problem}" for label, cell in expand_grid(cfg)
                for problem in consistency_problems(cell, construct=construct)]  # fmt: skip
    problems = _spectrum_problems(cfg) + _step_problems(cfg) + _fold_problems(cfg) + _name_problems(cfg)
    problems += _dataset_problems(cfg)
    if cfg.phase.provider is None:
        names = ", ".join(registry.PHASE_PROVIDERS.names())
        problems.append(f"phase.provider: dataset {cfg.data.dataset!r} declares no default phase provider; name one ({names})")
    else:
        problems += _option_problems("phase.options", registry.PHASE_PROVIDERS, cfg.phase.provider, cfg.phase.options, construct)
    regulariser = cfg.objectives.regulariser
    key = "objectives.regulariser.options"
    problems += _option_problems(key, registry.REGULARISERS, regulariser.name, regulariser.options, construct)
    for index, augmentation in enumerate(cfg.augmentations):
        key = f"augmentations[{index}].options"
        problems += _option_problems(key, registry.AUGMENTATIONS, augmentation.name, augmentation.options, construct)
    return problems


def _spectrum_problems(cfg: ExperimentConfig) -> list[str]:
    from cyclejepa.symmetry.spectrum import HarmonicSpectrum

    try:
        spectrum = HarmonicSpectrum(cfg.symmetry.spectrum)
    except ValueError as error:
        return [f"symmetry.spectrum: {error} (got {cfg.symmetry.spectrum!r}; e.g. {PAPER_SPECTRUM!r})"]
    if spectrum.dim != cfg.model.projector.dim:
        return [
            f"symmetry.spectrum: {cfg.symmetry.spectrum!r} has dimension {spectrum.dim}, "
            f"but model.projector.dim is {cfg.model.projector.dim}; the two must be equal"
        ]
    coordinates = cfg.phase.options.get("coordinates") if cfg.phase.provider == "composite" else None
    n_phase = len(coordinates) if isinstance(coordinates, dict) else 1
    if spectrum.rank != n_phase:
        return [
            f"symmetry.spectrum: {cfg.symmetry.spectrum!r} has rank {spectrum.rank} (torus coordinates), but "
            f"phase.provider {cfg.phase.provider!r} gives {n_phase} phase coordinate(s); the two must be equal"
        ]
    return []


def checkpointed(cfg: ExperimentConfig, step: int) -> bool:
    """Whether the trainer writes a checkpoint at ``step``: every ``checkpoint_every``, and the last."""
    every, steps = cfg.training.checkpoint_every, cfg.training.steps
    return step == steps or (0 < step <= steps and step % every == 0)


def _step_problems(cfg: ExperimentConfig) -> list[str]:
    problems = []
    for step in cfg.evaluation.steps:
        if step > cfg.training.steps:
            problems.append(f"evaluation.steps: {step} is beyond training.steps ({cfg.training.steps})")
        elif not checkpointed(cfg, step):
            problems.append(
                f"evaluation.steps: step {step} is never checkpointed (training.checkpoint_every "
                f"{cfg.training.checkpoint_every}); checkpointed: {checkpoint_listing(cfg)}. "
                f"Did you mean {_nearest_checkpoint(cfg, step)}?"
            )
    headline = cfg.evaluation.headline_step
    if headline is not None and headline not in cfg.evaluation.steps:
        hint = min(cfg.evaluation.steps, key=lambda s: abs(s - headline), default=None)
        problems.append(
            f"evaluation.headline_step: {headline} is not evaluated; allowed: evaluation.steps "
            f"{cfg.evaluation.steps}" + (f". Did you mean {hint}?" if hint is not None else "")
        )
    return problems


def _nearest_checkpoint(cfg: ExperimentConfig, step: int) -> int:
    """The checkpointed step nearest ``step`` (at most ``training.steps``); the earlier on a tie."""
    every, steps = cfg.training.checkpoint_every, cfg.training.steps
    below = step // every * every
    candidates = [s for s in (below, below + every, steps) if checkpointed(cfg, s)]
    return min(candidates, key=lambda s: (abs(s - step), s))


def checkpoint_listing(cfg: ExperimentConfig, shown: int = 8) -> str:
    """The checkpointed steps; when more than ``shown``, the first ``shown`` - 1 and the last."""
    every, steps = cfg.training.checkpoint_every, cfg.training.steps
    count = -(-steps // every)  # the multiples of every below steps, and steps
    if count <= shown:
        return ", ".join(map(str, [every * k for k in range(1, count)] + [steps]))
    return ", ".join(str(every * k) for k in range(1, shown)) + f", …, {steps}"


def _fold_problems(cfg: ExperimentConfig) -> list[str]:
    shared = sorted(set(cfg.data.train_folds or ()) & set(cfg.data.eval_folds or ()))  # None: not derived (named elsewhere)
    if shared:
        return [f"data.eval_folds: folds {shared} are also in data.train_folds {cfg.data.train_folds}; the two must not overlap"]
    return []


def _dataset_problems(cfg: ExperimentConfig) -> list[str]:
    """data.options the dataset's constructor does not take; data facts that cannot be derived or
    that the config contradicts (`_fold_range_problems`, `_shape_problems`, `_lead_problems`,
    `_family_problems`), all read from one `data_facts`."""
    data = cfg.data
    accepted = _keyword_parameters(registry.DATASETS.get(data.dataset))
    problems = []
    if accepted is not None:
        accepted.discard("root")
        problems += [
            f"data.options.{option}: unknown option of dataset {data.dataset!r}; allowed: {', '.join(sorted(accepted)) or '(none)'}"
            + (f". Did you mean {hint!r}?" if (hint := closest_match(option, sorted(accepted))) else "")
            for option in data.options
            if option not in accepted or option == "root"
        ]
    facts = data_facts(data, cycle_band(cfg.phase.provider))
    if isinstance(facts, str):
        return problems + [facts]
    return (
        problems
        + _fold_range_problems(cfg, facts)
        + _shape_problems(cfg, facts)
        + _lead_problems(cfg, facts)
        + _family_problems(cfg, facts)
    )


def _fold_range_problems(cfg: ExperimentConfig, facts: DataFacts) -> list[str]:
    """Folds named that the dataset does not have (1..`FoldProtocol.count`)."""
    protocol, problems = facts.folds, []
    for key in ("train_folds", "eval_folds"):
        outside = [fold for fold in getattr(cfg.data, key) or () if fold not in protocol.all_folds]
        if outside:
            problems.append(
                f"data.{key}: folds {outside} are not folds of dataset {cfg.data.dataset!r}, which has 1..{protocol.count}"
            )
    return problems


def _shape_problems(cfg: ExperimentConfig, facts: DataFacts) -> list[str]:
    """Model keys set by hand that contradict the data: channels and token patch."""
    where = f"dataset {cfg.data.dataset!r}"
    problems = []
    if cfg.model.encoder.leads != len(facts.channels):
        problems.append(
            f"model.encoder.leads: {cfg.model.encoder.leads}, but {where} gives {len(facts.channels)} channel(s) "
            f"{list(facts.channels)}; leave model.encoder.leads out to derive it"
        )
    if cfg.model.encoder.patch != facts.token_patch:
        problems.append(
            f"model.encoder.patch: {cfg.model.encoder.patch}, but the cache's tokens are data.token_patch = "
            f"{facts.token_patch} samples; leave model.encoder.patch out to derive it"
        )
    return problems


def _lead_problems(cfg: ExperimentConfig, facts: DataFacts) -> list[str]:
    """Channels the phase provider reads (its ``lead`` option, else that option's default; each
    coordinate's for ``composite``) that the dataset does not keep; with neither, a provider that
    picks its channel by name (`PhaseProvider.reads_channel`) and finds none of the dataset's."""
    import inspect

    readers = [("phase.options", cfg.phase.provider, cfg.phase.options)]
    coordinates = cfg.phase.options.get("coordinates")
    if cfg.phase.provider == "composite" and isinstance(coordinates, dict):
        readers = [(f"phase.options.coordinates.{name}", spec.get("provider"), spec)
                   for name, spec in coordinates.items() if isinstance(spec, dict)]  # fmt: skip
    channels, problems = list(facts.channels), []
    for key, name, options in readers:
        if name is None or name not in registry.PHASE_PROVIDERS:
            continue  # named by consistency_problems or by the composite provider's own check
        parameter = inspect.signature(registry.PHASE_PROVIDERS.get(name)).parameters.get("lead")
        default = None if parameter is None or parameter.default is inspect.Parameter.empty else parameter.default
        lead = options.get("lead", default)
        wanted = [lead] if isinstance(lead, str) and lead != "all" else lead if isinstance(lead, (list, tuple)) else []
        origin = "" if "lead" in options else f" (the default of phase provider {name!r})"
        provider = registry.PHASE_PROVIDERS.get(name)
        if lead is None and getattr(provider, "channel_pattern", None) and not any(map(provider.reads_channel, channels)):
            problems.append(
                f"{key}.lead: phase provider {name!r} reads {', '.join(provider.channel_kinds)} channels by name, and "
                f"dataset {cfg.data.dataset!r} has none ({', '.join(channels)}); name its channel with {key}.lead"
            )
        for channel in wanted:
            if str(channel).lower() not in {c.lower() for c in channels}:
                hint = closest_match(str(channel), channels)
                problems.append(
                    f"{key}.lead: {channel!r}{origin} is not a channel of dataset {cfg.data.dataset!r}; its channels: "
                    f"{', '.join(channels)}" + (f". Did you mean {hint!r}?" if hint else "")
                )
    return problems


def _name_problems(cfg: ExperimentConfig) -> list[str]:
    from collections import Counter

    problems = []
    for index, family in enumerate(cfg.evaluation.families):
        if family not in registry.PERTURBATIONS:
            problems.append(
                f"evaluation.families[{index}]: {registry.unknown_name_message('anomaly family', family, registry.PERTURBATIONS.names())}"
            )
    arms = Counter(arm.name for arm in cfg.runs.arms)
    problems += [f"runs.arms: arm name {name!r} appears {n} times; arm names must be unique" for name, n in arms.items() if n > 1]
    seeds = Counter(cfg.runs.seeds)
    problems += [f"runs.seeds: seed {seed} appears {n} times; seeds must be unique" for seed, n in seeds.items() if n > 1]
    return problems


def _option_problems(key: str, reg: registry.Registry, name: str, options: dict[str, Any], construct: bool) -> list[str]:
    """Options that the component's constructor does not take (the names `Registry.options`
    records, else the constructor's), then the values it refuses; a component whose option names
    are recorded is imported and constructed only with ``construct``."""
    import inspect

    recorded = reg.options.get(name)
    component = None if recorded is not None and not construct else reg.get(name)
    accepted = set(recorded) if recorded is not None else _keyword_parameters(component)
    if accepted is not None:
        unknown = [option for option in options if option not in accepted]
        if unknown:
            return [
                f"{key}.{option}: unknown option of {reg.kind} {name!r}; allowed: {', '.join(sorted(accepted))}"
                + (f". Did you mean {hint!r}?" if (hint := closest_match(option, sorted(accepted))) else "")
                for option in unknown
            ]
    if inspect.isclass(component):
        try:
            component(**options)
        except (TypeError, ValueError) as error:
            return [f"{key}: {reg.kind} {name!r} refuses {options}: {error}"]
    return []


def _keyword_parameters(component: Any) -> set[str] | None:
    """Keyword names a class's constructor (through ``**kwargs`` to its bases) accepts; None: any."""
    import inspect

    classes = inspect.getmro(component) if inspect.isclass(component) else ()
    functions = [vars(cls)["__init__"] for cls in classes if "__init__" in vars(cls) and cls is not object] or [component]
    names: set[str] = set()
    for function in functions:
        parameters = list(inspect.signature(function).parameters.values())
        kinds = {p.kind for p in parameters}
        names |= {p.name for p in parameters if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name != "self"}
        if inspect.Parameter.VAR_KEYWORD not in kinds:
            return names
    return None


def preflight(cfg: ExperimentConfig, *, construct: bool = True) -> None:
    """Every check that the config and the files on disk allow, before any work: raises one
    `ConfigError` listing each problem with its key path (a grid: each cell's, cell by cell).
    ``construct``: as in `consistency_problems` (off: no torch-backed module is imported)."""
    problems = []
    for label, cell in expand_grid(cfg):
        where, plans = f"grid {label}: " if label else "", plan_runs(cell)
        problems += [where + problem for problem in consistency_problems(cell, construct=construct) + _device_problems(cell, plans)
                     + _corpus_problems(cell) + identity_problems(plans) + _extra_problems(cell)]  # fmt: skip
    if problems:
        raise ConfigError(problems, source="preflight")


def _device_problems(cfg: ExperimentConfig, plans: list[RunPlan]) -> list[str]:
    """Devices this machine lacks; ``training.device`` only while a run of ``plans`` is left to
    train (runs trained on CUDA are evaluated elsewhere with their ``training.device``, see the
    run identity). ``auto`` and ``cpu`` are on every machine: only another name needs torch to be
    checked."""
    problems, keys = [], ["evaluation.device"]
    if not all(plan.finished() for plan in plans):
        keys.insert(0, "training.device")
    for key in keys:
        section, name = key.split(".")
        device = getattr(getattr(cfg, section), name)
        if device in ("auto", "cpu"):
            continue
        from cyclejepa.devices import resolve_device

        try:
            resolve_device(device)
        except ValueError as error:
            problems.append(f"{key}: {error}")
    return problems


def _extra_problems(cfg: ExperimentConfig) -> list[str]:
    """An optional package a setting needs that is not installed."""
    if not cfg.training.tensorboard:
        return []
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return ["training.tensorboard: true needs tensorboard: pip install 'cyclejepa[tensorboard]'"]
    return []


def _family_problems(cfg: ExperimentConfig, facts: DataFacts) -> list[str]:
    """Anomaly families of a list of the config's own that cannot apply to the phase provider's
    signal (`PhaseProvider.signal`) or to the dataset's channel count (``facts``). The default
    list is the battery's to filter: it skips what does not apply and says so in the report."""
    from cyclejepa.config import EvaluationConfig
    from cyclejepa.registry import PERTURBATIONS, PHASE_PROVIDERS

    provider, families = cfg.phase.provider, cfg.evaluation.families
    if (
        families == EvaluationConfig.model_fields["families"].default
        or provider is None
        or not all(family in PERTURBATIONS for family in families)
    ):
        return []  # the default list; a provider or names that consistency_problems names
    from cyclejepa.evaluation.anomaly.perturbations import applicable_families  # the families' own facts

    signal = getattr(PHASE_PROVIDERS.get(provider), "signal", "any")
    _, skipped = applicable_families(families, signal, len(facts.channels))
    return [f"evaluation.families[{families.index(name)}]: {name!r} {reason}; leave it out" for name, reason in skipped.items()]


def _corpus_problems(cfg: ExperimentConfig) -> list[str]:
    """A dataset that cannot be built from the config, or whose data on disk is not the one asked
    for (e.g. a synthetic corpus of another size at the root)."""
    from cyclejepa.data.datasets import DatasetNotFound

    try:
        dataset = build_dataset(cfg)
        mismatch = getattr(dataset, "mismatch", None)
        problem = mismatch() if mismatch else None
    except DatasetNotFound:
        return []  # said in full, with where to get it, when prepare needs the data
    except (ValueError, TypeError) as error:
        return [f"data: dataset {cfg.data.dataset!r}: {str(error).splitlines()[0]}"]
    return [problem] if problem else []


def identity_problems(plans: list[RunPlan]) -> list[str]:
    """Runs of ``plans`` whose folders hold a run trained with other settings than the plan's
    identity, with the keys that differ."""
    problems = []
    for plan in plans:
        recorded = recorded_identity(plan)
        if recorded is None:
            continue
        differences = identity_differences(recorded, plan.identity)
        if differences:
            problems.append(
                f"{plan.directory} was trained with other settings ({'; '.join(differences)}); "
                "restore them, or choose another output_dir"
            )
    return problems


def recorded_identity(plan: RunPlan) -> dict | None:
    """The identity a run directory was trained with: from done.json, else its last checkpoint."""
    folder = plan.folder
    if folder.done.exists():
        return read_json(folder.done).get("identity", {})
    if not folder.checkpoints.is_dir():
        return None  # nothing trained yet: no checkpoint to read (nor torch to read it)
    from cyclejepa.training.checkpoint import latest_checkpoint, load_checkpoint

    last = latest_checkpoint(folder.checkpoints)
    return None if last is None else load_checkpoint(last)["meta"].get("identity", {})
