"""What the baselines share besides their interface (`base.py`): sizing a denoiser to DiHAL's
budget, the frozen token table in its normalised form, rounding vectors to the vocabulary, the
length check, and `build`, the one construction of every baseline (docs/method.md §5).

A baseline class declares what its construction needs (`build` reads nothing else):
    Config                                  its config dataclass (the default when none is given)
    needs_bos: bool                         whether its decoder starts from BOS
    denoiser_space(cfg, embeddings, seq_len) -> (d_in, max_len)   what its denoiser diffuses
    __init__(embeddings, denoiser_cfg, cfg, *, seq_len, bos_id, seed)
"""

from __future__ import annotations

import math
from functools import cache

import torch
from torch import Tensor, nn

from dihal.bridge.denoiser import CausalDenoiser
from dihal.net_configs import DenoiserConfig

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


def normalise_embeddings(embeddings: Tensor) -> Tensor:
    """Rows scaled to L2 norm sqrt(d), float32; an all-zero row stays zero."""
    e = embeddings.detach().float()
    norms = e.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return e / norms * math.sqrt(e.shape[-1])



def build(
    model_class: type[nn.Module],
    embeddings: Tensor,
    seq_len: int,
    target_params: int,
    seed: int,
    bos_id: int | None = None,
    eos_id: int | None = None,
    config=None,
) -> nn.Module:
    """A `model_class` baseline over the backbone's embeddings (V, d) for sequences of seq_len
    tokens, its bidirectional denoiser sized to target_params (`fit_denoiser_config`) over the
    class's `denoiser_space`. bos_id is required where the class `needs_bos`; eos_id is needed
    by no recipe and is ignored. Each baseline module's `build` is this, for its class."""
    if model_class.needs_bos and bos_id is None:
        raise ValueError(f"{model_class.__name__}'s decoder starts from BOS: pass bos_id")
    cfg = config or model_class.Config()
    d_in, max_len = model_class.denoiser_space(cfg, embeddings, seq_len)
    den = fit_denoiser_config(d_in, target_params, max_len=max_len, causal=False)
    return model_class(embeddings, den, cfg, seq_len=seq_len, bos_id=bos_id, seed=seed)
