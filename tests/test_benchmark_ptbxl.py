"""`cyclejepa benchmark ptbxl` end to end on a tiny synthetic corpus: one command to every task ×
protocol JSON and the tables with the published figures, finished cells kept, and the sealed fold:
refused without --unseal, and with it never trained on."""

import ast
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from cyclejepa.bench.ptbxl import run as bench_run
from cyclejepa.bench.ptbxl.published import PUBLISHED
from cyclejepa.cli import app
from cyclejepa.data.cache import PreparedCache
from cyclejepa.training.checkpoint import save_checkpoint

from conftest import TINY_MODEL

FAST = ["--seeds", "0", "--steps", "4", "--eval-every", "2", "--batch-size", "4"]


def write_config(tmp_path, folds):
    config = {
        "name": "tiny", "output_dir": str(tmp_path / "run"),
        "data": {"root": str(tmp_path.parent / "corpus"), "dataset": "synthetic", "options": {"records": 60}, **folds},
        **TINY_MODEL,
        "training": {"steps": 2, "batch_size": 4, "checkpoint_every": 2, "device": "cpu"},
        "runs": {"seeds": [0]}, "evaluation": {"steps": [2], "bootstrap": 20, "device": "cpu"},
    }  # fmt: skip
    path = tmp_path / "tiny.yaml"
    tmp_path.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path


def invoke(*args):
    return CliRunner().invoke(app, ["benchmark", "ptbxl", *map(str, args)])


pytestmark = pytest.mark.xdist_group("benchmark_ptbxl")  # one worker builds the module's fixtures (`--dist loadgroup`)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A folder beside a shared corpus folder (written by the first benchmark that needs it)."""
    return tmp_path_factory.mktemp("bench")


