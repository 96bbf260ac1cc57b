"""LD4LG (Lovelace et al. 2023, "Latent diffusion for language generation") at DiHAL's budget.

Recipe, in the backbone's token space:
- An autoencoder. The encoder reads the backbone's token embeddings (frozen, normalised as for
  SED, through a learned projection) with a small bidirectional transformer; a Perceiver
  resampler (learned latent queries attending to [encoder states; latents], LD4LG's
  `PerceiverResampler`) compresses them to z (n_latents, d_latent), l2-normalised to norm
  sqrt(d_latent) (LD4LG's `l2_normalize_latents`: unit scale per coordinate, no data
  statistics). An autoregressive decoder cross-attends to z and reads the text back
  (cross-entropy, teacher forcing from BOS).
- Diffusion over the latent positions: the bridge's CausalDenoiser with causal=False,
  v prediction, cosine schedule, self-conditioning on the x0 estimate (probability 1/2 per
  batch, as LD4LG's train_prob_self_cond): loss ||v_hat - v||^2.
- Sampling: `steps` denoiser calls on time_grid(steps) from noise to a latent, DDPM posterior
  steps (eta = 1, LD4LG's default sampler), then the decoder reads `length` tokens from BOS:
  sampled at temperature 1 by default, as every model of the comparison (`temperature` <= 0:
  greedy). Samples follow the training sequences' format
  (a corpus whose sequences start with BOS gives samples that start with BOS).

Departures from the paper (to fit one training budget on small hardware):
- LD4LG compresses the features of a frozen pre-trained encoder-decoder LM (BART/T5) and reads
  the text back with its frozen decoder behind a "reconstruction" network. Here the encoder is a
  small bidirectional transformer over the frozen backbone token embeddings, and the reader is a
  small autoregressive decoder that cross-attends to the latent directly, its input embeddings
  and read-out tied to the same frozen table through projections.
- LD4LG trains the autoencoder first, then the diffusion on the frozen autoencoder's latents.
  With one budget, by default we train both at once: loss = reconstruction CE + diffusion MSE
  on the latent *detached*, so the diffusion never shapes the autoencoder; it tracks the
  encoder's latents as they settle (the CE converges much faster than the diffusion loss).
  `autoencoder_steps=k` restores the two phases within one run: after k training calls of
  loss() the whole autoencoder is frozen and only the diffusion trains (the count is a saved
  buffer, so a resumed run stays in its phase). A k that is too small freezes an unfinished
  autoencoder, so the joint default is the safer choice for a short budget.
- No U-ViT-style dense skip connections, no EMA, and the denoiser is fed t in [0, 1] rather than
  alpha_bar(t); the resampler has no query/key RMS-norm.

The reader is `decoder.TokenDecoder`, shared with CoDAR.
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
from dihal.compare.baselines.common import check_length, normalise_embeddings
from dihal.compare.baselines.decoder import (
    Attention,
    DecoderConfig,
    Layer,
    TokenDecoder,
    init_weights,
    mlp,
)
from dihal.compare.baselines.schedules import (
    CosineSchedule,
    ddim_step,
    q_sample,
    sample_time,
    time_grid,
    v_target,
    x0_from_v,
)
from dihal.net_configs import DenoiserConfig
from dihal.seeds import derive_seed

# ---------------------------------------------------------------------------------------------
# LD4LG


class PerceiverLayer(nn.Module):
    """Latent queries attend to [inputs; latents] (the Flamingo/LD4LG resampler), then an MLP."""

    def __init__(self, d: int, n_heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.norm_x = nn.LayerNorm(d)
        self.norm_latents = nn.LayerNorm(d)
        self.attn = Attention(d, n_heads)
        self.norm_mlp = nn.LayerNorm(d)
        self.mlp = mlp(d, mlp_ratio)

    def forward(self, x: Tensor, latents: Tensor) -> Tensor:
        lat = self.norm_latents(latents)
        latents = latents + self.attn(lat, torch.cat([self.norm_x(x), lat], dim=1))
        return latents + self.mlp(self.norm_mlp(latents))


@dataclass(frozen=True)
class LD4LGConfig:
    """n_latents x d_latent: the latent (LD4LG: 32 x 64). d_ae, ae_heads: width and heads of the
    encoder and the resampler. eta: 1 = DDPM posterior steps (LD4LG's sampler), 0 = DDIM.
    temperature: the decoder's; <= 0 is greedy. autoencoder_steps: training calls of loss() in
    phase 1 (autoencoder + diffusion), after which the autoencoder is frozen; None: one phase."""

    n_latents: int = 32
    d_latent: int = 64
    d_ae: int = 256
    ae_heads: int = 4
    encoder_layers: int = 2
    resampler_layers: int = 3  # LD4LG's --num_layers 3
    mlp_ratio: float = 4.0
    decoder: DecoderConfig = field(default_factory=DecoderConfig)
    self_cond_prob: float = 0.5
    eta: float = 1.0
    temperature: float = 1.0  # docs/method.md §4: samples at temperature 1 (greedy collapses)
    autoencoder_steps: int | None = None
    schedule: CosineSchedule = field(default_factory=CosineSchedule)

    def __post_init__(self) -> None:
        if not 0.0 <= self.self_cond_prob <= 1.0:
            raise ValueError(f"self_cond_prob must be in [0, 1], got {self.self_cond_prob}")
        if self.autoencoder_steps is not None and self.autoencoder_steps < 0:
            raise ValueError(f"autoencoder_steps must be >= 0, got {self.autoencoder_steps}")

    def to_dict(self) -> dict:
        return asdict(self)


class LD4LG(nn.Module):
    name = "ld4lg"
    Config = LD4LGConfig
    needs_bos = True

    @staticmethod
    def denoiser_space(cfg: LD4LGConfig, embeddings: Tensor, seq_len: int) -> tuple[int, int]:
        return cfg.d_latent, cfg.n_latents  # the latent positions

    def __init__(self, embeddings: Tensor, denoiser_cfg: DenoiserConfig, cfg: LD4LGConfig,
                 *, seq_len: int, bos_id: int, seed: int) -> None:
        super().__init__()
        if denoiser_cfg.d_in != cfg.d_latent or denoiser_cfg.causal:
            raise ValueError("the denoiser must be bidirectional with d_in == d_latent")
        if denoiser_cfg.max_len < cfg.n_latents:
            raise ValueError(f"denoiser max_len {denoiser_cfg.max_len} < n_latents {cfg.n_latents}")
        self.cfg = cfg
        self.seq_len = seq_len
        self.bos_id = bos_id
        V, d_emb = embeddings.shape
        # Frozen and rebuilt from the backbone by `build`, so kept out of checkpoints.
        self.register_buffer("table", normalise_embeddings(embeddings), persistent=False)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(seed, "autoencoder"))
            d = cfg.d_ae
            self.enc_in = nn.Linear(d_emb, d, bias=False)
            self.enc_pos = nn.Embedding(seq_len, d)
            self.encoder = nn.ModuleList(
                Layer(d, cfg.ae_heads, cfg.mlp_ratio, causal=False, cross=False)
                for _ in range(cfg.encoder_layers))
            self.latents = nn.Parameter(torch.randn(cfg.n_latents, d) * 0.02)
            self.resampler = nn.ModuleList(
                PerceiverLayer(d, cfg.ae_heads, cfg.mlp_ratio) for _ in range(cfg.resampler_layers))
            self.latent_norm = nn.LayerNorm(d)
            self.to_latent = nn.Linear(d, cfg.d_latent)
            init_weights(self)
            self.decoder = TokenDecoder(V, d_emb, cfg.d_latent, cfg.n_latents, seq_len, cfg.decoder)
        self.denoiser = build_denoiser(denoiser_cfg, derive_seed(seed, "denoiser"))
        # Training calls of loss() so far: saved with the weights, so a resumed run keeps its phase.
        self.register_buffer("train_calls", torch.zeros((), dtype=torch.long))

    @property
    def max_len(self) -> int:
        return self.seq_len

    def denoiser_parameters(self) -> int:
        """The network run at every sampler step (its in/out projections included); not the
        autoencoder, the decoder nor the frozen table."""
        return self.denoiser.param_count()

    def total_parameters(self) -> int:
        """Every trained parameter: autoencoder, decoder, denoiser (not the frozen table)."""
        return sum(p.numel() for p in self.parameters())

    def autoencoder_frozen(self) -> bool:
        k = self.cfg.autoencoder_steps
        return k is not None and int(self.train_calls) >= k

    def encode(self, ids: Tensor) -> Tensor:
        """ids (B, T) -> latents (B, n_latents, d_latent), each of norm sqrt(d_latent)."""
        check_length(ids.shape[1], self.seq_len)
        x = self.enc_in(self.table[ids]) + self.enc_pos.weight[: ids.shape[1]]
        for layer in self.encoder:
            x = layer(x)
        lat = self.latents.expand(ids.shape[0], -1, -1)
        for layer in self.resampler:
            lat = layer(x, lat)
        z = self.to_latent(self.latent_norm(lat))
        return F.normalize(z, dim=-1) * math.sqrt(self.cfg.d_latent)

    def predict_x0(self, z_t: Tensor, t: Tensor | float, self_cond: Tensor) -> Tensor:
        """The denoiser predicts v; the latent estimate it implies."""
        return x0_from_v(self.denoiser(z_t, t, self_cond), z_t, t, self.cfg.schedule)

    def loss_terms(self, ids: Tensor, generator: torch.Generator) -> dict[str, Tensor]:
        """{"reconstruction": decoder CE through the latent (phase 1 only), "diffusion":
        v-prediction MSE on the detached latent}. A call in training mode counts towards
        `autoencoder_steps`."""
        terms = {}
        if self.autoencoder_frozen():
            with torch.no_grad():
                z0 = self.encode(ids)
        else:
            z = self.encode(ids)
            terms["reconstruction"] = self.decoder.loss(ids, z, self.table, self.bos_id)
            z0 = z.detach()  # the diffusion learns the latents; it does not shape them
        if self.training:
            self.train_calls += 1
        sched, dev = self.cfg.schedule, ids.device
        t = sample_time(z0.shape[0], generator, dev)
        eps = torch.randn(z0.shape, generator=generator, device=dev)
        z_t = q_sample(z0, t, eps, sched)
        c = torch.zeros_like(z0)
        coin = torch.rand((), generator=generator, device=dev)
        if coin.item() < self.cfg.self_cond_prob:
            with torch.no_grad():
                c = self.predict_x0(z_t, t, c)
        v_hat = self.denoiser(z_t, t, c)
        terms["diffusion"] = (v_hat - v_target(z0, eps, t, sched)).pow(2).mean()
        return terms

    def loss(self, ids: Tensor, generator: torch.Generator) -> Tensor:
        return sum(self.loss_terms(ids, generator).values())

    @torch.no_grad()
    def sample_latents(self, n: int, steps: int, generator: torch.Generator) -> Tensor:
        """(n, n_latents, d_latent) from exactly `steps` self-conditioned denoiser calls."""
        shape = (n, self.cfg.n_latents, self.cfg.d_latent)
        z = torch.randn(shape, generator=generator, device=self.table.device)
        z0_hat = torch.zeros_like(z)
        grid = time_grid(steps).tolist()
        for t, s in zip(grid[:-1], grid[1:], strict=True):
            z0_hat = self.predict_x0(z, t, z0_hat)
            z = ddim_step(z0_hat, z, t, s, self.cfg.schedule, self.cfg.eta, generator)
        return z

    def native_temperature(self) -> float:
        return float(self.cfg.temperature)

    @torch.no_grad()
    def sample(self, n: int, length: int, steps: int, generator: torch.Generator,
               temperature: float | None = None) -> Tensor:
        """(n, length) int64 ids: a diffused latent, read out from BOS by the decoder at
        `temperature` (the config's unless given)."""
        check_length(length, self.seq_len)
        z = self.sample_latents(n, steps, generator)
        temp = self.cfg.temperature if temperature is None else temperature
        return self.decoder.generate(z, length, self.table, self.bos_id, temp, generator)


# build(embeddings, seq_len, target_params, seed, bos_id, eos_id=None, config=None): LD4LG over
# the backbone's embeddings (V, d); bos_id starts the decoder.
build = partial(common.build, LD4LG)
