"""Throughput benchmark: statistics on a fake clock, the instrumented step, a quick tiny run."""

import ast
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from cyclejepa.bench.throughput import (
    SECTIONS,
    SPLIT_GROUPS,
    compare_traces,
    instrumented_step,
    product_step,
    synthetic_training_arrays,
)
from cyclejepa.bench.timing import PhaseTimer, summarise, time_calls, time_window
from cyclejepa.config import parse_config
from cyclejepa.bench.commands import benchmark_throughput
from cyclejepa.pipeline.pretraining import training_spec
from cyclejepa.training import Trainer
from test_training import TINY as TRAINING_TINY

TINY = {**TRAINING_TINY, "training": {"batch_size": 4}}  # the training tests' tiny model, default steps


class FakeClock:
    """A clock that only moves when a fake step says how long it took."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def steps(self, durations):
        """A step function whose i-th call lasts durations[i] seconds."""
        remaining = iter(durations)

        def step():
            self.now += next(remaining)

        return step


def test_time_calls_excludes_warmup_and_takes_the_median():
    clock = FakeClock()
    step = clock.steps([100.0, 50.0] + [0.3, 0.1, 0.2, 0.5, 0.4])
    durations = time_calls(step, warmup=2, repeats=5, clock=clock)
    assert durations == pytest.approx([0.3, 0.1, 0.2, 0.5, 0.4])
    stats = summarise(durations)
    assert stats["n"] == 5
    assert stats["median_ms"] == pytest.approx(300.0)
    assert stats["mean_ms"] == pytest.approx(300.0)
    assert stats["min_ms"] == pytest.approx(100.0) and stats["max_ms"] == pytest.approx(500.0)
    assert stats["p10_ms"] == pytest.approx(np.percentile([0.1, 0.2, 0.3, 0.4, 0.5], 10) * 1e3)
    assert stats["p90_ms"] == pytest.approx(np.percentile([0.1, 0.2, 0.3, 0.4, 0.5], 90) * 1e3)


def test_timers_synchronise_before_reading_the_clock():
    clock, queued = FakeClock(), []

    def step():  # 1 s on the host, then 0.5 s of device work left queued
        clock.now += 1.0
        queued.append(0.5)

    def sync():  # waits for the queued device work
        clock.now += sum(queued)
        queued.clear()

    queued.append(7.0)  # work queued before timing starts is not counted
    assert time_calls(step, warmup=1, repeats=2, sync=sync, clock=clock) == pytest.approx([1.5, 1.5])
    queued.append(7.0)
    assert time_window(step, 4, sync=sync, clock=clock) == pytest.approx(4 * 1.0 + 4 * 0.5)
    assert not queued


def test_phase_split_fractions_sum_to_one_and_groups_add_up():
    clock = FakeClock()
    timer = PhaseTimer(clock=clock)
    durations = {"batch": [1.0, 3.0], "augment + cutoffs": [2.0, 2.0], "backward": [4.0, 8.0]}
    for step in range(2):
        for name, values in durations.items():
            with timer.phase(name):
                clock.now += values[step]
    split = timer.split({"data": ("batch", "augment + cutoffs"), "rest": ("backward",)})
    assert split["steps"] == 2 and split["step_mean_ms"] == pytest.approx(10_000.0)
    fractions = {name: phase["fraction"] for name, phase in split["phases"].items()}
    assert sum(fractions.values()) == pytest.approx(1.0)
    assert fractions == pytest.approx({"batch": 0.2, "augment + cutoffs": 0.2, "backward": 0.6})
    assert split["phases"]["batch"]["median_ms"] == pytest.approx(2000.0)
    assert split["groups"]["data"] == pytest.approx({"mean_ms": 4000.0, "fraction": 0.4})
    with pytest.raises(KeyError, match="optimiser"):
        timer.split({"x": ("optimiser",)})


def test_compare_traces_reports_the_worst_relative_difference():
    reference = [[10.0, 1.0, 50.0, 0.5, 3.0, 1e-4], [9.0, 0.8, 40.0, 0.4, 2.0, 2e-4]]
    trace = [[10.1, 1.0, 50.0, 0.5, 0.0, 0.0], [9.0, 0.8, 40.0, 0.5, 9.0, 9.0]]
    result = compare_traces(trace, reference, rtol=0.05)
    assert result["terms"]["loss"] == pytest.approx({"max_rel_diff": 0.01, "at_step": 1})
    assert result["terms"]["transport"] == pytest.approx({"max_rel_diff": 0.25, "at_step": 2})
    assert not result["passed"]  # transport is 25 % off; grad_norm and lr are not compared
    assert compare_traces(trace[:1], reference, rtol=0.05)["passed"]


@pytest.mark.parametrize(
    "timed_step, phases",
    [
        (instrumented_step, sorted(set().union(*SPLIT_GROUPS.values()))),  # the eager variants' split
        (product_step, sorted(["inputs", "objective forward", "backward", "clip + optimiser"])),  # compiled ones'
    ],
)
def test_a_timed_step_computes_what_train_step_computes(tmp_path, timed_step, phases):
    cfg = parse_config(TINY)
    signals, token_phases = synthetic_training_arrays(channels=12, tokens=125, records=16)
    plain = Trainer(training_spec(cfg, tmp_path / "plain", seed=3, transport_weight=1.0), signals, token_phases, model_fs=100.0)
    timed = Trainer(training_spec(cfg, tmp_path / "timed", seed=3, transport_weight=1.0), signals, token_phases, model_fs=100.0)
    timer = PhaseTimer()
    for _ in range(3):
        expected = plain.train_step()
        terms = timed_step(timed, timer)
        got = torch.stack([terms[name].detach() for name in ("loss", "prediction", "regulariser", "transport")])
        torch.testing.assert_close(got, expected[:4], rtol=1e-6, atol=1e-6)
    assert timed.step == plain.step == 3
    for p, q in zip(plain.objective.parameters(), timed.objective.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-6)
    assert sorted(timer.durations) == phases and all(len(times) == 3 for times in timer.durations.values())


def test_the_benchmark_trains_what_the_pipeline_trains_but_keeps_no_identity(tmp_path):
    """`timed_training_spec` (the benchmark's trainers) holds every section `pipeline.training_spec`
    gives the trainer, and no run identity."""
    from dataclasses import fields

    from cyclejepa.bench.commands import timed_training_spec

    cfg = parse_config({**TINY, "augmentations": [{"name": "drift", "p": 0.3}]})
    bench = timed_training_spec(cfg, tmp_path, seed=2, transport_weight=0.5)
    product = training_spec(cfg, tmp_path, seed=2, transport_weight=0.5)
    for field in fields(product):
        if field.name not in ("identity", "run_hash"):
            assert getattr(bench, field.name) == getattr(product, field.name), field.name
    assert (bench.identity, bench.run_hash) == ({}, "") and product.identity


def test_each_variant_trains_the_config_with_only_its_device_precision_and_compile_set():
    """`throughput_spec`: every trainer is the config's, with the variant's ``training.device``,
    ``precision`` and ``compile`` (the objective's precision too); the ensemble's is eager float32 on the CPU."""
    from cyclejepa.bench.throughput import VARIANTS
    from cyclejepa.jsonio import short_hash
    from cyclejepa.bench.commands import throughput_spec
    from cyclejepa.training.spec import ObjectiveSpec

    raw = {**TINY, "augmentations": [{"name": "drift", "p": 0.3}], "training": {"batch_size": 4, "steps": 7, "precision": "bf16"}}
    cfg = parse_config(raw)
    spec = throughput_spec(raw, torch.device("cpu"))
    assert (spec.batch_size, spec.channels, spec.tokens) == (4, cfg.model.encoder.leads, 1000 // cfg.model.encoder.patch)
    assert spec.config_hash == short_hash(cfg.model_dump(mode="json")) and spec.config_overrides == raw
    settings = {name: (variant.precision, variant.compile_mode or False) for name, variant in VARIANTS.items()}
    trainers = {**spec.trainers, "ensemble": spec.ensemble}
    assert set(trainers) == {*VARIANTS, "ensemble"}
    for name, trainer in trainers.items():
        precision, compile_mode = settings.get(name, ("float32", False))
        assert trainer.training.model_dump() == {
            **cfg.training.model_dump(),
            "device": "cpu",
            "precision": precision,
            "compile": compile_mode,
        }, name
        assert trainer.objective == ObjectiveSpec(cfg.model, cfg.symmetry, cfg.objectives, precision), name
        assert (trainer.optimiser, trainer.augmentations) == (cfg.optimiser, tuple(cfg.augmentations)), name
        assert (trainer.seed, trainer.transport_weight, trainer.identity, trainer.run_hash) == (0, 1.0, {}, ""), name


def test_the_command_line_refuses_a_missing_config_or_an_unknown_section_before_any_work(tmp_path, capsys):
    from cyclejepa.bench.commands import throughput_main

    out = tmp_path / "throughput.json"
    with pytest.raises(SystemExit) as stopped:
        throughput_main(["--config", str(tmp_path / "absent.yaml"), "--device", "cpu", "--out", str(out)])
    assert stopped.value.code == 2 and "absent.yaml" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        throughput_main(["--sections", "sigreg,nope", "--device", "cpu", "--out", str(out)])
    assert stopped.value.code == 1 and "unknown section(s) ['nope']" in capsys.readouterr().err
    assert not out.exists()


def test_synthetic_phases_have_undefined_ends_and_advance_per_token():
    _, phases = synthetic_training_arrays(channels=2, tokens=125, records=64, seed=1)
    defined = np.isfinite(phases)
    assert defined[:, :12].sum() < defined[:, :12].size and not defined[:, -1].any()
    assert defined[:, 12:113].all()
    steps = np.diff(np.unwrap(phases[:, 12:113], axis=1), axis=1)
    assert np.all((steps > 2 * np.pi / 12.5 - 1e-5) & (steps < 2 * np.pi / 10 + 1e-5))


@pytest.mark.slow
def test_quick_tiny_run_writes_every_section(tmp_path):
    out = tmp_path / "throughput.json"
    report = benchmark_throughput(
        "cpu",
        quick=True,
        out=out,
        config=TINY,
        prepare_records=20,
        sections=SECTIONS,
        log=lambda message: None,
    )
    written = json.loads(out.read_text())
    assert written["schema"] == report["schema"]
    for key in ("machine", "versions", "settings", *SECTIONS):
        assert key in written, key
    assert {"cpu_model", "cpu_count", "memory_bytes"} <= set(written["machine"])
    assert {"python", "torch", "numpy", "cyclejepa"} <= set(written["versions"])
    for name in ("transport", "sigreg", "inference", "prepare", "ensemble"):
        assert written[name]["status"] == "ok", written[name]
    (training,) = written["training"]
    assert training["status"] == "ok" and training["finite"]
    assert training["steps_per_s"] == pytest.approx(1e3 / training["step"]["median_ms"])
    assert sum(g["fraction"] for g in training["split"]["groups"].values()) == pytest.approx(1.0)
    assert training["peak_memory"]["bytes"] > 0
    transport = written["transport"]["rows"]
    assert {(r["tokens"], r["method"]) for r in transport} == {
        (t, m) for t in (125, 1000) for m in ("O(T) identity", "all pairs")
    }
    assert all(r["abs_difference"] < 1e-4 for r in transport)
    assert written["sigreg"]["N"] == 4 * 125 and written["sigreg"]["M"] == 16
    assert written["inference"]["rows"][0]["records_per_s"] > 0
    assert written["prepare"]["rows"][0]["kept"] == 20
    ensemble = written["ensemble"]["rows"]
    assert [r["runs"] for r in ensemble] == [1, 2, 4]
    assert all(r[way]["steps_per_s"] > 0 for r in ensemble for way in ("in turn", "stacked"))
    assert all(
        r["stacked / in turn"] == pytest.approx(r["stacked"]["steps_per_s"] / r["in turn"]["steps_per_s"]) for r in ensemble
    )
    equality = written["equality"]["variants"]["float32"]
    assert equality["passed"] and equality["terms"]["loss"]["max_rel_diff"] == 0.0  # CPU: same path
    markdown = out.with_suffix(".md").read_text()
    assert "| float32 |" in markdown and "## Transport loss" in markdown and "## Stacked ensemble" in markdown


@pytest.mark.slow
def test_experiment_benchmark_times_every_stage_and_writes_the_report(tmp_path):
    import yaml

    from cyclejepa.bench.experiment import EXPERIMENT_STAGES
    from cyclejepa.bench.commands import time_experiment

    config = tmp_path / "tiny.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                **{k: v for k, v in TRAINING_TINY.items() if k != "training"},
                "data": {"train_folds": [1, 2, 3, 4, 5, 6, 7, 8], "eval_folds": [9]},
                "training": {"steps": 2, "batch_size": 4, "checkpoint_every": 2, "precision": "float32"},
                "runs": {"seeds": [0]},
                "evaluation": {
                    "steps": [2],
                    "bootstrap": 10,
                    "anomaly_records": 4,
                    "severities": [0.0, 2.0],
                    "umap": False,
                    "eligible_min_positives": 1,
                },
            }
        )
    )
    result = time_experiment(config, tmp_path / "out", records=60, workers=1, log=lambda _: None)
    assert set(EXPERIMENT_STAGES) <= set(result["stages"])
    assert result["experiment_s"] == pytest.approx(sum(result["stages"][s] for s in EXPERIMENT_STAGES))
    saved = json.loads((tmp_path / "out" / "stages.json").read_text())
    assert saved["stages"] == result["stages"] and saved["runs"] == ["winder-seed0", "control-seed0"]
    assert (tmp_path / "out" / "run" / "report" / "report.md").exists()
    assert "experiment (prepare → report)" in (tmp_path / "out" / "stages.md").read_text()


def test_host_syncs_count_only_the_sync_warnings(monkeypatch):
    """Setting the debug mode warns once that it is a prototype (seen on CUDA, torch 2.11): that
    notice is no synchronisation; the blocking operations' warnings are counted per step."""
    from cyclejepa.bench.throughput.training import find_host_syncs

    modes = []
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: modes.append(mode))

    def step():
        warnings.warn("Synchronization debug mode is a prototype feature and does not yet detect all", stacklevel=1)
        for _ in range(2):
            warnings.warn("called a synchronizing CUDA operation", stacklevel=1)

    found = find_host_syncs(step, steps=3)
    assert modes == ["warn", 0]
    assert [entry["per_step"] for entry in found] == [2.0]
    assert found[0]["message"] == "called a synchronizing CUDA operation"


def test_the_all_pairs_reference_is_the_transport_loss_pair_by_pair():
    """`all_pairs_transport_loss` (the throughput benchmark's and benchmarks/transport_speed.py's
    reference, in the package so an installed wheel has it) against a float64 loop over every
    ordered pair of valid tokens with the explicit ρ(φ_t' − φ_t), and against the O(T) identity."""
    from cyclejepa.bench.throughput.parts import all_pairs_transport_loss, synthetic_batch
    from cyclejepa.objectives import transport_loss
    from cyclejepa.symmetry import U1Symmetry

    symmetry = U1Symmetry("2x0+2x1+1x3").double()
    z, phi = synthetic_batch(3, 14, symmetry, "cpu", seed=2)
    z, phi = z.double(), phi.double()
    phi[2, 1:] = float("nan")  # one valid token: no pair, left out of the mean
    per_record = []
    for record in range(2):
        unit = torch.nn.functional.normalize(z[record], dim=-1)
        valid = [t for t in range(14) if torch.isfinite(phi[record, t])]
        cosines = [
            float(symmetry.matrix(phi[record, u] - phi[record, t]) @ unit[t] @ unit[u]) for t in valid for u in valid if t != u
        ]
        per_record.append(1 - np.mean(cosines))
    expected = np.mean(per_record)
    assert float(all_pairs_transport_loss(z, phi, symmetry, records_per_chunk=2)) == pytest.approx(expected, rel=1e-10)
    assert float(transport_loss(z, phi, symmetry)) == pytest.approx(expected, rel=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["throughput", "allocations", "ptbxl"])
def test_each_benchmark_passes_its_own_help_in_a_fresh_interpreter(name):
    """`cyclejepa benchmark NAME --help` (`cyclejepa.cli.BENCHMARKS`, each a `cyclejepa.bench.commands`
    function) from a fresh process: the command's own options under its own name."""
    import subprocess
    import sys

    from cyclejepa.cli import BENCHMARKS

    assert set(BENCHMARKS) == {"throughput", "allocations", "ptbxl"}
    done = subprocess.run([sys.executable, "-m", "cyclejepa", "benchmark", name, "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: cyclejepa benchmark {name} ")
    assert {"throughput": "--quick", "allocations": "--seeds", "ptbxl": "--protocols"}[name] in done.stdout


BENCHMARK_SCRIPTS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


def test_a_benchmarks_script_runs_its_help_in_a_fresh_interpreter():
    """A script of ``benchmarks/`` (pulse_validation.py: its tables through `cyclejepa.bench.report`)
    answers ``--help`` from a fresh process, as benchmarks/README.md says each does."""
    import subprocess
    import sys

    script = next(path for path in BENCHMARK_SCRIPTS if path.name == "pulse_validation.py")
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: pulse_validation.py") and "--json" in done.stdout


@pytest.mark.parametrize("script", BENCHMARK_SCRIPTS, ids=lambda path: path.name)
def test_each_benchmarks_script_takes_names_the_package_has(script):
    """Every ``from cyclejepa... import NAME`` of every script in ``benchmarks/`` (module level, in
    functions, and in the code a script runs in a child interpreter) names a module and an attribute
    the package has: a script's parts moved inside `cyclejepa.bench` are followed."""
    import importlib

    imported = _package_imports(ast.parse(script.read_text()))
    assert imported, f"{script.name} takes nothing from the package"
    for module, name in imported:
        assert hasattr(importlib.import_module(module), name), f"{script.name}: {module} has no {name}"


def _package_imports(tree: ast.AST) -> list[tuple[str, str]]:
    """(module, name) of each ``from cyclejepa... import name`` in ``tree`` and in the Python source
    of its string constants (the code a script hands a child interpreter)."""
    found = [(node.module, alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
             and (node.module or "").startswith("cyclejepa") for alias in node.names]  # fmt: skip
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "\nfrom cyclejepa" in node.value:
            found += _package_imports(ast.parse(node.value))
    return found


def _measured_by_hand(tree: ast.AST) -> list[str]:
    """What a script measures or writes itself instead of taking it from `cyclejepa.bench`: the
    peak RSS (``ru_maxrss``), the machine (``platform``), a Markdown table's rule, JSON written by hand."""
    found = [f"line {n.lineno}: ru_maxrss" for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "ru_maxrss"]
    found += [f"line {n.lineno}: import platform" for n in ast.walk(tree)
              if isinstance(n, ast.Import) and any(alias.name == "platform" for alias in n.names)]  # fmt: skip
    found += [f"line {n.lineno}: table rule {n.value!r}" for n in ast.walk(tree)
              if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.lstrip().startswith(("|---", "| ---"))]  # fmt: skip
    found += [f"line {n.lineno}: write_text(json.dumps(...))" for n in ast.walk(tree) if isinstance(n, ast.Call)
              and getattr(n.func, "attr", None) == "write_text" and "json.dumps" in ast.unparse(n)]  # fmt: skip
    return found


@pytest.mark.parametrize("script", BENCHMARK_SCRIPTS, ids=lambda path: path.name)
def test_each_benchmarks_script_takes_its_measuring_and_writing_from_the_package(script):
    assert _measured_by_hand(ast.parse(script.read_text())) == []


def test_a_script_measuring_by_hand_is_found():
    source = (
        "import platform\nimport resource\n\npeak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print('|---|---|')\nout.write_text(json.dumps(rows))\n"
    )
    assert _measured_by_hand(ast.parse(source)) == [
        "line 4: ru_maxrss",
        "line 1: import platform",
        "line 5: table rule '|---|---|'",
        "line 6: write_text(json.dumps(...))",
    ]
