"""Gaussian (variance-preserving) noise schedules and the DDIM update, for the baselines.

Continuous time t in [0, 1]: t = 0 is the data end, t = 1 the noise end. A schedule is a small
frozen object that only knows alpha_bar(t); the forward process and the update rule are pure
functions of it, with randomness passed in explicitly (an eps or a generator).

    x_t = sqrt(alpha_bar(t)) x0 + sqrt(1 - alpha_bar(t)) eps                  (q_sample)

    x_s = sqrt(ab_s) x0_hat + sqrt(1 - ab_s - sigma^2) eps_hat + sigma z      (ddim_step)
          eps_hat = (x_t - sqrt(ab_t) x0_hat) / sqrt(1 - ab_t)
          sigma   = eta sqrt((1 - ab_s) / (1 - ab_t)) sqrt(1 - ab_t / ab_s)

eta = 0 is DDIM (deterministic); eta = 1 samples the DDPM posterior q(x_s | x_t, x0 = x0_hat).
A network may predict x0 directly, or v (`x0_from_v`); either way the sampler hands x0_hat to
`ddim_step`. Times may be a float or one per sequence, shape (B,), for states (B, T, d).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from dihal.bridge.process import as_time

TimeLike = float | Tensor


@dataclass(frozen=True)
class NoiseSchedule:
    """alpha_bar(t): the signal fraction of x_t, non-increasing from about 1 at t = 0.

    Subclasses define `_alpha_bar`; the public `alpha_bar` clips it to [min_alpha_bar, 1] so
    that sqrt(alpha_bar) and the DDIM ratios stay finite at the noise end.
    """

    min_alpha_bar: float = 1e-5

    def _alpha_bar(self, t: Tensor) -> Tensor:
        raise NotImplementedError

    def alpha_bar(self, t: TimeLike) -> Tensor:
        t = torch.as_tensor(t)
        if not t.is_floating_point():
            t = t.float()
        return self._alpha_bar(t).clamp(self.min_alpha_bar, 1.0)


@dataclass(frozen=True)
class SqrtSchedule(NoiseSchedule):
    """Diffusion-LM's schedule, alpha_bar(t) = 1 - sqrt(t + s) (Li et al. 2022, s = 1e-4).

    The noise is already 0.1 std at t = 0 and rises fast at small t, which Li et al. found
    better for embeddings than the cosine schedule. 1 - sqrt(1 + s) < 0, so the last ~1e-4 of
    time sits at min_alpha_bar (their discrete version clips beta at 0.999 to the same end).
    """

    s: float = 1e-4

    def _alpha_bar(self, t: Tensor) -> Tensor:
        return 1.0 - torch.sqrt(t + self.s)


@dataclass(frozen=True)
class CosineSchedule(NoiseSchedule):
    """Nichol & Dhariwal (2021): alpha_bar(t) = cos^2(((t + s) / (1 + s)) pi / 2) / cos^2(...at 0).

    alpha_bar(0) = 1 exactly; alpha_bar(1) = 0, clipped to min_alpha_bar.
    """

    s: float = 0.008

    def _alpha_bar(self, t: Tensor) -> Tensor:
        def f(u: Tensor) -> Tensor:
            return torch.cos((u + self.s) / (1.0 + self.s) * math.pi / 2) ** 2

        return f(t) / f(torch.zeros_like(t))  # the same arithmetic at 0: exactly 1 there


def _coefficients(schedule: NoiseSchedule, t: TimeLike, like: Tensor) -> tuple[Tensor, Tensor]:
    """(sqrt(alpha_bar), sqrt(1 - alpha_bar)) at t, broadcastable to `like`."""
    ab = as_time(schedule.alpha_bar(as_time(t, like).float()), like)
    return ab.sqrt(), (1.0 - ab).clamp_min(0.0).sqrt()


def sample_time(n: int, generator: torch.Generator, device: torch.device | str | None = None) -> Tensor:
    """n training times ~ U(0, 1), float32, on the generator's device unless told otherwise."""
    return torch.rand(n, generator=generator, device=device or generator.device)


def time_grid(steps: int) -> Tensor:
    """steps + 1 times 1 = t_K > t_{K-1} > ... > t_0 = 0 with t_k = k / K.

    A sampler makes exactly `steps` network calls, at t_K, ..., t_1, each followed by
    ddim_step(x0_hat, x, t_k, t_{k-1}); the last step (s = 0) returns x0_hat.
    """
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    return torch.arange(steps, -1, -1, dtype=torch.float64).div(steps).float()


def q_sample(x0: Tensor, t: TimeLike, eps: Tensor, schedule: NoiseSchedule) -> Tensor:
    """x_t = sqrt(alpha_bar(t)) x0 + sqrt(1 - alpha_bar(t)) eps."""
    a, b = _coefficients(schedule, t, x0)
    return a * x0 + b * eps


def v_target(x0: Tensor, eps: Tensor, t: TimeLike, schedule: NoiseSchedule) -> Tensor:
    """v = sqrt(ab) eps - sqrt(1 - ab) x0 (Salimans & Ho 2022), the target of v prediction."""
    a, b = _coefficients(schedule, t, x0)
    return a * eps - b * x0


def x0_from_v(v: Tensor, x_t: Tensor, t: TimeLike, schedule: NoiseSchedule) -> Tensor:
    """The x0 estimate implied by a v prediction: sqrt(ab) x_t - sqrt(1 - ab) v."""
    a, b = _coefficients(schedule, t, x_t)
    return a * x_t - b * v


def ddim_step(
    x0_hat: Tensor,
    x_t: Tensor,
    t: TimeLike,
    s: TimeLike,
    schedule: NoiseSchedule,
    eta: float = 0.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """x_s from x_t and a prediction of x0, for 0 <= s < t <= 1 (see the module docstring).

    s = 0 is the data end: the result is x0_hat itself (also where alpha_bar(0) < 1, as for
    the sqrt schedule). eta > 0 draws fresh noise and needs `generator`.
    """
    if eta < 0:
        raise ValueError(f"eta must be >= 0, got {eta}")
    a_t, b_t = _coefficients(schedule, t, x_t)
    a_s, b_s = _coefficients(schedule, s, x_t)
    eps_hat = (x_t - a_t * x0_hat) / b_t.clamp_min(1e-8)
    x_s = a_s * x0_hat
    if eta > 0:
        if generator is None:
            raise ValueError("eta > 0 draws noise: pass a torch.Generator")
        # sigma^2 = eta^2 (1 - ab_s)/(1 - ab_t) (1 - ab_t/ab_s), written with the coefficients
        ratio = (a_t / a_s) ** 2
        var = (eta**2 * (b_s / b_t.clamp_min(1e-8)) ** 2 * (1.0 - ratio)).clamp(min=0.0)
        var = torch.minimum(var, b_s**2)
        z = torch.randn(x_t.shape, generator=generator, device=x_t.device, dtype=x_t.dtype)
        x_s = x_s + (b_s**2 - var).clamp_min(0.0).sqrt() * eps_hat + var.sqrt() * z
    else:
        x_s = x_s + b_s * eps_hat
    at_end = as_time(s, x_t) <= 0
    return torch.where(at_end, x0_hat, x_s)
