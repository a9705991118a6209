"""Five independent random streams per seed, whose states travel in every checkpoint."""

from __future__ import annotations

import numpy as np
import torch

from cyclejepa.devices import indexed

STREAMS = ("init", "mask", "sigreg", "augment", "data")


class RNGStreams:
    """One `torch.Generator` per source of randomness, seeded by `numpy.random.SeedSequence(seed).spawn`
    (independent streams); ``init`` on the CPU, the others on the training device."""

    def __init__(self, seed: int, device: torch.device | str = "cpu"):
        children = np.random.SeedSequence(seed).spawn(len(STREAMS))
        self.generators: dict[str, torch.Generator] = {}
        for name, child in zip(STREAMS, children, strict=True):
            where = "cpu" if name == "init" else indexed(device)
            generator = torch.Generator(device=where)
            generator.manual_seed(int(child.generate_state(1, dtype=np.uint64)[0] >> 1))
            self.generators[name] = generator

    def __getitem__(self, name: str) -> torch.Generator:
        return self.generators[name]

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: g.get_state() for name, g in self.generators.items()}

    def load_state_dict(self, states: dict[str, torch.Tensor]) -> None:
        """Continue every stream where ``states`` left it; a state from another kind of device raises
        a ValueError naming the stream."""
        missing = set(STREAMS) - set(states)
        if missing:
            raise KeyError(f"checkpoint lacks RNG stream(s) {sorted(missing)}")
        for name, generator in self.generators.items():  # every stream checked before any is set
            saved, size = states[name].numel(), generator.get_state().numel()
            if saved != size:  # e.g. a CUDA generator's 16 bytes against a CPU one's 5,056
                raise ValueError(
                    f"RNG stream {name!r}: the checkpoint holds a {saved}-byte generator state, but this run's "
                    f"generator on {generator.device} takes {size} bytes: the checkpoint was written on another "
                    "kind of device; resume it on the kind it was trained on (training.device)"
                )
        for name, generator in self.generators.items():
            generator.set_state(states[name].cpu())
