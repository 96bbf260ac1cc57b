"""The bridge loss: MSE between the denoiser's z0_hat and the true z0, over real tokens."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from dihal.bridge.process import BrownianBridge


def squared_error(
    pred: Tensor, target: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """(sum of squared errors, number of terms) over real tokens, in float32.

    Kept as a sum and a count so that batches and processes can be pooled exactly.
    """
    err = (pred.float() - target.float()).pow(2)
    if mask is None:
        return err.sum(), torch.full((), float(err.numel()), device=err.device)  # no host copy
    m = mask.unsqueeze(-1)
    return torch.where(m, err, 0.0).sum(), m.sum().to(err.dtype) * err.shape[-1]


def bridge_loss_terms(
    denoiser: nn.Module,
    process: BrownianBridge,
    cond: Tensor,
    target: Tensor,
    t: Tensor,
    eps: Tensor,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Squared error of f(x_t, t, c) against z0 at x_t = marginal(z0 = target, z1 = cond, t, eps)."""
    x_t = process.marginal(target, cond, t, eps)
    return squared_error(denoiser(x_t, t, cond), target, mask)


def bridge_loss(
    denoiser: nn.Module,
    process: BrownianBridge,
    cond: Tensor,
    target: Tensor,
    t: Tensor,
    eps: Tensor,
    mask: Tensor | None = None,
) -> Tensor:
    """Mean squared error on z0 over real tokens and dimensions."""
    total, count = bridge_loss_terms(denoiser, process, cond, target, t, eps, mask)
    return total / count.clamp_min(1.0)
