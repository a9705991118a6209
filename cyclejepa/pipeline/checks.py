"""The checks beyond the schema, before any work starts.

`consistency_problems` finds from the config alone what makes a valid-looking config fail later;
`preflight` adds devices, optional packages, the corpus on disk and the runs already in the
output directory. The lower layers are asked once per config (`gather_facts`); no component is
imported or constructed: a built-in's facts are its declaration (`cyclejepa.declarations`)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cyclejepa import registry
from cyclejepa.config import PAPER_SPECTRUM, ConfigError, EvaluationConfig, ExperimentConfig, expand_grid
from cyclejepa.data.channels import channel_key
from cyclejepa.declarations.options import Options
from cyclejepa.facts import DataFacts, cycle_band, data_facts
from cyclejepa.jsonio import read_json
from cyclejepa.pipeline.identity import identity_differences
from cyclejepa.pipeline.plans import RunPlan, plan_runs
from cyclejepa.pipeline.preparation import build_dataset
from cyclejepa.registry import did_you_mean

if TYPE_CHECKING:
    from cyclejepa.symmetry.spectrum import HarmonicSpectrum


@dataclass(frozen=True)
class PhaseReader:
    """A phase provider (or torus coordinate) that reads a channel: options key, name, declaration, options."""

    key: str
    name: str
    declared: Any
    options: Options


@dataclass(frozen=True)
class ConfigFacts:
    """What the lower layers say of one config (a grid cell); a str where a fact could not be
    derived says why. ``provider_names`` is read only when the config names no provider."""

    spectrum: HarmonicSpectrum | str
    data: DataFacts | str
    provider_names: tuple[str, ...]
    readers: tuple[PhaseReader, ...]
    unknown_families: dict[int, str]
    skipped_families: dict[str, str]


def gather_facts(cfg: ExperimentConfig) -> ConfigFacts:
    """The `ConfigFacts` of one grid cell."""
    data = data_facts(cfg.data, cycle_band(cfg.phase.provider))
    unknown_families = _unknown_families(cfg.evaluation.families)
    readers = _phase_readers(cfg)
    return ConfigFacts(
        spectrum=_parsed_spectrum(cfg.symmetry.spectrum),
        data=data,
        provider_names=tuple(registry.PHASE_PROVIDERS.names()) if cfg.phase.provider is None else (),
        readers=readers,
        unknown_families=unknown_families,
        skipped_families=_skipped_families(cfg, data, unknown_families),
    )


def _parsed_spectrum(text: str) -> HarmonicSpectrum | str:
    """The `HarmonicSpectrum` that ``text`` names, or why it names none."""
    from cyclejepa.symmetry.spectrum import HarmonicSpectrum

    try:
        return HarmonicSpectrum(text)
    except ValueError as error:
        return str(error)


def _unknown_families(families: list[str]) -> dict[int, str]:
    """The registry's message for each of ``families`` it does not know, by index."""
    known = registry.PERTURBATIONS
    return {
        index: registry.unknown_name_message("anomaly family", family, known.names())
        for index, family in enumerate(families)
        if family not in known
    }


def _phase_readers(cfg: ExperimentConfig) -> tuple[PhaseReader, ...]:
    """The `PhaseReader` of the phase provider, or of each coordinate its options name (``readers()``)."""
    options, provider = cfg.phase.options, cfg.phase.provider
    named = getattr(options, "readers", None)
    pairs = (
        [(f"phase.options.{key}", name, typed) for key, name, typed in named()]
        if named
        else [("phase.options", provider, options)]
    )
    return tuple(
        PhaseReader(key, name, registry.PHASE_PROVIDERS.declared(name), typed)
        for key, name, typed in pairs
        if name is not None and name in registry.PHASE_PROVIDERS
    )


