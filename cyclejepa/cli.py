"""The ``cyclejepa`` command line (typer + rich)."""

from __future__ import annotations

import logging
import platform
import shlex
import signal
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from cyclejepa import registry
from cyclejepa.version import __version__
from cyclejepa.config import ConfigError, load_config
from cyclejepa.pipeline.checks import consistency_problems, prepared_cache_verdict, preflight
from cyclejepa.pipeline.identity import config_hash

app = typer.Typer(
    name="cyclejepa",
    help="Phase-equivariant self-supervised learning on cyclic biosignals.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# soft_wrap: one line per message, whatever its length; emoji off and text printed as `Text`
# (`_say`): a path holding ``[/]`` or ``:x:`` stays as written.
console = Console(soft_wrap=True, emoji=False)
errors = Console(stderr=True, soft_wrap=True, emoji=False)

ConfigPath = Annotated[Path, typer.Argument(help="experiment YAML file")]
Overrides = Annotated[list[str] | None, typer.Option("--set", help="override a config key: a.b.c=value (repeatable)")]
Unseal = Annotated[bool, typer.Option("--unseal", help="allow (and audit) evaluation on the sealed fold")]


def _say(*parts: str | tuple[str, str], to: Console = console) -> None:
    """Print one line, each part a plain string or (string, style), exactly as written."""
    to.print(Text.assemble(*parts), highlight=False)


def _show_version(value: bool) -> None:
    if value:
        console.print(f"cyclejepa {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_show_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    """Phase-equivariant self-supervised learning on cyclic biosignals."""


def _load(config: Path, overrides: list[str] | None):
    """Load a config or exit with its problems listed."""
    try:
        return load_config(config, overrides or [])
    except ConfigError as error:
        _invalid(error)


def _invalid(error: ConfigError) -> NoReturn:
    """Print a config's problems and exit with status 2."""
    _say(("invalid config", "red"), f" {error}", to=errors)
    raise typer.Exit(code=2) from None


def _preflight(cfg) -> None:
    """Run `pipeline.preflight` or exit with its problems."""
    try:
        preflight(cfg)
    except ConfigError as error:
        _invalid(error)


@app.command()
def validate(config: ConfigPath, set_: Overrides = None) -> None:
    """Check a config: keys, types, component names and their typed options, spectrum, steps,
    folds, devices, the corpus on disk and the runs already trained in its output directory."""
    cfg = _load(config, set_)
    _preflight(cfg)
    _say(("valid", "green"), f" {config} (hash {config_hash(cfg)})")


@app.command()
def info() -> None:
    """Versions, devices and every registered component."""
    import numpy
    import torch

    versions = Table(title="cyclejepa", show_header=False)
    versions.add_row("cyclejepa", __version__)
    versions.add_row("python", platform.python_version())
    versions.add_row("torch", torch.__version__)
    versions.add_row("numpy", numpy.__version__)
    versions.add_row("devices", ", ".join(_devices()))
    console.print(versions)
    components = Table(title="registered components")
    components.add_column("registry")
    components.add_column("names")
    for kind, reg in registry.ALL_REGISTRIES.items():
        components.add_row(kind, ", ".join(reg.names()) or "-")
    console.print(components)


@app.command()
def phase(
    records: Annotated[list[Path], typer.Argument(help="WFDB record paths, without extension")],
    lead: Annotated[
        list[str] | None,
        typer.Option(help="channel name, taken whole (PLETH, finds PLETH,); repeat for several (--lead II --lead V5); 'all'"),
    ] = None,
    provider: Annotated[str | None, typer.Option(help="registered phase provider [default: from the channel names]")] = None,
    config: Annotated[Path | None, typer.Option(help="take provider and options from this config's phase section")] = None,
    format: Annotated[str, typer.Option("--format", help="jsonl or table")] = "jsonl",
    plot: Annotated[
        Path | None, typer.Option(help="write a PNG per record here: signal and events, cycle quality, rate over time")
    ] = None,
) -> None:
    """Detect cycle events and phase QC for each record: one JSON object per record.

    Each object carries the rate of every cycle (rates: time_s, per_min) and, for pulse and
    breath, each cycle's quality and good flag (cycle_quality, cycle_ok); the table shows the
    mean rate over good cycles and their share.

    Without --provider the channel names choose: ecg-rpeak ("r_peaks") on a record with an ECG
    lead, else the one provider that reads its channels (pulse, breath: "events"), else an error
    naming the choices. A record that cannot be read is reported on stderr and skipped; the exit
    status is 1 when any was. Channel names match as the library matches them (case, surrounding
    space and trailing punctuation aside); a --lead value with a comma inside (II,V5) still names
    each part.
    """
    import json

    from cyclejepa.phase.records import describe_track, track_record

    if format not in ("jsonl", "table"):
        raise typer.BadParameter(f"--format must be jsonl or table, got {format!r}")
    options = None
    if config is not None:
        if provider is not None or lead is not None:
            raise typer.BadParameter("--config sets the provider and its options: drop --provider and --lead")
        phase_section = _load(config, None).phase
        provider, options = phase_section.provider, phase_section.options.model_dump(mode="json")
    leads = _lead_names(lead)
    table = Table("record", "fs", "events", "rate/min", "good", "phase yield", "qc")
    table.columns[0].overflow = "fold"  # whole names: records often share a long prefix
    table.columns[2].min_width = 15  # a coordinate's name and count ("respiratory 61") on one line
    names, failed = _short_names(records), 0
    for record, name in zip(records, names, strict=True):
        try:
            phased = track_record(record, lead=leads, provider=provider, options=options)
            result = describe_track(phased)
        except (OSError, ValueError, KeyError) as error:
            _say((str(record), "red"), f": {error}", to=errors)
            failed += 1
            continue
        if plot is not None:
            from cyclejepa.phase.plot import plot_record

            plot_record(phased, plot)
        if format == "jsonl":
            print(json.dumps(result))
        else:
            verdict = "ok" if result["qc"]["ok"] else ", ".join(result["qc"]["reasons"])
            rate, good = _rates_and_good_cycles(phased.track)
            table.add_row(name, str(result["fs"]), _event_count(result), rate, good, f"{result['phase_yield']:.3f}", verdict)
    if format == "table" and table.row_count:
        console.print(table)
    if failed:
        _say(f"{failed} of {len(records)} records could not be read", to=errors)
        raise typer.Exit(code=1)


def _lead_names(values: list[str] | None) -> str | list[str] | None:
    """The ``--lead`` values, each a name taken whole (``PLETH,``) unless a comma lies inside
    (``II,V5``: each part); one name as a string, several as a list."""
    from cyclejepa.data.channels import channel_key

    names = []
    for value in values or []:
        inner = "," in channel_key(value)
        names += [part for part in value.split(",") if part.strip()] if inner else [value]
    return None if not names else names[0] if len(names) == 1 else names


def _event_count(result: dict) -> str:
    """Event count of a `phase_record` result; per coordinate for several."""
    if "coordinates" in result:
        return ", ".join(f"{name} {len(c['events'])}" for name, c in result["coordinates"].items())
    return str(len(result["r_peaks"])) if "r_peaks" in result else f"{len(result['events'])} ({result['event']})"


def _rates_and_good_cycles(track) -> tuple[str, str]:
    """Mean rate per minute over the good cycles ("n/a" for a coordinate failing QC) and the
    share of good cycles ("-" where not assessed), per coordinate."""
    import math

    def rate(t) -> str:
        if t.qc is not None and not t.qc.ok:
            return "n/a"
        return "-" if math.isnan(t.mean_rate()) else f"{t.mean_rate():.1f}"

    rates = ", ".join(rate(t) for t in track.tracks)
    good = ", ".join("-" if t.cycle_ok is None or not len(t.cycle_ok) else f"{t.cycle_ok.mean():.0%}" for t in track.tracks)
    return rates, good


def _short_names(records: list[Path]) -> list[str]:
    """Record paths without the folder they all share (whole paths for a single record)."""
    if len(records) < 2:
        return [str(r) for r in records]
    import os

    shared = os.path.commonpath([os.path.abspath(r.parent) for r in records])
    return [os.path.relpath(os.path.abspath(r), shared) for r in records]


@app.command()
def synth(
    out: Annotated[Path, typer.Option(help="corpus folder (PTB-XL 1.0.3 layout)")],
    records: Annotated[int, typer.Option(min=1, max=99_999, help="number of records (at most 99,999)")] = 2000,
    seed: Annotated[int, typer.Option(min=0, max=2**32 - 1, help="random seed (0 to 2³² - 1)")] = 0,
    workers: Annotated[int, typer.Option(min=1, max=256, help="worker processes (at most 256)")] = 1,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="replace a corpus already in --out")] = False,
) -> None:
    """Write a synthetic corpus in the exact PTB-XL layout, with ground-truth R-peaks."""
    from cyclejepa.data.synthetic import DATABASE_CSV, write_synthetic_corpus

    if (out / DATABASE_CSV).exists() and not overwrite:
        _say(
            ("error", "red"),
            f" {out} already holds a corpus ({DATABASE_CSV}); pass --overwrite to replace it, or choose another --out",
            to=errors,
        )
        raise typer.Exit(code=1)
    with _user_errors():
        path = write_synthetic_corpus(out, records, seed=seed, workers=workers, overwrite=overwrite)
    _say(f"wrote {records} synthetic records to {path}")


