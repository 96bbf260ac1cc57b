"""Samplers for the bridge: the full-sequence one and an incremental one for generation.

Both walk the grid t_k = k / K from x_1 = z1 = c down to t_0 = 0 with the process's
posterior step; the denoiser is an argument, never a dependency.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from dihal.bridge.denoiser import KVCache
from dihal.bridge.process import BrownianBridge


def time_grid(steps: int) -> list[tuple[float, float]]:
    """The K (t, s) pairs of one sampling pass: (K/K, (K-1)/K), ..., (1/K, 0)."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    return [(k / steps, (k - 1) / steps) for k in range(steps, 0, -1)]


def _noise(x: Tensor, generator: torch.Generator | None) -> Tensor:
    return torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)


@torch.no_grad()
def sample(
    denoiser: nn.Module,
    c: Tensor,
    process: BrownianBridge,
    steps: int = 16,
    eta: float = 0.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """z0_hat (B, T, d) for conditions c (B, T, d), in the units of c (standardised)."""
    x = c
    for t, s in time_grid(steps):
        z0_hat = denoiser(x, t, c)
        eps = _noise(x, generator) if eta != 0.0 and s > 0 else None
        x = process.posterior_step(z0_hat, x, t, s, eta=eta, eps=eps)
    return x


@dataclass
class BridgeDecodeState:
    """What incremental sampling carries between calls: one K/V cache per denoising step."""

    caches: list[KVCache]
    length: int = 0
    generator: torch.Generator | None = field(default=None, repr=False)


class IncrementalSampler:
    """The sampler of `sample`, fed the condition a few positions at a time.

    With eta = 0 the outputs equal `sample`'s for the same positions (the denoiser is causal and
    each step's cache holds exactly the keys/values the full pass computed for the prefix), and
    no prefix position is recomputed. With eta > 0 the noise is drawn per call, so results are
    distributed like `sample`'s but not identical to them.
    """

    def __init__(
        self,
        denoiser: nn.Module,
        process: BrownianBridge,
        steps: int = 16,
        eta: float = 0.0,
    ) -> None:
        self.denoiser = denoiser
        self.process = process
        self.grid = time_grid(steps)
        self.eta = eta

    def new_state(self, generator: torch.Generator | None = None) -> BridgeDecodeState:
        return BridgeDecodeState(
            caches=[self.denoiser.new_cache() for _ in self.grid], generator=generator
        )

    @torch.no_grad()
    def extend(self, state: BridgeDecodeState, c_new: Tensor) -> Tensor:
        """z0_hat (B, n, d) for the next n positions' conditions c_new (B, n, d)."""
        x = c_new
        for (t, s), cache in zip(self.grid, state.caches, strict=True):
            z0_hat = self.denoiser(x, t, c_new, cache=cache, start_pos=state.length)
            eps = _noise(x, state.generator) if self.eta != 0.0 and s > 0 else None
            x = self.process.posterior_step(z0_hat, x, t, s, eta=self.eta, eps=eps)
        state.length += c_new.shape[1]
        return x