def _skipped_families(cfg: ExperimentConfig, data: DataFacts | str, unknown: dict[int, str]) -> dict[str, str]:
    """Families of a config's own list (not the default, which the battery filters) that cannot
    apply to the provider's declared ``signal`` or the channel count, with why."""
    provider, families = cfg.phase.provider, cfg.evaluation.families
    default = EvaluationConfig.model_fields["families"].default
    if families == default or unknown or isinstance(data, str) or provider is None or provider not in registry.PHASE_PROVIDERS:
        return {}
    from cyclejepa.evaluation.anomaly.perturbations import applicable_families  # the families' own facts

    signal = getattr(registry.PHASE_PROVIDERS.declared(provider), "signal", "any")
    _, skipped = applicable_families(families, signal, len(data.channels))
    return skipped


def consistency_problems(cfg: ExperimentConfig) -> list[str]:
    """What makes a valid-looking config fail later, from the config alone: one line per problem
    with its key path, allowed values and closest match; a grid cell by cell."""
    problems = []
    for label, cell in expand_grid(cfg):
        facts = gather_facts(cell)
        problems += [f"grid {label}: {problem}" if label else problem for problem in _config_problems(cell, facts)]
    return problems


def _config_problems(cfg: ExperimentConfig, facts: ConfigFacts) -> list[str]:
    """Every config check of one cell, in order, against its ``facts``."""
    problems = _spectrum_problems(cfg, facts) + _step_problems(cfg) + _fold_problems(cfg) + _name_problems(cfg, facts)
    problems += _dataset_problems(cfg, facts)
    if cfg.phase.provider is None:
        names = ", ".join(facts.provider_names)
        problems.append(f"phase.provider: dataset {cfg.data.dataset!r} declares no default phase provider; name one ({names})")
    return problems


def _spectrum_problems(cfg: ExperimentConfig, facts: ConfigFacts) -> list[str]:
    """A spectrum that does not parse, or whose dimension ≠ ``model.projector.dim`` or rank ≠ phase coordinates."""
    spectrum = facts.spectrum
    if isinstance(spectrum, str):
        return [f"symmetry.spectrum: {spectrum} (got {cfg.symmetry.spectrum!r}; e.g. {PAPER_SPECTRUM!r})"]
    if spectrum.dim != cfg.model.projector.dim:
        return [
            f"symmetry.spectrum: {cfg.symmetry.spectrum!r} has dimension {spectrum.dim}, "
            f"but model.projector.dim is {cfg.model.projector.dim}; the two must be equal"
        ]
    named = getattr(cfg.phase.options, "readers", None)
    n_phase = len(named()) if named else 1
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
    """Evaluated steps beyond training or never checkpointed; a headline step not evaluated."""
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
    """Folds both trained on and evaluated."""
    shared = sorted(set(cfg.data.train_folds or ()) & set(cfg.data.eval_folds or ()))  # None: not derived (named elsewhere)
    if shared:
        return [f"data.eval_folds: folds {shared} are also in data.train_folds {cfg.data.train_folds}; the two must not overlap"]
    return []


def _name_problems(cfg: ExperimentConfig, facts: ConfigFacts) -> list[str]:
    """Unknown families and statistic; arm names and seeds given twice; an arm named 'random' beside the baseline."""
    problems = [f"evaluation.families[{index}]: {message}" for index, message in facts.unknown_families.items()]
    arms = Counter(arm.name for arm in cfg.runs.arms)
    problems += [f"runs.arms: arm name {name!r} appears {n} times; arm names must be unique" for name, n in arms.items() if n > 1]
    if cfg.evaluation.random_baseline and "random" in arms:
        problems.append(
            "runs.arms: arm name 'random' is the random baseline's (evaluation.random_baseline: true); rename the arm"
        )
    seeds = Counter(cfg.runs.seeds)
    problems += [f"runs.seeds: seed {seed} appears {n} times; seeds must be unique" for seed, n in seeds.items() if n > 1]
    regulariser = cfg.objectives.regulariser.options
    statistic = getattr(regulariser, "statistic", None)
    if statistic is not None and statistic not in registry.STATISTICS:
        problems.append(
            "objectives.regulariser.options.statistic: "
            + registry.unknown_name_message(registry.STATISTICS.kind, statistic, registry.STATISTICS.names())
        )
    return problems