OverwriteCache = Annotated[
    bool, typer.Option("--overwrite-cache", help="rebuild a shared data.cache_dir that another experiment prepared")
]
Shard = Annotated[
    str | None,
    typer.Option("--shard", metavar="I/N", help="prepare only share I of N of the records (I = 0 … N-1), then --merge"),
]
Merge = Annotated[bool, typer.Option("--merge", help="write the cache of the shards --shard I/N prepared")]


@app.command()
def prepare(
    config: ConfigPath, set_: Overrides = None, overwrite_cache: OverwriteCache = False, shard: Shard = None, merge: Merge = False
) -> None:
    """Build the preprocessing cache of a config's corpus (idempotent); on N machines, each runs
    --shard I/N, then one runs --merge."""
    from cyclejepa.data.cache.shards import parse_shard
    from cyclejepa.lock import output_lock
    from cyclejepa.pipeline.preparation import prepare as prepare_stage, prepare_shard_stage

    if shard is not None and merge:
        raise typer.BadParameter("--shard prepares one share and --merge writes the cache of all of them; give one")
    try:
        share = parse_shard(shard) if shard is not None else None
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None
    cfg = _load(config, set_)
    problems = consistency_problems(cfg)  # the config against its dataset's facts, before the corpus is touched
    if problems:
        _invalid(ConfigError(problems, source=str(config)))
    again = ["prepare", str(config), *_set_words(set_), *(["--shard", shard] if shard else []), *(["--merge"] if merge else [])]
    if share is not None:  # shards run side by side: each holds its own lock, not the experiment's
        with _user_errors(again=again):
            info = prepare_shard_stage(cfg, *share)
        counts = info["counts"]
        _say(
            f"shard {share[0]}/{share[1]}: {counts['records_kept']} of {counts['records']} records kept as "
            f"{counts['windows']} windows, {counts['rejected']} rejected; merge with `cyclejepa prepare "
            f"{config} --merge` once every shard is done"
        )
        return
    with _user_errors(again=again), output_lock(cfg.output_dir):
        cache = prepare_stage(cfg, overwrite_cache=overwrite_cache, merge=merge)
    counts = cache.manifest["counts"]
    windows = f" as {counts['kept']} windows" if counts["kept"] != counts["records_kept"] else ""
    _say(f"cache {cache.path}: {counts['records_kept']} records kept{windows}, {counts['rejected']} rejected")
    problems, flags = prepared_cache_verdict(cfg, cache)  # what `run` and `train` will refuse, and flag
    flagged = [] if problems else [f"phase QC: {flag}; the report will mark no figure best" for flag in flags]
    for problem in problems + flagged:
        _say(("warning", "yellow"), f" {problem}", to=errors)


