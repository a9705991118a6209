"""Results that know when they mean nothing: collapsed tokens, degenerate probes, few windows or
patients, recordings whose people are unknown."""

import copy
import json
import math

import numpy as np
import pytest

from conftest import TINY_MODEL, synthetic_data
from cyclejepa import pipeline
from cyclejepa.config import parse_config
from cyclejepa.evaluation.mechanism import COLLAPSE_SIMILARITY, g1_gate
from cyclejepa.evaluation.probe import LinearProbe, score_probe
from cyclejepa.evaluation.report import bottom_line_markdown
from cyclejepa.evaluation.results import CheckpointResult
from cyclejepa.evaluation.validity import MIN_PATIENTS, MIN_WINDOWS, cell_validity
from cyclejepa.symmetry import U1Symmetry
from test_eval_mechanism import SPEC, equivariant_tokens, random_phases


def typed(results):
    """Saved results (JSON values) as the report reads them."""
    return [CheckpointResult.model_validate(result) for result in results]


def naive_mean_c_i(tokens, phases):
    """E[c_I] over every ordered pair of phase-valid tokens of every record, by a float64 loop."""
    total, pairs = 0.0, 0
    for z, phi in zip(np.asarray(tokens, np.float64), phases, strict=True):
        unit = z / np.linalg.norm(z, axis=-1, keepdims=True)
        valid = np.flatnonzero(np.isfinite(phi))
        for a in valid:
            for b in valid:
                if a != b:
                    total += unit[a] @ unit[b]
                    pairs += 1
    return total / pairs


