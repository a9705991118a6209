"""Device handling with CUDA device objects, on a machine without a GPU.

``torch.device("cuda") != torch.device("cuda:0")``: the first CUDA training step once failed on
exactly that comparison. These tests stand CUDA up through monkeypatched queries, so that the
device-handling code runs its CUDA branches on the CPU.
"""

from types import SimpleNamespace

import pytest
import torch

from cyclejepa.config import parse_config
from cyclejepa.data.augment import check_batch
from cyclejepa.devices import Placement, indexed, place, resolve_device, same_device
from cyclejepa.training.trainer import compile_mode, uses_bf16


@pytest.fixture
def two_gpus(monkeypatch):
    """Pretend that two CUDA devices exist and that ``cuda:1`` is current."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)


def test_an_index_less_cuda_device_is_the_current_one(two_gpus):
    assert indexed("cuda") == torch.device("cuda", 1)
    assert indexed(torch.device("cuda:0")) == torch.device("cuda", 0)
    assert indexed("cpu") == torch.device("cpu")
    assert same_device("cuda", "cuda:1") and same_device(torch.device("cuda:1"), "cuda")
    assert not same_device("cuda", "cuda:0")
    assert not same_device("cpu", "cuda")


def test_without_cuda_the_index_less_device_is_cuda0():
    assert same_device(torch.device("cuda"), torch.device("cuda:0"))


def test_resolve_device_gives_indexed_devices_and_local_ranks(two_gpus):
    assert resolve_device("auto") == torch.device("cuda", 1)
    assert resolve_device("cuda") == torch.device("cuda", 1)
    assert resolve_device("cuda:0") == torch.device("cuda", 0)
    assert resolve_device("cuda", local_rank=0) == torch.device("cuda", 0)  # torchrun rank 0
    assert resolve_device("cuda:0", local_rank=1) == torch.device("cuda", 1)  # each rank its GPU
    assert resolve_device("cpu", local_rank=1) == torch.device("cpu")
    with pytest.raises(ValueError, match="has 2 CUDA device"):
        resolve_device("cuda:7")


def test_resolve_device_names_what_is_wrong(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match="has 0 CUDA device"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="unknown device 'banana'"):
        resolve_device("banana")


def test_a_placement_is_the_device_of_this_process_and_the_gpus_of_its_children(two_gpus, monkeypatch):
    """`place` resolves a setting once: the indexed device (`resolve_device`) and the GPUs that
    child processes are spread over (`child_gpus`: all for an index-less CUDA setting, none for
    ``cuda:N`` or the CPU); a device the machine lacks is refused as `resolve_device` refuses it."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert place("auto") == Placement("auto", torch.device("cuda", 1), ("0", "1"))
    assert place("cuda") == Placement("cuda", torch.device("cuda", 1), ("0", "1"))
    assert place("cuda:0") == Placement("cuda:0", torch.device("cuda", 0), ())
    assert place("cpu") == Placement("cpu", torch.device("cpu"), ())
    with pytest.raises(ValueError, match="has 2 CUDA device"):
        place("cuda:7")


class _CudaBatch:
    """What `check_batch` sees of a (B, leads, samples) float batch on ``cuda:0``."""

    device = torch.device("cuda", 0)
    dtype = torch.float32
    shape = (2, 12, 1000)

    def dim(self):
        return 3

    def is_floating_point(self):
        return True


def test_augmentation_accepts_a_generator_on_cuda_for_a_batch_on_cuda0(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    check_batch(_CudaBatch(), SimpleNamespace(device=torch.device("cuda")))  # the bug: raised
    with pytest.raises(ValueError, match="generator is on cuda:1"):
        check_batch(_CudaBatch(), SimpleNamespace(device=torch.device("cuda:1")))
    with pytest.raises(ValueError, match="generator is on cpu"):
        check_batch(_CudaBatch(), SimpleNamespace(device=torch.device("cpu")))


@pytest.mark.parametrize(
    ("setting", "device_type", "distributed", "expected"),
    [
        (False, "cuda", False, None),
        (True, "cpu", False, "default"),
        ("default", "cuda", False, "default"),
        ("auto", "cuda", False, "reduce-overhead"),
        ("auto", "cuda", True, "default"),  # under torchrun: no CUDA graphs
        ("auto", "cpu", False, None),
        ("auto", "cpu", True, None),
        ("reduce-overhead", "cuda", True, "reduce-overhead"),  # asked for: the networks' graphs only
        ("max-autotune", "cuda", False, "max-autotune"),
    ],
)
def test_compile_setting_maps_to_a_torch_compile_mode(setting, device_type, distributed, expected):
    cfg = parse_config({"training": {"compile": setting}})
    assert compile_mode(cfg.training.compile, device_type, distributed) == expected


def test_precision_auto_is_bf16_on_cuda_only():
    assert parse_config({}).training.precision == "auto"
    assert uses_bf16("auto", "cuda") and not uses_bf16("auto", "cpu")
    assert uses_bf16("bf16", "cpu") and not uses_bf16("float32", "cuda")


def test_unknown_compile_and_precision_values_name_the_key():
    with pytest.raises(ValueError, match="training.compile"):
        parse_config({"training": {"compile": "fastest"}})
    with pytest.raises(ValueError, match="training.precision"):
        parse_config({"training": {"precision": "fp8"}})