@app.command()
def download(
    dataset: Annotated[str, typer.Argument(help="registered dataset name, e.g. ptbxl")],
    dest: Annotated[Path, typer.Option(help="destination folder")],
) -> None:
    """Download a dataset from its source (needs network access; PTB-XL: PhysioNet)."""
    if dataset not in registry.DATASETS:
        raise typer.BadParameter(registry.unknown_name_message("dataset", dataset, registry.DATASETS.names()))
    with _user_errors():
        path = registry.DATASETS.get(dataset).download(dest)
    _say(f"{dataset} is in {path}")


@app.command()
def train(
    config: ConfigPath,
    arm: Annotated[str | None, typer.Option(help="arm name (default: the first)")] = None,
    seed: Annotated[int | None, typer.Option(help="seed (default: the first)")] = None,
    set_: Overrides = None,
) -> None:
    """Pre-train one arm × seed; under torchrun, data-parallel over the processes."""
    from cyclejepa.lock import output_lock
    from cyclejepa.outputs import RunFolder
    from cyclejepa.pipeline.plans import run_plan
    from cyclejepa.pipeline.preparation import configured_cache, prepare as prepare_stage
    from cyclejepa.pipeline.pretraining import pretrain
    from cyclejepa.training import process_group

    cfg = _load(config, set_)
    _preflight(cfg)
    arms = {a.name: a for a in cfg.runs.arms}
    if arm is not None and arm not in arms:
        raise typer.BadParameter(registry.unknown_name_message("arm", arm, list(arms)))
    plan = run_plan(cfg, arms[arm] if arm else cfg.runs.arms[0], cfg.runs.seeds[0] if seed is None else seed)
    again = ["train", str(config), "--arm", plan.arm.name, "--seed", str(plan.seed), *_set_words(set_)]
    with (
        _user_errors(again),
        process_group(cfg.training.device) as dist,
        output_lock(plan.directory) if dist.is_main else nullcontext(),
    ):
        if dist.is_main:
            prepare_stage(cfg)
        dist.barrier()  # the other ranks read the cache rank 0 prepared
        cache = configured_cache(cfg)
        if problems := prepared_cache_verdict(cfg, cache, ("train",))[0]:
            raise ConfigError(problems, source="prepare")
        directory = pretrain(cfg, cache, plan, progress=dist.is_main, dist=dist)
    if dist.is_main:
        _say(f"{plan.name}: trained, checkpoints in {RunFolder(directory).checkpoints}")


