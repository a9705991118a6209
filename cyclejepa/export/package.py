"""The weights package of a trained encoder: ``model.safetensors``, ``config.json``, ``README.md``.

`write_package` writes the deployed path of a run's checkpoint (encoder + projector) and the
weights of its phase action (the symmetry's basis, when it has any) as safetensors;
``config.json`` holds everything needed to prepare the input and rebuild the model: channels
and order, rates, window, resampling and decimation filters, normalisation, token patch, phase
provider and options, the symmetry's spectrum and basis, the architecture, the library
version, the run's identity and step, and the sha256 of every other file of the package
(``files``) and of its own content (``config_sha256``, over the sorted JSON of every other
key). ``reference.py`` (`cyclejepa.export.reference`) prepares and encodes a record with numpy
and onnxruntime only. With ``onnx`` / ``torchscript`` it adds the offline and streaming graphs
(`cyclejepa.export.graphs`). Folders are 0755 and files 0644 whatever the umask. What it needs
of the run besides the encoder comes in an `ExportSpec`; the export stage
(`cyclejepa.pipeline.exporting`: `export_run`, `save_pretrained`) builds it from the run's config.

`load_pretrained` needs only the package: it checks ``config.json`` (`cyclejepa.export.checks`),
verifies the weights' checksum strictly (the card may be edited, an optional graph deleted),
rebuilds the architecture on the meta device and compares it with the weights file's header
before allocating anything, then loads the weights strictly (a missing, extra or misshapen
tensor is an error naming it), into the same `Encoder` that a run's `load_encoder` gives, so both embed
a record alike. Formats `READABLE` are read; any other is refused naming who reads it.
"""

from __future__ import annotations

import copy
import glob
import json
import os
import platform
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cyclejepa.data.cache import PHASE_REVISION
from cyclejepa.data.cache.record import _decimation_taps
from cyclejepa.data.datasets import sha256_file
from cyclejepa.data.preprocess import HIGHPASS_ORDER, KAISER_BETA, SignalPreparation, highpass_sos
from cyclejepa.embed import OUT_OF_RANGE_DECADES, CacheSettings, Encoder, check_finite_weights
from cyclejepa.export import reference
from cyclejepa.export.card import model_card
from cyclejepa.export.checks import PackageError, check_channels_known, check_config, check_files
from cyclejepa.export.graphs import OPSET, export_onnx, export_torchscript, require_onnx, state_names
from cyclejepa.export.spec import ExportSpec
from cyclejepa.jsonio import json_sha256
from cyclejepa.models import JEPAModel, ProjectorMLP, StreamingEncoder
from cyclejepa.outputs import RunFolder
from cyclejepa.registry import ENCODERS, SYMMETRIES
from cyclejepa.symmetry import HarmonicSpectrum
from cyclejepa.training.checkpoint import load_checkpoint
from cyclejepa.version import __version__

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "READABLE",
    "PackageError",
    "check_target",
    "from_pretrained",
    "load_pretrained",
    "read_package_config",
    "remove_stale_staging",
    "source_run",
    "write_package",
]

FORMAT = "cyclejepa-encoder"
FORMAT_VERSION = 4
READABLE = (2, 3, 4)
"""Package formats this cyclejepa reads: 2 (card named MODEL_CARD.md, every file strict), 3 and
4 (the cache rate of ``preprocessing`` named ``cache_fs``, not ``fs``, as the signal geometry
names it, `cyclejepa.signal_geometry.SignalGeometry.to_dict`, with ``n_tokens``)."""
WEIGHTS, CONFIG, CARD, REFERENCE = "model.safetensors", "config.json", "README.md", "reference.py"
CARDS = (CARD, "MODEL_CARD.md")
"""The model card's name in format 3 and in format 2: free to edit, never verified."""
CHANGED = "changed in memory after loading the checkpoint"
"""``run.weights`` of a package saved from an encoder whose weights differ from its checkpoint's."""
MAX_CONFIG_BYTES = 16 << 20
"""A config.json larger than this is refused before it is read."""
GRAPHS = {
    ("onnx", False): "encoder.onnx",
    ("onnx", True): "encoder_streaming.onnx",
    ("torchscript", False): "encoder.pt",
    ("torchscript", True): "encoder_streaming.pt",
}
"""File name of each exported graph, by (format, streaming)."""