def _dataset_problems(cfg: ExperimentConfig, facts: ConfigFacts) -> list[str]:
    """Data facts that cannot be derived or that the config contradicts."""
    data = facts.data
    if isinstance(data, str):
        return [data]
    return (
        _fold_range_problems(cfg, data)
        + _shape_problems(cfg, data)
        + _lead_problems(cfg, data, facts.readers)
        + _family_problems(cfg, facts.skipped_families)
        + _augmentation_problems(cfg, data)
    )


def _augmentation_problems(cfg: ExperimentConfig, data: DataFacts) -> list[str]:
    """Augmentation options the data refuses: a ``count`` above the channel count, a ``frequency``
    not below the model rate's Nyquist frequency cache_fs / decimation / 2 (Hz)."""
    channels, problems = list(data.channels), []
    rates = (cfg.data.cache_fs, cfg.data.decimation)
    nyquist = rates[0] / rates[1] / 2 if rates[0] is not None and rates[1] is not None else None
    for index, augmentation in enumerate(cfg.augmentations):
        key, options, name = f"augmentations[{index}].options", augmentation.options, augmentation.name
        count = _numbers(getattr(options, "count", None))
        if count and max(count) > len(channels):
            problems.append(
                f"{key}.count: {name} drops up to {max(count):g} channels, but dataset {cfg.data.dataset!r} "
                f"has {len(channels)} ({', '.join(channels)}); leave count out (it fits the channels: at most "
                f"C - 1, none of one channel) or leave {name} out"
            )
        frequency = _numbers(getattr(options, "frequency", None))
        if frequency and nyquist is not None and max(frequency) >= nyquist:
            fits = getattr(type(options).model_fields.get("frequency"), "default", 0) is None
            problems.append(
                f"{key}.frequency: {name} at up to {max(frequency):g} Hz is not below the Nyquist "
                f"frequency {nyquist:g} Hz of the model rate {2 * nyquist:g} Hz; choose a lower frequency"
                + (" or leave it out (it fits the rate)" if fits else "")
            )
    return problems


def _numbers(value: Any) -> list[float]:
    """The numbers of an option given as one number or a list of them (else none)."""
    values = value if isinstance(value, (list, tuple)) else [value]
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]


def _fold_range_problems(cfg: ExperimentConfig, data: DataFacts) -> list[str]:
    """Folds named that the dataset does not have (1..`FoldProtocol.count`)."""
    protocol, problems = data.folds, []
    for key in ("train_folds", "eval_folds"):
        outside = [fold for fold in getattr(cfg.data, key) or () if fold not in protocol.all_folds]
        if outside:
            problems.append(
                f"data.{key}: folds {outside} are not folds of dataset {cfg.data.dataset!r}, which has 1..{protocol.count}"
            )
    return problems


def _shape_problems(cfg: ExperimentConfig, data: DataFacts) -> list[str]:
    """Model keys set by hand that contradict the data: channels and token patch."""
    where = f"dataset {cfg.data.dataset!r}"
    problems = []
    if cfg.model.encoder.leads != len(data.channels):
        problems.append(
            f"model.encoder.leads: {cfg.model.encoder.leads}, but {where} gives {len(data.channels)} channel(s) "
            f"{list(data.channels)}; leave model.encoder.leads out to derive it"
        )
    if cfg.model.encoder.patch != data.token_patch:
        problems.append(
            f"model.encoder.patch: {cfg.model.encoder.patch}, but the cache's tokens are data.token_patch = "
            f"{data.token_patch} samples; leave model.encoder.patch out to derive it"
        )
    return problems


def _lead_problems(cfg: ExperimentConfig, data: DataFacts, readers: tuple[PhaseReader, ...]) -> list[str]:
    """Channels a phase reader's ``lead`` names that the dataset lacks; without a ``lead``, a
    declared ``channel_pattern`` that matches none of the dataset's channels."""
    return [problem for reader in readers for problem in _reader_lead_problems(cfg, reader, list(data.channels))]


