"""README.md of an exported encoder, the model card: YAML front matter as model hubs read it
(licence, library, tags, the data's licence and citation, the metrics with their evaluation size
and bootstrap count), then what it is, its input, its training data, the run's own evaluation
figures at the exported step, intended use and limits."""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from cyclejepa.evaluation.probe import ProbeResult
from cyclejepa.evaluation.report import bottom_line_markdown
from cyclejepa.evaluation.results import CheckpointResult
from cyclejepa.export.spec import CardSpec

__all__ = ["front_matter", "model_card"]

LICENCE = "mit"
"""The library's licence, the weights' by default (the card names the data's licence apart)."""


def model_card(config: dict[str, Any], card: CardSpec, result: CheckpointResult | None) -> str:
    """The card's Markdown from the package's ``config`` (config.json), the run's training facts
    ``card`` and its evaluation ``result`` at the exported step."""
    run, prep, model = config["run"], config["preprocessing"], config["model"]
    tokens = prep["n_tokens"]
    return (
        front_matter(config, card, result)
        + "\n\n".join(
            [
                f"# {run['experiment']}: {run['run']}, step {run['step']}",
                f"A Winder encoder (encoder + projector, {model['deployed_parameters']:,} parameters) exported by "
                f"cyclejepa {config['cyclejepa_version']} from run `{run['run']}` of experiment `{run['experiment']}`: "
                f"arm `{run['arm']}` (λ_trans = {run['transport_weight']:g}), seed {run['seed']}, checkpoint step "
                f"{run['step']} of {card.steps}, run identity `{run['run_hash']}`. Load it with "
                f"`cyclejepa.load_pretrained(DIR)`; `config.json` says how to prepare its input without cyclejepa.",
                _input_section(prep, config["symmetry"], tokens, model),
                _running_section(prep),
                _training_section(card),
                _evaluation_section(result, run, list(card.eval_folds)),
                _USE,
                _limits(card.dataset, prep),
            ]
        )
        + "\n"
    )


def front_matter(config: dict[str, Any], card: CardSpec, result: CheckpointResult | None) -> str:
    """The card's YAML front matter, between ``---`` lines."""
    run = config["run"]
    meta = {
        "license": LICENCE,
        "library_name": "cyclejepa",
        "tags": ["cyclejepa", "self-supervised", "phase-equivariant", "time-series", "feature-extraction", card.dataset],
        "datasets": [card.dataset],
        "data_license": card.data_licence or "unknown",
        "data_citation": card.data_citation or "unknown",
        "model-index": [
            {
                "name": f"{run['experiment']}/{run['run']}-step{run['step']}",
                "results": [] if result is None else _results(result, card),
            }
        ],
    }
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000) + "---\n\n"


def _results(result: CheckpointResult, card: CardSpec) -> list[dict]:
    """One model-index result per diagnostic task: macro-AUROC, its interval and bootstrap
    count, and the records and patients it was measured on."""
    results = []
    for task, probe in result.diagnostic.items():
        if not isinstance(probe, ProbeResult):  # a task that could not be evaluated
            continue
        auroc, counts = probe.macro_auroc, probe.counts
        metric = {
            "type": "roc_auc",
            "name": f"macro-AUROC ({task})",
            "value": round(float(auroc.point), 4),
            "ci_95": [round(float(auroc.low), 4), round(float(auroc.high), 4)],
            "bootstrap": auroc.replicates,
            "records": counts.get("eval_records", counts.get("eval")),
            "patients": counts.get("eval_patients"),
        }
        results.append(
            {
                "task": {"type": "feature-extraction", "name": f"linear probe, {task}"},
                "dataset": {"name": card.dataset, "type": card.dataset, "split": f"folds {list(card.eval_folds)}"},
                "metrics": [metric],
            }
        )
    return results


def _channels(prep: dict) -> str:
    """``I, II, ... (mV)`` when every channel has one unit, else each channel with its own."""
    units = prep.get("units") or []
    if len(set(units)) == 1:
        return f"{', '.join(prep['channels'])} ({units[0]})"
    return ", ".join(f"{c} ({u})" for c, u in zip(prep["channels"], units, strict=True))


