"""The ```python examples of docs/*.md run as written.

Every block runs, unless the line before it says ``<!-- not run: REASON -->`` (a fragment that
needs the caller's data, PTB-XL, a trained run or a GPU). The blocks of one page share a
namespace, in page order, and run in a fresh interpreter in a temporary folder.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(r"^(?:<!-- not run: (?P<reason>.*?) -->\n)?```python\n(?P<code>.*?)^```", re.S | re.M)
RUNNER = """
import json, sys, traceback
failures = []
for page, blocks in json.load(sys.stdin).items():
    namespace = {"__name__": "__docs__"}
    for line, code in blocks:
        try:
            exec(compile(code, f"{page}:{line}", "exec"), namespace)
        except BaseException:
            failures.append(f"{page}:{line}: " + traceback.format_exc(limit=-3))
print(json.dumps(failures))
"""


def blocks(page: Path) -> list[tuple[int, str, str | None]]:
    """(first line of the code, code, not-run reason or None) of every ```python block."""
    text = page.read_text()
    return [(text.count("\n", 0, m.start("code")) + 1, m.group("code"), m.group("reason")) for m in BLOCK.finditer(text)]


def runnable() -> dict[str, list[tuple[int, str]]]:
    pages = {page.name: blocks(page) for page in sorted(DOCS.glob("*.md"))}
    return {name: [(line, code) for line, code, reason in found if reason is None] for name, found in pages.items()}


def test_every_block_is_found_and_each_skipped_one_says_why():
    text = "\n".join(page.read_text() for page in DOCS.glob("*.md"))
    found = {name: blocks(DOCS / name) for name in runnable()}
    assert sum(len(b) for b in found.values()) == text.count("```python")  # no block missed
    reasons = [reason for page in found.values() for _, _, reason in page if reason is not None]
    assert all(len(reason.strip()) > 10 for reason in reasons), reasons
    assert runnable()["streaming.md"], "the streaming example is meant to run"


@pytest.mark.slow
def test_the_runnable_examples_run(tmp_path):
    pages = {name: found for name, found in runnable().items() if found}
    result = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps(pages),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    failures = json.loads(result.stdout.strip().splitlines()[-1])
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("code", ["raise ValueError('boom')", "undefined_name + 1"])
def test_a_failing_example_is_reported_with_its_page_and_line(tmp_path, code):
    page = {"page.md": [[7, code]]}
    result = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(page), capture_output=True, text=True)
    (failure,) = json.loads(result.stdout)
    assert failure.startswith("page.md:7: ") and ("ValueError: boom" in failure or "NameError" in failure)
