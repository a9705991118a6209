"""Models out: the weights package of a trained encoder, and its TorchScript and ONNX graphs.

`write_package` writes ``model.safetensors``, ``config.json``, ``README.md`` and
``reference.py`` from an `Encoder` and the `ExportSpec` of its run (the export stage,
`cyclejepa.pipeline.export_run` / ``cyclejepa export``, builds both from a run folder);
`load_pretrained` (`from_pretrained`) reads them back into an `Encoder` with no run folder.
`export_onnx` and `export_torchscript` write the deployed path offline or as a streaming step
with its state explicit (`cyclejepa.export.graphs`).

Names are imported on first use (PEP 562), so that importing one module does not import
its siblings and their dependencies.
"""

from typing import TYPE_CHECKING

from cyclejepa.registry import lazy_names

if TYPE_CHECKING:  # each name's type for type checkers and editors (`X as X`: re-exported); nothing imported at run time
    from cyclejepa.export.graphs import (
        export_onnx as export_onnx,
        export_torchscript as export_torchscript,
        state_names as state_names,
    )
    from cyclejepa.export.package import (
        check_target as check_target,
        from_pretrained as from_pretrained,
        load_pretrained as load_pretrained,
        PackageError as PackageError,
        read_package_config as read_package_config,
        source_run as source_run,
        write_package as write_package,
    )
    from cyclejepa.export.spec import CardSpec as CardSpec, ExportSpec as ExportSpec

_HOMES = {
    "export_onnx": "graphs",
    "export_torchscript": "graphs",
    "state_names": "graphs",
    "PackageError": "package",
    "check_target": "package",
    "from_pretrained": "package",
    "load_pretrained": "package",
    "read_package_config": "package",
    "source_run": "package",
    "write_package": "package",
    "CardSpec": "spec",
    "ExportSpec": "spec",
}
"""Each public name and the submodule that defines it."""

__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
