"""SED (Strudel et al. 2022): self-conditioned embedding diffusion over frozen embeddings.

Recipe, in the backbone's token space:
- x0 = the backbone's token embeddings, frozen and normalised: every row is scaled to L2 norm
  sqrt(d) (unit mean square per dimension, the scale of the unit-variance noise), so the read-out
  below ranks tokens by cosine similarity. `common.normalise_embeddings` is the one place this
  is done.
- Cosine noise schedule, x0 prediction by a bidirectional transformer f(x_t, t, c) (the bridge's
  CausalDenoiser with causal=False), whose condition input c carries self-conditioning
  (Chen et al. 2022): in training, with probability 1/2 per batch, a first pass with c = 0 gives
  an estimate that is fed, detached, as c to the pass that is trained; otherwise c = 0. In
  sampling c is always the previous step's estimate (0 at the first step).
- Loss: ||x0_hat - x0||^2 + cross-entropy of the read-out logits = g x0_hat E_norm^T / sqrt(d),
  g = exp(log_scale) a learned scalar temperature (the read-out is tied to the frozen table).
- Sampling: `steps` denoiser calls on time_grid(steps) with the DDPM/DDIM update; tokens are the
  argmax of the read-out of the final estimate. Samples are plain token sequences: no BOS/EOS
  is added or stripped.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dihal.bridge.denoiser import build_denoiser
from dihal.compare.baselines import common
from dihal.compare.baselines.base import no_temperature
from dihal.compare.baselines.common import check_length, normalise_embeddings, round_to_vocab
from dihal.compare.baselines.schedules import (
    CosineSchedule,
    ddim_step,
    q_sample,
    sample_time,
    time_grid,
)
from dihal.net_configs import DenoiserConfig
from dihal.seeds import derive_seed


@dataclass(frozen=True)
class SEDConfig:
    """self_cond_prob: share of training batches that get a self-conditioning estimate.
    ce_weight: weight of the read-out cross-entropy next to the MSE.
    eta: 1 = DDPM ancestral sampling, 0 = DDIM."""

    self_cond_prob: float = 0.5
    ce_weight: float = 1.0
    eta: float = 1.0
    schedule: CosineSchedule = field(default_factory=CosineSchedule)

    def __post_init__(self) -> None:
        if not 0.0 <= self.self_cond_prob <= 1.0:
            raise ValueError(f"self_cond_prob must be in [0, 1], got {self.self_cond_prob}")

    def to_dict(self) -> dict:
        return asdict(self)


class SED(nn.Module):
    name = "sed"
    Config = SEDConfig
    needs_bos = False

    @staticmethod
    def denoiser_space(cfg: SEDConfig, embeddings: Tensor, seq_len: int) -> tuple[int, int]:
        return embeddings.shape[1], seq_len  # the backbone's token embeddings

    def __init__(self, embeddings: Tensor, denoiser_cfg: DenoiserConfig, cfg: SEDConfig,
                 *, seq_len: int, bos_id: int | None, seed: int) -> None:
        super().__init__()
        if denoiser_cfg.d_in != embeddings.shape[1] or denoiser_cfg.causal:
            raise ValueError("the denoiser must be bidirectional with d_in == embedding size")
        self.cfg = cfg
        # Frozen and rebuilt from the backbone by `build`, so kept out of checkpoints.
        self.register_buffer("table", normalise_embeddings(embeddings), persistent=False)
        self.log_scale = nn.Parameter(torch.zeros(()))
        self.denoiser = build_denoiser(denoiser_cfg, derive_seed(seed, "denoiser"))

    @property
    def max_len(self) -> int:
        return self.denoiser.cfg.max_len

    def denoiser_parameters(self) -> int:
        """The network run at every sampler step; not the frozen table nor the read-out scale."""
        return self.denoiser.param_count()

    def logits(self, x: Tensor) -> Tensor:
        return self.log_scale.exp() * (x @ self.table.T) / math.sqrt(self.table.shape[1])

    def loss(self, ids: Tensor, generator: torch.Generator) -> Tensor:
        B, T = ids.shape
        check_length(T, self.max_len)
        x0 = self.table[ids]
        t = sample_time(B, generator, ids.device)
        eps = torch.randn(x0.shape, generator=generator, device=ids.device)
        x_t = q_sample(x0, t, eps, self.cfg.schedule)
        c = torch.zeros_like(x_t)
        coin = torch.rand((), generator=generator, device=ids.device)
        if coin.item() < self.cfg.self_cond_prob:
            with torch.no_grad():
                c = self.denoiser(x_t, t, c)
        x0_hat = self.denoiser(x_t, t, c)
        mse = (x0_hat - x0).pow(2).mean()
        ce = F.cross_entropy(self.logits(x0_hat).flatten(0, 1), ids.flatten())
        return mse + self.cfg.ce_weight * ce

    def native_temperature(self) -> None:
        return None  # rounds to the nearest embedding: no decoder temperature

    @torch.no_grad()
    def sample(self, n: int, length: int, steps: int, generator: torch.Generator,
               temperature: float | None = None) -> Tensor:
        no_temperature(self.name, temperature)
        check_length(length, self.max_len)
        d = self.table.shape[1]
        x = torch.randn(n, length, d, generator=generator, device=self.table.device)
        x0_hat = torch.zeros_like(x)
        grid = time_grid(steps).tolist()
        for t, s in zip(grid[:-1], grid[1:], strict=True):
            x0_hat = self.denoiser(x, t, x0_hat)
            x = ddim_step(x0_hat, x, t, s, self.cfg.schedule, self.cfg.eta, generator)
        return round_to_vocab(x0_hat, self.table, score="dot")


# build(embeddings, seq_len, target_params, seed, bos_id=None, eos_id=None, config=None): SED
# over the backbone's embeddings (V, d).
build = partial(common.build, SED)
