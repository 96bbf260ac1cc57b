"""The bridge denoiser f(x_t, t, c) -> z0_hat: a small causal transformer over positions.

Position i attends to positions <= i (like the backbone), so a prefix's outputs never depend on
what follows, and generation can extend a key/value cache one position at a time.
The network knows nothing about the bridge schedule: t is just a number in [0, 1].
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dihal.net_configs import DenoiserConfig

# t in [0, 1] is scaled before the sinusoidal embedding so that its frequencies span the
# same range as DDPM's integer timesteps 0..1000.
TIME_SCALE = 1000.0


def denoiser_config_of(protocol, d_in: int, max_len: int) -> DenoiserConfig:
    """The denoiser a bridge protocol (dihal.config.BridgeProtocol) sizes, over states of
    width `d_in` and sequences up to `max_len`."""
    return DenoiserConfig(d_in=d_in, d_model=protocol.d_model, n_layers=protocol.n_layers,
                          n_heads=protocol.n_heads, mlp_ratio=protocol.mlp_ratio, max_len=max_len)


class KVCache:
    """Keys and values of the positions already processed, one pair per layer.

    Storage is allocated on first use with room for `capacity` positions; `length` is the number
    of positions held. Meant for inference (under torch.no_grad()).
    """

    def __init__(self, n_layers: int, capacity: int) -> None:
        self.n_layers = n_layers
        self.capacity = capacity
        self.length = 0
        self._k: list[Tensor | None] = [None] * n_layers
        self._v: list[Tensor | None] = [None] * n_layers
        # (t, modulations): the time conditioning depends on t alone, so a cache that is always
        # used at one t (one denoising step of the incremental sampler) computes it once.
        self.time_memo: tuple[Tensor, list[Tensor]] | None = None

    def update(self, layer: int, k: Tensor, v: Tensor, start: int) -> tuple[Tensor, Tensor]:
        """Store k, v (B, H, T, Dh) at positions [start, start + T); return all keys/values so far."""
        end = start + k.shape[2]
        if end > self.capacity:
            raise ValueError(f"cache capacity {self.capacity} exceeded (need {end})")
        if self._k[layer] is None:
            shape = (k.shape[0], k.shape[1], self.capacity, k.shape[3])
            self._k[layer] = k.new_zeros(shape)
            self._v[layer] = v.new_zeros(shape)
        k_all, v_all = self._k[layer], self._v[layer]
        k_all[:, :, start:end] = k
        v_all[:, :, start:end] = v
        return k_all[:, :, :end], v_all[:, :, :end]


def timestep_embedding(t: Tensor, dim: int, max_period: float = 10000.0) -> Tensor:
    """Sinusoidal embedding (B,) -> (B, dim), as in DDPM/DiT, of TIME_SCALE * t."""
    half = dim // 2
    freqs = torch.exp(
        -math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half
    )
    args = TIME_SCALE * t.float()[:, None] * freqs[None, :]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def _rope_tables(cfg: DenoiserConfig) -> tuple[Tensor, Tensor]:
    half = cfg.head_dim // 2
    inv_freq = cfg.rope_base ** (-torch.arange(half, dtype=torch.float32) / half)
    angles = torch.arange(cfg.max_len, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return torch.cos(angles), torch.sin(angles)  # (max_len, Dh/2) each


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (x[..., :Dh/2], x[..., Dh/2:]) of x (B, H, T, Dh) by cos/sin (T, Dh/2)."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    """adaLN: x * (1 + scale) + shift with per-sequence shift/scale (B, 1, D)."""
    return x * (1.0 + scale) + shift


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: DenoiserConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.causal = cfg.causal
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(
        self,
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
        cache: KVCache | None,
        layer: int,
        start_pos: int,
    ) -> Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, D // self.n_heads).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(layer, k, v, start_pos)
        S = k.shape[2]
        if S == T:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        elif T == 1:  # one new position sees every cached one
            y = F.scaled_dot_product_attention(q, k, v)
        else:  # a chunk after a cached prefix: query a (absolute S - T + a) sees keys <= it
            mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(y.transpose(1, 2).reshape(B, T, D))


class MLP(nn.Module):
    def __init__(self, cfg: DenoiserConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.d_mlp)
        self.proj = nn.Linear(cfg.d_mlp, cfg.d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    """Pre-norm transformer block whose two norms are modulated (shift, scale) by the time."""

    def __init__(self, cfg: DenoiserConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, elementwise_affine=False)
        self.attn = CausalSelfAttention(cfg)
        self.norm2 = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, elementwise_affine=False)
        self.mlp = MLP(cfg)
        self.modulation = nn.Sequential(nn.SiLU(), nn.Linear(cfg.d_model, 4 * cfg.d_model))

    def forward(self, x, mod, cos, sin, cache, layer, start_pos) -> Tensor:
        """mod: this block's time modulation, self.modulation(temb) of shape (B, 4 d_model)."""
        shift1, scale1, shift2, scale2 = mod[:, None, :].chunk(4, dim=-1)
        x = x + self.attn(
            modulate(self.norm1(x), shift1, scale1), cos, sin, cache, layer, start_pos
        )
        return x + self.mlp(modulate(self.norm2(x), shift2, scale2))


