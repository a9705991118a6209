"""Atomic JSON files: concurrent writers of one file, and a write that fails on the disk."""

import json
import subprocess
import sys
import threading

import numpy as np
import pytest

from cyclejepa.jsonio import read_json, write_json


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