@pytest.mark.parametrize("noise", [0.1, 0.25, 0.3, 0.35, 0.5, 1.0])
def test_gain_is_collapsed_exactly_when_the_tokens_are_alike_beyond_the_threshold(noise):
    rng = np.random.default_rng(3)
    phases = random_phases(rng, 16, 20)
    common = rng.normal(size=(16, 1, 12))  # one direction per record, plus isotropic noise
    tokens = common / np.linalg.norm(common, axis=-1, keepdims=True) + noise * rng.normal(size=(16, 20, 12)) / math.sqrt(12)
    gate = g1_gate(tokens, phases, U1Symmetry(SPEC), np.arange(16) // 2, replicates=50)
    similarity = naive_mean_c_i(tokens, phases)
    assert gate.true.mean_c_i == pytest.approx(similarity, abs=1e-12)
    assert gate.true.collapsed == (similarity >= COLLAPSE_SIMILARITY)
    if gate.true.collapsed:
        assert gate.passed is None and gate.not_testable == "collapsed" and gate.interval_excludes_zero is not None
    else:
        assert gate.passed is not None and gate.not_testable is None


def test_an_equivariant_encoder_is_not_collapsed_and_one_patient_is_named_as_the_reason():
    rng = np.random.default_rng(1)
    symmetry = U1Symmetry(SPEC)
    tokens, phases, _ = equivariant_tokens(rng, symmetry, 12, 60)
    gate = g1_gate(tokens, phases, symmetry, np.arange(12) % 3, replicates=50)
    assert not gate.true.collapsed and gate.passed is True and gate.not_testable is None
    one = g1_gate(tokens, phases, symmetry, np.zeros(12, int), replicates=50)
    assert one.passed is None and one.not_testable == "1 patient"


def test_a_probe_is_degenerate_when_it_ranks_nothing_or_one_class_is_left():
    rng = np.random.default_rng(0)
    groups = np.arange(40)
    Y = np.stack([np.arange(40) % 2, (np.arange(40) // 2) % 2, np.arange(40) % 5 == 0], axis=1).astype(int)
    X = rng.normal(size=(40, 6)) + Y[:, :1]
    healthy = score_probe(LinearProbe(C=1.0).fit(X, Y), X, Y, groups, classes=["a", "b", "c"], replicates=20)
    assert healthy.degenerate is None
    constant = LinearProbe(C=1.0).fit(np.ones((40, 6)), Y)  # nothing to tell the records apart
    assert np.ptp(constant.decision_function(np.ones((40, 6))), axis=0).max() == 0
    flat = score_probe(constant, np.ones((40, 6)), Y, groups, classes=["a", "b", "c"], replicates=20)
    assert flat.degenerate == "constant predictions" and flat.macro_auroc.point == 0.5
    one_left = Y.copy()
    one_left[:, 1:] = 1  # b and c have no negative evaluation record
    single = score_probe(LinearProbe(C=1.0).fit(X, Y), X, one_left, groups, classes=["a", "b", "c"], replicates=20)
    assert single.degenerate == "1 of 3 classes with positive and negative evaluation records"


pytestmark = pytest.mark.xdist_group("validity")  # one worker builds the module's fixtures (`--dist loadgroup`)


@pytest.fixture(scope="module")
def collapsed_run(tmp_path_factory):
    """The collapse reproducer at test size: regulariser and transport both off, 60 steps."""
    out = tmp_path_factory.mktemp("collapse")
    sections = copy.deepcopy(TINY_MODEL)
    sections["objectives"]["regulariser"]["weight"] = 0.0
    cfg = parse_config({
        "output_dir": str(out / "run"),
        "data": synthetic_data(out, 40),
        **sections,
        "optimiser": {"lr": 0.005, "grad_clip": 10.0},
        "training": {"steps": 60, "batch_size": 8, "checkpoint_every": 60, "device": "cpu"},
        "runs": {"seeds": [0], "arms": [{"name": "winder", "transport_weight": 0.0}]},
        "evaluation": {"steps": [60], "bootstrap": 20, "anomaly_records": 2, "severities": [0.0, 2.0], "families": ["ectopic"],
                       "umap": False, "eligible_min_positives": 1, "probe_c": 1.0, "random_baseline": False},
    })  # fmt: skip
    return cfg, pipeline.run_experiment(cfg, progress=False)


def test_a_run_with_regulariser_and_transport_off_reports_collapsed_not_a_gain_fraction(collapsed_run):
    cfg, report = collapsed_run
    result = json.loads((cfg.output_dir / "evaluation" / "winder-seed0-step000060.json").read_text())
    similarity = result["mechanism"]["true"]["mean_c_i"]
    assert similarity >= COLLAPSE_SIMILARITY and abs(result["mechanism"]["true"]["gain_fraction"]) > 1  # a meaningless ratio
    assert result["validity"]["collapsed"] and result["validity"]["token_similarity"] == similarity
    assert result["mechanism"]["passed"] is None and result["mechanism"]["not_testable"] == "collapsed"
    text = report.read_text()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert rows["Transport gain fraction ↑"] == f"| Transport gain fraction ↑ | collapsed (token similarity {similarity:.3f}) |"
    assert rows["G1 shuffled-φ gate"] == "| G1 shuffled-φ gate | Not testable (collapsed) |"
    assert f"**winder: collapsed.** Its tokens are {similarity:.3f} alike" in text
    assert f"{result['mechanism']['true']['gain_fraction']:.4f}" not in text  # the ratio is shown nowhere
    summary = json.loads((report.parent / "report.json").read_text())
    assert summary["headline"]["winder"]["Transport gain fraction ↑"] == f"collapsed (token similarity {similarity:.3f})"
    assert summary["validity"]["winder"]["collapsed"] and summary["grid"][0]["g1"] is None
    # 40 synthetic records leave 4 windows in fold 9: flagged as few, with both thresholds
    windows = result["mechanism"]["true"]["records"]
    assert windows < MIN_WINDOWS and result["validity"]["too_few"]["windows"] == windows
    assert f"**winder: few data.** {windows} evaluation windows of" in text and f"{MIN_PATIENTS} patients" in text


def test_recordings_of_unknown_people_are_called_recordings(collapsed_run):
    cfg, _ = collapsed_run
    result = json.loads((cfg.output_dir / "evaluation" / "winder-seed0-step000060.json").read_text())
    assert result["data"]["subjects_known"] is True  # the synthetic corpus names its patients
    known = bottom_line_markdown(typed([result]))
    assert "patient-clustered" in known and "same person may sit" not in known
    result["data"]["subjects_known"] = False  # as for a dataset that does not know its people
    unknown = bottom_line_markdown(typed([result]))
    assert "95 % recording-clustered percentile bootstrap" in unknown and "patient" not in unknown
    assert "the same person may sit in training and in evaluation" in unknown


def test_a_dataset_that_does_not_know_its_people_has_no_patients_row(collapsed_run, tmp_path, monkeypatch):
    from cyclejepa.data.cache import PreparedCache
    from cyclejepa.data.synthetic.dataset import SyntheticPTBXL
    from cyclejepa.evaluation.checkpoint_evaluation import write_protocol
    from cyclejepa.pipeline.evaluation import describe_data

    cfg, _ = collapsed_run
    cache = PreparedCache(pipeline.cache_dir(cfg))
    protocol = json.loads((cfg.output_dir / "evaluation" / "protocol.json").read_text())
    assert "| Patients |" in protocol["cohort_markdown"]
    monkeypatch.setattr(SyntheticPTBXL, "subjects_known", False)
    assert describe_data(cfg, cache).subjects_known is False
    (tmp_path / "evaluation").mkdir()
    write_protocol(
        tmp_path / "evaluation",
        cache,
        tuple(cfg.data.train_folds),
        tuple(cfg.data.eval_folds),
        describe_data(cfg, cache),
        "unused",
    )
    unknown = json.loads((tmp_path / "evaluation" / "protocol.json").read_text())["cohort_markdown"]
    assert "| Patients |" not in unknown and "| Recordings |" in unknown


def test_evaluate_refuses_a_checkpoint_whose_outputs_are_not_finite_naming_it(collapsed_run, tmp_path):
    import shutil

    import torch

    from cyclejepa.data.cache import PreparedCache
    from cyclejepa.evaluation.checkpoint_evaluation import NonFiniteOutputs
    from cyclejepa.outputs import OutputFolder
    from cyclejepa.pipeline.evaluation import evaluate_run_step
    from cyclejepa.training import load_checkpoint, save_checkpoint

    cfg, _ = collapsed_run
    shutil.copytree(cfg.output_dir / "runs", tmp_path / "runs")
    copy = cfg.model_copy(update={"output_dir": tmp_path})
    checkpoint = tmp_path / "runs" / "winder-seed0" / "checkpoints" / "step_000060.pt"
    state = load_checkpoint(checkpoint)
    last = [name for name in state["model"] if name.startswith("model.projector.") and name.endswith("weight")][-1]
    state["model"][last] = torch.full_like(state["model"][last], 3e38)  # finite weights whose tokens overflow float32
    assert all(torch.isfinite(t).all() for t in state["model"].values() if t.is_floating_point())
    save_checkpoint(state, checkpoint)
    plan = pipeline.plan_runs(copy)[0]
    cache = PreparedCache(pipeline.cache_dir(cfg))
    spec, objective = pipeline.evaluation_spec(copy, cache), pipeline.objective_spec(copy)
    with pytest.raises(
        NonFiniteOutputs, match=f"checkpoint {checkpoint} gives non-finite \\(NaN or infinite\\) .* windows, e.g. cache rows"
    ):
        evaluate_run_step(spec, objective, cache, OutputFolder(tmp_path), plan, 60, torch.device("cpu"))
    assert not (tmp_path / "evaluation" / "winder-seed0-step000060.json").exists()


def test_a_degenerate_probe_is_shown_as_such_not_as_an_auroc(collapsed_run):
    cfg, _ = collapsed_run
    result = json.loads((cfg.output_dir / "evaluation" / "winder-seed0-step000060.json").read_text())
    assert result["diagnostic"]["superclass"]["degenerate"] is None  # the probe of this run ranks its records
    point = result["diagnostic"]["superclass"]["macro_auroc"]["point"]
    result["diagnostic"]["superclass"]["degenerate"] = "constant predictions"  # as `degenerate_probe` says of a flat probe
    text = bottom_line_markdown(typed([result]))
    row = next(line for line in text.splitlines() if line.startswith("| Superclass macro-AUROC"))
    assert row.endswith("| degenerate probe (constant predictions) |") and f"{point:.4f}" not in row
    assert "**winder: the `superclass` probe is degenerate** (constant predictions)" in text


@pytest.fixture(scope="module")
def few_data_run(tmp_path_factory):
    """Both arms on 60 synthetic records, 4 steps: a handful of windows of fewer than 10 patients
    in fold 9, so every figure rests on few data."""
    out = tmp_path_factory.mktemp("few")
    cfg = parse_config({
        "output_dir": str(out / "run"),
        "data": synthetic_data(out, 60),
        **TINY_MODEL,
        "training": {"steps": 4, "batch_size": 8, "checkpoint_every": 4, "device": "cpu"},
        "runs": {"seeds": [0]},
        "evaluation": {"steps": [4], "bootstrap": 20, "anomaly_records": 2, "severities": [0.0, 2.0], "families": ["ectopic"],
                       "umap": False, "eligible_min_positives": 1, "probe_c": 1.0, "random_baseline": False},
    })  # fmt: skip
    report = pipeline.run_experiment(cfg, progress=False)
    results = [
        json.loads((cfg.output_dir / "evaluation" / f"{arm}-seed0-step000004.json").read_text()) for arm in ("winder", "control")
    ]
    return cfg, report, results


def few_words(result):
    """The words a figure of ``result`` carries, from the counts its evaluation saved."""
    few = result["validity"]["too_few"]
    return f"few data: {few['windows']} windows, {few['patients']} patients"


def table_rows(text, heading):
    """The rows of the table under ``heading`` (its header and rule line left out), keyed by their first cell."""
    lines = text.split(heading, 1)[1].split("\n\n")[1].splitlines()[2:]
    return {line.split(" | ")[0].lstrip("| "): line for line in lines}


def with_counts(result, windows, patients):
    """``result`` as if its mechanism and every probe had been scored on ``windows`` windows of ``patients`` patients."""
    changed = copy.deepcopy(result)
    changed["mechanism"]["true"]["records"], changed["mechanism"]["patients"] = windows, patients
    for probe in changed["diagnostic"].values():
        probe["counts"]["eval"], probe["counts"]["eval_patients"] = windows, patients
    return changed


def test_figures_on_few_data_say_so_in_their_own_cells_and_are_never_bold(few_data_run, tmp_path):
    from cyclejepa.pipeline.reporting import write_grid_summary

    cfg, report, (winder, control) = few_data_run
    for result in (winder, control):
        few = result["validity"]["too_few"]
        assert few["windows"] < MIN_WINDOWS and 2 <= few["patients"] < MIN_PATIENTS and not result["validity"]["collapsed"]
    words = few_words(winder)
    assert few_words(control) == words
    gain = [r["mechanism"]["true"]["gain_fraction"] for r in (winder, control)]
    g1 = ["Pass" if r["mechanism"]["passed"] else "Fail" for r in (winder, control)]
    text = report.read_text()
    bottom = table_rows(text, "## Bottom line")
    assert (
        bottom["Transport gain fraction ↑"]
        == f"| Transport gain fraction ↑ | {gain[0]:.4f} ({words}) | {gain[1]:.4f} ({words}) |"
    )
    assert bottom["G1 shuffled-φ gate"] == f"| G1 shuffled-φ gate | {g1[0]} ({words}) | {g1[1]} ({words}) |"
    point = winder["diagnostic"]["superclass"]["macro_auroc"]
    assert bottom["Superclass macro-AUROC, 5 classes ↑"].startswith(
        f"| Superclass macro-AUROC, 5 classes ↑ | {point['point']:.4f} [{point['low']:.4f}, {point['high']:.4f}] ({words}) |"
    )
    figures = [row for label, row in bottom.items() if not label.startswith("**")]  # section rows are bold
    assert len(figures) > 10 and not any("**" in row for row in figures)
    grid, mechanism = table_rows(text, "## Full grid"), table_rows(text, "## Mechanism validity")
    assert f"| {gain[0]:.4f} ({words}) | {g1[0]} ({words}) |" in grid["winder"]
    assert f"| {gain[1]:.4f} ({words}) |" in mechanism["control"] and mechanism["control"].endswith(f"| {g1[1]} ({words}) |")
    assert f"| class | winder ({words}) | control ({words}) | positives |" in text  # the raw per-class figures, headed so
    summary = json.loads((report.parent / "report.json").read_text())
    assert summary["headline"]["winder"]["Transport gain fraction ↑"] == gain[0]  # the number itself stays in the JSON
    summary_text = write_grid_summary(tmp_path, [("c0", cfg)]).read_text()
    assert f"| c0 |  | winder | {point['point']:.4f} ({words}) | {gain[0]:.4f} ({words}) | {g1[0]} ({words}) |" in summary_text


def test_a_figure_on_enough_data_prints_as_before_and_the_better_arm_is_bold(few_data_run):
    _, _, cell = few_data_run
    enough = [with_counts(r, MIN_WINDOWS, MIN_PATIENTS) for r in cell]
    assert all(cell_validity(r).meaningful for r in typed(enough))
    plain, flagged = (
        table_rows(bottom_line_markdown(typed(enough)), "## Bottom line"),
        table_rows(bottom_line_markdown(typed(cell)), "## Bottom line"),
    )
    gain = [r["mechanism"]["true"]["gain_fraction"] for r in cell]
    shown = [f"{g:.4f}" for g in gain]
    shown[gain.index(max(gain))] = f"**{shown[gain.index(max(gain))]}**"
    assert plain["Transport gain fraction ↑"] == f"| Transport gain fraction ↑ | {shown[0]} | {shown[1]} |"
    assert "few data" not in "".join(plain.values())
    words = f" ({few_words(cell[0])})"
    for label, row in flagged.items():  # the same cells, less the words and the bold
        if not label.startswith("**"):
            assert row.replace(words, "") == plain[label].replace("**", ""), label


def test_one_recording_reads_not_testable_and_few_data_in_recordings(few_data_run):
    _, _, cell = few_data_run
    alone = []
    for result in cell:
        one = with_counts(result, 4, 1)
        one["mechanism"]["passed"] = None  # as `g1_gate` leaves G1 below two subjects
        one["mechanism"]["paired_difference"]["testable"] = False
        one["data"]["subjects_known"] = False  # a dataset that does not know whose each recording is
        alone.append(one)
    rows = table_rows(bottom_line_markdown(typed(alone)), "## Bottom line")
    gain = alone[0]["mechanism"]["true"]["gain_fraction"]
    paired = alone[0]["mechanism"]["paired_difference"]["point"]
    assert rows["Transport gain fraction ↑"].startswith(
        f"| Transport gain fraction ↑ | {gain:.4f} (few data: 4 windows, 1 recording) |"
    )
    assert rows["G1 shuffled-φ gate"] == "| G1 shuffled-φ gate | Not testable (1 recording) | Not testable (1 recording) |"
    assert rows["Paired true − shuffled gain ↑"].startswith(
        f"| Paired true − shuffled gain ↑ | {paired:.4f} [not testable] (few data: 4 windows, 1 recording) |"
    )


def test_the_grid_summary_shows_a_degenerate_probe_in_words(few_data_run, tmp_path):
    import shutil

    from cyclejepa.evaluation.integrity import with_checksum
    from cyclejepa.pipeline.reporting import report_spec, write_grid_summary
    from cyclejepa.evaluation.report import write_report

    cfg, _, _ = few_data_run
    shutil.copytree(cfg.output_dir / "evaluation", tmp_path / "cell" / "evaluation")
    path = tmp_path / "cell" / "evaluation" / "winder-seed0-step000004.json"
    result = json.loads(path.read_text())
    result["diagnostic"]["superclass"]["degenerate"] = "constant predictions"  # as `degenerate_probe` says of a flat probe
    path.write_text(json.dumps(with_checksum(result)))
    cell_cfg = cfg.model_copy(update={"output_dir": tmp_path / "cell"})
    write_report(report_spec(cell_cfg), cell_cfg.output_dir)
    summary = write_grid_summary(tmp_path, [("c0", cell_cfg)]).read_text()
    assert "| c0 |  | winder | degenerate probe (constant predictions) |" in summary


def test_a_collapsed_arm_never_wins_bold_in_any_row(few_data_run):
    """Beside a collapsed arm no comparison is meaningful: no figure of the bottom line is bold,
    whichever arm's figure is the larger."""
    _, _, cell = few_data_run
    enough = [with_counts(r, MIN_WINDOWS, MIN_PATIENTS) for r in cell]
    assert any("**" in row for label, row in table_rows(bottom_line_markdown(typed(enough)), "## Bottom line").items()
               if not label.startswith("**"))  # fmt: skip
    for collapsed in range(2):
        arms = copy.deepcopy(enough)
        arms[collapsed]["mechanism"]["true"]["mean_c_i"] = COLLAPSE_SIMILARITY
        rows = table_rows(bottom_line_markdown(typed(arms)), "## Bottom line")
        figures = [row for label, row in rows.items() if not label.startswith("**")]
        assert len(figures) > 10 and not any("**" in row for row in figures), collapsed


def test_an_eligible_task_without_a_class_says_why_in_plain_words(few_data_run):
    """No class reaches evaluation.eligible_min_positives: the task's error names the setting,
    not the probe library's message about an empty label array."""
    from cyclejepa.data.cache import PreparedCache
    from cyclejepa.evaluation.embeddings import Representations
    from cyclejepa.evaluation.checkpoint_evaluation import probe_metrics
    from cyclejepa.pipeline.evaluation import evaluation_spec

    cfg, _, _ = few_data_run
    cache = PreparedCache(pipeline.cache_dir(cfg))
    strict = cfg.model_copy(update={"evaluation": cfg.evaluation.model_copy(update={"eligible_min_positives": 10**6})})
    rows = np.arange(len(cache.columns["fold"]))
    reps = Representations(np.random.default_rng(0).normal(size=(len(rows), 8)), rows, {})
    diagnostic = probe_metrics(evaluation_spec(strict, cache), cache, reps)[0]
    eligible = [task for task in diagnostic if task.endswith("-eligible")]
    assert eligible and all(
        diagnostic[task]["error"].startswith("no class has 1000000 positive windows in the fold where eligibility")
        and "evaluation.eligible_min_positives" in diagnostic[task]["error"]
        for task in eligible
    )