class CausalDenoiser(nn.Module):
    """f(x_t, t, c) -> z0_hat for states (B, T, d_in) and times t (a float or (B,))."""

    def __init__(self, cfg: DenoiserConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.in_proj = nn.Linear(2 * cfg.d_in, cfg.d_model)
        self.time_mlp = nn.Sequential(
            nn.Linear(cfg.time_embed_dim, cfg.d_model),
            nn.SiLU(),
            nn.Linear(cfg.d_model, cfg.d_model),
        )
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.final_norm = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, elementwise_affine=False)
        self.final_modulation = nn.Sequential(nn.SiLU(), nn.Linear(cfg.d_model, 2 * cfg.d_model))
        self.out_proj = nn.Linear(cfg.d_model, cfg.d_in)
        cos, sin = _rope_tables(cfg)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)
        # Time modulation starts neutral and the output starts at exactly zero.
        for block in self.blocks:
            nn.init.zeros_(block.modulation[-1].weight)
            nn.init.zeros_(block.modulation[-1].bias)
        nn.init.zeros_(self.final_modulation[-1].weight)
        nn.init.zeros_(self.final_modulation[-1].bias)
        nn.init.zeros_(self.out_proj.weight)
        nn.init.zeros_(self.out_proj.bias)

    def _time_conditioning(self, t: Tensor, dtype: torch.dtype, cache: KVCache | None) -> list[Tensor]:
        """Per-block (and final) modulations for times t (B,); memoised in a decoding cache."""
        if cache is None or torch.is_grad_enabled():
            return _modulations(self, t, dtype)
        memo = cache.time_memo
        if memo is not None and memo[0].shape == t.shape and torch.equal(memo[0], t):
            return memo[1]
        mods = _modulations(self, t, dtype)
        cache.time_memo = (t.clone(), mods)
        return mods

    def new_cache(self) -> KVCache:
        return KVCache(self.cfg.n_layers, self.cfg.max_len)

    def param_count(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(
        self,
        x_t: Tensor,
        t: float | Tensor,
        c: Tensor,
        cache: KVCache | None = None,
        start_pos: int = 0,
    ) -> Tensor:
        """z0_hat for positions [start_pos, start_pos + T).

        With a cache, positions [0, start_pos) must already be in it (cache.length == start_pos);
        their keys/values are reused and those of the new positions appended.
        """
        if x_t.shape != c.shape or x_t.ndim != 3 or x_t.shape[-1] != self.cfg.d_in:
            raise ValueError(
                f"x_t {tuple(x_t.shape)} and c {tuple(c.shape)} must both be (B, T, {self.cfg.d_in})"
            )
        B, T, _ = x_t.shape
        if cache is not None and not self.cfg.causal:
            raise ValueError("a bidirectional denoiser (causal=False) cannot decode with a cache")
        if cache is not None and cache.length != start_pos:
            raise ValueError(f"start_pos={start_pos} but the cache holds {cache.length} positions")
        if start_pos < 0 or start_pos + T > self.cfg.max_len:
            raise ValueError(
                f"positions [{start_pos}, {start_pos + T}) exceed max_len={self.cfg.max_len}"
            )
        t = torch.as_tensor(t, dtype=torch.float32, device=x_t.device)
        if t.ndim == 0:
            t = t.expand(B)
        if t.shape != (B,):
            raise ValueError(f"t must be a float or shape ({B},), got {tuple(t.shape)}")

        mods = self._time_conditioning(t, x_t.dtype, cache)
        cos = self.rope_cos[start_pos : start_pos + T]
        sin = self.rope_sin[start_pos : start_pos + T]
        x = self.in_proj(torch.cat([x_t, c], dim=-1))
        for i, block in enumerate(self.blocks):
            x = block(x, mods[i], cos, sin, cache, i, start_pos)
        if cache is not None:
            cache.length = start_pos + T
        shift, scale = mods[-1][:, None, :].chunk(2, dim=-1)
        return self.out_proj(modulate(self.final_norm(x), shift, scale))


def _modulations(model: CausalDenoiser, t: Tensor, dtype: torch.dtype) -> list[Tensor]:
    temb = model.time_mlp(timestep_embedding(t, model.cfg.time_embed_dim).to(dtype))
    return [block.modulation(temb) for block in model.blocks] + [model.final_modulation(temb)]


def build_denoiser(cfg: DenoiserConfig, seed: int) -> CausalDenoiser:
    """A freshly initialised denoiser whose weights depend only on (cfg, seed).

    The global RNG state is left as it was.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return CausalDenoiser(cfg)
