"""The six PTB-XL benchmark tasks from scp_statements.csv: vocabulary sizes on PTB-XL's own table
(as the synthetic corpus and the real records carry it) and labels against independent
computations (the reader's diagnostic classes; a csv/ast recomputation of the aggregation)."""

import ast
import csv
import tarfile

import numpy as np
import pytest

from cyclejepa.data.ptbxl import PTBXL, SUBCLASSES, SUPERCLASSES
from cyclejepa.data.ptbxl_tasks import TASKS, task_labels, task_vocabulary
from cyclejepa.data.synthetic import write_synthetic_corpus

from conftest import SHARED

ARCHIVE = SHARED / "data" / "ptbxl-dev" / "ptbxl-dev-434.tar.xz"
SIZES = {"all": 71, "diagnostic": 44, "subdiagnostic": 23, "superdiagnostic": 5, "form": 19, "rhythm": 12}


pytestmark = pytest.mark.xdist_group("ptbxl_tasks")  # one worker builds the module's fixtures (`--dist loadgroup`)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    root = tmp_path_factory.mktemp("tasks") / "corpus"
    write_synthetic_corpus(root, 30, seed=0, progress=False)
    return PTBXL(root)


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """The real records' two tables (no signal is needed); skips when the archive is absent."""
    if not ARCHIVE.is_file():
        pytest.skip(f"real PTB-XL records not found at {ARCHIVE}")
    folder = tmp_path_factory.mktemp("real")
    with tarfile.open(ARCHIVE) as archive:
        members = [m for m in archive.getmembers() if m.name.endswith((".csv", "LICENSE.txt"))]
        archive.extractall(folder, members=members, filter="data")
    return PTBXL(folder / "ptbxl-dev")


@pytest.mark.parametrize("corpus", ["synthetic", "real"])
def test_vocabularies_have_the_benchmark_sizes_on_ptbxls_statement_table(corpus, request):
    statements = request.getfixturevalue(corpus).statements
    assert {task: len(task_vocabulary(statements, task)) for task in TASKS} == SIZES
    assert task_vocabulary(statements, "superdiagnostic") == tuple(sorted(SUPERCLASSES))
    assert task_vocabulary(statements, "subdiagnostic") == SUBCLASSES
    assert set(task_vocabulary(statements, "all")) == set(statements.index)


def naive_labels(root, task):
    """The benchmark's aggregation recomputed with the csv module and ast, record by record."""
    with open(root / "scp_statements.csv", newline="") as stream:
        table = {row[""]: row for row in csv.DictReader(stream)}
    flag = {"diagnostic": "diagnostic", "form": "form", "rhythm": "rhythm"}.get(task)
    out = {}
    with open(root / "ptbxl_database.csv", newline="") as stream:
        for row in csv.DictReader(stream):
            codes = ast.literal_eval(row["scp_codes"])
            found = set(codes) if task == "all" else {code for code in codes if table[code][flag] == "1.0"}
            out[int(float(row["ecg_id"]))] = found
    return out


@pytest.mark.parametrize("task", ["all", "diagnostic", "form", "rhythm"])
def test_statement_tasks_match_a_naive_recomputation_on_the_real_records(real, task):
    ids = real.metadata["ecg_id"].to_numpy()
    found = task_labels(real, task, ids)
    expected = naive_labels(real.root, task)
    for row, ecg_id in enumerate(ids):
        assert {found.classes[c] for c in np.flatnonzero(found.labels[row])} == expected[ecg_id]
    assert found.labelled.sum() == sum(bool(v) for v in expected.values())
    if task in ("form", "rhythm"):  # records without a statement of these tasks leave them
        assert 0 < found.labelled.sum() < len(ids)


@pytest.mark.parametrize("task, prefix", [("superdiagnostic", "super"), ("subdiagnostic", "sub")])
def test_diagnostic_classes_match_the_readers_own_multi_hot(real, task, prefix):
    meta = real.metadata
    found = task_labels(real, task, meta["ecg_id"])
    expected = meta[[f"{prefix}_{c}" for c in found.classes]].to_numpy()
    np.testing.assert_array_equal(found.labels, expected)
    assert found.labels.sum(axis=0).min() >= 0 and found.labelled.sum() == (expected.sum(axis=1) > 0).sum()


def test_windows_repeat_their_records_labels_and_unknown_inputs_are_refused(synthetic):
    ids = synthetic.metadata["ecg_id"].to_numpy()[:3]
    found = task_labels(synthetic, "superdiagnostic", np.repeat(ids, 2))
    np.testing.assert_array_equal(found.labels[0::2], found.labels[1::2])
    with pytest.raises(KeyError, match=r"ecg_id\(s\) \[99999\] are not in"):
        task_labels(synthetic, "all", [ids[0], 99999])
    with pytest.raises(ValueError, match="unknown PTB-XL benchmark task 'diagnostics'.*Did you mean 'diagnostic'"):
        task_labels(synthetic, "diagnostics", ids)
