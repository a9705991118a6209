"""Causal Transformer predictor with learned relative-position biases and a mask token."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from cyclejepa.models.projector import TokenMLP
from cyclejepa.registry import PREDICTORS

INIT_STD = 0.02
"""Standard deviation of the normal init of the mask token and the relative-bias table."""


class PredictorBlock(nn.Module):
    """Pre-LN Transformer block: x + Attn(LN₁(x)), then + MLP(LN₂(x)).

    ``qkv`` (dim → 3·dim, bias) splits as (3, heads, dim/heads): queries (head-major), keys,
    values. The additive attention mask (relative bias + causal −inf) comes from the predictor.
    """

    def __init__(self, dim: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = TokenMLP(dim, ffn, dim)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        qkv = self.qkv(self.norm1(x)).view(batch, tokens, 3, self.heads, dim // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask.to(q.dtype))
        x = x + self.out(attended.transpose(1, 2).reshape(batch, tokens, dim))
        return x + self.mlp(self.norm2(x))


@PREDICTORS.register("causal-transformer")
class CausalTransformerPredictor(nn.Module):
    """Causal pre-LN Transformer g_ψ over projected tokens: (B, T, dim) → (B, T, dim).

    Token i attends to tokens j ≤ i with the additive per-head bias
    ``relative_bias[h, clamp(j - i, ±max_relative_position) + max_relative_position]``; the
    one table is shared by all blocks. A final Linear dim → dim (bias, no LayerNorm) gives the
    prediction. With the defaults (the paper) the predictor has 3,227,084 parameters:
    4 × 789,760 (blocks) + 65,792 (output) + 256 (mask token) + 1,996 (bias table, 4 × 499).
    Causal attention uses only offsets ≤ 0; the positive half of the table is kept to match the
    paper's count and gets no gradient. ``dim`` is the projector's output width (no input
    projection); offsets beyond ±``max_relative_position`` share the table's end entries.
    """

    def __init__(self, dim: int = 256, depth: int = 4, heads: int = 4, ffn: int = 1024, max_relative_position: int = 249):
        super().__init__()
        if dim % heads:
            raise ValueError(f"predictor dim {dim} is not divisible by heads {heads}")
        self.dim, self.max_relative_position = dim, max_relative_position
        self.blocks = nn.ModuleList(PredictorBlock(dim, heads, ffn) for _ in range(depth))
        self.output = nn.Linear(dim, dim)
        self.mask_token = nn.Parameter(torch.empty(dim))
        self.relative_bias = nn.Parameter(torch.empty(heads, 2 * max_relative_position + 1))
        nn.init.normal_(self.mask_token, std=INIT_STD)
        nn.init.normal_(self.relative_bias, std=INIT_STD)

    def attention_mask(self, tokens: int) -> torch.Tensor:
        """(heads, T, T) additive mask: bias[h, j - i] where j ≤ i, −inf where j > i."""
        position = torch.arange(tokens, device=self.relative_bias.device)
        offset = position[None, :] - position[:, None]
        m = self.max_relative_position
        bias = self.relative_bias[:, offset.clamp(-m, m) + m]
        return bias.masked_fill(offset > 0, float("-inf"))

    def apply_mask(self, z: torch.Tensor, cutoff: torch.Tensor) -> torch.Tensor:
        """Replace z[b, t] by the mask token wherever t > cutoff[b]."""
        if cutoff.shape != z.shape[:1] or cutoff.is_floating_point():
            raise ValueError(
                f"cutoff must be an integer tensor of shape ({z.shape[0]},), got {cutoff.dtype} {tuple(cutoff.shape)}"
            )
        hidden = torch.arange(z.shape[1], device=z.device) > cutoff.to(z.device)[:, None]
        return torch.where(hidden[..., None], self.mask_token.to(z.dtype), z)

    def forward(self, z: torch.Tensor, cutoff: torch.Tensor | None = None) -> torch.Tensor:
        """Predictions (B, T, dim): output t predicts z_{t+1} from tokens ≤ t; inputs after the
        integer ``cutoff[b]`` (B,) become the mask token (None: no masking)."""
        if z.ndim != 3 or z.shape[-1] != self.dim:
            raise ValueError(f"predictor input must be (batch, tokens, {self.dim}), got {tuple(z.shape)}")
        x = z if cutoff is None else self.apply_mask(z, cutoff)
        attn_mask = self.attention_mask(z.shape[1])
        for block in self.blocks:
            x = block(x, attn_mask)
        return self.output(x)