@app.command()
def run(
    config: ConfigPath,
    set_: Overrides = None,
    unseal: Unseal = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the plan and exit")] = False,
    overwrite_cache: OverwriteCache = False,
) -> None:
    """Prepare → pre-train every arm × seed → evaluate the grid → report, in one output folder."""
    from cyclejepa.pipeline.run import describe_plan, run_experiment

    cfg, again = _load_unsealed("run", config, set_, unseal)
    with _user_errors(again):
        if dry_run:
            for line in describe_plan(cfg):
                console.print(line, highlight=False, markup=False)
            return
        report = run_experiment(cfg, overwrite_cache=overwrite_cache)
    _say(("report", "green"), f" {report}")


def _load_unsealed(command: str, config: Path, set_: list[str] | None, unseal: bool):
    """The config of `run` or `evaluate` (``--unseal`` as ``evaluation.unseal=true``) and the words that resume it."""
    cfg = _load(config, (set_ or []) + (["evaluation.unseal=true"] if unseal else []))
    return cfg, [command, str(config), *_set_words(set_), *(["--unseal"] if unseal else [])]


BENCHMARKS = {
    "throughput": "cyclejepa.bench.commands:throughput_main",
    "allocations": "cyclejepa.bench.commands:allocations_main",
    "ptbxl": "cyclejepa.bench.commands:ptbxl_main",
}
"""Each benchmark's command line, ``module:function`` taking the words after its name."""


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True}, add_help_option=False)
def benchmark(
    ctx: typer.Context,
    name: Annotated[
        str | None, typer.Argument(help="throughput, allocations or ptbxl; options after it go to the benchmark")
    ] = None,
) -> None:
    """Run a benchmark: `throughput` (speed and memory of the trainer's parts), `allocations`, or
    `ptbxl` (the six PTB-XL statement tasks: linear probe, fine-tuning, from scratch).

    `cyclejepa benchmark NAME --help` lists the options of benchmark NAME.
    """
    import importlib

    if name in (None, "--help", "-h"):
        console.print(ctx.get_help(), highlight=False, markup=False)
        raise typer.Exit(code=0 if name else 2)
    if name not in BENCHMARKS:
        raise typer.BadParameter(registry.unknown_name_message("benchmark", name, list(BENCHMARKS)))
    module, function = BENCHMARKS[name].split(":")
    getattr(importlib.import_module(module), function)(ctx.args)


