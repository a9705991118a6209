"""Loading a config imports no implementation: the facts a config needs when it loads (a dataset's
channels, rates and folds, a phase provider's cycle band) are the components' declarations
(`cyclejepa.declarations`), which their implementations inherit."""

import json
import subprocess
import sys
import textwrap
import re
from pathlib import Path

import pytest

from cyclejepa import registry
from cyclejepa.config import ConfigError, parse_config
from cyclejepa.declarations.kinds import DatasetDeclaration, ProviderDeclaration
from cyclejepa.facts import data_facts

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
ENTRY_POINTS = (ROOT / "examples" / "pyproject.toml").read_text().split('[project.entry-points."cyclejepa.plugins"]')[1]
PLUGINS = re.findall(r'^[\w-]+ = "(\w+)"$', ENTRY_POINTS.split("\n[")[0], flags=re.MULTILINE)
"""The example plugins' modules (`pip install -e examples` registers them as entry points)."""
LOADING_ONLY = ("cyclejepa.config", "cyclejepa.facts", "cyclejepa.grid", "cyclejepa.registry", "cyclejepa.version",
                "cyclejepa.declarations")  # fmt: skip
"""The package's modules a config may load: the schema, the facts, the registry, the declarations."""

LOAD_EVERY_EXAMPLE = textwrap.dedent(
    """
    import importlib, json, sys
    sys.path.insert(0, sys.argv[1])  # the examples' plugin modules, registered as their entry points would be
    for plugin in sys.argv[2].split(","):
        importlib.import_module(plugin)
    from cyclejepa import registry
    from cyclejepa.config import load_config

    implementations = sorted({module for reg in registry.ALL_REGISTRIES.values() for module in reg.builtins.values()})
    before, loaded = set(sys.modules), {}
    for path in sys.argv[3:]:
        loaded[path] = load_config(path).data.dataset
    print(json.dumps({"implementations": implementations, "loaded": loaded, "before": sorted(before),
                      "new": sorted(set(sys.modules) - before), "all": sorted(sys.modules)}))
    """
)


def test_loading_every_example_imports_no_implementation():
    """`load_config` of every example (the plugin examples with their plugins registered first)
    leaves torch, PTB-XL's reader, the R-peak detector and every module the registry names
    unimported: the modules it adds are the package's loading modules alone."""
    command = [sys.executable, "-c", LOAD_EVERY_EXAMPLE, str(ROOT / "examples"), ",".join(PLUGINS), *map(str, EXAMPLES)]
    report = json.loads(subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=True).stdout)
    assert sorted(report["loaded"]) == sorted(map(str, EXAMPLES)) and len(EXAMPLES) >= 9 and len(PLUGINS) == 3
    implementations = set(report["implementations"])
    assert {"cyclejepa.data.ptbxl", "cyclejepa.phase.ecg.provider", "cyclejepa.objectives.sigreg"} <= implementations
    new = set(report["new"])
    assert not new & (implementations | {"torch", "cyclejepa.phase.ecg.rpeak"})
    assert [m for m in new if m.startswith("cyclejepa.") and not m.startswith(LOADING_ONLY)] == []
    assert {"torch", "cyclejepa.data.ptbxl", "cyclejepa.phase.ecg.rpeak"}.isdisjoint(report["all"])


def test_a_builtin_implementation_inherits_its_declaration():
    """Each built-in dataset and phase provider has a declaration, and its class is a subclass of
    it (one home per fact: the class reads its facts from the declaration, it holds no copy)."""
    for reg, kind in ((registry.DATASETS, DatasetDeclaration), (registry.PHASE_PROVIDERS, ProviderDeclaration)):
        for name in reg.builtins:
            declared = reg.declared(name)
            assert issubclass(declared, kind) and issubclass(reg.get(name), declared), f"{reg.kind} {name!r}"


def test_a_plugin_class_is_its_own_declaration(monkeypatch):
    """A dataset registered outside the core is read from its class: its facts, and its options
    model (the ``channels`` option's default are the channels), which types a config's options."""
    from cyclejepa.data.datasets import Dataset
    from cyclejepa.declarations.options import Options

    class BeltOptions(Options):
        channels: tuple[str, ...] = ("THORAX", "ABDOMEN")

    class Belts(Dataset):
        cache_fs, token_patch, Options = 25.0, 5, BeltOptions

        def __init__(self, root=None, channels=("THORAX", "ABDOMEN")):
            super().__init__(root)

    monkeypatch.setitem(registry.DATASETS._entries, "belts-example", Belts)
    assert registry.DATASETS.declared("belts-example") is Belts
    facts = data_facts(parse_config({"data": {"dataset": "belts-example"}, "phase": {"provider": "breath"}}).data)
    assert facts.channels == ("THORAX", "ABDOMEN") and facts.cache_fs == 25.0 and facts.n_tokens == 50
    with pytest.raises(
        ConfigError,
        match=r"data\.options\.chanels: unknown option of dataset 'belts-example'; allowed: channels\. Did you mean 'channels'\?",
    ):
        parse_config({"data": {"dataset": "belts-example", "options": {"chanels": ["THORAX"]}}, "phase": {"provider": "breath"}})


def test_a_plugin_without_an_options_model_takes_any_options(monkeypatch):
    """A plugin that declares no model takes `OpenOptions`: any keywords, passed to its constructor."""
    from cyclejepa.data.datasets import Dataset
    from cyclejepa.declarations.options import OpenOptions

    class Belts(Dataset):
        channels, cache_fs, token_patch = ("THORAX",), 25.0, 5

    monkeypatch.setitem(registry.DATASETS._entries, "belts-example", Belts)
    cfg = parse_config({"data": {"dataset": "belts-example", "options": {"anything": 1}}, "phase": {"provider": "breath"}})
    assert isinstance(cfg.data.options, OpenOptions) and cfg.data.options.model_dump() == {"anything": 1}
