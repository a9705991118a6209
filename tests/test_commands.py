"""Every documented command, run as a user runs it: each in a fresh interpreter
(``python -m cyclejepa ...``), on tiny settings and the real records of ``../shared/data``,
checked on its exit status and its output.

The commands are those of README.md (its command table and the inline and fenced commands of its
other sections), the fenced shell blocks of docs/your-signal.md and the commands of
docs/quickstart.md. `COVERED` maps each of them, normalised, to the test that runs it, and
`test_every_documented_command_has_a_test` fails for a command added to those pages without one.

Two chains share their trained runs with the tests that read them, built once per test session
even under ``pytest -n`` (a file lock in the session's base folder): the quickstart config on a
synthetic corpus (synth, validate, prepare, train one arm, the other under torchrun, evaluate,
report, run, the PTB-XL benchmark) and the pulse example of
docs/your-signal.md (the corpus script, run, embed, export, the package's reference.py, embed of
the package). Only what needs a GPU or the network is not run.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from filelock import FileLock

from conftest import SHARED

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = SHARED / "data" / "physionet-samples"
BIDMC = SHARED / "data" / "bidmc-samples"
CINC = SHARED / "data" / "cinc2021-samples"
pytestmark = pytest.mark.skipif(not SAMPLES.is_dir(), reason=f"real PhysioNet samples not found at {SAMPLES}")
QUICKSTART_CHAIN = pytest.mark.xdist_group("quickstart-chain")
PULSE_CHAIN = pytest.mark.xdist_group("pulse-chain")
"""The tests of one chain run on one worker (`--dist loadgroup`), which builds it while the other
worker runs the rest: neither waits on the other's build."""

# ---- the documented commands and the test that runs each ------------------------------------

COVERED = {
    # README.md, "Set-up"
    "make quickstart": "test_make_quickstart_runs_the_quickstart_config",
    "make test": "test_make_test_and_make_docs_run_what_ci_runs",
    "make test-slow": "test_make_test_and_make_docs_run_what_ci_runs",
    # README.md, "The paper's experiment"
    "cyclejepa run examples/winder_ptbxl.yaml": "test_the_papers_config_plans_its_runs_on_a_corpus_named_by_the_environment",
    "cyclejepa download ptbxl --dest DIR": "test_download_takes_its_documented_options",
    "make ptbxl-dev": "test_make_ptbxl_dev_extracts_the_shared_archive_and_runs_its_config",
    "torchrun --nproc_per_node N -m cyclejepa train examples/winder_ptbxl.yaml --arm winder --seed 0": (
        "test_train_one_arm_the_other_under_torchrun_then_evaluate"
    ),
    "cyclejepa run examples/winder_ptbxl.yaml --unseal": "test_the_papers_config_plans_its_runs_on_a_corpus_named_by_the_environment",
    "cyclejepa --help": "test_help_lists_every_command_of_the_table",
    # README.md, the command table
    "cyclejepa info": "test_info_lists_versions_and_components",
    "cyclejepa validate CONFIG [--set key.path=value ...]": "test_validate_accepts_the_config_and_names_a_wrong_key",
    "cyclejepa run CONFIG [--dry-run] [--unseal]": "test_the_papers_config_plans_its_runs_on_a_corpus_named_by_the_environment",
    "cyclejepa synth --out DIR --records N --seed S [--overwrite]": "test_synth_writes_the_ptbxl_layout_and_overwrite_replaces_it",
    "cyclejepa prepare CONFIG": "test_prepare_counts_the_records_it_keeps",
    "cyclejepa phase RECORD ... [--lead NAME | --config CONFIG] [--format jsonl|table]": (
        "test_phase_of_a_real_ecg_matches_its_reference_beats"
    ),
    "cyclejepa train CONFIG --arm A --seed S": "test_train_one_arm_the_other_under_torchrun_then_evaluate",
    "cyclejepa evaluate CONFIG": "test_report_rebuilds_what_evaluate_wrote",
    "cyclejepa report RUN_DIR": "test_report_rebuilds_what_evaluate_wrote",
    "cyclejepa embed RUN_DIR RECORD... --out FILE.npz|.parquet": "test_embed_a_run_writes_the_documented_arrays",
    "cyclejepa export RUN_DIR --out DIR [--onnx] [--torchscript]": "test_export_writes_the_package_with_its_graphs",
    "cyclejepa embed DIR ...": "test_embed_a_package_as_the_run_and_its_reference_applies_the_preparation",
    "cyclejepa benchmark throughput|allocations [...]": "test_benchmark_throughput_and_allocations",
    "cyclejepa benchmark ptbxl CONFIG_OR_RUN [--unseal] [...]": "test_benchmark_ptbxl_scores_a_run",
    # README.md, "Documentation"
    "make docs": "test_make_test_and_make_docs_run_what_ci_runs",
    # docs/your-signal.md
    "cyclejepa run my-ppg.yaml": "test_the_minimal_config_of_your_signal_runs_and_embeds",
    "cyclejepa embed runs/my-ppg path/to/new/record --out new.npz": "test_the_minimal_config_of_your_signal_runs_and_embeds",
    "python docs/scripts/raw_pulse_corpus.py --out runs/raw_pulse --sources ../shared/data/physionet-samples": (
        "test_the_raw_pulse_corpus_script_writes_twenty_recordings"
    ),
    "cyclejepa phase ../shared/data/bidmc-samples/bidmc44 --provider pulse --lead PLETH --format table --plot figures": (
        "test_phase_table_and_plot_of_a_pulse_as_your_signal_shows_them"
    ),
    "cyclejepa run examples/wfdb_pulse.yaml": "test_the_pulse_example_runs_and_reports",
    "cyclejepa run examples/wfdb_breath.yaml": "test_the_breath_example_runs_on_the_shared_records",
    "cyclejepa embed runs/wfdb_pulse runs/raw_pulse/a103l-2-slow runs/raw_pulse/v102s-1 --out emb.npz": (
        "test_embed_a_run_writes_the_documented_arrays"
    ),
    # docs/quickstart.md
    "cyclejepa run examples/quickstart.yaml": "test_make_quickstart_runs_the_quickstart_config",
}
"""Each documented command (normalised by `normalise`) → the test of this module that runs it."""

