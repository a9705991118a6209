"""The smaller commands: `--version`, `benchmark --help`, `synth` into a corpus, `phase` over
several records with bad ones among them; how the commands name the pipeline's stages."""

import ast
import importlib
import inspect
import json

import pytest
from typer.testing import CliRunner

from cyclejepa import __version__, cli as cli_module
from cyclejepa.cli import app
from cyclejepa.data.synthetic import write_synthetic_corpus

cli = CliRunner()


pytestmark = pytest.mark.xdist_group("cli")  # one worker builds the module's fixtures (`--dist loadgroup`)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Three synthetic records, deep enough that their paths share a long prefix."""
    root = tmp_path_factory.mktemp("cli") / ("a-long-folder-name-" * 4) / "corpus"
    return write_synthetic_corpus(root, 3, seed=0, progress=False)


def test_version_prints_the_package_version():
    result = cli.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"cyclejepa {__version__}"


def test_the_commands_import_each_stage_from_the_module_that_defines_it():
    """`cli.py` names every pipeline function by its own module (`from cyclejepa.pipeline.run
    import run_experiment`), never through the package's lazy face (`from cyclejepa import
    pipeline`, `from cyclejepa.pipeline import …`), so that the config can be followed from a
    command into its stage by reading the code."""
    imports = [node for node in ast.walk(ast.parse(inspect.getsource(cli_module))) if isinstance(node, ast.ImportFrom)]
    face = [node.lineno for node in imports if node.module == "cyclejepa.pipeline"
            or (node.module == "cyclejepa" and "pipeline" in {alias.name for alias in node.names})]  # fmt: skip
    assert face == []
    stages = [(node.module, alias.name) for node in imports if (node.module or "").startswith("cyclejepa.pipeline.")
              for alias in node.names]  # fmt: skip
    assert ("cyclejepa.pipeline.run", "run_experiment") in stages
    for module, name in stages:
        assert getattr(importlib.import_module(module), name).__module__ == module, f"{name} is not defined in {module}"


def test_benchmark_help_lists_the_benchmarks_and_each_passes_its_own_help():
    result = cli.invoke(app, ["benchmark", "--help"])
    assert result.exit_code == 0 and "throughput" in result.stdout and "allocations" in result.stdout
    own = cli.invoke(app, ["benchmark", "throughput", "--help"])
    assert own.exit_code == 0 and "--quick" in own.stdout


def test_synth_into_an_existing_corpus_says_to_pass_overwrite(corpus):
    database = (corpus / "ptbxl_database.csv").read_bytes()
    result = cli.invoke(app, ["synth", "--out", str(corpus), "--records", "2"])
    assert result.exit_code == 1 and result.exception is None or isinstance(result.exception, SystemExit)
    assert "already holds a corpus" in result.stderr and "--overwrite" in result.stderr
    assert "overwrite=True" not in result.output  # no Python argument, no traceback
    assert (corpus / "ptbxl_database.csv").read_bytes() == database


@pytest.mark.parametrize("format", ["jsonl", "table"])
def test_phase_reports_each_bad_record_goes_on_and_exits_non_zero(corpus, tmp_path, format):
    records = corpus / "records500" / "00000"
    broken = tmp_path / "00009_hr"
    broken.with_suffix(".hea").write_text("not a header\n")
    paths = [records / "00001_hr", tmp_path / "missing", records / "00002_hr", broken, records / "00003_hr"]
    result = cli.invoke(app, ["phase", *map(str, paths), "--format", format])
    assert result.exit_code == 1
    assert f"{tmp_path / 'missing'}:" in result.stderr and f"{broken}:" in result.stderr
    assert "2 of 5 records could not be read" in result.stderr
    good = [str(paths[i]) for i in (0, 2, 4)]
    if format == "jsonl":
        assert [json.loads(line)["record"] for line in result.stdout.splitlines()] == good
    else:  # one row per good record, each with its own, whole name
        rows = [line for line in result.stdout.splitlines() if "_hr" in line]
        assert len(rows) == 3, result.stdout
        for name, row in zip(("00001_hr", "00002_hr", "00003_hr"), rows, strict=True):
            assert name in row


def windowed_config(folder, window_s):
    import yaml

    config = folder / f"windows-{window_s}.yaml"
    config.write_text(yaml.safe_dump({
        "output_dir": str(folder / "out"),
        "data": {"dataset": "synthetic", "root": str(folder / "corpus"), "options": {"records": 12, "seed": 0},
                 "window_s": window_s, "train_folds": [1, 2, 3, 4, 5, 6, 7, 8], "eval_folds": [9], "workers": 1},
    }))  # fmt: skip
    return config


def test_prepare_counts_records_and_the_windows_they_are_cut_into(tmp_path):
    result = cli.invoke(app, ["prepare", str(windowed_config(tmp_path, 4))])  # 10 s records: two 4 s windows each
    assert result.exit_code == 0, result.output
    assert "12 records kept as 24 windows, 0 rejected" in " ".join(result.stdout.split())


def test_prepare_refuses_a_config_against_its_data_before_writing_the_corpus(tmp_path):
    result = cli.invoke(app, ["prepare", str(windowed_config(tmp_path, 5))])  # 62.5 tokens of 80 ms
    assert result.exit_code == 2
    assert "data.window_s: window_s 5 s at fs 500 Hz is 2500 samples, not a whole number of tokens" in " ".join(
        result.stderr.split()
    )
    assert not (tmp_path / "corpus").exists()
