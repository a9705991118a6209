"""The shared progress bar: columns, counting by advance or completed, lazy rich import."""

import re
import sys

from cyclejepa.progress import progress_bar


def test_bar_counts_and_shows_fields_and_rate(capsys):
    with progress_bar(10, "run-a", completed=2, fields=("terms",), rate=True) as update:
        update(completed=4, terms="loss 0.5")
        update(3, terms="loss 0.25")
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.search(r"run-a .* 7/10 loss 0\.25 [0-9.]+ it/s", line), line


def test_bar_without_fields_shows_description_and_count(capsys):
    with progress_bar(5, "embedding") as update:
        for _ in range(5):
            update(1)
    assert re.search(r"embedding .* 5/5 ", capsys.readouterr().out), "no final 5/5 line"


def test_disabled_bar_draws_nothing_and_never_imports_rich(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "rich.progress", None)  # any import of it now fails
    with progress_bar(3, "hidden", enabled=False, fields=("terms",), rate=True) as update:
        update(2)
        update(completed=3, terms="x")
    assert capsys.readouterr().out == ""
