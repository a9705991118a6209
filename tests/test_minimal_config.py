"""The minimal config of docs/your-signal.md on a one-channel folder, in a fresh interpreter as
users run it (its end-to-end run and embed: tests/test_commands.py): what
`run` refuses `validate` and `run --dry-run` refuse first, and a folder whose records miss the
evaluation fold stops right after `prepare`, before any training, naming the remedy."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

wfdb = pytest.importorskip("wfdb")

from cyclejepa.data.datasets import hash_fold  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
V102S = REPO.parent / "shared" / "data" / "physionet-samples" / "v102s"
TINY = [
    "training.steps=2", "training.batch_size=4", "training.checkpoint_every=2", "training.device=cpu",
    "evaluation.steps=[2]", "evaluation.bootstrap=20", "evaluation.umap=false", "evaluation.device=cpu",
    "evaluation.anomaly_records=2", "evaluation.severities=[0.0, 2.0]",
    "runs.seeds=[0]", "symmetry.spectrum=2x0+2x1+2x2", "model.projector.dim=10", "model.projector.hidden=8",
    "model.encoder.width=8", "model.encoder.hidden=8", "model.predictor.depth=1", "model.predictor.heads=2",
    "model.predictor.ffn=8",
]  # fmt: skip
"""Training and evaluation settings small enough for a test; the data, phase and augmentation
sections stay the docs' own."""

pytestmark = pytest.mark.skipif(not V102S.with_suffix(".hea").is_file(), reason="needs ../shared/data/physionet-samples")


def docs_config() -> str:
    """The config block of "Your signal in five minutes" (the first YAML block of the page)."""
    text = (REPO / "docs" / "your-signal.md").read_text()
    return re.search(r"```yaml\n(.*?)```", text, re.S).group(1)


def pleth_folder(root: Path, evaluated: int, trained: int = 6) -> Path:
    """30 s one-channel pieces of v102s's PLETH (250 Hz) as WFDB records at ``root``: ``evaluated``
    of them named to fall in fold 10 (the dataset's evaluation fold) and ``trained`` in others."""
    record = wfdb.rdrecord(str(V102S), channel_names=["PLETH"])
    signal, piece = record.p_signal[:, 0], int(30 * record.fs)
    wanted, names = {True: evaluated, False: trained}, []
    for index in range(1000):
        name = f"p{index:03d}"
        if wanted[hash_fold(name) == 10] > 0:
            wanted[hash_fold(name) == 10] -= 1
            names.append(name)
    root.mkdir(parents=True)
    for k, name in enumerate(names):
        part = signal[(k % 10) * piece : (k % 10 + 1) * piece].reshape(-1, 1)
        wfdb.wrsamp(name, fs=record.fs, units=["NU"], sig_name=["PLETH"], p_signal=part, fmt=["16"], write_dir=str(root))
    return root


def cyclejepa(*words: str, cwd: Path) -> subprocess.CompletedProcess:
    """``cyclejepa WORDS`` in a fresh interpreter that imports this checkout's package."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "cyclejepa", *words]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def with_settings(*overrides: str) -> list[str]:
    return [word for item in overrides for word in ("--set", item)]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "my-ppg.yaml"
    path.write_text(docs_config())
    return path


def test_what_run_refuses_of_the_augmentations_validate_and_the_dry_run_refuse_first(tmp_path, config):
    root = pleth_folder(tmp_path / "records", evaluated=1, trained=1)
    explicit = "augmentations=[{name: lead-dropout, options: {count: [1, 3]}}, {name: tone, options: {frequency: 25}}]"
    for command in (["validate"], ["run", "--dry-run"]):
        refused = cyclejepa(*command[:1], str(config), *command[1:], *with_settings(f"data.root={root}", explicit), cwd=tmp_path)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "augmentations[0].options.count: lead-dropout drops up to 3 channels, but dataset 'wfdb' has 1 (PLETH)" in (
            refused.stderr
        )
        assert "augmentations[1].options.frequency: tone at up to 25 Hz is not below the Nyquist frequency 12.5 Hz" in (
            refused.stderr
        )
    assert not (tmp_path / "runs").exists()


def test_a_folder_without_an_evaluation_record_stops_before_training_naming_the_remedy(tmp_path, config):
    root = pleth_folder(tmp_path / "records", evaluated=0, trained=3)
    done = cyclejepa("run", str(config), *with_settings(f"data.root={root}", *TINY), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    message = " ".join(done.stderr.split())
    assert "data.eval_folds: the cache at" in message and "keeps no record in folds [10]" in message
    assert "--set 'data.eval_folds=[" in message and "or add records" in message
    assert not (tmp_path / "runs" / "my-ppg" / "runs").exists()  # no run trained
