"""Diffusion-LM (Li et al. 2022): Gaussian diffusion over learned word embeddings.

Recipe, in the backbone's token space (its vocabulary; its embedding values are not used):
- A word-embedding table EMB (V, e), initialised N(0, 1) and trained jointly with the denoiser.
- x0 ~ q(x0 | w) = N(EMB(w), (1 - alpha_bar(0)) I), the paper's extra "embedding" step.
- Sqrt noise schedule, x0 prediction by a bidirectional transformer f(x_t, t) (the bridge's
  CausalDenoiser with causal=False; its condition input is always zeros: no self-conditioning).
- Loss (the paper's end-to-end L_simple):
      ||f(x_t, t) - x0||^2                  t ~ U(0, 1)
    + ||f(x_{t=0}, 0) - EMB(w)||^2          the t = 0 term, ties the lowest level to EMB
    - log p(w | x0),  p = softmax(x0 EMB^T + b)   the rounding term; the read-out is tied to EMB
- Sampling: `steps` denoiser calls on time_grid(steps); each x0_hat is clamped to its nearest
  embedding (the clamping trick) before the DDPM/DDIM update; the end point is rounded to the
  nearest embedding. Samples are plain token sequences: no BOS/EOS is added or stripped.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dihal.bridge.denoiser import build_denoiser
from dihal.compare.baselines import common
from dihal.compare.baselines.base import no_temperature
from dihal.compare.baselines.common import check_length, round_to_vocab
from dihal.compare.baselines.schedules import (
    SqrtSchedule,
    ddim_step,
    q_sample,
    sample_time,
    time_grid,
)
from dihal.net_configs import DenoiserConfig
from dihal.seeds import derive_seed


@dataclass(frozen=True)
class DiffusionLMConfig:
    """embed_dim: size of the learned embeddings (the paper: 16 for E2E, 128 for ROCStories).
    eta: 1 = DDPM ancestral sampling as in the paper, 0 = DDIM."""

    embed_dim: int = 128
    eta: float = 1.0
    clamp: bool = True
    schedule: SqrtSchedule = field(default_factory=SqrtSchedule)

    def to_dict(self) -> dict:
        return asdict(self)


class DiffusionLM(nn.Module):
    """Built by `build`; only the vocabulary size of the backbone's embeddings is used."""

    name = "diffusion-lm"
    Config = DiffusionLMConfig
    needs_bos = False

    @staticmethod
    def denoiser_space(cfg: DiffusionLMConfig, embeddings: Tensor, seq_len: int) -> tuple[int, int]:
        return cfg.embed_dim, seq_len  # the learned embeddings, one per token

    def __init__(self, embeddings: Tensor, denoiser_cfg: DenoiserConfig, cfg: DiffusionLMConfig,
                 *, seq_len: int, bos_id: int | None, seed: int) -> None:
        super().__init__()
        if denoiser_cfg.d_in != cfg.embed_dim or denoiser_cfg.causal:
            raise ValueError("the denoiser must be bidirectional with d_in == embed_dim")
        self.cfg = cfg
        vocab_size = embeddings.shape[0]
        gen = torch.Generator().manual_seed(derive_seed(seed, "embedding"))
        self.embedding = nn.Parameter(torch.randn(vocab_size, cfg.embed_dim, generator=gen))
        self.readout_bias = nn.Parameter(torch.zeros(vocab_size))
        self.denoiser = build_denoiser(denoiser_cfg, derive_seed(seed, "denoiser"))

    @property
    def max_len(self) -> int:
        return self.denoiser.cfg.max_len

    def denoiser_parameters(self) -> int:
        """The network run at every sampler step (its in/out projections from and to the
        e-dimensional embeddings included); not the embedding table nor its tied read-out."""
        return self.denoiser.param_count()

    def logits(self, x: Tensor) -> Tensor:
        """The rounding head p(w | x) = softmax(x EMB^T + b), tied to the embedding table."""
        return x @ self.embedding.T + self.readout_bias

    def loss(self, ids: Tensor, generator: torch.Generator) -> Tensor:
        B, T = ids.shape
        check_length(T, self.max_len)
        sched = self.cfg.schedule

        def noise() -> Tensor:
            return torch.randn(B, T, self.cfg.embed_dim, generator=generator, device=ids.device)

        emb = self.embedding[ids]
        x0 = emb + (1.0 - sched.alpha_bar(0.0)).sqrt().item() * noise()  # x0 ~ q(x0 | w)
        t = sample_time(B, generator, ids.device)
        x_t = q_sample(x0, t, noise(), sched)
        x_low = q_sample(x0, 0.0, noise(), sched)
        # one pass over both levels: [x_t at t, x_t at t = 0]
        x_in = torch.cat([x_t, x_low])
        pred = self.denoiser(x_in, torch.cat([t, torch.zeros_like(t)]), torch.zeros_like(x_in))
        x0_hat, x0_hat_low = pred.split(B)
        mse = (x0_hat - x0).pow(2).mean()
        mse_t0 = (x0_hat_low - emb).pow(2).mean()
        rounding = F.cross_entropy(self.logits(x0).flatten(0, 1), ids.flatten())
        return mse + mse_t0 + rounding

    def native_temperature(self) -> None:
        return None  # rounds to the nearest embedding: no decoder temperature

    @torch.no_grad()
    def sample(self, n: int, length: int, steps: int, generator: torch.Generator,
               temperature: float | None = None) -> Tensor:
        no_temperature(self.name, temperature)
        check_length(length, self.max_len)
        table = self.embedding
        x = torch.randn(n, length, self.cfg.embed_dim, generator=generator, device=table.device)
        zeros = torch.zeros_like(x)
        grid = time_grid(steps).tolist()
        for t, s in zip(grid[:-1], grid[1:], strict=True):
            x0_hat = self.denoiser(x, t, zeros)
            if self.cfg.clamp:
                x0_hat = table[round_to_vocab(x0_hat, table)]
            x = ddim_step(x0_hat, x, t, s, self.cfg.schedule, self.cfg.eta, generator)
        return round_to_vocab(x, table)


# build(embeddings, seq_len, target_params, seed, bos_id=None, eos_id=None, config=None): a
# Diffusion-LM over the vocabulary of `embeddings` (V, d); it learns its own embeddings.
build = partial(common.build, DiffusionLM)
