"""The weights package of a trained encoder: ``model.safetensors``, ``config.json``, ``MODEL_CARD.md``.

`export_run` writes the deployed path of a run's checkpoint (encoder + projector) and the
weights of its phase action (the symmetry's basis, when it has any) as safetensors;
``config.json`` holds everything needed to prepare the input and rebuild the model: channels
and order, rates, window, resampling and decimation filters, normalisation, token patch, phase
provider and options, the symmetry's spectrum and basis, the architecture, the library
version, the run's identity and step, and the sha256 of every other file of the package
(``files``) and of its own content (``config_sha256``, over the sorted JSON of every other
key). With ``onnx`` / ``torchscript`` it adds the offline and streaming graphs
(`cyclejepa.export.graphs`).

`load_pretrained` needs only the package: it verifies every checksum, rebuilds the
architecture from ``config.json`` and loads the weights strictly (a missing, extra or
misshapen tensor is an error naming it), into the same `Encoder` that `load_encoder` gives, so
both embed a record alike.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cyclejepa.version import __version__
from cyclejepa.data.cache import PHASE_REVISION, open_cache
from cyclejepa.data.datasets import sha256_file
from cyclejepa.data.preprocess import KAISER_BETA
from cyclejepa.embed import Encoder, Preprocessing, load_encoder, locate_run
from cyclejepa.export.card import evaluation_result, model_card
from cyclejepa.export.graphs import export_onnx, export_torchscript, require_onnx, state_names
from cyclejepa.models import JEPAModel, ProjectorMLP, StreamingEncoder
from cyclejepa.registry import ENCODERS, SYMMETRIES
from cyclejepa.training.checkpoint import checkpoint_path, load_checkpoint

__all__ = ["FORMAT", "FORMAT_VERSION", "PackageError", "export_run", "load_pretrained", "read_package_config"]

FORMAT = "cyclejepa-encoder"
FORMAT_VERSION = 1
WEIGHTS, CONFIG, CARD = "model.safetensors", "config.json", "MODEL_CARD.md"
GRAPHS = {
    ("onnx", False): "encoder.onnx",
    ("onnx", True): "encoder_streaming.onnx",
    ("torchscript", False): "encoder.pt",
    ("torchscript", True): "encoder_streaming.pt",
}
"""File name of each exported graph, by (format, streaming)."""


class PackageError(ValueError):
    """A package that is damaged, changed after export, or not a cyclejepa encoder package."""


def _safetensors():
    try:
        import safetensors.torch
    except ImportError:
        raise ImportError("weights packages need safetensors: pip install 'cyclejepa[export]'") from None
    return safetensors.torch


def export_run(
    run_dir: str | os.PathLike,
    out: str | os.PathLike,
    *,
    step: int | None = None,
    arm: str | None = None,
    seed: int | None = None,
    onnx: bool = False,
    torchscript: bool = False,
    overwrite: bool = False,
) -> Path:
    """Write the weights package of a run's checkpoint to the folder ``out``; returns ``out``.

    ``run_dir``, ``step``, ``arm`` and ``seed`` choose the checkpoint as `load_encoder` does.
    ``onnx`` / ``torchscript`` add the offline and streaming graphs. An existing ``out`` is
    refused unless ``overwrite``. The package is written beside ``out`` and renamed into place.
    """
    safetensors = _safetensors()
    if onnx:
        require_onnx()
    out = Path(out)
    _check_target(out, overwrite)
    encoder = load_encoder(run_dir, step, "cpu", arm=arm, seed=seed)
    cfg, plan = locate_run(Path(run_dir), arm, seed)
    step = encoder.source["step"]
    meta = load_checkpoint(checkpoint_path(Path(encoder.source["run"]) / "checkpoints", step))["meta"]
    manifest = open_cache(cfg).manifest
    model = encoder.model
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "cyclejepa_version": __version__,
        "torch_version": torch.__version__,
        "run": {
            "experiment": cfg.name, "run": plan.name, "arm": plan.arm.name, "seed": meta["seed"],
            "transport_weight": meta["transport_weight"], "step": step, "run_hash": meta["run_hash"],
            "identity": meta["identity"],
        },
        "model": _architecture(cfg, model),
        "symmetry": cfg.symmetry.model_dump(mode="json"),
        "preprocessing": _preprocessing(encoder.preprocessing, cfg, manifest),
        "streaming": {
            "chunk": ["batch", model.encoder.leads, model.encoder.patch],
            "state": [
                {"input": name, "output": f"next_{name}", "module": module, "shape": ["batch", model.encoder.width, frames]}
                for (name, module), frames in zip(state_names(model).items(), StreamingEncoder(model).state_layout().values())
            ],
        },
    }  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    try:
        safetensors.save_file(_weights(model, encoder.symmetry), staging / WEIGHTS, metadata={"format": "pt"})
        (staging / CARD).write_text(model_card(config, cfg, manifest, evaluation_result(cfg, plan, step)))
        samples = encoder.window // encoder.preprocessing.decimation
        for (kind, streaming), name in GRAPHS.items():
            if (kind == "onnx" and onnx) or (kind == "torchscript" and torchscript):
                export = export_onnx if kind == "onnx" else export_torchscript
                export(model, staging / name, samples=None if streaming else samples)
        config["files"] = {p.name: sha256_file(p) for p in sorted(staging.iterdir())}
        config["config_sha256"] = _config_digest(config)
        (staging / CONFIG).write_text(json.dumps(config, indent=1) + "\n")
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out


def _check_target(out: Path, overwrite: bool) -> None:
    """Refuse an existing ``out``, unless ``overwrite`` and it is an encoder package or empty."""
    if not out.exists():
        return
    if not overwrite:
        raise FileExistsError(f"{out} exists; choose another folder or overwrite it (--overwrite)")
    if not out.is_dir() or (any(out.iterdir()) and not (out / CONFIG).is_file()):
        raise FileExistsError(f"{out} exists and is not an encoder package; it is left alone: choose another folder")


def _architecture(cfg, model: JEPAModel) -> dict[str, Any]:
    """The deployed modules' constructor arguments and parameter count."""
    projector = model.projector
    return {
        "name": cfg.model.name,
        "encoder": cfg.model.encoder.model_dump(mode="json"),
        "projector": {"in_dim": projector.in_dim, "hidden": projector.hidden, "out_dim": projector.out_dim},
        "deployed_parameters": sum(p.numel() for p in (*model.encoder.parameters(), *projector.parameters())),
    }