COMMAND = re.compile(r"^(?:cyclejepa|make|python|torchrun) \S")
FENCE = re.compile(r"^```(?P<lang>[a-z]*)\n(?P<body>.*?)^```", re.S | re.M)
SHELL = {"", "bash", "sh", "shell", "console"}


def normalise(command: str) -> str:
    """One line, single spaces, no trailing ``# comment``, no markdown escapes (``\\|`` is ``|``)."""
    command = re.sub(r"\s+#.*$", "", command.replace("\\\n", " ").strip())
    return " ".join(command.replace("\\|", "|").split())


def fenced_commands(text: str) -> list[str]:
    """Command lines of the fenced shell blocks (no language, bash, sh, shell, console)."""
    lines = [line for m in FENCE.finditer(text) if m["lang"] in SHELL for line in m["body"].replace("\\\n", " ").splitlines()]
    return [normalise(line) for line in lines if COMMAND.match(line.strip())]


def inline_commands(text: str) -> list[str]:
    """Commands written as inline code: `` `cyclejepa info` ``, `` `make docs` `` (fences removed)."""
    spans = re.findall(r"`([^`]+)`", FENCE.sub("", text))
    return [normalise(span) for span in spans if COMMAND.match(normalise(span))]


def documented_commands() -> dict[str, list[str]]:
    """Page → its commands: README.md and docs/quickstart.md fenced and inline; docs/your-signal.md fenced."""
    readme, quickstart, signal = (ROOT / p for p in ("README.md", "docs/quickstart.md", "docs/your-signal.md"))
    return {
        "README.md": fenced_commands(readme.read_text()) + inline_commands(readme.read_text()),
        "docs/quickstart.md": fenced_commands(quickstart.read_text()) + inline_commands(quickstart.read_text()),
        "docs/your-signal.md": fenced_commands(signal.read_text()),
    }


def test_every_documented_command_has_a_test():
    documented = documented_commands()
    found = {command for commands in documented.values() for command in commands}
    missing = {page: sorted(set(c) - set(COVERED)) for page, c in documented.items() if set(c) - set(COVERED)}
    assert not missing, f"documented commands without a test in tests/test_commands.py (add them to COVERED): {missing}"
    assert set(COVERED) <= found, f"COVERED lists commands no page documents: {sorted(set(COVERED) - found)}"
    assert {name for name in COVERED.values() if not callable(globals().get(name))} == set()
    assert len(found) >= 30 and "cyclejepa info" in documented["README.md"]  # the pages were read


def test_the_coverage_check_finds_a_new_command():
    page = "Text `cyclejepa frobnicate X` and\n\n```bash\nmake quickstart   # a comment\ncyclejepa new \\\n  --flag\n```\n"
    assert fenced_commands(page) == ["make quickstart", "cyclejepa new --flag"]
    assert inline_commands(page) == ["cyclejepa frobnicate X"]
    assert "cyclejepa frobnicate X" not in COVERED and "cyclejepa new --flag" not in COVERED


# ---- running a command ----------------------------------------------------------------------


def cyclejepa(*args, cwd: Path | None = None, env: dict | None = None, timeout: float = 240) -> dict:
    """``python -m cyclejepa ARGS`` in a fresh interpreter: {"args", "rc", "out", "err", "cpu"}."""
    return command([sys.executable, "-m", "cyclejepa", *map(str, args)], cwd=cwd, env=env, timeout=timeout)


