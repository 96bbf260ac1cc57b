"""Bridgeability measures of a trained denoiser on held-out pairs, in standardised units."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from dihal.bridge.data import BridgeData
from dihal.bridge.loss import bridge_loss_terms, squared_error
from dihal.bridge.process import BrownianBridge
from dihal.bridge.sampler import DEFAULT_RULE, sample
from dihal.net_configs import DEFAULT_T_GRID
from dihal.seeds import derive_seed


def _device_of(module: nn.Module) -> torch.device:
    return next(module.parameters()).device


@torch.no_grad()
def validation_loss(
    denoiser: nn.Module,
    val: BridgeData,
    process: BrownianBridge,
    t_grid: tuple[float, ...] = DEFAULT_T_GRID,
    seed: int = 0,
    batch_size: int = 32,
) -> float:
    """The training MSE on z0 at every t of `t_grid`, averaged, with fixed noise.

    The noise depends only on (seed, batch_size, val's shapes): every call, for every layer,
    sees the same eps.
    """
    if not t_grid:
        raise ValueError("t_grid is empty")
    device = _device_of(denoiser)
    gen = torch.Generator(device=device).manual_seed(derive_seed(seed, "validation"))
    total = torch.zeros((), dtype=torch.float64, device=device)
    count = torch.zeros((), dtype=torch.float64, device=device)
    for start in range(0, len(val), batch_size):
        cond, target, mask = val.batch(slice(start, start + batch_size), device)
        for t_value in t_grid:
            t = torch.full((cond.shape[0],), float(t_value), device=device)
            eps = torch.randn(target.shape, generator=gen, device=device)
            sq, n = bridge_loss_terms(denoiser, process, cond, target, t, eps, mask)
            total += sq.double()
            count += n.double()
    return float(total / count)


RECONSTRUCTION_BLOCK = 32
"""The held-out sequences whose squared errors are summed together (in float32) before they are
added up in float64: the pooling of every reconstruction error, whatever batch it is sampled in."""


class ReconstructionPool:
    """||z0_hat - z0|| / ||z0|| over the real tokens of held-out sequences fed in order
    (Frobenius norms, pooled): each `block` consecutive sequences' squared sums taken together
    in float32 (`squared_error`), the blocks added in float64. Sequences are buffered until
    their block is complete, so the number does not depend on the batches they are fed in:
    reconstruction_error in batches of 32 and a pass in batches of 8 give the same one."""

    def __init__(self, block: int = RECONSTRUCTION_BLOCK) -> None:
        if block < 1:
            raise ValueError(f"block must be >= 1, got {block}")
        self.block = block
        self._pending: list[tuple[Tensor, Tensor, Tensor | None]] = []
        self._buffered = 0
        self._err: Tensor | None = None
        self._ref: Tensor | None = None

    def add(self, z0_hat: Tensor, target: Tensor, mask: Tensor | None = None) -> None:
        """The samples z0_hat (B, T, d) of the next B sequences, their true z0 (B, T, d) and
        real-token mask (B, T) (None: every token), all on one device."""
        if z0_hat.shape != target.shape:
            raise ValueError(f"z0_hat {tuple(z0_hat.shape)} and target {tuple(target.shape)} "
                             "must have the same shape")
        self._pending.append((z0_hat, target, mask))
        self._buffered += z0_hat.shape[0]
        while self._buffered >= self.block:
            self._flush(self.block)

    def _flush(self, n: int) -> None:
        """Pool the first n buffered sequences as one block."""
        parts = list(zip(*self._pending, strict=True))
        z, target = (p[0] if len(p) == 1 else torch.cat(p) for p in parts[:2])
        masks = parts[2]
        mask = None if masks[0] is None else masks[0] if len(masks) == 1 else torch.cat(masks)
        rest = z.shape[0] - n
        self._pending = [(z[n:], target[n:], None if mask is None else mask[n:])] if rest else []
        self._buffered = rest
        z, target = z[:n], target[:n]
        mask = None if mask is None else mask[:n]
        err = squared_error(z, target, mask)[0].double()
        ref = squared_error(torch.zeros_like(target), target, mask)[0].double()
        self._err = err if self._err is None else self._err + err
        self._ref = ref if self._ref is None else self._ref + ref

    def value(self) -> float:
        """The relative error over every sequence fed so far (a last, shorter block pooled)."""
        if self._buffered:
            self._flush(self._buffered)
        if self._err is None:
            raise ValueError("the reconstruction error needs at least one held-out sequence")
        return math.sqrt(float(self._err / self._ref))


@torch.no_grad()
def reconstruction_error(
    denoiser: nn.Module,
    val: BridgeData,
    process: BrownianBridge,
    steps: int = 16,
    eta: float = 0.0,
    seed: int = 0,
    batch_size: int = RECONSTRUCTION_BLOCK,
    rule: str = DEFAULT_RULE,
) -> float:
    """||sample(c) - z0|| / ||z0|| over all real tokens of `val` (Frobenius norms, pooled by
    ReconstructionPool in blocks of `batch_size` sequences), with the sampler's update `rule` (the marginal rule's noise seeded
    from `seed` and each batch's start, so it depends on `batch_size`)."""
    device = _device_of(denoiser)
    gen = torch.Generator(device=device).manual_seed(derive_seed(seed, "reconstruction"))
    pool = ReconstructionPool(batch_size)
    for start in range(0, len(val), batch_size):
        cond, target, mask = val.batch(slice(start, start + batch_size), device)
        z0_hat = sample(denoiser, cond, process, steps=steps, eta=eta, generator=gen, rule=rule,
                        seed=derive_seed(seed, "reconstruction", start))
        pool.add(z0_hat, target, mask)
    return pool.value()