def _safetensors():
    try:
        import safetensors.torch
    except ImportError:
        raise ImportError("weights packages need safetensors: pip install 'cyclejepa[export]'") from None
    return safetensors.torch


def check_target(out: str | os.PathLike, *, onnx: bool = False, overwrite: bool = False) -> Path:
    """``out`` as a Path if `write_package` can write there: safetensors (and onnx with ``onnx``)
    importable, and ``out`` absent, or with ``overwrite`` an encoder package or an empty folder."""
    _safetensors()
    if onnx:
        require_onnx()
    out = Path(out)
    _check_target(out, overwrite)
    return out


def source_run(encoder: Encoder) -> RunFolder:
    """The run folder ``encoder``'s weights were loaded from; an encoder of a package is refused."""
    if "package" in encoder.source:
        raise ValueError(f"this encoder was loaded from the package {encoder.source['package']}: copy that folder")
    return RunFolder(Path(encoder.source["run"]))


def write_package(
    encoder: Encoder,
    spec: ExportSpec,
    out: str | os.PathLike,
    *,
    onnx: bool = False,
    torchscript: bool = False,
    overwrite: bool = False,
) -> Path:
    """Write the package of ``encoder`` (its weights as they are now) to the folder ``out``, from
    the run ``spec`` describes; returns ``out``.

    ``onnx`` / ``torchscript`` add the offline and streaming graphs. An existing ``out`` is
    refused unless ``overwrite`` (`check_target`). The package is written beside ``out``, in a
    hidden folder ``.NAME.partial-PID-*`` removed on any failure, and renamed into place; one
    left by an export that was killed is removed by the next export to ``out``
    (`remove_stale_staging`). Non-finite weights are refused, naming the tensors
    (`check_finite_weights`). Weights that differ from the checkpoint's (changed in memory after
    loading, e.g. fine-tuned) are saved as they are, and ``config.json`` and the card say that
    the run's evaluation does not apply to them.
    """
    run = source_run(encoder)
    safetensors = _safetensors()
    out = check_target(out, onnx=onnx, overwrite=overwrite)
    step = encoder.source["step"]
    checkpoint = load_checkpoint(run.checkpoint(step))
    meta = checkpoint["meta"]
    model = copy.deepcopy(encoder.model).cpu().eval()
    check_finite_weights(model, f"the encoder of {encoder.source}")
    weights = _weights(model, encoder.symmetry)
    changed = _changed(checkpoint["model"], model)
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "cyclejepa_version": __version__,
        "torch_version": torch.__version__,
        "versions": _versions(onnx),
        "run": {
            "experiment": spec.experiment,
            "run": spec.run,
            "arm": spec.arm,
            "seed": meta["seed"],
            "transport_weight": meta["transport_weight"],
            "step": step,
            "run_hash": meta["run_hash"],
            "identity": meta["identity"],
            "weights": CHANGED if changed else "checkpoint",
        },
        "model": _architecture(spec, model),
        "symmetry": spec.symmetry,
        "preprocessing": _preprocessing(encoder.settings, spec),
        "streaming": {
            "chunk": ["batch", model.encoder.leads, model.encoder.patch],
            "state": [
                {"input": name, "output": f"next_{name}", "module": module, "shape": ["batch", model.encoder.width, frames]}
                for (name, module), frames in zip(
                    state_names(model).items(), StreamingEncoder(model).state_layout().values(), strict=True
                )
            ],
        },
    }
    result = None if changed else spec.evaluation
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(out)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f"{_staging_prefix(out)}{os.getpid()}-"))
    try:
        metadata = {
            "format": "pt",
            "package_format": FORMAT,
            "format_version": str(FORMAT_VERSION),
            "model": json.dumps(config["model"]),
            "symmetry": json.dumps(config["symmetry"]),
            "cyclejepa_version": __version__,
        }
        safetensors.save_file(weights, staging / WEIGHTS, metadata=metadata)
        (staging / CARD).write_text(model_card(config, spec.card, result))
        shutil.copyfile(reference.__file__, staging / REFERENCE)
        samples = encoder.geometry.window_samples
        for (kind, streaming), name in GRAPHS.items():
            if (kind == "onnx" and onnx) or (kind == "torchscript" and torchscript):
                export = export_onnx if kind == "onnx" else export_torchscript
                options = {"metadata": _onnx_metadata(config)} if kind == "onnx" else {}
                export(model, staging / name, samples=None if streaming else samples, **options)
        config["files"] = {p.name: sha256_file(p) for p in sorted(staging.iterdir())}
        config["config_sha256"] = _config_digest(config)
        (staging / CONFIG).write_text(json.dumps(config, indent=1) + "\n")
        _readable(staging)
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out