def _preprocessing(preprocessing: Preprocessing, cfg, manifest: dict[str, Any]) -> dict[str, Any]:
    """`Preprocessing.to_dict` and what else reproduces the input: the filters, the phase
    convention and coordinates, the detector revision and the cache's hash."""
    fir = {"window": ["kaiser", KAISER_BETA], "padtype": "edge", "method": "scipy.signal.resample_poly"}
    return {
        **preprocessing.to_dict(),
        "resampling": {**fir, "ratio": "fs / input rate, each rate to 1/1000 Hz", "note": "none when the rates are equal"},
        "decimation_filter": {**fir, "taps": 2 * 10 * preprocessing.decimation + 1, "cutoff": 1 / preprocessing.decimation}
        if preprocessing.decimation > 1 else "none",
        "phase_convention": cfg.phase.convention,
        "phase_coordinates": manifest.get("phase_coordinates", []),
        "phase_revision": manifest["arguments"]["phase_revision"],
        "cache_hash": manifest["config_hash"],
    }


def _modules(model: JEPAModel, symmetry: nn.Module) -> nn.ModuleDict:
    """What the package holds: the deployed modules and the phase action, keyed as in the file."""
    return nn.ModuleDict({"encoder": model.encoder, "projector": model.projector, "symmetry": symmetry})


def _weights(model: JEPAModel, symmetry: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone().contiguous() for k, v in _modules(model, symmetry).state_dict().items()}


