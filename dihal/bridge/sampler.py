"""Samplers for the bridge: the full-sequence one and an incremental one for generation.

Both walk the grid t_k = k / K from x_1 = z1 = c down to t_0 = 0 with one of two update rules
(docs/method.md §2); the denoiser is an argument, never a dependency.

- "ancestral": the process's posterior step, x_s = (1 - s/t) z0_hat + (s/t) x_t (+ eta noise);
  with eta = 0 every x_s is noise-free, off the training marginals.
- "marginal": the process's marginal step, which re-noises z0_hat to the marginal of x_s with
  the noise implied by x_t (the bridge analogue of DDIM). The first step, from t = 1, has no
  noise to reuse: it draws eps for each position p from a generator seeded with
  derive_seed(seed, "bridge-position", p), so a position's sample does not depend on how many
  positions come after it or on how the sequence is fed (cached generation stays valid).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from dihal.bridge.denoiser import KVCache
from dihal.bridge.process import BrownianBridge
from dihal.config import DEFAULT_SAMPLER_RULE as DEFAULT_RULE
from dihal.config import SAMPLER_RULES
from dihal.seeds import derive_seed


def time_grid(steps: int) -> list[tuple[float, float]]:
    """The K (t, s) pairs of one sampling pass: (K/K, (K-1)/K), ..., (1/K, 0)."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    return [(k / steps, (k - 1) / steps) for k in range(steps, 0, -1)]


def _noise(x: Tensor, generator: torch.Generator | None) -> Tensor:
    return torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)


def check_rule(rule: str, eta: float = 0.0) -> str:
    """`rule` if it is one of SAMPLER_RULES (eta > 0 only with "ancestral"), else a clear error."""
    if rule not in SAMPLER_RULES:
        raise ValueError(f"sampler rule must be one of {SAMPLER_RULES}, got {rule!r}")
    if rule == "marginal" and eta != 0.0:
        raise ValueError(f"eta={eta} applies to the ancestral rule only; the marginal rule is "
                         "deterministic after its first step (use eta=0)")
    return rule


def draws_noise(rule: str, steps: int, eta: float = 0.0) -> bool:
    """Whether `sample` draws any noise under (rule, steps, eta): the ancestral rule only with
    eta > 0, the marginal rule at its first step, and either only where a step ends above
    t = 0 (K > 1). Without noise a sample is a function of its condition alone: the same
    whatever the generator, the seed or the batch it is drawn in."""
    check_rule(rule, eta)
    return steps > 1 and (rule == "marginal" or eta != 0.0)


def position_noise(seed: int, start_pos: int, like: Tensor) -> Tensor:
    """Standard normal noise shaped like `like` (B, n, d) for positions [start_pos, start_pos + n):
    position p's (B, d) block comes from a CPU generator seeded derive_seed(seed,
    "bridge-position", p), so it is the same whatever the chunking or the device."""
    B, n, d = like.shape
    blocks = [
        torch.randn((B, d), generator=torch.Generator().manual_seed(
            derive_seed(seed, "bridge-position", start_pos + j)))
        for j in range(n)
    ]
    return torch.stack(blocks, dim=1).to(like.device, like.dtype)


def _update(process: BrownianBridge, rule: str, z0_hat: Tensor, x: Tensor, c: Tensor, t: float,
            s: float, eta: float, generator: torch.Generator | None, seed: int,
            start_pos: int) -> Tensor:
    """One step t -> s of either rule (the noise drawn here, the update rule in the process)."""
    if rule == "ancestral":
        eps = _noise(x, generator) if eta != 0.0 and s > 0 else None
        return process.posterior_step(z0_hat, x, t, s, eta=eta, eps=eps)
    eps = position_noise(seed, start_pos, x) if t == 1.0 and s > 0 else None
    return process.marginal_step(z0_hat, x, c, t, s, eps=eps)


@torch.no_grad()
def sample(
    denoiser: nn.Module,
    c: Tensor,
    process: BrownianBridge,
    steps: int = 16,
    eta: float = 0.0,
    generator: torch.Generator | None = None,
    *,
    rule: str = DEFAULT_RULE,
    seed: int = 0,
) -> Tensor:
    """z0_hat (B, T, d) for conditions c (B, T, d), in the units of c (standardised).

    rule: "ancestral" (eta and `generator` apply) or "marginal" (`seed` seeds its first step's
    per-position noise)."""
    check_rule(rule, eta)
    x = c
    for t, s in time_grid(steps):
        z0_hat = denoiser(x, t, c)
        x = _update(process, rule, z0_hat, x, c, t, s, eta, generator, seed, 0)
    return x


@dataclass
class BridgeDecodeState:
    """What incremental sampling carries between calls: one K/V cache per denoising step."""

    caches: list[KVCache]
    length: int = 0
    generator: torch.Generator | None = field(default=None, repr=False)
    seed: int = 0  # the marginal rule's per-position noise


class IncrementalSampler:
    """The sampler of `sample`, fed the condition a few positions at a time.

    With eta = 0 (either rule: the marginal rule's first-step noise is seeded per position, with
    the state's seed) the outputs equal `sample`'s for the same positions and seed (the
    denoiser is causal and each step's cache holds exactly the keys/values the full pass
    computed for the prefix), and no prefix position is recomputed. With eta > 0 the noise is drawn per call, so results are
    distributed like `sample`'s but not identical to them.
    """

    def __init__(
        self,
        denoiser: nn.Module,
        process: BrownianBridge,
        steps: int = 16,
        eta: float = 0.0,
        rule: str = DEFAULT_RULE,
    ) -> None:
        self.denoiser = denoiser
        self.process = process
        self.grid = time_grid(steps)
        self.eta = eta
        self.rule = check_rule(rule, eta)

    def new_state(self, generator: torch.Generator | None = None,
                  seed: int = 0) -> BridgeDecodeState:
        return BridgeDecodeState(
            caches=[self.denoiser.new_cache() for _ in self.grid], generator=generator, seed=seed
        )

    @torch.no_grad()
    def extend(self, state: BridgeDecodeState, c_new: Tensor) -> Tensor:
        """z0_hat (B, n, d) for the next n positions' conditions c_new (B, n, d)."""
        x = c_new
        for (t, s), cache in zip(self.grid, state.caches, strict=True):
            z0_hat = self.denoiser(x, t, c_new, cache=cache, start_pos=state.length)
            x = _update(self.process, self.rule, z0_hat, x, c_new, t, s, self.eta,
                        state.generator, state.seed, state.length)
        state.length += c_new.shape[1]
        return x
