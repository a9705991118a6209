"""Models: exact parameter counts, causality, receptive field, masking and attention reference."""

import math

import pytest
import torch

from cyclejepa.models import (
    CausalConvEncoder,
    CausalTransformerPredictor,
    build_model,
    parameter_breakdown,
)
from cyclejepa.registry import ENCODERS, MODELS, PREDICTORS, UnknownComponentError

PAPER_COUNTS = {
    "encoder.patch_mlp": 180_992,
    "encoder.blocks.0": 394_240,
    "encoder.blocks.1": 394_240,
    "encoder": 969_472,
    "projector": 262_912,
    "deployed": 1_232_384,
    **{f"predictor.blocks.{i}": 789_760 for i in range(4)},
    "predictor.output": 65_792,
    "predictor.mask_token": 256,
    "predictor.relative_bias": 1_996,
    "predictor": 3_227_084,
    "optimised": 4_459_468,
}


def expected_counts(leads, patch, width, hidden, kernel, n_blocks, proj_hidden, depth, heads, ffn, max_rel):
    """Closed-form parameter counts of the architecture (Linear = in·out + out, LN = 2·dim)."""

    def linear(i, o):
        return i * o + o

    encoder = linear(leads * patch, hidden) + linear(hidden, width) + n_blocks * (2 * 2 * width + 2 * kernel * width**2)
    projector = linear(width, proj_hidden) + linear(proj_hidden, width)
    block = 2 * 2 * width + linear(width, 3 * width) + linear(width, width) + linear(width, ffn) + linear(ffn, width)
    predictor = depth * block + linear(width, width) + width + heads * (2 * max_rel + 1)
    return {"encoder": encoder, "projector": projector, "predictor": predictor}


def counts_from_named_parameters(model):
    """Sum of named_parameters grouped by the breakdown's keys, computed independently."""
    sums = {}
    for name, parameter in model.named_parameters():
        parts = name.split(".")
        depth = 3 if parts[1] == "blocks" else 2
        for key in {parts[0], ".".join(parts[:depth])}:
            sums[key] = sums.get(key, 0) + parameter.numel()
    return sums


def small_model(**predictor):
    return build_model(
        "winder",
        seed=0,
        encoder={"width": 16, "hidden": 32},
        predictor={"depth": 2, "heads": 2, **predictor},
    ).double()


def test_paper_parameter_counts_are_exact():
    model = build_model("winder")
    assert parameter_breakdown(model) == PAPER_COUNTS
    independent = counts_from_named_parameters(model)
    for key, value in PAPER_COUNTS.items():
        if key not in ("deployed", "optimised"):
            assert independent[key] == value, key
    assert independent["encoder"] + independent["projector"] == PAPER_COUNTS["deployed"]
    assert sum(p.numel() for p in model.parameters()) == PAPER_COUNTS["optimised"]
    closed_form = expected_counts(12, 8, 256, 512, 3, 2, 512, 4, 4, 1024, 249)
    assert closed_form == {k: PAPER_COUNTS[k] for k in closed_form}


@pytest.mark.parametrize(
    "encoder, projector, predictor, expected_args",
    [
        ({"width": 32, "hidden": 64}, {}, {"depth": 1}, (12, 8, 32, 64, 3, 2, 64, 1, 4, 128, 249)),
        (
            {
                "leads": 3,
                "patch": 4,
                "width": 24,
                "hidden": 40,
                "kernel": 5,
                "dilations": (1, 2, 4),
            },
            {"hidden": 20},
            {"depth": 2, "heads": 3, "ffn": 36, "max_relative_position": 10},
            (3, 4, 24, 40, 5, 3, 20, 2, 3, 36, 10),
        ),
    ],
)
def test_small_config_counts_follow_formula(encoder, projector, predictor, expected_args):
    model = build_model("winder", encoder=encoder, projector=projector, predictor=predictor)
    breakdown = parameter_breakdown(model)
    expected = expected_counts(*expected_args)
    assert {k: breakdown[k] for k in expected} == expected
    assert breakdown["optimised"] == sum(expected.values())
    leads, patch = expected_args[:2]
    z = model(torch.randn(2, leads, patch * 10))
    assert z.shape == (2, 10, expected_args[2])
    assert model.predictor(z).shape == z.shape


def test_patch_flattening_is_lead_major():
    encoder = CausalConvEncoder(leads=3, patch=4, width=8, hidden=8)
    x = torch.randn(2, 3, 20)
    manual = torch.empty(2, 5, 12)
    for b in range(2):
        for t in range(5):
            for lead in range(3):
                for s in range(4):
                    manual[b, t, lead * 4 + s] = x[b, lead, 4 * t + s]
    assert torch.equal(encoder.patchify(x), manual)


