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

This module also holds `TokenDecoder`, the cross-attending autoregressive reader that CoDAR
shares.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dihal.baselines.diffusion_lm import check_length, fit_denoiser_config
from dihal.baselines.schedules import (
    CosineSchedule,
    ddim_step,
    q_sample,
    sample_time,
    time_grid,
    v_target,
    x0_from_v,
)
from dihal.baselines.sed import normalise_embeddings
from dihal.bridge.denoiser import DenoiserConfig, build_denoiser
from dihal.seeds import derive_seed

# ---------------------------------------------------------------------------------------------
# The autoregressive reader (shared with CoDAR) and its layers


class Attention(nn.Module):
    """Multi-head attention of queries from x (B, T, D) over keys/values from source (B, S, D)."""

    def __init__(self, d: int, n_heads: int) -> None:
        super().__init__()
        if d % n_heads:
            raise ValueError(f"d={d} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.q = nn.Linear(d, d)
        self.kv = nn.Linear(d, 2 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x: Tensor, source: Tensor, causal: bool = False) -> Tensor:
        (B, T, D), S, h = x.shape, source.shape[1], self.n_heads
        q = self.q(x).view(B, T, h, D // h).transpose(1, 2)
        k, v = self.kv(source).view(B, S, 2, h, D // h).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return self.out(y.transpose(1, 2).reshape(B, T, D))


def _mlp(d: int, ratio: float) -> nn.Sequential:
    hidden = int(round(ratio * d))
    return nn.Sequential(nn.Linear(d, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, d))


class Layer(nn.Module):
    """Pre-norm transformer layer: self-attention (causal or not), optionally cross-attention
    to a memory (B, M, D), then an MLP."""

    def __init__(self, d: int, n_heads: int, mlp_ratio: float, causal: bool, cross: bool) -> None:
        super().__init__()
        self.causal = causal
        self.norm_self = nn.LayerNorm(d)
        self.self_attn = Attention(d, n_heads)
        self.norm_cross = nn.LayerNorm(d) if cross else None
        self.cross_attn = Attention(d, n_heads) if cross else None
        self.norm_mlp = nn.LayerNorm(d)
        self.mlp = _mlp(d, mlp_ratio)

    def forward(self, x: Tensor, memory: Tensor | None = None) -> Tensor:
        h = self.norm_self(x)
        x = x + self.self_attn(h, h, causal=self.causal)
        if self.cross_attn is not None:
            x = x + self.cross_attn(self.norm_cross(x), memory)
        return x + self.mlp(self.norm_mlp(x))


def init_weights(module: nn.Module) -> None:
    """GPT-2 style: N(0, 0.02) weights, zero biases (LayerNorms keep their defaults)."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)


@dataclass(frozen=True)
class DecoderConfig:
    """Size of an autoregressive reader (kept small: it is not part of the matched budget)."""

    d_model: int = 256
    n_layers: int = 2
    n_heads: int = 4
    mlp_ratio: float = 4.0


class TokenDecoder(nn.Module):
    """p(y_i | y_<i, memory): a causal transformer over tokens that cross-attends to a memory
    sequence (B, M, d_memory). Its token inputs and its read-out are tied to a fixed table
    (V, d_emb), passed to each call: input = table[y] W_in,
    logits = (h W_out) table^T / sqrt(d_emb) + b (O(1) at init for rows of norm sqrt(d_emb)).

    Teacher forcing starts from BOS and predicts every position of ids, so generation from BOS
    reproduces the training sequences' format (including a leading BOS if they have one)."""

    def __init__(self, vocab_size: int, d_emb: int, d_memory: int, memory_len: int,
                 max_len: int, cfg: DecoderConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.max_len = max_len
        self.tok_in = nn.Linear(d_emb, d, bias=False)
        self.pos = nn.Embedding(max_len, d)
        self.mem_in = nn.Linear(d_memory, d)
        self.mem_pos = nn.Embedding(memory_len, d)
        self.mem_norm = nn.LayerNorm(d)
        self.layers = nn.ModuleList(
            Layer(d, cfg.n_heads, cfg.mlp_ratio, causal=True, cross=True)
            for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, d_emb, bias=False)
        self.head_bias = nn.Parameter(torch.zeros(vocab_size))
        self.logit_scale = d_emb**-0.5
        init_weights(self)

    def memory(self, memory: Tensor) -> Tensor:
        """Project and position-tag a memory (B, M, d_memory) once per sequence."""
        m = self.mem_in(memory) + self.mem_pos.weight[: memory.shape[1]]
        return self.mem_norm(m)

    def hidden(self, prev_ids: Tensor, memory: Tensor, table: Tensor) -> Tensor:
        """(B, L, D) states that predict y_1..y_L from y_0..y_{L-1} = prev_ids and a projected
        memory."""
        L = prev_ids.shape[1]
        if L > self.max_len:
            raise ValueError(f"{L} positions exceed the decoder's max_len={self.max_len}")
        x = self.tok_in(table[prev_ids]) + self.pos.weight[:L]
        for layer in self.layers:
            x = layer(x, memory)
        return self.norm(x)

    def logits(self, h: Tensor, table: Tensor) -> Tensor:
        """(..., V) logits of states h (..., D), read out through the tied table."""
        return (self.head(h) @ table.T) * self.logit_scale + self.head_bias

    def loss(self, ids: Tensor, memory: Tensor, table: Tensor, bos_id: int) -> Tensor:
        """Teacher-forced cross-entropy of every token of ids (B, T) after a BOS start."""
        prev = torch.cat([torch.full_like(ids[:, :1], bos_id), ids[:, :-1]], dim=1)
        logits = self.logits(self.hidden(prev, self.memory(memory), table), table)
        return F.cross_entropy(logits.flatten(0, 1), ids.flatten())

    @torch.no_grad()
    def generate(self, memory: Tensor, length: int, table: Tensor, bos_id: int,
                 temperature: float, generator: torch.Generator) -> Tensor:
        """(n, length) ids decoded left to right from BOS; temperature <= 0 is greedy.
        The prefix is recomputed for every token (no KV cache: the reader is small)."""
        mem = self.memory(memory)
        out = torch.full((memory.shape[0], 1), bos_id, dtype=torch.long, device=memory.device)
        for _ in range(length):
            last = self.logits(self.hidden(out, mem, table)[:, -1], table).float()
            if temperature > 0:
                probs = torch.softmax(last / temperature, dim=-1)
                nxt = torch.multinomial(probs, 1, generator=generator)
            else:
                nxt = last.argmax(-1, keepdim=True)
            out = torch.cat([out, nxt], dim=1)
        return out[:, 1:]


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
        self.mlp = _mlp(d, mlp_ratio)

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
    temperature: float = 1.0  # METHOD.md s.4: samples at temperature 1 (greedy collapses)
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

    def __init__(self, embeddings: Tensor, denoiser_cfg: DenoiserConfig, cfg: LD4LGConfig,
                 seq_len: int, bos_id: int, seed: int) -> None:
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

    @torch.no_grad()
    def sample(self, n: int, length: int, steps: int, generator: torch.Generator,
               temperature: float | None = None) -> Tensor:
        """(n, length) int64 ids: a diffused latent, read out from BOS by the decoder at
        `temperature` (the config's unless given)."""
        check_length(length, self.seq_len)
        z = self.sample_latents(n, steps, generator)
        temp = self.cfg.temperature if temperature is None else temperature
        return self.decoder.generate(z, length, self.table, self.bos_id, temp, generator)


def build(
    embeddings: Tensor,
    seq_len: int,
    target_params: int,
    seed: int,
    bos_id: int | None = None,
    eos_id: int | None = None,
    config: LD4LGConfig | None = None,
) -> LD4LG:
    """LD4LG over the backbone's embeddings (V, d), its denoiser sized to target_params.
    bos_id starts the decoder; eos_id is not needed by the recipe and is ignored."""
    if bos_id is None:
        raise ValueError("LD4LG's decoder starts from BOS: pass bos_id")
    cfg = config or LD4LGConfig()
    den = fit_denoiser_config(cfg.d_latent, target_params, max_len=cfg.n_latents, causal=False)
    return LD4LG(embeddings, den, cfg, seq_len, bos_id, seed)