def command(words: list, cwd: Path | None = None, env: dict | None = None, timeout: float = 240) -> dict:
    """Run ``words`` (OMP_NUM_THREADS=1, no colour, wide lines): args, exit status, stdout, stderr
    and the CPU seconds it took."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [str(w) for w in words],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1", "NO_COLOR": "1", "COLUMNS": "200", **(env or {})},
        timeout=timeout,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"args": [str(w) for w in words], "rc": done.returncode, "out": done.stdout, "err": done.stderr, "cpu": cpu}


def ok(result: dict) -> str:
    """The command's stdout and stderr together, after asserting it exited 0."""
    text = result["out"] + result["err"]
    assert result["rc"] == 0, f"{shlex.join(result['args'])} exited {result['rc']}:\n{text[-3000:]}"
    return text


def once(tmp_path_factory, name: str, build) -> tuple[Path, dict]:
    """``build(folder) -> {step: result}`` run once per test session, also under ``pytest -n`` (the
    workers share the session's base folder; the first one builds, the others wait and read)."""
    base = tmp_path_factory.getbasetemp()
    base = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, record = base / f"commands-{name}", base / f"commands-{name}.json"
    with FileLock(str(record) + ".lock"):
        if not record.exists():
            folder.mkdir(exist_ok=True)
            record.write_text(json.dumps(build(folder)))
    return folder, json.loads(record.read_text())


# ---- the quickstart chain -------------------------------------------------------------------

QUICKSTART = ROOT / "examples" / "quickstart.yaml"
TINY_EVALUATION = [
    "training.steps=2", "training.checkpoint_every=2", "evaluation.steps=[2]", "evaluation.headline_step=2",
    "evaluation.bootstrap=20", "evaluation.severities=[0.0, 2.0]", "evaluation.umap=false",
]  # fmt: skip


def quickstart_sets(folder: Path) -> list[str]:
    """--set words of the quickstart on a 100-record corpus in ``folder``, two training steps."""
    sets = [f"output_dir={folder / 'run'}", f"data.root={folder / 'corpus'}", "data.options={records: 100, seed: 0}",
            *TINY_EVALUATION, "evaluation.anomaly_records=4", "evaluation.families=[ectopic]",
            "evaluation.eligible_min_positives=1"]  # fmt: skip
    return [word for value in sets for word in ("--set", value)]


def build_quickstart(folder: Path) -> dict:
    sets, config = quickstart_sets(folder), QUICKSTART
    steps = {"synth": cyclejepa("synth", "--out", folder / "corpus", "--records", 100, "--seed", 0)}
    steps["synth again"] = cyclejepa("synth", "--out", folder / "corpus", "--records", 100, "--seed", 0)
    steps["validate"] = cyclejepa("validate", config, *sets)
    steps["validate typo"] = cyclejepa("validate", config, *sets, "--set", "training.stpes=3")
    steps["prepare"] = cyclejepa("prepare", config, *sets)
    steps["train"] = cyclejepa("train", config, "--arm", "winder", "--seed", 0, *sets)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", "-m", "cyclejepa"]
    steps["torchrun"] = command([*torchrun, "train", config, "--arm", "control", "--seed", 0, *sets])
    steps["evaluate"] = cyclejepa("evaluate", config, *sets)
    report = folder / "run" / "report" / "report.md"
    steps["report text"] = {"text": report.read_text() if report.is_file() else ""}
    steps["report"] = cyclejepa("report", folder / "run")
    steps["rebuilt text"] = {"text": report.read_text() if report.is_file() else ""}
    steps["run"] = cyclejepa("run", config, *sets)
    steps["benchmark ptbxl"] = cyclejepa("benchmark", "ptbxl", folder / "run", "--tasks", "superdiagnostic",
                                         "--protocols", "linear", "--fractions", "1", "--seeds", "0")  # fmt: skip
    return steps


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory) -> tuple[Path, dict]:
    return once(tmp_path_factory, "quickstart", build_quickstart)


@QUICKSTART_CHAIN
def test_synth_writes_the_ptbxl_layout_and_overwrite_replaces_it(quickstart):
    """README table: `cyclejepa synth --out DIR --records N --seed S [--overwrite]`."""
    folder, steps = quickstart
    ok(steps["synth"])
    assert (folder / "corpus" / "ptbxl_database.csv").is_file() and (folder / "corpus" / "scp_statements.csv").is_file()
    rows = (folder / "corpus" / "ptbxl_database.csv").read_text().splitlines()
    assert len(rows) == 101  # header + 100 records
    assert len(list((folder / "corpus").glob("records500/*/*_hr.hea"))) == 100
    again = steps["synth again"]
    assert again["rc"] != 0 and "--overwrite" in again["out"] + again["err"]  # the documented remedy is named


@QUICKSTART_CHAIN
def test_validate_accepts_the_config_and_names_a_wrong_key(quickstart):
    """README table: `cyclejepa validate CONFIG [--set key.path=value ...]`: "the key path, the
    allowed values and the closest match for every problem"."""
    _, steps = quickstart
    ok(steps["validate"])
    wrong = steps["validate typo"]
    message = wrong["out"] + wrong["err"]
    assert wrong["rc"] != 0 and "training.stpes" in message and "steps" in message.replace("stpes", "")