def layer_norm(x, norm):
    mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def gelu(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def linear(x, layer):
    return x @ layer.weight.T + layer.bias


def causal_conv(x, conv):
    """Explicit sum: tap k of the (out, in, kernel) weight looks (kernel - 1 - k)·d tokens back."""
    kernel, dilation = conv.kernel_size[0], conv.dilation[0]
    out = torch.zeros_like(x)
    for t in range(x.shape[1]):
        for k in range(kernel):
            source = t - (kernel - 1 - k) * dilation
            if source >= 0:
                out[:, t] += x[:, source] @ conv.weight[:, :, k].T
    return out


def reference_encoder(encoder, x):
    """Naive float64 encoder: loop patchify, explicit MLP and context blocks."""
    batch, leads, samples = x.shape
    patch = encoder.patch
    tokens = torch.stack(
        [x[:, :, patch * t : patch * (t + 1)].reshape(batch, -1) for t in range(samples // patch)],
        1,
    )
    first, _, second = encoder.patch_mlp
    h = linear(gelu(linear(tokens, first)), second)
    for block in encoder.blocks:
        inner = causal_conv(gelu(layer_norm(h, block.norm1)), block.conv1)
        h = h + causal_conv(gelu(layer_norm(inner, block.norm2)), block.conv2)
    return h


def test_encoder_matches_naive_reference():
    torch.manual_seed(0)
    encoder = CausalConvEncoder(leads=3, patch=4, width=6, hidden=10, kernel=3, dilations=(1, 2, 3)).double()
    x = torch.randn(2, 3, 4 * 11, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(encoder(x), reference_encoder(encoder, x), rtol=0, atol=1e-12)


def test_encoder_output_ignores_the_future():
    encoder = small_model().encoder
    x = torch.randn(2, 12, 8 * 30, dtype=torch.float64)
    t = 17
    perturbed = x.clone()
    perturbed[..., 8 * (t + 1) :] += torch.randn_like(perturbed[..., 8 * (t + 1) :])
    before, after = encoder(x), encoder(perturbed)
    torch.testing.assert_close(after[:, : t + 1], before[:, : t + 1], rtol=0, atol=1e-12)
    assert (after[:, t + 1 :] - before[:, t + 1 :]).abs().amax(-1).min() > 1e-6


def test_each_token_sees_exactly_itself_and_the_twelve_before():
    encoder = small_model().encoder
    assert encoder.receptive_field == 12
    tokens, s = 40, 15
    x = torch.randn(1, 12, 8 * tokens, dtype=torch.float64)
    perturbed = x.clone()
    perturbed[..., 8 * s : 8 * (s + 1)] += torch.randn(12, 8, dtype=torch.float64)
    change = (encoder(perturbed) - encoder(x)).abs().amax(-1)[0]
    for t in range(tokens):
        if t - 12 <= s <= t:
            assert change[t] > 1e-6, t
        else:
            assert change[t] <= 1e-12, t


@pytest.mark.parametrize(
    "shape, match",
    [
        ((2, 12, 1001), "not a multiple of the patch size 8"),
        ((2, 11, 1000), "12 leads"),
        ((12, 1000), "12 leads"),
    ],
)
def test_encoder_rejects_bad_input(shape, match):
    with pytest.raises(ValueError, match=match):
        CausalConvEncoder(width=8, hidden=8)(torch.randn(shape))


def test_predictor_is_causal():
    predictor = small_model().predictor
    z = torch.randn(3, 20, 16, dtype=torch.float64)
    t = 9
    perturbed = z.clone()
    perturbed[:, t + 1 :] += torch.randn_like(perturbed[:, t + 1 :])
    before, after = predictor(z), predictor(perturbed)
    torch.testing.assert_close(after[:, : t + 1], before[:, : t + 1], rtol=0, atol=1e-12)
    assert (after[:, t + 1 :] - before[:, t + 1 :]).abs().amax(-1).min() > 1e-6


def test_mask_token_replaces_positions_after_cutoff():
    predictor = small_model().predictor
    z = torch.randn(3, 20, 16, dtype=torch.float64)
    cutoff = torch.tensor([4, 11, 19])
    hidden = torch.arange(20)[None, :] > cutoff[:, None]
    perturbed = z + hidden[..., None] * torch.randn_like(z)
    out = predictor(z, cutoff)
    torch.testing.assert_close(predictor(perturbed, cutoff), out, rtol=0, atol=1e-12)
    manual = torch.where(hidden[..., None], predictor.mask_token, z)
    torch.testing.assert_close(out, predictor(manual), rtol=0, atol=1e-12)
    # output at c+1 reads the mask token there, so it differs from the unmasked output
    rows = torch.arange(2)
    assert (out[rows, cutoff[:2] + 1] - predictor(z)[rows, cutoff[:2] + 1]).abs().amax() > 1e-6


def test_cutoff_must_be_an_integer_vector_per_record():
    predictor = small_model().predictor
    z = torch.randn(2, 5, 16, dtype=torch.float64)
    with pytest.raises(ValueError, match="cutoff must be an integer tensor of shape"):
        predictor(z, torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        predictor(z, torch.tensor([1, 2, 3]))


def reference_predictor(predictor, z):
    """Naive float64 predictor: explicit LayerNorm, GELU and softmax, loops over heads and pairs."""
    tokens, dim = z.shape[1:]
    heads, m = predictor.relative_bias.shape[0], predictor.max_relative_position
    head_dim = dim // heads
    bias = torch.full((heads, tokens, tokens), -math.inf, dtype=z.dtype)
    for i in range(tokens):
        for j in range(i + 1):
            bias[:, i, j] = predictor.relative_bias[:, max(-m, min(m, j - i)) + m]
    x = z
    for block in predictor.blocks:
        q, k, v = linear(layer_norm(x, block.norm1), block.qkv).split(dim, dim=-1)
        heads_out = []
        for h in range(heads):
            cols = slice(h * head_dim, (h + 1) * head_dim)
            scores = q[..., cols] @ k[..., cols].transpose(1, 2) / math.sqrt(head_dim) + bias[h]
            heads_out.append(torch.softmax(scores, dim=-1) @ v[..., cols])
        x = x + linear(torch.cat(heads_out, dim=-1), block.out)
        ffn_in, _, ffn_out = block.mlp
        x = x + linear(gelu(linear(layer_norm(x, block.norm2), ffn_in)), ffn_out)
    return linear(x, predictor.output)


def test_relative_bias_attention_matches_naive_reference():
    torch.manual_seed(1)
    predictor = CausalTransformerPredictor(dim=8, depth=2, heads=2, ffn=16, max_relative_position=3).double()
    with torch.no_grad():
        predictor.relative_bias.normal_(std=2.0)  # large enough that a wrong offset shows
    z = torch.randn(2, 7, 8, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(predictor(z), reference_predictor(predictor, z), rtol=0, atol=1e-12)


def test_predictor_under_bf16_autocast_tracks_float32():
    predictor = small_model().predictor.float()
    z = torch.randn(2, 12, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = predictor(z, torch.tensor([3, 7]))
    high = predictor(z, torch.tensor([3, 7]))
    assert (low.float() - high).norm() < 0.05 * high.norm()


def test_seeded_build_is_reproducible_and_leaves_global_rng_alone():
    state = torch.get_rng_state()
    first, second = (build_model("winder", seed=7, encoder={"width": 8, "hidden": 8}) for _ in range(2))
    assert torch.equal(torch.get_rng_state(), state)
    other = build_model("winder", seed=8, encoder={"width": 8, "hidden": 8})
    second_state, other_state = second.state_dict(), other.state_dict()
    for name, tensor in first.state_dict().items():
        assert torch.equal(tensor, second_state[name]), name
    assert not torch.equal(first.predictor.mask_token, other_state["predictor.mask_token"])


def test_build_model_reports_bad_overrides():
    with pytest.raises(ValueError, match="model.projector.in_dim=64 must equal encoder width=32"):
        build_model("winder", encoder={"width": 32}, projector={"in_dim": 64})
    with pytest.raises(ValueError, match="model.predictor.dim=16 must equal projector out_dim=32"):
        build_model("winder", encoder={"width": 32}, predictor={"dim": 16})
    with pytest.raises(TypeError, match="model.encoder: .*widht"):
        build_model("winder", encoder={"widht": 32})
    with pytest.raises(UnknownComponentError, match="winder-conv"):
        build_model("winder", encoder={"name": "winder-cnv"})
    with pytest.raises(ValueError, match="not divisible by heads 3"):
        build_model("winder", encoder={"width": 32}, predictor={"heads": 3})


def test_registered_names():
    assert ENCODERS.get("winder-conv") is CausalConvEncoder
    assert PREDICTORS.get("causal-transformer") is CausalTransformerPredictor
    assert "winder" in MODELS


def test_the_breakdown_of_a_deployed_model_is_refused_by_name():
    """A deployed model (no predictor) has no training breakdown: a ValueError saying so, not a
    TypeError from inside the count."""
    model = build_model("winder", encoder={"width": 16, "hidden": 32}, projector={"hidden": 32})
    model.predictor = None
    with pytest.raises(ValueError, match="no predictor"):
        parameter_breakdown(model)
