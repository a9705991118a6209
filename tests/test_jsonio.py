"""Atomic JSON files: concurrent writers of one file, and a write that fails on the disk; the
sha256 of canonical JSON that every identity and checksum uses."""

import hashlib
import json
import subprocess
import sys
import threading

import numpy as np
import pytest

from cyclejepa.jsonio import flat_json, json_sha256, read_json, short_hash, write_json


def test_concurrent_writers_of_one_file_never_collide(tmp_path):
    path = tmp_path / "result.json"
    values = {writer: {"writer": writer, "values": list(range(writer, writer + 2000))} for writer in range(6)}
    failures, start = [], threading.Barrier(len(values))

    def write_many(writer):
        start.wait()
        try:
            for _ in range(40):
                write_json(path, values[writer])
        except Exception as error:  # noqa: BLE001 - the test reports every writer's failure
            failures.append(repr(error))

    threads = [threading.Thread(target=write_many, args=(w,)) for w in values]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert read_json(path) in values.values()  # one writer's whole text, not a mixture
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]  # no temporary left behind


def test_numpy_values_are_written_as_plain_json(tmp_path):
    path = write_json(tmp_path / "a" / "v.json", {"x": np.arange(3), "y": np.float32(0.5), "p": tmp_path})
    assert json.loads(path.read_text()) == {"x": [0, 1, 2], "y": 0.5, "p": str(tmp_path)}
    with pytest.raises(TypeError, match="cannot write object as JSON"):
        write_json(tmp_path / "b.json", {"x": object()})
    assert not (tmp_path / "b.json").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["a"]


FULL_DISK = """
import resource, signal, sys
from cyclejepa.jsonio import write_json
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    write_json(sys.argv[1], list(range(10_000)))
except OSError as error:
    print(error)
"""


def test_a_write_the_disk_refuses_names_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "big.json"
    done = subprocess.run([sys.executable, "-c", FULL_DISK, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"[Errno 27] cannot write {path}: File too large"
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ one sha256 of canonical JSON

HASHED = [
    {},
    {"b": [1, 2.5, None], "a": {"z": "é", "y": True}},
    {"data.fs": 500.0, "phase": {"provider": "pulse", "options": {}}, "steps": 1200},
    [3, {"key with space": "x, y: z"}],
]
"""Values as the identities, the cache manifest, results and export packages hash them."""


def _old_default(value):
    return value.tolist() if hasattr(value, "tolist") else str(value)


@pytest.mark.parametrize("value", HASHED)
def test_every_hash_is_the_formula_its_files_were_written_with(value):
    """Each caller's digest equals the formula it used before it shared `json_sha256`, so that
    no run identity, cache manifest, result checksum or package digest changes."""
    from cyclejepa.pipeline.identity import identity_hash
    from cyclejepa.data.cache.files import arguments_hash
    from cyclejepa.evaluation.integrity import content_checksum
    from cyclejepa.export.package import _config_digest

    spaced = hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()
    assert json_sha256(value) == spaced
    assert identity_hash(value) == spaced[:16]
    assert arguments_hash(value) == spaced
    if isinstance(value, dict):
        assert _config_digest({**value, "config_sha256": "old"}) == spaced
        compact = json.dumps(value, sort_keys=True, separators=(",", ":"), default=_old_default)
        assert content_checksum({**value, "checksum": "old"}) == hashlib.sha256(compact.encode()).hexdigest()


def test_the_hash_reads_keys_in_any_order_and_tells_separators_apart():
    assert json_sha256({"a": 1, "b": 2}) == json_sha256({"b": 2, "a": 1})
    assert json_sha256({"a": 1}) != json_sha256({"a": 1}, compact=True)
    assert json_sha256({"a": 1}, compact=True) == hashlib.sha256(b'{"a":1}').hexdigest()
    with pytest.raises(TypeError):
        json_sha256({"a": np.float32(1)})
    assert json_sha256({"a": np.arange(2)}, default=lambda a: a.tolist()) == json_sha256({"a": [0, 1]})


def test_flat_json_names_every_leaf_by_its_key_path():
    """Dicts nest with dots, lists of dicts with [i]; empty dicts and lists of plain values are leaves."""
    value = {"a": {"b": 1, "c": [1, 2]}, "d": [{"e": None}, {"f": {"g": "x"}}], "h": {}, "i": []}
    assert flat_json("cfg", value) == {
        "cfg.a.b": 1, "cfg.a.c": [1, 2], "cfg.d[0].e": None, "cfg.d[1].f.g": "x", "cfg.h": {}, "cfg.i": [],
    }  # fmt: skip
    assert flat_json("seed", 3) == {"seed": 3}


def test_short_hash_is_the_first_16_digits_of_the_canonical_sha256():
    value = {"b": [1, 2.5], "a": "λ"}
    assert short_hash(value) == hashlib.sha256(b'{"a": "\\u03bb", "b": [1, 2.5]}').hexdigest()[:16]