@app.command()
def evaluate(config: ConfigPath, set_: Overrides = None, unseal: Unseal = False) -> None:
    """Evaluate the trained checkpoints of a config and write its report (no training)."""
    from cyclejepa.lock import output_lock
    from cyclejepa.pipeline.evaluation import evaluate_experiment

    cfg, again = _load_unsealed("evaluate", config, set_, unseal)
    with _user_errors(again), output_lock(cfg.output_dir):
        path = evaluate_experiment(cfg)
    _say(("report", "green"), f" {path}")


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(help="output directory of `cyclejepa run`")]) -> None:
    """Rebuild report.md and report.json of a run directory from its saved results."""
    from cyclejepa.lock import output_lock
    from cyclejepa.pipeline.reporting import report_experiment

    with _user_errors(again=["report", str(run_dir)]), output_lock(run_dir):
        path = report_experiment(run_dir)
    _say(("report", "green"), f" {path}")


Checkpoint = Annotated[int | None, typer.Option(help="checkpoint step (default: evaluation.headline_step, else the latest)")]
RunArm = Annotated[str | None, typer.Option(help="arm of the run (default: the first)")]
RunSeed = Annotated[int | None, typer.Option(help="seed of the run (default: the first)")]


@app.command()
def embed(
    run_dir: Annotated[
        Path, typer.Argument(help="output directory of `cyclejepa run`, one run folder in it, or a package of `cyclejepa export`")
    ],
    out: Annotated[Path, typer.Option(help="output file: .npz or .parquet; with --corpus, a folder of parquet shards")],
    records: Annotated[
        list[Path] | None,
        typer.Argument(help="record files as the run's dataset reads them (WFDB: paths without extension)"),
    ] = None,
    corpus: Annotated[
        bool, typer.Option("--corpus", help="embed every record of the run's corpus (or of --root) into parquet shards")
    ] = False,
    root: Annotated[Path | None, typer.Option(help="with --corpus: a folder of records the run's dataset reads")] = None,
    records_per_shard: Annotated[int, typer.Option(min=1, help="with --corpus: records per parquet shard")] = 1000,
    workers: Annotated[int, typer.Option(min=1, help="with --corpus: processes embedding shards side by side (CPU)")] = 1,
    checkpoint: Checkpoint = None,
    arm: RunArm = None,
    seed: RunSeed = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N")] = "auto",
    batch_size: Annotated[int, typer.Option(min=1, help="records read and windows embedded at a time")] = 256,
    tokens: Annotated[bool, typer.Option(help="keep the token embeddings (else record embeddings, phases, QC)")] = True,
) -> None:
    """Embed record files with a trained run or package (read by its dataset): record and token embeddings, token phases, events, QC."""
    from cyclejepa.embed import OUT_OF_RANGE_DECADES, check_output
    from cyclejepa.outputs import OutputFolder
    from cyclejepa.pipeline.embedding import load_encoder

    with _user_errors():
        _check_embed_arguments(records, out, corpus, root)
        if not corpus:
            check_output(out)
        if (run_dir / "config.json").is_file() and not OutputFolder(run_dir).config.is_file():
            from cyclejepa.export import load_pretrained

            chosen = [
                name for name, value in (("--checkpoint", checkpoint), ("--arm", arm), ("--seed", seed)) if value is not None
            ]
            if chosen:
                raise ValueError(f"{run_dir} is a package of one checkpoint: {', '.join(chosen)} do not apply")
            encoder = load_pretrained(run_dir, device)
        else:
            encoder = load_encoder(run_dir, checkpoint, device, arm=arm, seed=seed)
        if corpus:
            _embed_corpus(encoder, out, root, records_per_shard, workers, batch_size, tokens)
            return
        result = encoder.embed_files(records or [], batch_size=batch_size, progress=True, keep_tokens=tokens)
        result.save(out)
    far = int((result.input_distance > OUT_OF_RANGE_DECADES).sum())
    _embedded(
        result.failed,
        f"{out}: {len(result)} records embedded ({int(result.qc_ok.sum())} pass phase QC, {far} out of the "
        f"run's input range), {len(result.failed)} failed; {encoder}",
    )


def _embedded(failed: dict, summary: str) -> None:
    """A line per failed record, then ``summary``; exit 1 when any failed."""
    for record, reason in failed.items():
        _say((str(record), "red"), f": {reason}", to=errors)
    _say(summary)
    if failed:
        raise typer.Exit(code=1)