@QUICKSTART_CHAIN
def test_prepare_counts_the_records_it_keeps(quickstart):
    """README table: `cyclejepa prepare CONFIG`: the preprocessing cache of the 100 records."""
    folder, steps = quickstart
    assert f"cache {folder / 'run' / 'cache'}: 100 records kept, 0 rejected" in ok(steps["prepare"])
    assert (folder / "run" / "cache").is_dir()


@QUICKSTART_CHAIN
def test_train_one_arm_the_other_under_torchrun_then_evaluate(quickstart):
    """README table: `cyclejepa train CONFIG --arm A --seed S` (one arm); README, "The paper's
    experiment": `torchrun --nproc_per_node N -m cyclejepa train ... --arm winder --seed 0` (the
    other arm, one process: the paper's config needs PTB-XL and GPUs); then `cyclejepa evaluate`
    evaluates both."""
    folder, steps = quickstart
    assert "winder-seed0: trained" in ok(steps["train"])
    assert "control-seed0: trained" in ok(steps["torchrun"])
    ok(steps["evaluate"])
    assert {p.name for p in (folder / "run" / "evaluation").glob("*.json")} >= {
        "winder-seed0-step000002.json",
        "control-seed0-step000002.json",
    }


@QUICKSTART_CHAIN
def test_make_quickstart_runs_the_quickstart_config(quickstart):
    """README "Set-up": `make quickstart`; docs/quickstart.md: `make quickstart` (that is,
    `cyclejepa run examples/quickstart.yaml`), here resuming the runs trained and evaluated above,
    writes the report the page shows: its sections and the rows of its bottom line (two training
    steps here, so not its figures)."""
    folder, steps = quickstart
    assert re.search(r"^quickstart: .*\n\t\$\(BIN\)/cyclejepa run examples/quickstart.yaml$", make_file(), re.M)
    ran = ok(steps["run"])
    assert str(folder / "run" / "report" / "report.md") in ran.replace("\n", "")  # "prints where its report is"
    assert "seed0: 2/2" not in ran  # after train, torchrun and evaluate nothing is left to train
    report = (folder / "run" / "report" / "report.md").read_text()
    page = (ROOT / "docs" / "quickstart.md").read_text()
    documented = page[page.index("## quickstart: report") :]
    for heading in re.findall(r"^### (.+)$", documented, re.M):
        assert f"## {heading}" in report, heading
    bottom_line = documented[documented.index("### Bottom line") : documented.index("### Full grid")]
    for label in re.findall(r"^\| (?:\*\*)?([^|*]+?)(?:\*\*)? \|", bottom_line, re.M)[1:]:
        assert f"| {label}" in report or f"| **{label}**" in report, label
    figures = re.findall(r"^\| (?:Transport gain fraction|Effective rank of z) ↑ \| \**(-?[\d.]+)", report, re.M)
    assert len(figures) == 2 and all(np.isfinite(float(f)) for f in figures), figures


@QUICKSTART_CHAIN
def test_report_rebuilds_what_evaluate_wrote(quickstart):
    """README table: `cyclejepa evaluate CONFIG` / `cyclejepa report RUN_DIR`."""
    folder, steps = quickstart
    path = folder / "run" / "report" / "report.md"
    assert str(path) in ok(steps["evaluate"]).replace("\n", "")
    assert str(path) in ok(steps["report"]).replace("\n", "")
    assert steps["rebuilt text"]["text"] == steps["report text"]["text"] != ""


@QUICKSTART_CHAIN
def test_benchmark_ptbxl_scores_a_run(quickstart):
    """README table: `cyclejepa benchmark ptbxl CONFIG_OR_RUN [--unseal] [...]` on a run folder of
    a PTB-XL-layout corpus, one task, the linear probe."""
    _, steps = quickstart
    text = ok(steps["benchmark ptbxl"])
    assert "superdiagnostic" in text and "linear" in text
    assert re.search(r"0\.\d{3}", text)  # a macro-AUROC figure


@pytest.mark.slow  # a whole benchmark run in a fresh interpreter: `make test-slow`
def test_benchmark_throughput_and_allocations(tmp_path):
    """README table: `cyclejepa benchmark throughput|allocations [...]`: the throughput of the
    deployed path for the quickstart's model; the allocations benchmark's command line in a fresh
    interpreter (its six trainings, 20 s of CPU, are left out: each trains as `train` does above)."""
    out = tmp_path / "throughput.json"
    throughput = cyclejepa("benchmark", "throughput", "--quick", "--sections", "inference", "--prepare-records", 0,
                           "--device", "cpu", "--threads", 1, "--config", QUICKSTART, "--out", out)  # fmt: skip
    text = ok(throughput)
    assert "## Inference" in text and json.loads(out.read_text())
    assert re.search(r"^\| float32 \| \d+ \| [\d.]+ \| \d+ \|$", (tmp_path / "throughput.md").read_text(), re.M)
    options = ok(cyclejepa("benchmark", "allocations", "--help"))
    assert "--steps" in options and "--seeds" in options and "--config" in options