def _input_section(prep: dict, symmetry: dict, tokens: int, model: dict) -> str:
    phase = prep["phase_provider"] + (f" ({prep['phase_options']})" if prep["phase_options"] else "")
    return "\n".join(
        [
            "## Input and output",
            "",
            f"- Channels, in this order, in their units: {_channels(prep)}.",
            f"- Rate: resampled to {prep['cache_fs']:g} Hz (polyphase, Kaiser β = 5), phased there, decimated by "
            f"{prep['decimation']} to the model's {prep['model_fs']:g} Hz.",
            f"- Window: {prep['window_s']:g} s; a longer record is cut into consecutive windows, a shorter tail dropped.",
            _preparation_line(prep),
            "- Normalisation: per-channel z-score with the training folds' mean and std (in `config.json`).",
            f"- Phase: provider `{phase}`; token phases at patch centres; a window failing its phase QC gets no embedding.",
            f"- Output: {tokens} tokens of {model['projector']['out_dim']} dimensions per window (one per "
            f"{prep['token_patch']} samples at {prep['model_fs']:g} Hz); a record's embedding in cyclejepa is the mean of "
            "its phase-valid tokens, which needs the library's phase provider and QC; the mean of all tokens "
            "(`mean_tokens`) is the one the graphs and `reference.py` reproduce alone. Phase action: "
            f"`{symmetry['name']}`, spectrum `{symmetry['spectrum']}`, basis `{symmetry['basis']}`.",
        ]
    )


def _preparation_line(prep: dict) -> str:
    """What each record goes through before windowing (`SignalPreparation`), when anything."""
    found = prep.get("preparation")
    if not found:
        return "- Preparation before windowing: none (the record as read, in its units)."
    cutoffs = ", ".join(
        f"{channel} {hz:g} Hz" for channel, hz in zip(prep["channels"], found["highpass_hz"], strict=True) if hz is not None
    )
    return (
        f"- Preparation before windowing: the first {found['drop_s']:g} s dropped; zero-phase high-pass "
        f"{cutoffs or 'none'}; z-score scope `{found['scope']}` (then the corpus z-score below)."
    )


def _running_section(prep: dict) -> str:
    """How to embed with the package: with cyclejepa, and with reference.py (numpy + onnxruntime):
    its command line, its input and output, the preparation it applies and when tokens come."""
    channels = " ".join(f"--channels {shlex.quote(channel)}" for channel in prep["channels"])
    return "\n\n".join(
        [
            "## Running it",
            "With cyclejepa: `cyclejepa embed DIR RECORD... --out embedded.npz` for record files, or "
            "`cyclejepa.load_pretrained(DIR).embed(signal, fs, channel_names)` for arrays.",
            "Without cyclejepa (numpy and onnxruntime only; it needs `encoder_streaming.onnx`, which "
            "`cyclejepa export --onnx` writes), with `DIR` this package's folder:",
            f"```bash\npython DIR/reference.py SIGNAL.npy --fs {prep['cache_fs']:g} {channels} --out tokens.npy "
            "--mean-tokens mean.npy\n```",
            f"`SIGNAL.npy` is (channels, samples) of real numbers in the units above, at the rate given by `--fs` "
            f"({prep['model_fs']:g} Hz or more; it is resampled to {prep['cache_fs']:g} Hz); one `--channels` per row, in "
            "the file's order (other rows are ignored). `tokens.npy` is (windows, tokens, K) float32, the tokens "
            "`cyclejepa embed` gives, and `mean.npy` their mean (K,). Nothing else is printed: input it cannot prepare "
            "as the library does is refused with one `error:` line on stderr and exit status 1, nothing written; a record "
            "far outside the training normalisation is encoded and flagged on stderr (`out_of_range: ...`, as "
            "`cyclejepa embed` flags it).",
            _reference_steps(prep),
        ]
    )