def _check_embed_arguments(records: list[Path] | None, out: Path, corpus: bool, root: Path | None) -> None:
    """A ValueError for a combination of `embed`'s arguments that cannot work."""
    if corpus and records:
        raise ValueError("give record files or --corpus, not both")
    if not corpus and not records:
        raise ValueError("give record files to embed, or --corpus for every record of the run's corpus")
    if root is not None and not corpus:
        raise ValueError("--root names the corpus folder of --corpus; record files are given as arguments")
    if corpus and out.suffix in (".npz", ".parquet"):
        raise ValueError(f"--corpus writes a folder of parquet shards: give --out a folder, not {out.name}")


def _embed_corpus(encoder, out: Path, root: Path | None, per_shard: int, workers: int, batch_size: int, tokens: bool) -> None:
    """`embed --corpus`: `embed_corpus`, then its failures and summary."""
    from cyclejepa.pipeline.embedding import embed_corpus

    done = embed_corpus(
        encoder, out, root, records_per_shard=per_shard, workers=workers, batch_size=batch_size, keep_tokens=tokens
    )
    resumed = f" ({done.resumed} already there)" if done.resumed else ""
    _embedded(
        done.failed,
        f"{out}: {done.embedded} records embedded in {len(done.shards)} shards{resumed}, {len(done.failed)} failed; {encoder}",
    )


@app.command()
def export(
    run_dir: Annotated[Path, typer.Argument(help="output directory of `cyclejepa run`, or one run folder in it")],
    out: Annotated[Path, typer.Option(help="folder to write the package to")],
    checkpoint: Checkpoint = None,
    arm: RunArm = None,
    seed: RunSeed = None,
    onnx: Annotated[bool, typer.Option("--onnx", help="add the offline and streaming ONNX graphs")] = False,
    torchscript: Annotated[bool, typer.Option("--torchscript", help="add the offline and streaming TorchScript graphs")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="replace an existing package at --out")] = False,
) -> None:
    """Export a run's encoder: model.safetensors, config.json, README.md, reference.py (cyclejepa.load_pretrained reads it)."""
    from cyclejepa.pipeline.exporting import export_run

    with _user_errors():
        try:
            path = export_run(
                run_dir, out, step=checkpoint, arm=arm, seed=seed, onnx=onnx, torchscript=torchscript, overwrite=overwrite
            )
        except ImportError as error:
            raise ValueError(str(error)) from None
    files = ", ".join(sorted(p.name for p in path.iterdir()))
    _say(f"{path}: {files}")


@contextmanager
def _user_errors(again: list[str] | None = None):
    """Print errors a user can act on without a traceback (exit 2 for a config, else 1); a stop
    (SIGTERM, SIGINT) prints the command ``again`` that resumes and exits with 128 + the signal."""
    from cyclejepa.data.datasets import DatasetNotFound, DownloadFailed
    from cyclejepa.lock import OutputLocked
    from cyclejepa.pipeline.seal import SealedFoldError
    from cyclejepa.interrupts import Stopped

    try:
        yield
    except ConfigError as error:  # `pipeline.preflight` of a stage: exit 2, as `validate` does
        _invalid(error)
    except (DatasetNotFound, DownloadFailed, SealedFoldError, OutputLocked, OSError, ValueError) as error:
        _say(("error", "red"), f" {error}", to=errors)
        raise typer.Exit(code=1) from None
    except KeyboardInterrupt as interrupt:
        stop = interrupt if isinstance(interrupt, Stopped) else Stopped(signal.SIGINT)
        resume = f"; resume with: cyclejepa {shlex.join(again)}" if again else ""
        _say((str(stop), "yellow"), resume, to=errors)
        raise typer.Exit(code=stop.exit_code) from None


def _set_words(overrides: list[str] | None) -> list[str]:
    """The ``--set`` options of ``overrides``, as words of a command line."""
    return [word for item in overrides or [] for word in ("--set", item)]


def _devices() -> list[str]:
    import torch

    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        found.append("mps")
    return found


def main() -> None:
    from cyclejepa.interrupts import raise_on_sigterm

    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the library's notices, on stderr
    raise_on_sigterm()  # a scheduler's stop unwinds like Ctrl-C: locks released, the resume command printed
    app()


if __name__ == "__main__":
    main()