# ---- the paper's config, the Makefile, help and info ----------------------------------------


def make_file() -> str:
    return (ROOT / "Makefile").read_text()


@QUICKSTART_CHAIN
def test_the_papers_config_plans_its_runs_on_a_corpus_named_by_the_environment(quickstart, tmp_path):
    """README "The paper's experiment": `cyclejepa run examples/winder_ptbxl.yaml` and, after
    training elsewhere, `cyclejepa run examples/winder_ptbxl.yaml --unseal`, PTB-XL found through
    CYCLEJEPA_PTBXL (here the synthetic corpus in its layout). Training the paper-size model
    needs a GPU: the dry run shows the plan, 2 arms × 2 seeds, and the seal of fold 10."""
    folder, _ = quickstart
    env = {"CYCLEJEPA_PTBXL": str(folder / "corpus")}
    config = ROOT / "examples" / "winder_ptbxl.yaml"
    sealed = ok(cyclejepa("run", config, "--dry-run", cwd=tmp_path, env=env))
    assert "data: dataset ptbxl" in sealed and "fold 10 is sealed: needs --unseal" in sealed, sealed
    for run in ("winder-seed0", "winder-seed1", "control-seed0", "control-seed1"):
        assert f"pre-train {run}: " in sealed and "[to train]" in sealed, run
    unsealed = ok(cyclejepa("run", config, "--unseal", "--dry-run", cwd=tmp_path, env=env))
    assert "fold 10 is sealed: UNSEALED (audited)" in unsealed, unsealed
    assert not (tmp_path / "runs").exists()  # a plan writes nothing


def test_make_ptbxl_dev_extracts_the_shared_archive_and_runs_its_config(tmp_path):
    """README: `make ptbxl-dev` (a GPU run: not run here). Its recipe extracts the shared archive
    that exists and runs `examples/ptbxl_dev.yaml`, whose root is where the recipe extracts to."""
    recipe = re.search(r"^ptbxl-dev:.*\n((?:\t.*\n)+)", make_file(), re.M)
    archive = re.search(r"^PTBXL_DEV_ARCHIVE \?= (.+)$", make_file(), re.M)
    assert recipe and archive and "cyclejepa run examples/ptbxl_dev.yaml" in recipe[1]
    assert (ROOT / archive[1]).resolve() == (SHARED / "data" / "ptbxl-dev" / "ptbxl-dev-434.tar.xz").resolve()
    assert (SHARED / "data" / "ptbxl-dev" / "ptbxl-dev-434.tar.xz").is_file()
    assert "runs/ptbxl_dev/data/ptbxl-dev/ptbxl_database.csv" in recipe[1]
    assert "root: runs/ptbxl_dev/data/ptbxl-dev" in (ROOT / "examples" / "ptbxl_dev.yaml").read_text()


def test_make_test_and_make_docs_run_what_ci_runs():
    """README "Set-up": `make test` (this suite, under -n 2, but its `slow` process-level tests),
    `make test-slow` (those) and "Documentation": `make docs` (`mkdocs build --strict`): all run by
    .ci/run; neither the slow tests nor the documentation build are repeated inside the suite."""
    assert re.search(
        r'^test: .*\n\tOMP_NUM_THREADS=1 \$\(BIN\)/python -m pytest -q -n 2 --dist loadgroup -m "not slow"$', make_file(), re.M
    )
    assert re.search(
        r"^test-slow: .*\n\tOMP_NUM_THREADS=1 \$\(BIN\)/python -m pytest -q -n 2 --dist loadgroup -m slow$", make_file(), re.M
    )
    assert re.search(r"^docs: .*\n\t\$\(BIN\)/mkdocs build --strict$", make_file(), re.M)
    ci = (ROOT / ".ci" / "run").read_text()
    assert "\nmake test\nmake test-slow\n" in ci and "mkdocs build --strict" in ci


def test_download_takes_its_documented_options():
    """README: `cyclejepa download ptbxl --dest DIR` (needs the network: only its options here)."""
    text = ok(cyclejepa("download", "--help"))
    assert "--dest" in text and "dataset" in text.lower()


def test_help_lists_every_command_of_the_table():
    """README: "Other commands (`cyclejepa --help`)": each command of the table is listed."""
    text = ok(cyclejepa("--help"))
    table = [c.split()[1] for c in COVERED if c.startswith("cyclejepa ") and not c.startswith("cyclejepa -")]
    assert {name for name in table if not re.search(rf"│ {name} ", text)} <= {"my-ppg.yaml"}, text


def test_info_lists_versions_and_components():
    """README table: `cyclejepa info`: versions, devices, every registered component."""
    text = ok(cyclejepa("info"))
    for word in ("torch", "numpy", "devices", "phase_providers", "ecg-rpeak", "pulse", "breath", "datasets", "wfdb"):
        assert word in text, word


# ---- phase on real records ------------------------------------------------------------------