@pytest.mark.slow
def test_one_command_writes_every_task_and_protocol_and_keeps_finished_cells(folder, monkeypatch):
    config = write_config(folder / "dev", {"train_folds": [1, 2, 3, 4, 5, 6, 7, 8], "eval_folds": [9]})
    result = invoke(config, "--tasks", "all", "superdiagnostic", "--fractions", "1", "0.5", *FAST)
    assert result.exit_code == 0, result.output
    out = folder / "dev" / "run" / "benchmark" / "ptbxl"
    for task in ("all", "superdiagnostic"):
        for protocol in ("linear", "random-linear", "finetune", "linear-finetune", "scratch"):
            found = json.loads((out / task / f"{protocol}.json").read_text())
            arms = {"scratch": {"scratch"}, "random-linear": {"random"}}.get(protocol, {"winder", "control"})
            assert {(e["arm"], e["fraction"]) for e in found["summary"]} == {(a, f) for a in arms for f in (1.0, 0.5)}
            for cell in found["cells"]:
                assert "scores" in cell, cell.get("error")
                assert cell["identity"]["folds"] == [[1, 2, 3, 4, 5, 6, 7], 8, [9]]
                assert cell["counts"]["fit"] == (cell["counts"]["fit_available"] if cell["fraction"] == 1 else
                                                 -(-cell["counts"]["fit_available"] // 2))  # fmt: skip
    assert not list(out.rglob("*.pt"))  # a stored cell leaves no fine-tuning checkpoint behind
    report = (out / "benchmark.md").read_text()
    assert "| random-linear | random |" in report  # the frozen random encoder's probe, beside the arms'
    random_cell = json.loads((out / "cells" / "all" / "random-linear" / "random-seed0-ft0-1.json").read_text())
    assert random_cell["identity"]["pretrained"]["step"] == 0 and "C" in random_cell
    assert "## macro-AUROC, 100% of the fit records" in report and "## Fmax, 50% of the fit records" in report
    for row in PUBLISHED:  # every published figure of these tasks, beside ours
        for task in ("all", "superdiagnostic"):
            if task in row.auroc:
                assert f"{row.auroc[task]:.3f}" in report
    assert "fit folds [1, 2, 3, 4, 5, 6, 7], early stopping on fold 8, scored folds [9]" in report
    assert "so they are context, not a comparison" in report  # fold 9 is not the published fold 10

    # other fine-tuning settings, and a checkpoint left by an interrupted run of yet others: the
    # cell is recomputed from the start
    scratch = out / "cells" / "superdiagnostic" / "scratch" / "scratch-ft0-1.json"
    save_checkpoint(
        {"identity": {"settings": {"lr": 9.0}}},
        out / "finetune" / "superdiagnostic" / "scratch" / "scratch-ft0-1" / "checkpoints" / "step_000002.pt",
    )
    changed = invoke(config, "--tasks", "superdiagnostic", "--protocols", "scratch", "--fractions", "1", *FAST, "--lr", "2e-3")
    assert changed.exit_code == 0, changed.output
    cell = json.loads(scratch.read_text())
    assert "scores" in cell and cell["identity"]["settings"]["lr"] == 2e-3 and cell["history"][0]["step"] == 2
    assert invoke(config, "--tasks", "superdiagnostic", "--protocols", "scratch", "--fractions", "1", *FAST).exit_code == 0
    assert json.loads(scratch.read_text())["identity"]["settings"]["lr"] == 1e-3

    def recompute(*args):
        raise AssertionError("a finished cell was recomputed")

    monkeypatch.setattr(bench_run.Bench, "_compute", recompute)
    again = invoke(folder / "dev" / "run", "--tasks", "all", "superdiagnostic", "--fractions", "1", "0.5", *FAST)
    assert again.exit_code == 0, again.output
    assert (out / "benchmark.md").read_text().split("Wall time")[1].split("\n", 1)[1] == report.split("Wall time")[1].split(
        "\n", 1
    )[1]


def test_fold_10_is_refused_without_unseal_and_never_trained_on_with_it(folder, monkeypatch):
    config = write_config(folder / "paper", {})  # the paper's folds: 1-9 train, 10 scores
    refused = invoke(config, "--tasks", "superdiagnostic", "--fractions", "1", *FAST)
    assert refused.exit_code == 1
    assert "data.eval_folds [10] includes the sealed fold 10 of dataset" in refused.output
    assert not (folder / "paper" / "run").exists()  # refused before any work

    trained, probed = [], []

    class Recording(bench_run.FineTuner):
        def __init__(self, classifier, signals, labels, *args, **kwargs):
            trained.append(np.array(signals))
            super().__init__(classifier, signals, labels, *args, **kwargs)

    probe = bench_run.Bench._probe
    monkeypatch.setattr(bench_run, "FineTuner", Recording)
    monkeypatch.setattr(
        bench_run.Bench, "_probe", lambda self, plan, data, rows: probed.append(rows) or probe(self, plan, data, rows)
    )
    result = invoke(config, "--unseal", "--tasks", "superdiagnostic", "--fractions", "1", *FAST)
    assert result.exit_code == 0, result.output
    run = folder / "paper" / "run"
    cache = PreparedCache(run / "cache")
    folds = cache.columns["fold"]
    flat = np.asarray(cache.signals).reshape(len(cache), -1)
    for signals in trained:  # every training record, found in the cache by its samples
        for x in signals.reshape(len(signals), -1):
            where = (flat == x).all(axis=1)
            assert where.any() and set(folds[where]) <= set(range(1, 9))
    assert len(trained) == 5 and all(set(folds[rows]) <= set(range(1, 9)) for rows in probed)
    cell = json.loads((run / "benchmark" / "ptbxl" / "superdiagnostic" / "scratch.json").read_text())["cells"][0]
    assert cell["identity"]["folds"] == [[1, 2, 3, 4, 5, 6, 7, 8], 9, [10]]
    audit = [json.loads(line) for line in (run / "unseal_audit.jsonl").read_text().splitlines()]
    assert {(e["stage"], tuple(e["folds"])) for e in audit} >= {("benchmark scoring", (10,))}
    assert "so they are context" not in (run / "benchmark" / "ptbxl" / "benchmark.md").read_text()


def test_bad_arguments_are_named_before_any_work(folder):
    config = write_config(folder / "bad", {"train_folds": [1, 2, 3, 4, 5, 6, 7, 8], "eval_folds": [9]})
    result = invoke(config, "--tasks", "rythm", "--protocols", "probe", "--fractions", "0", "--step", "1", "--seeds", "0", "0")
    assert result.exit_code == 2
    for text in ("unknown task 'rythm'", "unknown protocol 'probe'", "label fraction 0.0 is not in (0, 1]",
                 "step 1 is never checkpointed; checkpointed steps: 2", "seed 0 is given twice"):  # fmt: skip
        assert text in result.output
    for at_once in ("0", "two"):
        refused = invoke(config, "--at-once", at_once)
        assert refused.exit_code == 2 and f"{at_once!r} is neither auto nor a whole number of processes >= 1" in refused.output
    assert not (folder / "bad" / "run").exists()


def test_benchmark_split_takes_sealed_folds_and_names_a_bad_early_stopping_fold():
    class Folds:  # the one method of the cache the split reads
        fold = np.array([1, 2, 3, 3, 9, 2])

        def select(self, folds):
            return np.flatnonzero(np.isin(self.fold, folds))

    split = bench_run.benchmark_split(Folds(), [1, 2, 3], [9])
    assert (split.fit_folds, split.validation_fold, split.test_folds) == ([1, 2], 3, [9])
    assert (split.fit.tolist(), split.validation.tolist(), split.test.tolist()) == ([0, 1, 5], [2, 3], [4])
    assert bench_run.benchmark_split(Folds(), [1, 2, 3], [9], validation_fold=1).fit_folds == [2, 3]
    with pytest.raises(ValueError, match=r"early-stopping fold 9 is not one of data.train_folds \[1, 2, 3\]"):
        bench_run.benchmark_split(Folds(), [1, 2, 3], [9], validation_fold=9)
    with pytest.raises(ValueError, match=r"data.train_folds \[3\] leaves no fold to fit on"):
        bench_run.benchmark_split(Folds(), [3], [9])
    with pytest.raises(ValueError, match="no cached record in the test folds"):
        bench_run.benchmark_split(Folds(), [1, 2, 3], [10])


def test_the_benchmark_modules_read_no_experiment_config():
    """The config is read by the benchmarks' commands (`cyclejepa.bench.commands`, above the
    pipeline): the benchmarks below them take specs."""
    bench = Path(__file__).resolve().parents[1] / "cyclejepa" / "bench"
    paths = sorted(bench.rglob("*.py"))
    assert bench / "ptbxl" / "run.py" in paths and "ExperimentConfig" in (bench / "commands.py").read_text()
    paths.remove(bench / "commands.py")
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
            module = node.module if isinstance(node, ast.ImportFrom) else ""
            if (module or "").startswith("cyclejepa.pipeline") or any(n.startswith("cyclejepa.pipeline") for n in names):
                found.append(f"{path.name}:{node.lineno} imports the pipeline")
            found += [f"{path.name}:{node.lineno} {n}" for n in names if n in ("ExperimentConfig", "RunPlan")]
            if isinstance(node, ast.Name) and node.id in ("ExperimentConfig", "RunPlan"):
                found.append(f"{path.name}:{node.lineno} {node.id}")
    assert found == []


@pytest.mark.slow  # processes, signals or training: `make test-slow`
def test_cells_side_by_side_equal_cells_in_turn_and_resume_in_a_worker(folder, monkeypatch):
    """Two workers write the cells one process writes (failed ones too: ``form`` has no rankable
    class on this corpus), and a worker resumes an interrupted fine-tuning from its checkpoint."""
    import shutil

    import torch

    config = write_config(folder / "turn", {"train_folds": [1, 2, 3, 4, 5, 6, 7, 8], "eval_folds": [9]})
    args = ["--tasks", "superdiagnostic", "form", "--fractions", "1", *FAST]
    assert (in_turn := invoke(config, *args)).exit_code == 0, in_turn.output
    side = folder / "side" / "run"
    shutil.copytree(folder / "turn" / "run", side, ignore=shutil.ignore_patterns("benchmark"))
    interrupted = "superdiagnostic/finetune/winder-seed0-ft0-1"  # the first cell that trains a network

    class Interrupted(Exception):
        pass

    def save_then_stop(tuner):
        path = save(tuner)
        if tuner.directory.as_posix().endswith(interrupted):
            raise Interrupted
        return path

    save = bench_run.FineTuner.save
    monkeypatch.setattr(bench_run.FineTuner, "save", save_then_stop)
    assert isinstance(invoke(side, *args).exception, Interrupted)
    monkeypatch.undo()
    checkpoint = next((side / "benchmark" / "ptbxl" / "finetune" / interrupted / "checkpoints").glob("step_*.pt"))
    state = torch.load(checkpoint, weights_only=True)
    assert state["step"] == 2
    state["history"][0]["train_loss"] = -1.0  # a mark that only a resumed fine-tuning carries into its cell
    save_checkpoint(state, checkpoint)

    def in_this_process(self, cell, data, run):
        assert cell.protocol in ("linear", "random-linear"), f"{cell.name} was trained in the parent process"
        return compute(self, cell, data, run)

    compute = bench_run.Bench._compute
    monkeypatch.setattr(bench_run.Bench, "_compute", in_this_process)
    monkeypatch.setattr("os.cpu_count", lambda: 2)  # one thread per worker, as in this process (OMP_NUM_THREADS=1)
    assert (side_by_side := invoke(side, *args, "--at-once", "2")).exit_code == 0, side_by_side.output
    assert "cells that train a network 2 at once" in (side / "benchmark" / "ptbxl" / "benchmark.md").read_text()

    turn_cells, side_cells = (run / "benchmark" / "ptbxl" / "cells" for run in (folder / "turn" / "run", side))
    cells = sorted(turn_cells.rglob("*.json"))
    assert len(cells) == 16
    failed = 0
    for path in cells:
        a = json.loads(path.read_text())
        b = json.loads((side_cells / path.relative_to(turn_cells)).read_text())
        if path == turn_cells / f"{interrupted}.json":
            assert b["history"][0].pop("train_loss") == -1.0 and a["history"][0].pop("train_loss") != -1.0
        a.pop("wall_s"), b.pop("wall_s")
        assert a == b, path
        failed += "error" in a
    assert failed == 8  # every form cell, each recorded with its error; every superdiagnostic cell scored
    assert not list((side / "benchmark" / "ptbxl").rglob("*.pt"))


def test_cells_at_once_auto_is_one_on_the_cpu_and_never_more_than_the_cells():
    from cyclejepa.bench.ptbxl import cells_at_once

    assert cells_at_once("auto", "cpu", 20) == 1
    assert cells_at_once(8, "cpu", 3) == 3 and cells_at_once(2, "cpu", 0) == 1 and cells_at_once(2, "auto", 5) == 2


def test_a_fraction_that_leaves_no_learnable_class_is_refused_before_any_cell(folder):
    config = write_config(folder / "dev", {"train_folds": [1, 2, 3, 4, 5, 6, 7, 8], "eval_folds": [9]})
    result = invoke(config, "--tasks", "superdiagnostic", "--protocols", "linear", "--fractions", "1e-9", *FAST)
    assert result.exit_code != 0
    assert (
        "label fraction 1e-09 leaves task superdiagnostic 1 of" in result.output
        and "choose a larger --fractions" in result.output
    )
    assert not list((folder / "dev" / "run").rglob("*1e-09*"))  # no cell of that fraction was computed


def test_figures_on_few_scored_records_say_so_and_are_never_plain():
    from cyclejepa.bench.ptbxl.report import _value
    from cyclejepa.evaluation.validity import MIN_PATIENTS, MIN_WINDOWS

    scores = {"mean": 0.317, "sd": 0.0, "min": 0.317, "max": 0.317, "low": 0.0, "high": 0.667}
    few = {"runs": 1, "errors": [], "records": 4, "patients": 4, "macro_auroc": scores}
    assert _value(few, "macro_auroc") == "0.317 [0.000, 0.667] (few data: 4 records, 4 patients)"
    enough = {**few, "records": MIN_WINDOWS, "patients": MIN_PATIENTS}
    assert _value(enough, "macro_auroc") == "0.317 [0.000, 0.667]"


@pytest.mark.slow  # a fresh interpreter: `make test-slow`
def test_help_lists_the_random_linear_protocol():
    """``cyclejepa benchmark ptbxl --help`` in a fresh interpreter names every protocol, the random one too."""
    import subprocess
    import sys

    shown = subprocess.run([sys.executable, "-m", "cyclejepa", "benchmark", "ptbxl", "--help"], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "default: linear random-linear finetune linear-finetune scratch" in " ".join(shown.stdout.split())
