"""Models out: the weights package of a trained encoder, and its TorchScript and ONNX graphs.

`write_package` writes ``model.safetensors``, ``config.json``, ``README.md`` and
``reference.py`` from an `Encoder` and the `ExportSpec` of its run (the export stage,
`cyclejepa.pipeline.export_run` / ``cyclejepa export``, builds both from a run folder);
`load_pretrained` (`from_pretrained`) reads them back into an `Encoder` with no run folder.
`export_onnx` and `export_torchscript` write the deployed path offline or as a streaming step
with its state explicit (`cyclejepa.export.graphs`).
"""

from cyclejepa.export.graphs import export_onnx, export_torchscript, state_names
from cyclejepa.export.package import (
    PackageError, check_target, from_pretrained, load_pretrained, read_package_config, source_run, write_package,
)  # fmt: skip
from cyclejepa.export.spec import CardSpec, ExportSpec

__all__ = [
    "CardSpec",
    "ExportSpec",
    "PackageError",
    "check_target",
    "export_onnx",
    "export_torchscript",
    "from_pretrained",
    "load_pretrained",
    "read_package_config",
    "source_run",
    "state_names",
    "write_package",
]