def test_phase_of_a_real_ecg_matches_its_reference_beats(tmp_path):
    """README table: `cyclejepa phase RECORD ... [--lead NAME | --config CONFIG] [--format jsonl|table]`
    on MIT-BIH 100 (its R-peaks against the 2,273 reference beat labels of 100.atr), the same
    record with --lead and --format table, and a pulse channel with --config."""
    import wfdb

    (line,) = ok(cyclejepa("phase", SAMPLES / "100")).strip().splitlines()
    result = json.loads(line)
    assert result["qc"]["ok"] and 0.9 < result["phase_yield"] <= 1.0 and result["fs"] == 360
    beats = wfdb.rdann(str(SAMPLES / "100"), "atr").symbol
    reference = sum(symbol in "NAV" for symbol in beats)
    assert abs(len(result["r_peaks"]) - reference) <= 3, (len(result["r_peaks"]), reference)
    table = ok(cyclejepa("phase", SAMPLES / "100", SAMPLES / "s0010_re", "--lead", "V5", "--format", "table"))
    assert re.search(r"│ 100\s+│ 360\s+│ 22\d\d\s+│ \d+\.\d\s+│ -\s+│ [01]\.\d{3}", table), table  # rate/min, good
    assert re.search(r"│ s0010_re\s+│ 1000\s+│ \d\d\s+│", table), table  # 38.4 s of ECG
    config = ROOT / "examples" / "wfdb_pulse.yaml"
    (pulse,) = ok(cyclejepa("phase", SAMPLES / "a103l", "--config", config)).strip().splitlines()
    assert len(json.loads(pulse)["events"]) > 300  # 330 s of a pulse


@pytest.mark.skipif(not BIDMC.is_dir(), reason=f"BIDMC samples not found at {BIDMC}")
@pytest.mark.parametrize("lead", ["PLETH,", "PLETH"])
def test_phase_takes_a_channel_named_as_physionet_names_it(lead):
    """README table: `cyclejepa phase RECORD --lead NAME` on BIDMC, whose header names `PLETH,`:
    the name as the header writes it, and as docs/your-signal.md writes it."""
    (line,) = ok(cyclejepa("phase", BIDMC / "bidmc44", "--lead", lead)).strip().splitlines()
    assert len(json.loads(line)["events"]) > 400  # 8 min of a pulse


@pytest.mark.skipif(not BIDMC.is_dir(), reason=f"BIDMC samples not found at {BIDMC}")
def test_phase_table_and_plot_of_a_pulse_as_your_signal_shows_them(tmp_path):
    """docs/your-signal.md: `cyclejepa phase ../shared/data/bidmc-samples/bidmc44 --provider pulse
    --lead PLETH --format table --plot figures`, run from a folder of one's own: one table row
    with the pulse rate and the share of good cycles, QC ok, and the figure in ``figures``."""
    words = ["phase", BIDMC / "bidmc44", "--provider", "pulse", "--lead", "PLETH", "--format", "table", "--plot", "figures"]
    table = ok(cyclejepa(*words, cwd=tmp_path))
    rate, good = re.search(r"\(pulse\)\W+([\d.]+)\W+(\d+)%\W+[\d.]+\W+ok\b", table).groups()
    assert 80 < float(rate) < 100 and int(good) >= 90, table  # the monitor's HR: about 90/min
    figure = tmp_path / "figures" / "bidmc44.png"
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and figure.stat().st_size > 20_000


@pytest.mark.skipif(not CINC.is_dir(), reason=f"CinC 2021 samples not found at {CINC}")
def test_prepare_keeps_the_challenge_release_as_shipped(tmp_path):
    """README table: `cyclejepa prepare CONFIG` with `challenge2021` (README, "Your own data and
    signals": "for the PhysioNet/CinC Challenge 2020/2021 WFDB folders") on six records of the
    2021 release exactly as shipped."""
    config = tmp_path / "cinc.yaml"
    config.write_text(f"name: cinc\noutput_dir: {tmp_path / 'run'}\ndata: {{dataset: challenge2021, root: {CINC}}}\n")
    assert f"cache {tmp_path / 'run' / 'cache'}: 6 records kept, 0 rejected" in ok(cyclejepa("prepare", config))


# ---- the pulse chain of docs/your-signal.md -------------------------------------------------

PULSE = ROOT / "examples" / "wfdb_pulse.yaml"
PULSE_RECORDS = ("a103l-2-slow", "v102s-1")  # your-signal.md, "Embeddings"


def pulse_sets(folder: Path) -> list[str]:
    sets = [f"output_dir={folder / 'runs' / 'wfdb_pulse'}", f"data.root={folder / 'runs' / 'raw_pulse'}",
            *TINY_EVALUATION, "evaluation.anomaly_records=2"]  # fmt: skip
    return [word for value in sets for word in ("--set", value)]


