"""Models out: the weights package of a trained encoder, and its TorchScript and ONNX graphs.

`export_run` (``cyclejepa export``, `save_pretrained`) writes ``model.safetensors``,
``config.json``, ``README.md`` and ``reference.py``; `load_pretrained` (`from_pretrained`) reads
them back into an `Encoder` with no run folder.
`export_onnx` and `export_torchscript` write the deployed path offline or as a streaming step
with its state explicit (`cyclejepa.export.graphs`).
"""

from cyclejepa.export.graphs import export_onnx, export_torchscript, state_names
from cyclejepa.export.package import (
    PackageError, export_run, from_pretrained, load_pretrained, read_package_config, save_pretrained,
)  # fmt: skip

__all__ = [
    "PackageError",
    "export_onnx",
    "export_run",
    "export_torchscript",
    "from_pretrained",
    "load_pretrained",
    "read_package_config",
    "save_pretrained",
    "state_names",
]
