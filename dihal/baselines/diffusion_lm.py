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

This module also holds `fit_denoiser_config`, which sizes a denoiser to a parameter budget.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import cache

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dihal.baselines.schedules import SqrtSchedule, ddim_step, q_sample, sample_time, time_grid
from dihal.bridge.denoiser import CausalDenoiser, DenoiserConfig, build_denoiser
from dihal.seeds import derive_seed

# Widths tried by fit_denoiser_config: head size 32 below 128, 64 from there (as DiHAL's 256/4).
WIDTHS = (32, 64, 96, *range(128, 1025, 64))
DEPTHS = tuple(range(1, 13))
# Rows of a (rows, V) score matrix computed at once when rounding to the vocabulary.
_ROUND_ELEMENTS = 1 << 25


def _n_heads(d_model: int) -> int:
    return d_model // 64 if d_model >= 128 else d_model // 32


@cache
def _count(d_in: int, d_model: int, causal: bool) -> tuple[int, int]:
    """(parameters of a one-block denoiser, parameters per further block), counted on meta."""
    with torch.device("meta"):
        net = CausalDenoiser(DenoiserConfig(
            d_in=d_in, d_model=d_model, n_layers=1, n_heads=_n_heads(d_model), max_len=2,
            causal=causal))
    return net.param_count(), sum(p.numel() for p in net.blocks[0].parameters())


def fit_denoiser_config(
    d_in: int, target_params: int, max_len: int, causal: bool = False, tol: float = 0.10
) -> DenoiserConfig:
    """The (d_model, n_layers) on the WIDTHS x DEPTHS grid whose denoiser's parameter count is
    closest to target_params (ties: fewer layers); ValueError if even that is off by > tol."""
    best = None
    for d_model in WIDTHS:
        base, per_block = _count(d_in, d_model, causal)
        for n_layers in DEPTHS:
            n = base + (n_layers - 1) * per_block
            key = (abs(n - target_params), n_layers)
            if best is None or key < best[0]:
                best = (key, d_model, n_layers, n)
    (diff, _), d_model, n_layers, n = best
    if diff > tol * target_params:
        raise ValueError(f"no denoiser on the grid has {target_params:,} parameters +-{tol:.0%} "
                         f"(closest: d_model={d_model}, n_layers={n_layers}, {n:,})")
    return DenoiserConfig(d_in=d_in, d_model=d_model, n_layers=n_layers,
                          n_heads=_n_heads(d_model), max_len=max_len, causal=causal)


def round_to_vocab(x: Tensor, table: Tensor, score: str = "l2") -> Tensor:
    """Token ids (...,) of vectors x (..., e) against table (V, e), chunked over rows.

    score="l2": the nearest row; score="dot": the largest dot product (an argmax read-out).
    """
    flat = x.reshape(-1, x.shape[-1])
    sq = table.pow(2).sum(-1) if score == "l2" else None
    chunk = max(1, _ROUND_ELEMENTS // table.shape[0])
    out = []
    for rows in flat.split(chunk):
        dots = rows @ table.T
        out.append((dots - 0.5 * sq).argmax(-1) if sq is not None else dots.argmax(-1))
    return torch.cat(out).view(x.shape[:-1])


def check_length(length: int, max_len: int) -> None:
    if not isinstance(length, int) or not 1 <= length <= max_len:
        raise ValueError(f"length must be an int in [1, {max_len}], got {length!r}")


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
    name = "diffusion-lm"

    def __init__(self, vocab_size: int, denoiser_cfg: DenoiserConfig, cfg: DiffusionLMConfig,
                 seed: int) -> None:
        super().__init__()
        if denoiser_cfg.d_in != cfg.embed_dim or denoiser_cfg.causal:
            raise ValueError("the denoiser must be bidirectional with d_in == embed_dim")
        self.cfg = cfg
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

    @torch.no_grad()
    def sample(self, n: int, length: int, steps: int, generator: torch.Generator) -> Tensor:
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


def build(
    embeddings: Tensor,
    seq_len: int,
    target_params: int,
    seed: int,
    bos_id: int | None = None,
    eos_id: int | None = None,
    config: DiffusionLMConfig | None = None,
) -> DiffusionLM:
    """A Diffusion-LM over the vocabulary of `embeddings` (V, d): only V is used, the model
    learns its own embeddings. bos_id/eos_id are not needed by the recipe and are ignored."""
    cfg = config or DiffusionLMConfig()
    den = fit_denoiser_config(cfg.embed_dim, target_params, max_len=seq_len, causal=False)
    return DiffusionLM(embeddings.shape[0], den, cfg, seed)