def build_pulse(folder: Path) -> dict:
    runs = folder / "runs"
    script = ROOT / "docs" / "scripts" / "raw_pulse_corpus.py"
    steps = {"corpus": command([sys.executable, script, "--out", runs / "raw_pulse", "--sources", SAMPLES])}
    steps["run"] = cyclejepa("run", PULSE, *pulse_sets(folder))
    records = [runs / "raw_pulse" / name for name in PULSE_RECORDS]
    steps["embed"] = cyclejepa("embed", runs / "wfdb_pulse", *records, "--out", folder / "emb.npz")
    steps["export"] = cyclejepa("export", runs / "wfdb_pulse", "--out", folder / "package", "--onnx", "--torchscript")
    steps["embed package"] = cyclejepa("embed", folder / "package", *records, "--out", folder / "package.parquet")
    return steps


@pytest.fixture(scope="module")
def pulse(tmp_path_factory) -> tuple[Path, dict]:
    return once(tmp_path_factory, "pulse", build_pulse)


@PULSE_CHAIN
def test_the_raw_pulse_corpus_script_writes_twenty_recordings(pulse):
    """docs/your-signal.md, "A raw camera PPG": `python docs/scripts/raw_pulse_corpus.py --out
    runs/raw_pulse --sources ../shared/data/physionet-samples`."""
    folder, steps = pulse
    text = ok(steps["corpus"])
    headers = sorted(p.stem for p in (folder / "runs" / "raw_pulse").glob("*.hea"))
    assert len(headers) == 20 and {"a103l-2-slow", "a103l-1-inverted", "a103l-3-exposure", "v102s-1"} <= set(headers)
    assert re.search(r"a103l-2-slow: 40 s, level [\d.]+, range [\d.]+ units", text), text


@PULSE_CHAIN
def test_the_pulse_example_runs_and_reports(pulse):
    """docs/your-signal.md, "A raw camera PPG": `cyclejepa run examples/wfdb_pulse.yaml` writes the
    report the page shows: the same rows, each cell with its few-data words (2 recordings scored)."""
    folder, steps = pulse
    ok(steps["run"])
    report = (folder / "runs" / "wfdb_pulse" / "report" / "report.md").read_text()
    page = (ROOT / "docs" / "your-signal.md").read_text()
    shown = page[
        page.index("Its report (`OMP_NUM_THREADS=1`, `--set output_dir=...`, with the per-cycle quality control") : page.index(
            "Two recordings are scored"
        )
    ]
    for label in re.findall(r"^\| ([A-Z][^|]+?) \|", shown, re.M)[1:]:
        assert re.search(rf"^\| {re.escape(label)} \| .*\(few data: 6 windows, 2 recordings\)", report, re.M), label
    gain = re.search(r"^\| Transport gain fraction ↑ \| (-?[\d.]+)", report, re.M)
    assert gain and np.isfinite(float(gain[1]))


@PULSE_CHAIN
def test_embed_a_run_writes_the_documented_arrays(pulse):
    """README table: `cyclejepa embed RUN_DIR RECORD... --out FILE.npz|.parquet`; docs/your-signal.md,
    "Embeddings": `cyclejepa embed runs/wfdb_pulse runs/raw_pulse/a103l-2-slow runs/raw_pulse/v102s-1
    --out emb.npz`: three 10 s windows each, starting 3, 13 and 23 s into the recording."""
    folder, steps = pulse
    ok(steps["embed"])
    with np.load(folder / "emb.npz", allow_pickle=False) as saved:
        arrays = {key: saved[key] for key in saved.files}
    page = (ROOT / "docs" / "embeddings.md").read_text()
    written = page[page.index("## What is written") : page.index("The `.npz` holds")]
    documented = re.findall(r"^\| `(\w+)`(?:, `(\w+)`)? \|", written, re.M)
    assert {name for pair in documented for name in pair if name} == set(arrays)  # docs/embeddings.md's table
    assert [Path(str(r)).name for r in arrays["records"]] == list(PULSE_RECORDS)
    assert arrays["embeddings"].shape == (2, 24) and np.isfinite(arrays["embeddings"]).all()  # K = 24
    assert arrays["qc_ok"].all() and arrays["windows"].tolist() == [3, 3]
    assert arrays["window_start"].tolist() == [3.0, 13.0, 23.0] * 2
    assert arrays["tokens"].shape == (6, 125, 24) and np.isfinite(arrays["tokens"]).all()


@PULSE_CHAIN
def test_export_writes_the_package_with_its_graphs(pulse):
    """README table: `cyclejepa export RUN_DIR --out DIR [--onnx] [--torchscript]`."""
    folder, steps = pulse
    ok(steps["export"])
    names = {p.name for p in (folder / "package").iterdir()}
    assert {"model.safetensors", "config.json", "README.md", "reference.py"} <= names
    assert any(n.endswith(".onnx") for n in names) and any(n.endswith(".pt") for n in names), names


