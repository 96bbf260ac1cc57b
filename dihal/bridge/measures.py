"""Bridgeability measures of a trained denoiser on held-out pairs, in standardised units."""

from __future__ import annotations

import math

import torch
from torch import nn

from dihal.bridge.data import BridgeData
from dihal.bridge.loss import bridge_loss_terms, squared_error
from dihal.bridge.process import BrownianBridge
from dihal.bridge.sampler import sample
from dihal.seeds import derive_seed
from dihal.training import DEFAULT_T_GRID


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


@torch.no_grad()
def reconstruction_error(
    denoiser: nn.Module,
    val: BridgeData,
    process: BrownianBridge,
    steps: int = 16,
    eta: float = 0.0,
    seed: int = 0,
    batch_size: int = 32,
) -> float:
    """||sample(c) - z0|| / ||z0|| over all real tokens of `val` (Frobenius norms, pooled)."""
    device = _device_of(denoiser)
    gen = torch.Generator(device=device).manual_seed(derive_seed(seed, "reconstruction"))
    err = torch.zeros((), dtype=torch.float64, device=device)
    ref = torch.zeros((), dtype=torch.float64, device=device)
    for start in range(0, len(val), batch_size):
        cond, target, mask = val.batch(slice(start, start + batch_size), device)
        z0_hat = sample(denoiser, cond, process, steps=steps, eta=eta, generator=gen)
        err += squared_error(z0_hat, target, mask)[0].double()
        ref += squared_error(torch.zeros_like(target), target, mask)[0].double()
    return math.sqrt(float(err / ref))
