"""Fuzzing the readers of untrusted text: the WFDB header reader and the config loader.

Each test draws thousands of inputs (hypothesis), mixing well-formed fields with hostile ones
(exponent forms, huge and negative numbers, stray bytes, alias chains, wrong types), and asserts
only that each input is either read or refused with a named error (`HeaderError`, `ConfigError`)
whose message names where (a line, a key path), within a memory bound (`peak_memory`); the time
of each is bounded by hypothesis' ``deadline`` (10 s: generous against a loaded CI machine, where
a case of 0.4 s took 1.9 s, and far below the minutes an unbounded alias bomb takes). The helpers `refused` and `peak_memory` are the
pattern for fuzzing any reader of the library.
"""

from __future__ import annotations

import contextlib
import math
import re
import tracemalloc
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cyclejepa.config import ConfigError, apply_overrides, long_integer_problems, parse_config, read_yaml
from cyclejepa.data.wfdb_format import FORMATS, HeaderError, check_rate, parse_header

FUZZ = settings(max_examples=400, deadline=10_000, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
"""Many cheap examples, each within 1 s (most take a few ms; tracemalloc slows allocation several
times); the same examples on every run (derandomize)."""
parse_config(apply_overrides({"data": {"dataset": "synthetic"}}, ["optimiser.lr=1"]))  # imports and registries, once
MEMORY_MB = 64
"""The most a single input may allocate while it is read or refused."""


@contextlib.contextmanager
def peak_memory(limit_mb: float = MEMORY_MB) -> Iterator[None]:
    """Fail when the block allocates more than ``limit_mb`` MiB at its peak (tracemalloc)."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        yield
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < limit_mb * 2**20, f"{peak / 2**20:.1f} MiB allocated, more than {limit_mb} MiB"


def refused(error: BaseException, kind: type[Exception], where: str) -> None:
    """``error`` is a ``kind`` (a ValueError subclass of the library) whose message matches ``where``
    (the regular expression of what it must name: a line number, a key path)."""
    assert isinstance(error, kind) and isinstance(error, ValueError), f"{type(error).__name__}: {error}"
    assert re.search(where, str(error)), f"{str(error)!r} does not name {where!r}"


# The WFDB header reader

NUMBERS = ["500", "5000e-1", "1e12", "0.12", "-0", "+250", "1e400", "nan", "inf", "0x10", "", "٥٠٠", "1_000", "1e-300",
           "99999999999999999999999", "-7", "257", "1000.0", "3.4e38", ".", "e", "1/0"]  # fmt: skip
"""Numeric fields, well formed and hostile: exponent forms, overflow, NaN, other digits, empty."""
FORMAT_FIELDS = [f"{f}{spf}{skew}{offset}" for f in ("16", "212", "80", "17", "0", "-16", "x") for spf in ("", "x1", "x4", "x0", "x99999999999999999999")
                 for skew in ("", ":3", ":-1") for offset in ("", "+24", "+-5")]  # fmt: skip
GAINS = [f"{gain}{baseline}{units}" for gain in ("200", "1000.0", "0", "-5", "1e-26", "nan", "1e400", "x")
         for baseline in ("", "(0)", "(-12)", "(x)", "(1e3)") for units in ("", "/mV", "/uV", "/NU", "/", "/m V")]  # fmt: skip
FILES = ["r.dat", "r.mat", "../x.dat", "/etc/passwd", "", "r.dat#", "\x00"]


@st.composite
def headers(draw) -> str:
    """A header: a record line and signal lines whose fields are each drawn from well-formed and
    hostile values, a free text field now and then."""
    free = st.text(max_size=8)
    n_lines = draw(st.integers(0, 4))
    record = [draw(st.sampled_from(["r", "r/2", "E07599", "#r"])), draw(st.sampled_from([str(n_lines), "-1", "x", *NUMBERS])),
              draw(st.sampled_from(NUMBERS + [f"{a}/{b}" for a in NUMBERS[:4] for b in NUMBERS[:4]])), draw(st.sampled_from(NUMBERS))]  # fmt: skip
    lines = [" ".join(record[: draw(st.integers(1, 4))])]
    for _ in range(n_lines):
        fields = [draw(st.sampled_from(FILES)), draw(st.sampled_from(FORMAT_FIELDS)), draw(st.sampled_from(GAINS)),
                  *draw(st.lists(st.sampled_from(NUMBERS), min_size=5, max_size=5)), draw(free)]  # fmt: skip
        lines.append(" ".join(fields[: draw(st.integers(1, len(fields)))]))
    lines += draw(st.lists(st.sampled_from(["# Age: 74", "#", "# Dx: 59118001", "", "   ", "\t"]), max_size=2))
    return "\n".join(lines)


def _check_header(text: str) -> None:
    """``text`` parses into a consistent header, or is refused by a `HeaderError` naming where."""
    try:
        with peak_memory():
            header = parse_header(text)
    except HeaderError as error:
        refused(error, HeaderError, r"line \d+|record line|header")
        return
    except Exception as error:  # noqa: BLE001 - any other type is the finding
        pytest.fail(f"{type(error).__name__} on {text!r}: {error}")
    assert header.n_signals == len(header.signals) >= 0
    assert math.isfinite(header.fs) and header.fs > 0 and (header.samples is None or header.samples >= 0)
    assert all(s.format in FORMATS and s.samples_per_frame >= 1 and math.isfinite(s.gain) for s in header.signals)
    try:
        check_rate(header)
    except HeaderError as error:
        refused(error, HeaderError, r"declares .* Hz, outside")


@FUZZ
@given(headers())
def test_generated_headers_parse_or_are_refused_by_line(text):
    _check_header(text)


@settings(FUZZ, max_examples=1000)
@given(st.text(max_size=400))
def test_arbitrary_text_parses_or_is_refused_by_line(text):
    _check_header(text)


# The config loader

KEYS = st.sampled_from([
    "optimiser.lr", "optimiser.betas", "optimiser.eps", "optimiser.weight_decay", "objectives.regulariser.weight",
    "data.window_s", "data.cache_fs", "data.decimation", "data.options", "data.amplitude_limits", "runs.seeds", "runs.arms",
    "training.steps", "evaluation.steps", "augmentations", "grid", "symmetry.spectrum", "model.encoder.width", "name",
    "data.train_folds", "phase.provider", "nosuch.key", "optimiser.nosuch",
])  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(
        [".inf", "-.inf", ".nan", "1e400", "9" * 4400, "[.nan, 2]", "{a: 1}", "&a [1]", "*a", "!!python/name:os.system"]
    ),
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=4)), max_leaves=12)  # fmt: skip


def _check_config(load) -> None:
    """``load()`` validates, or is refused by a `ConfigError` naming a key path or the YAML's fault."""
    try:
        with peak_memory():
            load()
    except ConfigError as error:
        refused(error, ConfigError, r"[a-z_]+(\.[a-z_0-9]+)*(\.\d+)?:|YAML|--set|top level|runs|grid")
    except Exception as error:  # noqa: BLE001 - any other type is the finding
        pytest.fail(f"{type(error).__name__}: {error}")


def _from_yaml(text: str):
    """What `load_config` does with a file's text (without the file)."""
    import yaml

    try:
        raw = read_yaml(text) or {}
    except yaml.YAMLError as error:
        raise ConfigError([f"invalid YAML: {error}"]) from None
    if not isinstance(raw, dict):
        raise ConfigError(["the top level must be a mapping of sections"])
    problems = long_integer_problems(raw)
    if problems:
        raise ConfigError(problems)
    return parse_config(raw)


@settings(FUZZ, max_examples=200)
@given(st.dictionaries(KEYS, VALUES, max_size=4))
def test_generated_overrides_validate_or_are_refused_by_key_path(overrides):
    items = [f"{key}={value if isinstance(value, str) else repr(value)}" for key, value in overrides.items()]
    _check_config(lambda: parse_config(apply_overrides({"data": {"dataset": "synthetic"}}, items)))


@settings(FUZZ, max_examples=100)
@given(st.dictionaries(KEYS, VALUES, max_size=4))
def test_generated_documents_validate_or_are_refused_by_key_path(document):
    import yaml

    nested: dict = {}
    for key, value in document.items():
        *parents, leaf = key.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    _check_config(lambda: _from_yaml(yaml.safe_dump(nested)))


@settings(FUZZ, max_examples=40)
@given(st.integers(1, 12), st.integers(1, 12), st.booleans())
def test_alias_chains_are_refused_within_bounds(levels, width, mapping):
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    for i in range(1, levels):
        items = [f"k{j}: *a{i - 1}" for j in range(width)] if mapping else [f"*a{i - 1}"] * width
        lines.append(f"a{i}: &a{i} {{{', '.join(items)}}}" if mapping else f"a{i}: &a{i} [{', '.join(items)}]")
    _check_config(lambda: _from_yaml("\n".join(lines) + f"\nname: *a{levels - 1}\n"))


@FUZZ
@given(st.text(max_size=300))
def test_arbitrary_yaml_text_is_read_or_refused(text):
    _check_config(lambda: _from_yaml(text))