@PULSE_CHAIN
def test_embed_a_package_as_the_run_and_its_reference_applies_the_preparation(pulse, tmp_path):
    """README table: `cyclejepa embed DIR ...` (an exported package; parquet output) gives the run's
    `mean_tokens`; the package's `reference.py` applies the `wfdb` dataset's preparation (3 s
    dropped, the zero-phase high-pass) and gives the package's tokens, as docs/deploying.md, "The
    reference preparation", says."""
    import pyarrow.parquet as pq
    import wfdb

    folder, steps = pulse
    ok(steps["embed package"])
    table = pq.read_table(folder / "package.parquet")
    documented = {"record", "embedding", "qc_ok", "qc_reason", "mean_tokens", "input_distance", "windows", "tokens"}
    assert table.num_rows == 2 and documented <= set(table.column_names), table.column_names  # docs/embeddings.md
    with np.load(folder / "emb.npz", allow_pickle=False) as saved:
        from_run = saved["mean_tokens"]
    from_package = np.stack(table.column("mean_tokens").to_pylist())
    np.testing.assert_allclose(from_package, from_run, atol=1e-5)  # the package embeds as the run does
    record = wfdb.rdrecord(str(folder / "runs" / "raw_pulse" / PULSE_RECORDS[0]))
    np.save(tmp_path / "signal.npy", record.p_signal.T)
    words = [tmp_path / "signal.npy", "--fs", record.fs, "--channels", "PLETH", "--out", tmp_path / "tokens.npy"]
    ok(command([sys.executable, folder / "package" / "reference.py", *words]))
    expected = np.array(table.column("tokens")[0].as_py(), dtype=np.float32)  # (windows, tokens, K) of the record
    tokens = np.load(tmp_path / "tokens.npy")
    assert tokens.shape == expected.shape and np.abs(tokens - expected).max() <= 1e-4


# ---- the other your-signal.md configs -------------------------------------------------------

TINY_MODEL_SETS = ["symmetry.spectrum=4x0+4x1+4x2+2x3", "model.encoder={width: 16, hidden: 32}",
                   "model.projector={hidden: 32, dim: 24}", "model.predictor={depth: 1, heads: 2, ffn: 32}",
                   "objectives.regulariser.options={num_directions: 16}"]  # fmt: skip


@pytest.mark.slow  # a whole example run: `make test-slow`
def test_the_breath_example_runs_on_the_shared_records(tmp_path):
    """docs/your-signal.md, "Respiration": `cyclejepa run examples/wfdb_breath.yaml` (reads the
    RESP channels of ../shared/data/physionet-samples): one recording scored, as the page says."""
    config = ROOT / "examples" / "wfdb_breath.yaml"
    sets = [f"output_dir={tmp_path / 'run'}", f"data.root={SAMPLES}", *TINY_EVALUATION, "evaluation.anomaly_records=2"]
    ok(cyclejepa("run", config, *[w for s in sets for w in ("--set", s)]))
    report = (tmp_path / "run" / "report" / "report.md").read_text()
    assert "**Not testable:** the evaluation set holds 1 recording." in report
    page = (ROOT / "docs" / "your-signal.md").read_text()
    shown = page[page.index("Its report (`OMP_NUM_THREADS=1`, `--set output_dir=...`, with cycle quality") :]
    shown = shown[: shown.index("(At revision 3812975")]
    for label in re.findall(r"^\| ([A-Z][^|]+?) \|", shown, re.M)[1:]:
        assert f"| {label} | " in report, label
    assert "(few data: 1 window, 1 recording)" in report  # four of v102s's five windows fail cycle quality
    rejections = (tmp_path / "run" / "cache" / "rejections.csv").read_text()
    assert 'mixedsignals,units,"channel Resp is in Ohm' in rejections  # rejected by name, as the page says


@PULSE_CHAIN
def test_the_minimal_config_of_your_signal_runs_and_embeds(pulse, tmp_path):
    """docs/your-signal.md, "The config": its YAML block as written (root set to a one-channel
    folder of PLETH records), small model sizes, then `cyclejepa run my-ppg.yaml` and
    `cyclejepa embed runs/my-ppg path/to/new/record --out new.npz`."""
    folder, _ = pulse
    page = (ROOT / "docs" / "your-signal.md").read_text()
    block = re.search(r"## The config\n\n```yaml\n(.*?)```", page, re.S)[1]
    corpus = folder / "runs" / "raw_pulse"
    (tmp_path / "my-ppg.yaml").write_text(block.replace("path/to/records", str(corpus)))
    sets = [*TINY_MODEL_SETS, "training.batch_size=8", *TINY_EVALUATION, "evaluation.anomaly_records=2"]
    ok(cyclejepa("run", "my-ppg.yaml", *[w for s in sets for w in ("--set", s)], cwd=tmp_path))
    assert (tmp_path / "runs" / "my-ppg" / "report" / "report.md").is_file()
    ok(cyclejepa("embed", "runs/my-ppg", corpus / "v102s-1", "--out", "new.npz", cwd=tmp_path))
    with np.load(tmp_path / "new.npz") as saved:
        assert np.isfinite(saved["embeddings"]).all()
