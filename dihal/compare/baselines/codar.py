"""CoDAR (Shen et al. 2026, arXiv 2603.02547): continuous diffusion in embedding space, then an
autoregressive decoder that rounds to tokens in context.

Recipe, in the backbone's token space:
- x0 = the backbone's token embeddings, frozen and normalised exactly as for SED (rows of norm
  sqrt(d), `common.normalise_embeddings`), so SED and CoDAR share one diffusion space and differ
  only in how they round.
- Cosine noise schedule, x0 prediction by the bridge's CausalDenoiser with causal=False, self-
  conditioning as in SED (probability 1/2 per batch, the detached estimate fed as c): loss
  ||x0_hat - x0||^2.
- Contextual rounding: a causal transformer decoder that cross-attends to the whole denoised
  sequence and predicts token i from tokens < i (from BOS) and every denoised position,
  trained with cross-entropy; its input embeddings and read-out are tied to the frozen table
  (`decoder.TokenDecoder`, LD4LG's reader).
- Sampling: `steps` denoiser calls on time_grid(steps) (DDIM, eta = 0, by default), then the
  decoder reads `length` tokens from BOS, sampling at the decoder temperature (`temperature`,
  default 0.7: the knob that trades fluency for diversity). Samples follow the training
  sequences' format (a corpus whose sequences start with BOS gives samples that start with BOS).

Where the paper leaves room or we simplify:
- CoDAR trains in two stages (diffusion, then the decoder). With one budget we train both at
  once: loss = diffusion MSE + decoder CE, where the decoder reads the denoiser's own x0
  estimate at the training noise level t ~ U(0, 1), detached ("noised-then-denoised"): it
  learns to round the kind of imperfect embeddings the sampler produces, at every noise level,
  and the CE never shapes the denoiser. One denoiser pass serves both terms.
- The embedding space is the backbone's own frozen token table, not one learned for diffusion.
- The decoder is small (2 layers, width 256); no EMA.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import partial

import torch
from torch import Tensor, nn

from dihal.bridge.denoiser import build_denoiser
from dihal.compare.baselines import common
from dihal.compare.baselines.common import check_length, normalise_embeddings
from dihal.compare.baselines.decoder import DecoderConfig, TokenDecoder
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
class CoDARConfig:
    """self_cond_prob: share of training batches with a self-conditioning estimate.
    decoder_weight: weight of the decoder CE next to the diffusion MSE.
    eta: 0 = DDIM, 1 = DDPM posterior steps. temperature: the decoder's; <= 0 is greedy."""

    decoder: DecoderConfig = field(default_factory=DecoderConfig)
    self_cond_prob: float = 0.5
    decoder_weight: float = 1.0
    eta: float = 0.0
    temperature: float = 0.7
    schedule: CosineSchedule = field(default_factory=CosineSchedule)

    def __post_init__(self) -> None:
        if not 0.0 <= self.self_cond_prob <= 1.0:
            raise ValueError(f"self_cond_prob must be in [0, 1], got {self.self_cond_prob}")

    def to_dict(self) -> dict:
        return asdict(self)


class CoDAR(nn.Module):
    name = "codar"
    Config = CoDARConfig
    needs_bos = True

    @staticmethod
    def denoiser_space(cfg: CoDARConfig, embeddings: Tensor, seq_len: int) -> tuple[int, int]:
        return embeddings.shape[1], seq_len  # the backbone's token embeddings, as SED

    def __init__(self, embeddings: Tensor, denoiser_cfg: DenoiserConfig, cfg: CoDARConfig,
                 *, seq_len: int, bos_id: int, seed: int) -> None:
        super().__init__()
        if denoiser_cfg.d_in != embeddings.shape[1] or denoiser_cfg.causal:
            raise ValueError("the denoiser must be bidirectional with d_in == embedding size")
        self.cfg = cfg
        self.bos_id = bos_id
        V, d_emb = embeddings.shape
        # Frozen and rebuilt from the backbone by `build`, so kept out of checkpoints.
        self.register_buffer("table", normalise_embeddings(embeddings), persistent=False)
        self.denoiser = build_denoiser(denoiser_cfg, derive_seed(seed, "denoiser"))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(seed, "decoder"))
            self.decoder = TokenDecoder(V, d_emb, d_emb, self.max_len, self.max_len, cfg.decoder)

    @property
    def max_len(self) -> int:
        return self.denoiser.cfg.max_len

    def denoiser_parameters(self) -> int:
        """The network run at every sampler step (its in/out projections included); not the
        decoder nor the frozen table."""
        return self.denoiser.param_count()

    def total_parameters(self) -> int:
        """Every trained parameter: denoiser and decoder (not the frozen table)."""
        return sum(p.numel() for p in self.parameters())

    def loss_terms(self, ids: Tensor, generator: torch.Generator) -> dict[str, Tensor]:
        """{"diffusion": x0 MSE, "decoder": CE of the decoder reading the detached x0_hat}."""
        B, T = ids.shape
        check_length(T, self.max_len)
        sched, dev = self.cfg.schedule, ids.device
        x0 = self.table[ids]
        t = sample_time(B, generator, dev)
        eps = torch.randn(x0.shape, generator=generator, device=dev)
        x_t = q_sample(x0, t, eps, sched)
        c = torch.zeros_like(x_t)
        coin = torch.rand((), generator=generator, device=dev)
        if coin.item() < self.cfg.self_cond_prob:
            with torch.no_grad():
                c = self.denoiser(x_t, t, c)
        x0_hat = self.denoiser(x_t, t, c)
        return {"diffusion": (x0_hat - x0).pow(2).mean(),
                "decoder": self.decoder.loss(ids, x0_hat.detach(), self.table, self.bos_id)}

    def loss(self, ids: Tensor, generator: torch.Generator) -> Tensor:
        terms = self.loss_terms(ids, generator)
        return terms["diffusion"] + self.cfg.decoder_weight * terms["decoder"]

    @torch.no_grad()
    def sample_embeddings(self, n: int, length: int, steps: int,
                          generator: torch.Generator) -> Tensor:
        """(n, length, d) denoised embeddings from exactly `steps` self-conditioned calls."""
        check_length(length, self.max_len)
        x = torch.randn(n, length, self.table.shape[1], generator=generator,
                        device=self.table.device)
        x0_hat = torch.zeros_like(x)
        grid = time_grid(steps).tolist()
        for t, s in zip(grid[:-1], grid[1:], strict=True):
            x0_hat = self.denoiser(x, t, x0_hat)
            x = ddim_step(x0_hat, x, t, s, self.cfg.schedule, self.cfg.eta, generator)
        return x

    def native_temperature(self) -> float:
        return float(self.cfg.temperature)

    @torch.no_grad()
    def sample(self, n: int, length: int, steps: int, generator: torch.Generator,
               temperature: float | None = None) -> Tensor:
        """(n, length) int64 ids: diffused embeddings, rounded in context by the decoder at
        `temperature` (the config's unless given)."""
        x0_hat = self.sample_embeddings(n, length, steps, generator)
        temp = self.cfg.temperature if temperature is None else temperature
        return self.decoder.generate(x0_hat, length, self.table, self.bos_id, temp, generator)


# build(embeddings, seq_len, target_params, seed, bos_id, eos_id=None, config=None): CoDAR over
# the backbone's embeddings (V, d); bos_id starts the decoder.
build = partial(common.build, CoDAR)
