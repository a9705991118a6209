"""The shared progress display: a rich bar on a terminal (columns, counting by advance or
completed, lazy rich import), plain lines at a steady interval when stderr is a file."""

import re
import sys

import pytest

from cyclejepa import progress
from cyclejepa.progress import progress_bar


@pytest.fixture
def terminal(monkeypatch):
    monkeypatch.setattr(progress, "_terminal", lambda: True)


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(progress.time, "monotonic", fake)
    return fake


def test_bar_counts_and_shows_fields_and_rate(terminal, capsys):
    with progress_bar(10, "run-a", completed=2, fields=("terms",), rate=True, unit="steps") as update:
        update(completed=4, terms="loss 0.5")
        update(3, terms="loss 0.25")
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.search(r"run-a .* 7/10 loss 0\.25 [0-9.]+ steps/s", line), line


def test_bar_without_fields_shows_description_and_count(terminal, capsys):
    with progress_bar(5, "embedding") as update:
        for _ in range(5):
            update(1)
    assert re.search(r"embedding .* 5/5 ", capsys.readouterr().err), "no final 5/5 line"


def test_disabled_bar_draws_nothing_and_never_imports_rich(monkeypatch, capsys, terminal):
    monkeypatch.setitem(sys.modules, "rich.progress", None)  # any import of it now fails
    with progress_bar(3, "hidden", enabled=False, fields=("terms",), rate=True) as update:
        update(2)
        update(completed=3, terms="x")
    assert capsys.readouterr() == ("", "")


def test_a_log_file_gets_plain_lines_at_a_steady_interval(monkeypatch, capsys, clock):
    """Not a terminal: no rich, a line at the first update, one per interval, one at the end."""
    monkeypatch.setitem(sys.modules, "rich.progress", None)
    with progress_bar(1000, "winder-seed0", completed=100, fields=("terms",), rate=True, unit="steps", every=30) as update:
        for step in range(125, 1001, 25):  # 25 steps per second
            clock.now += 1.0
            update(completed=step, terms=f"loss {step / 1000:.3g}")
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "winder-seed0: 125/1000 (12%) loss 0.125, 25.0 steps/s, ETA 0:00:35"
    # 30 s later, then the last step
    assert lines[1] == "winder-seed0: 875/1000 (88%) loss 0.875, 25.0 steps/s, ETA 0:00:05"
    assert lines[2] == "winder-seed0: 1000/1000 (100%) loss 1, 25.0 steps/s, ETA 0:00:00"
    assert len(lines) == 3


def test_plain_lines_without_fields_or_progress_say_so(capsys, clock):
    with progress_bar(4, "preparing records", every=30) as update:
        update(0)
    assert capsys.readouterr().err.splitlines() == ["preparing records: 0/4 (0%), 0.0 it/s, ETA ?"]


def test_a_training_run_logs_step_losses_rate_and_eta(monkeypatch, capsys, tmp_path):
    from test_training import corpus, tiny_config

    from cyclejepa.pipeline import training_spec
    from cyclejepa.training import Trainer

    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)  # a line at every flush of the metrics
    x, phi = corpus(8)
    cfg = tiny_config(training={"steps": 30, "batch_size": 4, "checkpoint_every": 30})
    Trainer(training_spec(cfg, tmp_path / "winder-seed3", seed=0, transport_weight=1.0), x, phi, model_fs=100.0).fit()
    lines = capsys.readouterr().err.splitlines()
    pattern = r"winder-seed3: {}/30 \({}%\) loss \S+ predi \S+ regul \S+ trans \S+, [0-9.]+ steps/s, ETA \d:\d\d:\d\d"
    assert re.fullmatch(pattern.format(25, 83), lines[0]), lines
    assert re.fullmatch(pattern.format(30, 100), lines[1]) and len(lines) == 2, lines
