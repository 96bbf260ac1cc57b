"""The Brownian bridge between the condition z1 = c (t = 1) and the target z0 = h_l (t = 0).

A pure object: it knows the marginal x_t | (z0, z1) and the posterior step x_s | (x_t, z0_hat),
nothing about networks. Randomness is always explicit (a generator or a given eps).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

TimeLike = float | Tensor


def as_time(t: TimeLike, like: Tensor) -> Tensor:
    """A float, a (B,) tensor or a tensor already broadcastable to `like` -> broadcastable tensor.

    A (B,) tensor is one time per sequence and becomes (B, 1, 1) for (B, T, d) states.
    """
    t = torch.as_tensor(t, dtype=like.dtype, device=like.device)
    if t.ndim == 1 and like.ndim > 1:
        if t.shape[0] != like.shape[0]:
            raise ValueError(f"t has {t.shape[0]} entries for a batch of {like.shape[0]}")
        t = t.view(-1, *([1] * (like.ndim - 1)))
    return t


@dataclass(frozen=True)
class BrownianBridge:
    """x_t = (1 - t) z0 + t z1 + sigma * sqrt(t (1 - t)) * eps, t in [0, 1].

    sigma: bridge noise scale (docs/method.md §2: 1 by default).
    t_eps: `sample_t` draws from U(t_eps, 1 - t_eps) so that training never sees the noiseless
        endpoints exactly (both are allowed in `marginal`).
    """

    sigma: float = 1.0
    t_eps: float = 1e-5

    def __post_init__(self) -> None:
        if not self.sigma >= 0.0:
            raise ValueError(f"sigma must be >= 0, got {self.sigma}")
        if not 0.0 <= self.t_eps < 0.5:
            raise ValueError(f"t_eps must be in [0, 0.5), got {self.t_eps}")

    def sample_t(
        self,
        n: int,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
    ) -> Tensor:
        """n times ~ U(t_eps, 1 - t_eps), float32."""
        if generator is not None and device is None:
            device = generator.device
        u = torch.rand(n, generator=generator, device=device)
        return self.t_eps + (1.0 - 2.0 * self.t_eps) * u

    def marginal(self, z0: Tensor, z1: Tensor, t: TimeLike, eps: Tensor) -> Tensor:
        """Sample of x_t given the endpoints; t = 0 gives z0 and t = 1 gives z1 exactly."""
        t = as_time(t, z0)
        std = self.sigma * torch.sqrt(t * (1.0 - t))
        return (1.0 - t) * z0 + t * z1 + std * eps

    def posterior_step(
        self,
        z0_hat: Tensor,
        x_t: Tensor,
        t: TimeLike,
        s: TimeLike,
        eta: float = 0.0,
        eps: Tensor | None = None,
    ) -> Tensor:
        """x_s from x_t and a prediction of z0, for 0 <= s < t <= 1.

        x_s = (1 - s/t) z0_hat + (s/t) x_t + eta * sigma * sqrt(s (t - s) / t) * eps.
        eta = 0 is deterministic (eps unused); eta = 1 samples the exact bridge posterior
        x_s | (x_t, z0 = z0_hat). At s = 0 the result is z0_hat itself.
        """
        if isinstance(s, float | int) and s == 0:
            return z0_hat
        t = as_time(t, x_t)
        s = as_time(s, x_t)
        ratio = s / t
        x_s = (1.0 - ratio) * z0_hat + ratio * x_t
        if eta != 0.0:
            if eps is None:
                raise ValueError("eta != 0 needs eps")
            x_s = x_s + eta * self.sigma * torch.sqrt(s * (t - s) / t) * eps
        return x_s

    def implied_noise(self, z0_hat: Tensor, x_t: Tensor, z1: Tensor, t: TimeLike) -> Tensor:
        """eps_hat = (x_t - (1 - t) z0_hat - t z1) / (sigma sqrt(t (1 - t))): the noise that
        makes x_t a sample of the marginal with z0 = z0_hat. Undefined where the marginal has
        no noise (t = 0 or 1, or sigma = 0): those raise."""
        t = as_time(t, x_t)
        std = self.sigma * torch.sqrt(t * (1.0 - t))
        if bool((std == 0).any()):
            raise ValueError("the implied noise is undefined where sigma * sqrt(t (1 - t)) = 0 "
                             f"(sigma={self.sigma}, t at 0 or 1); give the noise explicitly")
        return (x_t - (1.0 - t) * z0_hat - t * z1) / std

    def marginal_step(
        self,
        z0_hat: Tensor,
        x_t: Tensor,
        z1: Tensor,
        t: TimeLike,
        s: TimeLike,
        eps: Tensor | None = None,
    ) -> Tensor:
        """x_s for 0 <= s < t <= 1 that keeps the training marginals (the bridge analogue of
        DDIM, docs/method.md §2):

            x_s = (1 - s) z0_hat + s z1 + sigma sqrt(s (1 - s)) eps_hat,

        eps_hat = `implied_noise(z0_hat, x_t, z1, t)`, or `eps` where given. At t = 1 (x_1 = z1,
        no noise to reuse) and with sigma = 0 the noise must be given (it is unused for
        sigma = 0). At s = 0 the result is z0_hat itself. Deterministic given eps.
        """
        if isinstance(s, float | int) and s == 0:
            return z0_hat
        if self.sigma == 0.0:
            return self.marginal(z0_hat, z1, s, torch.zeros_like(z0_hat))
        if eps is None:
            eps = self.implied_noise(z0_hat, x_t, z1, t)
        return self.marginal(z0_hat, z1, s, eps)


@dataclass(frozen=True)
class EndpointRegression(BrownianBridge):
    """The regression control: the bridge's loss and network, trained only at t = 1,
    where x_1 = z1 = c carries no noise. The denoiser then learns h_l = f(c, 1, c) directly, and
    the one-step sampler (K = 1: t = 1 -> s = 0) returns that prediction. Validated at t = 1."""

    def sample_t(self, n: int, generator: torch.Generator | None = None,
                 device: torch.device | str | None = None) -> Tensor:
        if generator is not None and device is None:
            device = generator.device
        return torch.ones(n, device=device)


REGRESSION_T_GRID = (1.0,)
