"""TorchScript and ONNX graphs of the deployed encoder against eager PyTorch: offline outputs,
chunked streaming with the state carried outside equal to the offline causal output, and the
phase action on exported features as on eager ones."""

import sys

import numpy as np
import onnxruntime as ort
import pytest
import torch

from cyclejepa.export import export_onnx, export_torchscript, state_names
from cyclejepa.models import build_model
from cyclejepa.objectives import pairwise_similarities
from cyclejepa.symmetry import U1Symmetry

SMALL = {"width": 16, "hidden": 24, "kernel": 5, "dilations": (1, 2, 4)}
SMALL_SPECTRUM = "2x0+2x1+2x2+2x3+1x4"  # dim 16 = the small encoder width


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def session(path):
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def eager(model, x):
    with torch.no_grad():
        return model(x).numpy()


def signal(records, samples, seed=1):
    return torch.randn(records, 12, samples, generator=torch.Generator().manual_seed(seed))


def stream_onnx(path, model, x):
    """(B, T, K) tokens of x streamed chunk by chunk through the ONNX step, the state carried here."""
    graph = session(path)
    state = {name: np.zeros((len(x), model.encoder.width, frames), np.float32)
             for name, frames in zip(state_names(model), (c.left_pad for c in convs(model)), strict=True)}  # fmt: skip
    tokens = []
    for chunk in x.split(model.encoder.patch, dim=-1):
        z, *after = graph.run(None, {"chunk": chunk.numpy(), **state})
        state = dict(zip(state, after, strict=True))
        tokens.append(z)
    return np.stack(tokens, axis=1)


def convs(model):
    return [m for m in model.encoder.modules() if isinstance(m, torch.nn.Conv1d)]


@pytest.mark.parametrize("config, samples", [({}, 1000), (SMALL, 320)], ids=["paper", "k5-d124"])
def test_onnx_offline_matches_eager_for_any_batch(config, samples, tmp_path):
    model = build_model("winder", seed=0, encoder=config).eval()
    graph = session(export_onnx(model, tmp_path / "encoder.onnx", samples=samples))
    assert [i.name for i in graph.get_inputs()] == ["x"] and graph.get_inputs()[0].shape == ["batch", 12, "samples"]
    assert graph.get_outputs()[0].shape[:2] == ["batch", "tokens"]
    for records, length in ((1, samples), (3, samples), (2, samples + 8), (1, 8 * 7)):  # batch and length are dynamic
        x = signal(records, length, seed=records)
        (z,) = graph.run(None, {"x": x.numpy()})
        assert z.shape == (records, length // 8, model.projector.out_dim)
        assert np.abs(z - eager(model, x)).max() <= 1e-4


@pytest.mark.parametrize("config, samples", [({}, 1000), (SMALL, 8 * 60)], ids=["paper", "k5-d124"])
def test_onnx_streaming_equals_the_offline_causal_output(config, samples, tmp_path):
    model = build_model("winder", seed=0, encoder=config).eval()
    path = export_onnx(model, tmp_path / "stream.onnx")
    graph = session(path)
    names = list(state_names(model))
    assert [i.name for i in graph.get_inputs()] == ["chunk", *names]
    assert [o.name for o in graph.get_outputs()] == ["z", *(f"next_{n}" for n in names)]
    x = signal(2, samples)
    streamed = stream_onnx(path, model, x)
    assert np.abs(streamed - eager(model, x)).max() <= 1e-4  # every token, the first ones included
    single = stream_onnx(path, model, x[1:])  # another batch size through the same graph
    assert np.abs(single - streamed[1:]).max() <= 1e-5


def test_torchscript_offline_and_streaming_match_eager(tmp_path):
    model = build_model("winder", seed=3, encoder=SMALL).eval()
    offline = torch.jit.load(str(export_torchscript(model, tmp_path / "encoder.pt", samples=320)))
    step = torch.jit.load(str(export_torchscript(model, tmp_path / "stream.pt")))
    x = signal(3, 320)
    reference = eager(model, x)
    with torch.no_grad():
        assert np.abs(offline(x).numpy() - reference).max() <= 1e-5
        assert np.abs(offline(x[:1]).numpy() - reference[:1]).max() <= 1e-5
        state = [torch.zeros(3, 16, conv.left_pad) for conv in convs(model)]
        tokens = []
        for chunk in x.split(8, dim=-1):
            z, *state = step(chunk, *state)
            tokens.append(z)
    assert np.abs(torch.stack(tokens, 1).numpy() - reference).max() <= 1e-5
    assert [tuple(s.shape) for s in state] == [(3, 16, 4), (3, 16, 4), (3, 16, 8), (3, 16, 8), (3, 16, 16), (3, 16, 16)]


def test_the_phase_action_on_exported_features_is_the_action_on_eager_ones(tmp_path):
    """ρ(g) applied to the ONNX tokens equals ρ(g) applied to the eager tokens, the group law
    holds on them, and the transported similarities c_R (and c_I) of each record agree."""
    model = build_model("winder", seed=5, encoder=SMALL).eval()
    symmetry = U1Symmetry(SMALL_SPECTRUM, basis="householder", generator=torch.Generator().manual_seed(2))
    x = signal(4, 320, seed=7)
    (exported,) = session(export_onnx(model, tmp_path / "encoder.onnx", samples=320)).run(None, {"x": x.numpy()})
    exported, reference = torch.from_numpy(exported), torch.from_numpy(eager(model, x))
    phases = torch.rand(4, 40, generator=torch.Generator().manual_seed(8)) * 2 * torch.pi
    phases[0, :5] = torch.nan  # undefined phases take no part
    with torch.no_grad():
        torch.testing.assert_close(
            symmetry.act(exported, phases.nan_to_num()), symmetry.act(reference, phases.nan_to_num()), rtol=0, atol=1e-4
        )
        a, b = 0.7, 2.1
        torch.testing.assert_close(symmetry.act(symmetry.act(exported, a), b), symmetry.act(exported, a + b), rtol=0, atol=1e-5)
        torch.testing.assert_close(symmetry.canonicalize(symmetry.act(exported, a), a), exported, rtol=0, atol=1e-5)
        for mine, theirs in zip(
            pairwise_similarities(exported, phases, symmetry), pairwise_similarities(reference, phases, symmetry), strict=True
        ):
            torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-5)


def test_bad_requests_are_refused(tmp_path, monkeypatch):
    model = build_model("winder", seed=0, encoder=SMALL)
    with pytest.raises(ValueError, match="multiple of the patch 8, got 100"):
        export_torchscript(model, tmp_path / "x.pt", samples=100)
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ImportError, match=r"ONNX export needs onnx: pip install 'cyclejepa\[export\]'"):
        export_onnx(model, tmp_path / "x.onnx")
    assert not (tmp_path / "x.onnx").exists()