def _config_digest(config: dict[str, Any]) -> str:
    """sha256 of the sorted JSON of every key but ``config_sha256``."""
    rest = {k: v for k, v in config.items() if k != "config_sha256"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()


def read_package_config(path: str | os.PathLike) -> dict[str, Any]:
    """``config.json`` of the package at ``path``, after checking its format, its own digest and
    the sha256 of every file it lists; raises `PackageError` (FileNotFoundError when a file is
    missing) naming the file and what is wrong."""
    path = Path(path)
    source = path / CONFIG
    if not source.is_file():
        raise FileNotFoundError(f"{path} is not an encoder package: no {CONFIG} (write one with `cyclejepa export`)")
    try:
        config = json.loads(source.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise PackageError(f"{source} is not valid JSON ({error}): damaged or cut short") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise PackageError(f"{source} does not describe a {FORMAT} package")
    if config.get("format_version") != FORMAT_VERSION:
        raise PackageError(
            f"{source} has package format {config.get('format_version')}; this cyclejepa reads format {FORMAT_VERSION}"
        )
    if config.get("config_sha256") != _config_digest(config):
        raise PackageError(f"{source} was changed after export: its content does not match its config_sha256")
    for name, expected in config["files"].items():
        file = path / name
        if not file.is_file():
            raise FileNotFoundError(f"{file} is missing from the package (config.json lists it)")
        if sha256_file(file) != expected:
            raise PackageError(f"{file} does not match its sha256 in config.json: damaged, cut short or changed")
    return config


def load_pretrained(path: str | os.PathLike, device: str = "cpu") -> Encoder:
    """The encoder of a package written by `export_run`, with its preprocessing; no run folder
    or network needed.

    Verifies the package (`read_package_config`), rebuilds the encoder, projector and phase
    action from ``config.json`` and loads ``model.safetensors`` into them strictly. The result
    embeds as `load_encoder`'s does (`Encoder.embed`, ``.symmetry`` the phase action).
    """
    from cyclejepa.devices import resolve_device

    safetensors = _safetensors()
    path = Path(path)
    config = read_package_config(path)
    architecture = config["model"]
    options = dict(architecture["encoder"])
    encoder = ENCODERS.get(options.pop("name"))(**options)
    projector = ProjectorMLP(**architecture["projector"])
    sym = config["symmetry"]
    symmetry = SYMMETRIES.get(sym["name"])(sym["spectrum"], basis=sym["basis"], **sym["basis_options"])
    model = JEPAModel(encoder, projector, None)
    _load_strictly(_modules(model, symmetry), safetensors.load_file(path / WEIGHTS), path / WEIGHTS)
    target = resolve_device(device)
    run = config["run"]
    source = {"package": str(path), "run": run["run"], "step": run["step"], "run_hash": run["run_hash"]}
    preprocessing = Preprocessing.from_dict(config["preprocessing"])
    if config["preprocessing"]["phase_revision"] != PHASE_REVISION:
        warnings.warn(
            f"{path} was exported with R-peak detection revision {config['preprocessing']['phase_revision']}, this "
            f"cyclejepa has revision {PHASE_REVISION}: token phases, and so which tokens are pooled, may differ",
            stacklevel=2,
        )
    return Encoder(model.to(target).eval(), preprocessing, target, source, symmetry.to(target).eval())


def _load_strictly(modules: nn.Module, weights: dict[str, torch.Tensor], source: Path) -> None:
    """``weights`` into ``modules``, every tensor present, none extra, every shape equal."""
    expected = modules.state_dict()
    missing = sorted(expected.keys() - weights.keys())
    extra = sorted(weights.keys() - expected.keys())
    shapes = [
        f"{k} {tuple(weights[k].shape)} (the architecture has {tuple(expected[k].shape)})"
        for k in sorted(expected.keys() & weights.keys())
        if weights[k].shape != expected[k].shape
    ]
    if missing or extra or shapes:
        problems = [f"{label}: {', '.join(keys)}" for label, keys in
                    (("missing", missing), ("unexpected", extra), ("wrong shape", shapes)) if keys]  # fmt: skip
        raise PackageError(f"{source} does not fit the architecture in config.json; " + "; ".join(problems))
    modules.load_state_dict(weights, strict=True)
