"""examples/ptbxl_dev.yaml on the real PTB-XL records of ../shared: prepare and a few CPU steps.

The development protocol on the 434 real records (folds 1-8 train, fold 9 scores) is a GPU run;
here the same config prepares every real record and trains a small model for a few steps.
"""

import json
import logging
import tarfile
from pathlib import Path

import numpy as np
import pytest

from cyclejepa import pipeline
from cyclejepa.config import load_config

from conftest import SHARED

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ptbxl_dev.yaml"
ARCHIVE = SHARED / "data" / "ptbxl-dev" / "ptbxl-dev-434.tar.xz"
PAPER_QC_EXCLUSION = 0.010  # the paper: 1.0 % of PTB-XL records fail phase QC
SMALL_MODEL = [
    "model.encoder.width=16",
    "model.encoder.hidden=32",
    "model.projector.hidden=32",
    "model.projector.dim=16",
    "model.predictor.depth=1",
    "model.predictor.heads=2",
    "model.predictor.ffn=32",
    'symmetry.spectrum="2x0+3x1+3x2+1x3"',
    "objectives.regulariser.options.num_directions=16",
    "training.steps=3",
    "training.batch_size=8",
    "training.checkpoint_every=3",
    "training.device=cpu",
    "evaluation.steps=[3]",
]


pytestmark = pytest.mark.xdist_group("ptbxl_dev")  # one worker builds the module's fixtures (`--dist loadgroup`)


@pytest.fixture(scope="module")
def ptbxl_dev(tmp_path_factory) -> Path:
    """The real records, extracted from the shared archive; skips when it is absent."""
    if not ARCHIVE.is_file():
        pytest.skip(f"real PTB-XL records not found at {ARCHIVE}")
    folder = tmp_path_factory.mktemp("ptbxl-dev")
    with tarfile.open(ARCHIVE) as archive:
        archive.extractall(folder, filter="data")
    return folder / "ptbxl-dev"


@pytest.fixture(scope="module")
def prepared(ptbxl_dev, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    cfg = load_config(EXAMPLE, [f"data.root={ptbxl_dev}", f"output_dir={out}", "data.workers=2", *SMALL_MODEL])
    return cfg, pipeline.prepare(cfg, progress=False)


def test_every_real_record_is_prepared_and_few_fail_phase_qc(prepared, caplog):
    cfg, cache = prepared
    assert cache.manifest["counts"]["rejected"] == 0 and not cache.rejections
    assert len(cache) == 434
    folds = np.bincount(cache.columns["fold"], minlength=11)[1:]
    assert folds.tolist() == [58, 51, 34, 42, 47, 33, 44, 44, 81, 0]  # data/README.md
    failed = int((~cache.columns["qc_ok"]).sum())
    rate = failed / len(cache)
    logging.getLogger(__name__).warning(
        "phase QC exclusion on the real PTB-XL records: %d of %d (%.1f %%; the paper: %.1f %%)",
        failed,
        len(cache),
        100 * rate,
        100 * PAPER_QC_EXCLUSION,
    )
    assert rate <= 5 * PAPER_QC_EXCLUSION, cache.columns["qc_reason"][~cache.columns["qc_ok"]]


def test_a_small_model_trains_on_the_real_records(prepared):
    cfg, cache = prepared
    directory = Path(cfg.output_dir) / "runs" / "winder-seed0"
    trainer = pipeline.train_run(cfg, cache, directory, seed=0, transport_weight=1.0, progress=False)
    rows = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2, 3]
    assert all(np.isfinite([row[k] for k in ("loss", "prediction", "regulariser", "transport")]).all() for row in rows)
    assert 0 < rows[0]["transport"] < 2  # 1 − mean cosine of real phase-valid tokens
    assert len(trainer.batches) == len(cache.select(range(1, 9))) == 353