def _reader_lead_problems(cfg: ExperimentConfig, reader: PhaseReader, channels: list[str]) -> list[str]:
    lead, pattern = getattr(reader.options, "lead", None), getattr(reader.declared, "channel_pattern", None)
    wanted = [lead] if isinstance(lead, str) and lead != "all" else list(lead) if isinstance(lead, (list, tuple)) else []
    origin = "" if "lead" in reader.options.model_fields_set else f" (the default of phase provider {reader.name!r})"
    problems = []
    if lead is None and pattern and not any(re.fullmatch(pattern, channel_key(c), re.IGNORECASE) for c in channels):
        kinds = ", ".join(getattr(reader.declared, "channel_kinds", ()))
        problems.append(
            f"{reader.key}.lead: phase provider {reader.name!r} reads {kinds} channels by name, and "
            f"dataset {cfg.data.dataset!r} has none ({', '.join(channels)}); name its channel with {reader.key}.lead"
        )
    for channel in wanted:
        if channel_key(str(channel)) not in {channel_key(c) for c in channels}:
            problems.append(
                f"{reader.key}.lead: {channel!r}{origin} is not a channel of dataset {cfg.data.dataset!r}; its channels: "
                f"{', '.join(channels)}" + did_you_mean(str(channel), channels)
            )
    return problems


def _family_problems(cfg: ExperimentConfig, skipped: dict[str, str]) -> list[str]:
    """Anomaly families of the config's own list that cannot apply (`_skipped_families`)."""
    families = cfg.evaluation.families
    return [f"evaluation.families[{families.index(name)}]: {name!r} {reason}; leave it out" for name, reason in skipped.items()]


def preflight(cfg: ExperimentConfig) -> list[tuple[str, ExperimentConfig]]:
    """Every check the config and the files on disk allow: one `ConfigError` listing each
    problem with its key path; else the checked cells, (label, config), as `expand_grid` gives."""
    problems, cells = [], []
    for label, cell in expand_grid(cfg):
        cells.append((label, cell))
        where, plans = f"grid {label}: " if label else "", plan_runs(cell)
        facts = gather_facts(cell)
        problems += [
            where + problem
            for problem in _config_problems(cell, facts)
            + _device_problems(cell, plans)
            + _corpus_problems(cell)
            + identity_problems(plans)
            + _extra_problems(cell)
        ]
    if problems:
        raise ConfigError(problems, source="preflight")
    return cells


def _device_problems(cfg: ExperimentConfig, plans: list[RunPlan]) -> list[str]:
    """Devices this machine lacks; ``training.device`` only while a run of ``plans`` is left to train."""
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


def _corpus_problems(cfg: ExperimentConfig) -> list[str]:
    """A dataset that cannot be built, or whose data on disk is not the one asked for."""
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
    """Runs of ``plans`` whose folders hold a run trained with other settings, with the keys that differ."""
    problems = []
    for plan in plans:
        recorded = recorded_identity(plan)
        if recorded is not None and (differences := identity_differences(recorded, plan.identity)):
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

    last = latest_checkpoint(folder)
    return None if last is None else load_checkpoint(last)["meta"].get("identity", {})


def cache_fold_problems(cfg: ExperimentConfig, cache: Any, keys: tuple[str, ...] = ("train_folds", "eval_folds")) -> list[str]:
    """Folds of ``keys`` (``data.train_folds``, ``data.eval_folds``) in which the prepared ``cache`` keeps no record."""
    present = sorted({int(fold) for fold in cache.columns["fold"]})
    problems = []
    for key in keys:
        folds = sorted(getattr(cfg.data, key) or ())
        if folds and not len(cache.select(folds)):
            problems.append(
                f"data.{key}: the cache at {cache.path} keeps no record in folds {folds} (its "
                f"{len(cache.columns['fold'])} windows lie in folds {present}); {_fold_remedy(present)}"
            )
    return problems