def _staging_prefix(out: Path) -> str:
    """Name prefix of the hidden folders a package for ``out`` is written in: ``.NAME.partial-PID-``."""
    return f".{out.name}.partial-"


def remove_stale_staging(out: Path) -> list[Path]:
    """Remove the staging folders beside ``out`` left by an export of it that was killed (its
    process, named in the folder's name, is gone); returns them. A folder of a process still
    running on this machine is left alone."""
    prefix, removed = _staging_prefix(out), []
    for folder in out.parent.glob(f"{glob.escape(prefix)}*"):
        pid = folder.name[len(prefix) :].split("-")[0]
        if folder.is_dir() and not folder.is_symlink() and pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _running(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True


def _changed(checkpoint: dict[str, torch.Tensor], model: JEPAModel) -> bool:
    """Whether ``model``'s encoder or projector differs from the checkpoint's (``model.*`` keys)."""
    deployed = nn.ModuleDict({"encoder": model.encoder, "projector": model.projector}).state_dict()
    return any(not torch.equal(value.cpu(), checkpoint[f"model.{key}"].cpu()) for key, value in deployed.items())


def _versions(onnx: bool) -> dict[str, str]:
    """The versions that wrote the package (the ONNX ones when it has graphs)."""
    import numpy
    import safetensors

    found = {"python": platform.python_version(), "numpy": numpy.__version__, "safetensors": safetensors.__version__}
    if onnx:
        import onnx as onnx_package

        found |= {"onnx": onnx_package.__version__, "onnx_opset": str(OPSET)}
        try:
            import onnxruntime

            found["onnxruntime"] = onnxruntime.__version__  # the runtime the graphs were checked with here
        except ImportError:
            pass
    return found


def _onnx_metadata(config: dict[str, Any]) -> dict[str, str]:
    """What an ONNX file says about itself (``metadata_props``): the input it expects and who wrote it."""
    prep = config["preprocessing"]
    return {
        "package_format": FORMAT,
        "format_version": str(FORMAT_VERSION),
        "channels": ",".join(prep["channels"]),
        "units": ",".join(prep["units"]),
        "cache_fs": f"{prep['cache_fs']:g}",
        "model_fs": f"{prep['model_fs']:g}",
        "decimation": str(prep["decimation"]),
        "window": str(prep["window"]),
        "window_s": f"{prep['window_s']:g}",
        "token_patch": str(prep["token_patch"]),
        "normalisation": json.dumps(prep["normalisation"]),
        "cyclejepa_version": config["cyclejepa_version"],
        "torch_version": config["torch_version"],
        "onnx_opset": str(OPSET),
        "run": config["run"]["run"],
        "step": str(config["run"]["step"]),
    }


def _readable(folder: Path) -> None:
    """Folder 0755, its files 0644, whatever the umask (`tempfile.mkdtemp` makes 0700)."""
    folder.chmod(0o755)
    for file in folder.iterdir():
        file.chmod(0o644)


def _check_target(out: Path, overwrite: bool) -> None:
    """Refuse an existing ``out``, unless ``overwrite`` and it is an encoder package or empty."""
    if not out.exists():
        return
    if not overwrite:
        raise FileExistsError(f"{out} exists; choose another folder or overwrite it (--overwrite)")
    if not out.is_dir() or (any(out.iterdir()) and not (out / CONFIG).is_file()):
        raise FileExistsError(f"{out} exists and is not an encoder package; it is left alone: choose another folder")


def _architecture(spec: ExportSpec, model: JEPAModel) -> dict[str, Any]:
    """The deployed modules' constructor arguments and parameter count."""
    projector = model.projector
    return {
        "name": spec.model_name,
        "encoder": dict(spec.encoder),
        "projector": {"in_dim": projector.in_dim, "hidden": projector.hidden, "out_dim": projector.out_dim},
        "deployed_parameters": sum(p.numel() for p in (*model.encoder.parameters(), *projector.parameters())),
    }


def _preprocessing(settings: CacheSettings, spec: ExportSpec) -> dict[str, Any]:
    """`CacheSettings.to_dict` and what else reproduces the input: the filters, the phase
    convention and coordinates, the detector revision and the cache's hash."""
    fir = {"window": ["kaiser", KAISER_BETA], "padtype": "edge", "method": "scipy.signal.resample_poly"}
    q = settings.geometry.decimation
    return {
        "steps": reference.STEPS,
        **settings.to_dict(),
        "resampling": {
            **fir,
            "ratio": "cache_fs / input rate, each rate to 1/1000 Hz",
            "note": "none when the rates are equal",
            "taps": "firwin(20 m + 1, 1 / m, kaiser) * up, m = max(up, down)",
            "applies_to": "the whole record",
        },
        "decimation_filter": {
            **fir,
            "taps": 20 * q + 1,
            "cutoff": 1 / q,
            "coefficients": _decimation_taps(q).tolist(),
            "group_delay": 10 * q,
            "applies_to": "each window",
            "alignment": f"y[n] = sum_k h[k] x[{q} n + {10 * q} - k], x extended by its first and last sample",
        }
        if q > 1
        else "none",
        "input_range": {
            "out_of_range_decades": OUT_OF_RANGE_DECADES,
            "distance": "max over channels of max(|log10 s|, log10(1 + |m|)), m and s the mean and std of the "
            "channel's prepared (normalised) samples over the record's windows",
        },
        **_highpass_filter(settings.preparation, settings.geometry.cache_fs),
        "phase_convention": spec.phase_convention,
        "phase_coordinates": spec.phase_coordinates,
        "phase_revision": spec.phase_revision,
        "cache_hash": spec.cache_hash,
    }


def _highpass_filter(preparation: SignalPreparation, fs: float) -> dict[str, Any]:
    """``{"highpass_filter": ...}``: the sections of each channel's zero-phase high-pass at ``fs``
    (`highpass_sos`, null for a channel without one) and how they are run; ``{}`` without any."""
    if not preparation.highpass_hz:
        return {}
    return {
        "highpass_filter": {
            "design": f"scipy.signal.butter({HIGHPASS_ORDER}, cutoff, btype='highpass', fs=fs, output='sos')",
            "method": "scipy.signal.sosfiltfilt",
            "padtype": "odd",
            "padlen": "3 (2 sections + 1)",
            "initial_state": "sosfilt_zi(sos) times the first sample of each pass",
            "applies_to": "the whole record after the leading drop_s seconds, before windowing",
            "sos": [None if cutoff is None else highpass_sos(fs, cutoff).tolist() for cutoff in preparation.highpass_hz],
        }
    }


def _modules(model: JEPAModel, symmetry: nn.Module) -> nn.ModuleDict:
    """What the package holds: the deployed modules and the phase action, keyed as in the file."""
    return nn.ModuleDict({"encoder": model.encoder, "projector": model.projector, "symmetry": symmetry})


def _weights(model: JEPAModel, symmetry: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone().contiguous() for k, v in _modules(model, symmetry).state_dict().items()}


def _config_digest(config: dict[str, Any]) -> str:
    """sha256 of the sorted JSON of every key but ``config_sha256``."""
    rest = {k: v for k, v in config.items() if k != "config_sha256"}
    return json_sha256(rest)


def read_package_config(path: str | os.PathLike) -> dict[str, Any]:
    """``config.json`` of the package at ``path``, after checking its format, its own digest, its
    fields (`check_config`) and the weights' sha256; raises `PackageError` (FileNotFoundError when
    a file is missing) naming the file or field and what is wrong. The card is not verified; a
    graph or the reference that is absent is fine, one that was changed is warned about."""
    path = Path(path)
    source = path / CONFIG
    if not source.is_file():
        raise FileNotFoundError(f"{path} is not an encoder package: no {CONFIG} (write one with `cyclejepa export`)")
    if source.stat().st_size > MAX_CONFIG_BYTES:
        raise PackageError(f"{source} is {source.stat().st_size:,} bytes, more than a package's config ({MAX_CONFIG_BYTES:,})")
    try:
        config = json.loads(source.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        raise PackageError(f"{source} is not valid JSON ({str(error)[:200]}): damaged or cut short") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise PackageError(f"{source} does not describe a {FORMAT} package")
    _check_version(source, config)
    if config.get("config_sha256") != _config_digest(config):
        raise PackageError(f"{source} was changed after export: its content does not match its config_sha256")
    files = check_files(path, config, (WEIGHTS,))
    check_config(config)
    for name, expected in files.items():
        file = path / name
        if name in CARDS and config["format_version"] > 2:
            continue
        if not file.is_file():
            if name == WEIGHTS or config["format_version"] == 2:
                raise FileNotFoundError(f"{file} is missing from the package (config.json lists it)")
            continue
        if sha256_file(file) != expected:
            message = f"{file} does not match its sha256 in config.json: damaged, cut short or changed"
            if name == WEIGHTS or config["format_version"] == 2:
                raise PackageError(message)
            warnings.warn(message, stacklevel=2)
    return config


def _check_version(source: Path, config: dict[str, Any]) -> None:
    """`READABLE` formats pass; an older one is refused naming the re-export, a newer one naming
    the cyclejepa that wrote it."""
    version = config.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise PackageError(f"config.json format_version: must be an integer, got {str(version)[:80]!r}")
    if version in READABLE:
        return
    if version > max(READABLE):
        raise PackageError(
            f"{source} has package format {version}, written by cyclejepa {str(config.get('cyclejepa_version'))[:40]}; "
            f"this cyclejepa {__version__} reads formats {list(READABLE)}: upgrade cyclejepa to read it"
        )
    raise PackageError(
        f"{source} has package format {version}, which no released cyclejepa reads any more (this one reads "
        f"{list(READABLE)}): export the run again with `cyclejepa export`"
    )


def load_pretrained(path: str | os.PathLike, device: str = "cpu") -> Encoder:
    """The encoder of a package written by `write_package`, with its preprocessing; no run folder
    or network needed.

    Verifies the package (`read_package_config`), rebuilds the encoder, projector and phase
    action from ``config.json`` and loads ``model.safetensors`` into them strictly. The result
    embeds as `load_encoder`'s does (`Encoder.embed`, ``.symmetry`` the phase action).
    """
    from cyclejepa.devices import resolve_device

    safetensors = _safetensors()
    path = Path(path)
    config = read_package_config(path)
    _fits_header(config, path / WEIGHTS)
    model, symmetry = _build(config)
    weights = safetensors.load_file(path / WEIGHTS)
    _load_strictly(_modules(model, symmetry), weights, path / WEIGHTS)
    try:
        check_finite_weights(model, str(path / WEIGHTS))
    except ValueError as error:
        raise PackageError(str(error)) from None
    target = resolve_device(device)
    run = config["run"]
    source = {"package": str(path), "run": run["run"], "step": run["step"], "run_hash": run.get("run_hash")}
    settings = CacheSettings.from_dict(config["preprocessing"])
    revision = config["preprocessing"].get("phase_revision")
    if revision != PHASE_REVISION:
        warnings.warn(
            f"{path} was exported with phase detection revision {revision}, this "
            f"cyclejepa has revision {PHASE_REVISION}: token phases, and so which tokens are pooled, may differ",
            stacklevel=2,
        )
    encoder = _encoder(model.to(target).eval(), settings, target, source, symmetry.to(target).eval())
    check_channels_known(config["preprocessing"], encoder.dataset.channels, settings.dataset)
    return encoder


from_pretrained = load_pretrained
"""`load_pretrained` under the name model hubs use."""


def _build(config: dict[str, Any], meta: bool = False) -> tuple[JEPAModel, nn.Module]:
    """The deployed modules and the phase action of ``config`` (on the meta device: shapes, no
    memory); a field the constructors refuse is a `PackageError` naming the section."""
    architecture, sym = config["model"], config["symmetry"]
    try:
        options = dict(architecture["encoder"])
        with torch.device("meta" if meta else "cpu"):
            encoder = ENCODERS.get(options.pop("name"))(**options)
            projector = ProjectorMLP(**architecture["projector"])
            if HarmonicSpectrum(sym["spectrum"]).dim != projector.out_dim:
                raise ValueError(f"spectrum {sym['spectrum']} is not of the projector's dimension {projector.out_dim}")
            symmetry = SYMMETRIES.get(sym["name"])(sym["spectrum"], basis=sym["basis"], **sym["basis_options"])
    except (KeyError, TypeError, ValueError, RuntimeError) as error:
        raise PackageError(f"config.json model / symmetry: cannot build the encoder it describes: {str(error)[:300]}") from None
    return JEPAModel(encoder, projector, None), symmetry


def _fits_header(config: dict[str, Any], weights: Path) -> None:
    """The architecture's tensors (built on the meta device) against the shapes in the
    safetensors header, before any memory is allocated for them."""
    from safetensors import safe_open

    model, symmetry = _build(config, meta=True)
    try:
        with safe_open(str(weights), framework="pt") as file:
            shapes = {key: tuple(file.get_slice(key).get_shape()) for key in file.keys()}  # noqa: SIM118 (safe_open is not iterable)
    except Exception as error:  # safetensors raises its own SafetensorError on a malformed header
        raise PackageError(f"{weights} is not a readable safetensors file: {str(error)[:200]}") from None
    _compare({k: tuple(v.shape) for k, v in _modules(model, symmetry).state_dict().items()}, shapes, weights)


def _encoder(model, settings: CacheSettings, target, source: dict, symmetry) -> Encoder:
    """`Encoder` of the package; an unknown phase provider or dataset is a `PackageError`."""
    try:
        return Encoder(model, settings, target, source, symmetry)
    except (KeyError, TypeError, ValueError) as error:
        raise PackageError(f"config.json preprocessing: {str(error)[:300]}") from None


def _load_strictly(modules: nn.Module, weights: dict[str, torch.Tensor], source: Path) -> None:
    """``weights`` into ``modules``, every tensor present, none extra, every shape equal."""
    expected = {k: tuple(v.shape) for k, v in modules.state_dict().items()}
    _compare(expected, {k: tuple(v.shape) for k, v in weights.items()}, source)
    modules.load_state_dict(weights, strict=True)


def _compare(expected: dict[str, tuple], found: dict[str, tuple], source: Path) -> None:
    """`PackageError` listing the tensors of ``expected`` missing from ``found``, those extra, and
    those of another shape."""
    missing = sorted(expected.keys() - found.keys())
    extra = sorted(found.keys() - expected.keys())
    shapes = [
        f"{k} {found[k]} (the architecture has {expected[k]})"
        for k in sorted(expected.keys() & found.keys())
        if found[k] != expected[k]
    ]
    if missing or extra or shapes:
        problems = [
            f"{label}: {', '.join(keys[:10])}"
            for label, keys in (("missing", missing), ("unexpected", extra), ("wrong shape", shapes))
            if keys
        ]
        raise PackageError(f"{source} does not fit the architecture in config.json; " + "; ".join(problems))
