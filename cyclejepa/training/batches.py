"""Training batches drawn from arrays kept on the training device."""

from __future__ import annotations

import numpy as np
import torch

from cyclejepa.devices import indexed

_RESIDENT_FRACTION = 0.5  # the corpus stays on an accelerator below this fraction of its free memory


class BatchSampler:
    """Epoch-wise shuffled batches of (signals, token phases) in the order of ``generator``.

    The arrays are copied once to ``device`` when they fit (a 21,799-record PTB-XL cache is about
    1 GB), else each batch from pinned host memory. The permutation and position are in
    `state_dict`, so a resumed run draws exactly the batches it would have drawn.
    """

    local = False  # each batch is the global one (under torchrun, ranks keep their shard of it)

    def __init__(
        self,
        signals: np.ndarray | torch.Tensor,
        phases: np.ndarray | torch.Tensor,
        batch_size: int,
        generator: torch.Generator,
        device: torch.device | str = "cpu",
    ):
        if len(signals) != len(phases):
            raise ValueError(f"{len(signals)} signals but {len(phases)} phase rows")
        if len(signals) < batch_size:
            raise ValueError(f"batch size {batch_size} exceeds the {len(signals)} training records")
        self.device = indexed(device)
        self.batch_size, self.generator = batch_size, generator
        self.signals = self._place(torch.as_tensor(np.asarray(signals, dtype=np.float32)))
        self.phases = self._place(torch.as_tensor(np.asarray(phases, dtype=np.float32)))
        self.order = self._permutation()
        self.cursor = 0
        self.epoch = 0

    def _place(self, array: torch.Tensor) -> torch.Tensor:
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            if array.nbytes < _RESIDENT_FRACTION * free:
                return array.to(self.device)
            return array.pin_memory()
        return array.to(self.device)

    def _permutation(self) -> torch.Tensor:
        return torch.randperm(len(self.signals), generator=self.generator, device=self.generator.device)

    def __len__(self) -> int:
        return len(self.signals)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch (signals (B, channels, samples), phases (B, tokens)); reshuffles per epoch."""
        if self.cursor + self.batch_size > len(self.order):
            self.order, self.cursor, self.epoch = self._permutation(), 0, self.epoch + 1
        index = self.order[self.cursor : self.cursor + self.batch_size]
        self.cursor += self.batch_size
        index = index.to(self.signals.device)
        batch = self.signals[index].to(self.device, non_blocking=True)
        return batch, self.phases[index].to(self.device, non_blocking=True)

    def state_dict(self) -> dict:
        return {"order": self.order.cpu(), "cursor": self.cursor, "epoch": self.epoch}

    def load_state_dict(self, state: dict) -> None:
        if "order" not in state:
            raise ValueError("the checkpoint was taken on streamed batches; resume it with the same training.memory_budget_gb")
        if len(state["order"]) != len(self.signals):
            raise ValueError(f"checkpoint was taken on {len(state['order'])} records, this corpus has {len(self.signals)}")
        self.order = state["order"].to(self.generator.device)
        self.cursor, self.epoch = int(state["cursor"]), int(state["epoch"])
