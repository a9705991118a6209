"""Causal patch encoder: per-patch MLP followed by residual dilated causal convolutions."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from cyclejepa.models.projector import TokenMLP
from cyclejepa.registry import ENCODERS


class CausalConv1d(nn.Conv1d):
    """Bias-free Conv1D over token-major (B, T, C), left-padded with (k − 1)·d zeros: output t
    depends on inputs t − (k − 1)·d … t."""

    def __init__(self, channels: int, kernel: int, dilation: int):
        super().__init__(channels, channels, kernel, dilation=dilation, bias=False)
        self.left_pad = (kernel - 1) * dilation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        padded = F.pad(x.transpose(1, 2), (self.left_pad, 0))
        return super().forward(padded).transpose(1, 2)


class ContextBlock(nn.Module):
    """x + conv₂(GELU(LN₂(conv₁(GELU(LN₁(x)))))), LN over channels per token, one dilation:
    2·2C + 2·k·C² parameters, one identity skip, nothing after the sum."""

    def __init__(self, channels: int, kernel: int, dilation: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(channels)
        self.conv1 = CausalConv1d(channels, kernel, dilation)
        self.norm2 = nn.LayerNorm(channels)
        self.conv2 = CausalConv1d(channels, kernel, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.gelu(self.norm1(x)))
        return x + self.conv2(F.gelu(self.norm2(h)))


@ENCODERS.register("winder-conv")
class CausalConvEncoder(nn.Module):
    """The Winder encoder: (B, leads, samples) → (B, samples / patch, width) tokens.

    Each patch of ``patch`` samples of all leads is flattened lead-major (sample s of lead l at
    ``l * patch + s``), mapped by a per-patch MLP ``leads·patch → hidden → width``, then through
    one `ContextBlock` (convolutions of size ``kernel``) per entry of ``dilations``. With the
    defaults (the paper) a 12 × 1000 record gives 125 tokens of width 256, and 969,472 parameters.
    """

    def __init__(
        self,
        leads: int = 12,
        patch: int = 8,
        width: int = 256,
        hidden: int = 512,
        kernel: int = 3,
        dilations: Sequence[int] = (1, 2),
    ):
        super().__init__()
        if kernel < 1 or any(d < 1 for d in dilations):
            raise ValueError(f"kernel and dilations must be >= 1, got {kernel=}, {dilations=}")
        self.leads, self.patch, self.width = leads, patch, width
        self.kernel, self.dilations = kernel, tuple(dilations)
        self.patch_mlp = TokenMLP(leads * patch, hidden, width)
        self.blocks = nn.ModuleList(ContextBlock(width, kernel, d) for d in self.dilations)

    @property
    def receptive_field(self) -> int:
        """Look-back in tokens: output t depends on inputs t - receptive_field … t (12 here)."""
        return sum(2 * (self.kernel - 1) * d for d in self.dilations)

    def patchify(self, x: torch.Tensor) -> torch.Tensor:
        """(B, leads, samples) → (B, T, leads·patch), lead-major within each patch."""
        if x.ndim != 3 or x.shape[1] != self.leads:
            raise ValueError(f"encoder input must be (batch, {self.leads} leads, samples), got {tuple(x.shape)}")
        batch, leads, samples = x.shape
        if samples % self.patch:
            raise ValueError(f"encoder input length {samples} is not a multiple of the patch size {self.patch}")
        patches = x.reshape(batch, leads, samples // self.patch, self.patch)
        return patches.transpose(1, 2).reshape(batch, samples // self.patch, leads * self.patch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.patch_mlp(self.patchify(x))
        for block in self.blocks:
            h = block(h)
        return h