def _reference_steps(prep: dict) -> str:
    """The steps reference.py applies to this package's input, and when its tokens come."""
    found = prep.get("preparation")
    steps = (
        f"It applies, in order: the channels in the package's order; resampling to {prep['cache_fs']:g} Hz; "
        f"{_before_windowing(found)}windows of {prep['window_s']:g} s; decimation by {prep['decimation']} with "
        f"`decimation_filter`; the training z-score; the streaming graph, {prep['token_patch']} samples a step, its "
        "state restarted at every window."
    )
    if not found:
        return steps + " Each sample is prepared as it arrives: a token comes once its samples have passed the decimation filter."
    return steps + (
        " A zero-phase high-pass is not causal (its backward pass starts at the record's end) and a record's z-score "
        "needs all of it, so reference.py holds the record's samples and prepares and encodes them when the record "
        "ends, as `cyclejepa embed` prepares whole records: a device gets this package's tokens one record at a time, "
        "the latency being the record's length."
    )


def _before_windowing(found: dict | None) -> str:
    """The preparation before windowing as a clause of `_reference_steps` ('' without one)."""
    if not found:
        return ""
    parts = [f"the first {found['drop_s']:g} s dropped"]
    if any(cutoff is not None for cutoff in found["highpass_hz"]):
        parts.append(
            "the high-pass with the second-order sections of `config.json` `highpass_filter.sos`, run "
            "forward and backward as `scipy.signal.sosfiltfilt` runs them"
        )
    if found["scope"] != "corpus":
        parts.append(f"each {found['scope']}'s own z-score per channel")
    return "; ".join(parts) + "; "


def _training_section(card: CardSpec) -> str:
    counts = card.counts
    options = f" with options {card.dataset_options}" if card.dataset_options else ""
    augmentations = ", ".join(card.augmentations) or "none"
    return "\n".join(
        [
            "## Training data",
            "",
            f"- Dataset `{card.dataset}`{options}: records {counts['records']}, of which rejected "
            f"{counts['rejected']}; windows kept {counts['kept']}, of which failing phase QC {counts['qc_failed']}.",
            f"- Pre-training folds {list(card.train_folds)}; evaluation folds {list(card.eval_folds)} "
            "(never used for training or for the normalisation).",
            f"- {card.steps} steps of batch {card.batch_size}, AdamW at lr {card.lr:g}; augmentations: {augmentations}.",
        ]
    )


def _evaluation_section(result: CheckpointResult | None, run: dict, folds: list[int]) -> str:
    if run.get("weights", "checkpoint") != "checkpoint":
        return (
            f"## Evaluation\n\nThese weights were {run['weights']} (step {run['step']} of `{run['run']}`): "
            "the run's evaluation does not apply to them, and no figures are reported."
        )
    if result is None:
        return (
            f"## Evaluation\n\nStep {run['step']} of this run was not evaluated (no "
            f"`evaluation/{run['run']}-step*.json` for it): no figures to report."
        )
    table = bottom_line_markdown([result]).removeprefix("## Bottom line\n\n")
    table = table.replace(" Bold: the better arm where the comparison is non-degenerate.", "")  # one arm here
    return (
        f"## Evaluation\n\nThe run's own evaluation of this checkpoint, evaluation folds {folds} "
        f"(`evaluation/{run['run']}-step{run['step']:06d}.json` of its output directory):\n\n{table}"
    )


_USE = """## Intended use

Research on cyclic biosignals: frozen record and token embeddings for linear probes, retrieval
and phase-aware analysis; causal, token-by-token encoding on a device (the ONNX and TorchScript
graphs, if exported beside this card); transport-violation scores as a research signal of
beats that break the learned phase structure."""


def _limits(dataset: str, prep: dict) -> str:
    return "\n".join(
        [
            "## Limits",
            "",
            "- Not a medical device; not validated for diagnosis, triage or monitoring of patients.",
            f"- Trained on `{dataset}` only: other populations, devices, sensor placements, filters and "
            "noise levels are untested.",
            f"- Input must be prepared as `config.json` says (channels, {prep['cache_fs']:g} Hz, normalisation); "
            f"records sampled below {prep['model_fs']:g} Hz, or lacking a channel, are refused.",
            "- Equivariance to the phase action is learned, not exact: read the transport gain fraction and the G1 "
            "gate above before relying on it.",
        ]
    )