def _fold_remedy(present: list[int]) -> str:
    """What to do when the configured folds hold no record of the cache."""
    if len(present) < 2:
        return f"add records: every kept record lies in fold {present[0] if present else '(none)'}, and training and evaluation need two"
    train, evaluation = present[:-1], present[-1:]
    return (
        f"set folds the cache has, e.g. --set 'data.train_folds={train}' --set 'data.eval_folds={evaluation}', "
        "or add records (folds are a hash of each record's name or subject)"
    )


PHASE_QC_FOLDS = {"train": ("train_folds", "training"), "eval": ("eval_folds", "evaluation")}
"""The fold sets whose windows the phase QC check counts: key -> (``data`` key, word)."""


def prepared_cache_verdict(
    cfg: ExperimentConfig, cache: Any, folds: tuple[str, ...] = ("train", "eval")
) -> tuple[list[str], list[str]]:
    """(refusals, flags) of the prepared ``cache`` for the fold sets ``folds`` (keys of `PHASE_QC_FOLDS`)."""
    problems = cache_fold_problems(cfg, cache, tuple(PHASE_QC_FOLDS[key][0] for key in folds))
    refusals, flags = phase_qc_verdict(cfg, cache_phase_qc(cfg, cache, folds))
    return problems + refusals, flags


def cache_phase_qc(cfg: ExperimentConfig, cache: Any, keys: tuple[str, ...] = ("train", "eval")) -> dict[str, Any]:
    """The event word and `PreparedCache.phase_qc_counts` of each fold set of ``keys``, for `phase_qc_verdict`."""
    counts = {key: cache.phase_qc_counts(getattr(cfg.data, PHASE_QC_FOLDS[key][0]) or ()) for key in keys}
    return {"event": event_word(cfg), **counts}


def event_word(cfg: ExperimentConfig) -> str:
    """What one cycle of the config's phase provider is called (`PhaseProvider.event_name`)."""
    if cfg.phase.provider is None:
        return "event"
    return getattr(registry.PHASE_PROVIDERS.build(cfg.phase.provider, cfg.phase.options), "event_name", "event")


def phase_qc_verdict(cfg: ExperimentConfig, phase_qc: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(refusals, flags) of ``phase_qc`` (`cache_phase_qc`) under ``data.phase_qc``, with the
    share p = passed / windows: refused where p < ``refuse_below`` in the training windows,
    flagged where p < ``flag_below`` in the training or the evaluation windows."""
    thresholds, refusals, flags = cfg.data.phase_qc, [], []
    for key, (_, word) in PHASE_QC_FOLDS.items():
        counts = phase_qc.get(key)
        if not counts or not counts["windows"]:
            continue
        share = counts["passed"] / counts["windows"]
        found = _not_found(phase_qc["event"], counts, word)
        if key == "train" and share < thresholds.refuse_below:
            refusals.append(
                f"data.phase_qc.refuse_below: {found}, below data.phase_qc.refuse_below = {thresholds.refuse_below:g}: "
                f"most windows would train without a {phase_qc['event']} phase. Check with `cyclejepa phase RECORD` that the phase "
                "provider finds its cycles on the channel it reads (phase.provider, phase.options.lead), or lower "
                "data.phase_qc.refuse_below to train anyway"
            )
        if share < thresholds.flag_below:
            flags.append(f"{found}, below data.phase_qc.flag_below = {thresholds.flag_below:g}")
    return refusals, flags


def _not_found(event: str, counts: dict[str, Any], word: str) -> str:
    """E.g. "no pulse found in 20 of 30 training windows (33 % pass phase QC; failed for: reason ×n, …)"."""
    failed, reasons = counts["windows"] - counts["passed"], counts.get("reasons") or {}
    why = "; failed for: " + ", ".join(f"{reason} ×{n}" for reason, n in list(reasons.items())[:3]) if reasons else ""
    share = 100 * counts["passed"] / counts["windows"]
    return f"no {event} found in {failed} of {counts['windows']} {word} windows ({share:.0f} % pass phase QC{why})"
