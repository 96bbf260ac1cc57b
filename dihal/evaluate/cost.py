"""Cost per generated token: FLOPs counted from the shapes, and measured time.

FLOPs are those `torch.utils.flop_counter.FlopCounterMode` counts while the model actually
decodes (2 per multiply-add of every matmul, linear layer and attention product; attention
through the CPU's fused kernel is counted with torch's own formula for the fused kernels,
`CPU_ATTENTION`). Element-wise work (norms, activations, rotary, standardisation, sampling) is
not counted. "Per generated token" is the count of a cached decode of one sequence of
`length` tokens from BOS (the prompt and every fed-back token included) divided by `length`;
a batch multiplies every count by its size, so the per-token value does not depend on it.

`FlopModel` is the same count split by component (each backbone block, the head, one
denoising step of the bridge): it predicts the FLOPs of any hybrid (layer l, K steps), which
the tests check against a direct count, and gives the break-even: at which l and K a hybrid
is cheaper than its backbone. Pure compute, no Dagster.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from dihal.generation_inputs import FlopModel

FLOP_NOTE = ("FLOPs counted by torch.utils.flop_counter while decoding (2 per multiply-add of "
             "matmuls, linear layers and attention; element-wise ops not counted), per generated "
             "token of a cached decode from BOS")


def _cpu_attention(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


# torch counts the fused attention kernels of the GPU but not the CPU's: the same formula.
CPU_ATTENTION = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention}


def count_flops(fn: Callable[[], Any]) -> tuple[int, dict[str, int]]:
    """(total FLOPs, FLOPs per module name) of running fn() once."""
    with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION) as counter:
        fn()
    per_module = {name: int(sum(ops.values())) for name, ops in counter.get_flop_counts().items()}
    return int(counter.get_total_flops()), per_module


# ---------------------------------------------------------------- the FLOP model


def break_even(model: FlopModel, layers: Sequence[int], steps: Sequence[int]) -> list[dict]:
    """For each (layer l, K): the hybrid's and the backbone's FLOPs per token, their ratio,
    whether the hybrid is cheaper, and the largest K that is cheaper at that l."""
    base = model.backbone()
    rows = []
    for layer in layers:
        k_max = model.max_cheaper_steps(layer)
        for k in steps:
            f = model.hybrid(layer, k)
            rows.append({"layer": layer, "steps": k, "hybrid_flops": f, "backbone_flops": base,
                         "flops_vs_backbone": f / base, "cheaper": f < base,
                         "max_cheaper_steps": k_max})
    return rows


def backbone_flop_model(backbone, length: int = 32) -> FlopModel:
    """The backbone's parts, counted over a cached decode of one sequence of `length` tokens
    (module names from its own forward pass)."""
    from dihal.replace.hybrid import decode_backbone, no_warmup

    with no_warmup():
        total, per_module = count_flops(lambda: decode_backbone(backbone, 1, length, seed=0))
    root = type(backbone.model).__name__
    blocks = tuple(per_module.get(f"{root}.model.layers.{i}", 0) / length
                   for i in range(backbone.n_layers))
    if not all(blocks):
        raise ValueError(f"no FLOPs attributed to some blocks of {root}: the module names "
                         f"differ from {root}.model.layers.<i>")
    head = per_module.get(f"{root}.lm_head", 0) / length
    return FlopModel(blocks, head, total / length - sum(blocks) - head)


@torch.no_grad()
def denoiser_step_flops(denoiser: nn.Module, length: int = 32, t: float = 0.5) -> float:
    """FLOPs per position of one denoising step in cached decoding: the denoiser run on
    `length` positions one at a time with one cache (its time conditioning computed once, as
    the incremental sampler's per-step cache does)."""
    param = next(denoiser.parameters())
    d = denoiser.cfg.d_in
    x = torch.zeros(1, length, d, device=param.device, dtype=param.dtype)
    cache = denoiser.new_cache()

    def run():
        for p in range(length):
            denoiser(x[:, p : p + 1], t, x[:, p : p + 1], cache=cache, start_pos=p)

    return count_flops(run)[0] / length


def with_bridge(model: FlopModel, denoiser: nn.Module, length: int = 32) -> FlopModel:
    """`model` with the denoiser's step cost."""
    return FlopModel(model.block_flops, model.head_flops, model.other_flops,
                     denoiser_step_flops(denoiser, length))


# ---------------------------------------------------------------- measured rows


@dataclass(frozen=True)
class CostSubject:
    """One model of the cost table: `decode(n, length, *, temperature, seed, batch_size,
    cached)` returns a dihal.replace.hybrid.Generation (Hybrid.decode, PositionwiseHybrid.decode, or
    functools.partial(decode_backbone, backbone)). sampler_steps: K for a bridge (0 otherwise);
    layer: the replaced layers' top (None for the backbone)."""

    name: str
    decode: Callable[..., Any]
    sampler_steps: int = 0
    layer: int | None = None
    # its FLOPs per token priced by a FlopModel (e.g. `lambda m: m.hybrid(layer, K)`), where
    # cost_rows is given one: tests/unit/test_cost.py proves the model equal to the count for the
    # backbone and every kind of hybrid, so the eval need not count each decode again; None:
    # counted over the subject's own decode
    price: Callable[[FlopModel], float] | None = None


def cost_rows(subjects: Sequence[CostSubject], *, n: int = 4, length: int = 32, seed: int = 0,
              repeats: int = 3, flop_length: int | None = None,
              model: FlopModel | None = None) -> list[dict]:
    """Per model: FLOPs per generated token (counted over one cached decode of `flop_length`
    tokens, default `length`; priced by `model` instead where the subject has a `price` and
    `model` is given: its row's `flops_from` says which) and measured ms per token (cached
    decode of n sequences x `length` tokens in one batch, temperature 1, median of `repeats`
    after a warm-up; `ms_per_token_low` / `_high`: the fastest and slowest round, the noise
    the median is read with), with both relative to the first subject (the backbone, by
    convention). The timed runs go round the models `repeats` times (not one model's repeats
    after another's), so that a change of load on a shared machine falls on every model
    alike. This is the one timing of a model the report quotes (TIMING_NOTE)."""
    if not subjects:
        raise ValueError("cost_rows needs at least one model")
    if repeats < 1 or n < 1 or length < 1:
        raise ValueError(f"n, length and repeats must be >= 1, got {n}, {length}, {repeats}")
    flop_length = flop_length or length
    kw = dict(temperature=1.0, seed=seed, cached=True)
    from dihal.replace.hybrid import no_warmup

    priced = [model is not None and s.price is not None for s in subjects]
    with no_warmup():  # the work of the tokens themselves, not of a timing warm-up
        flops = [s.price(model) * flop_length if p else
                 count_flops(lambda s=s: s.decode(1, flop_length, batch_size=1, **kw))[0]
                 for s, p in zip(subjects, priced, strict=True)]
    for s in subjects:
        s.decode(n, min(4, length), batch_size=n, **kw)  # warm-up
    times: list[list[float]] = [[] for _ in subjects]
    for _ in range(repeats):
        for i, s in enumerate(subjects):
            times[i].append(_timed(lambda s=s: s.decode(n, length, batch_size=n, **kw)))
    rows = []
    for s, f, t, p in zip(subjects, flops, times, priced, strict=True):
        t = sorted(t)
        per_token = 1e3 / (n * length)
        rows.append({"model": s.name, "layer": s.layer, "K": s.sampler_steps,
                     "flops_from": "flop model" if p else "counted",
                     "flops_per_token": f / flop_length,
                     "ms_per_token": per_token * t[len(t) // 2],
                     "ms_per_token_low": per_token * t[0],
                     "ms_per_token_high": per_token * t[-1]})
    base = rows[0]
    for r in rows:
        r["flops_vs_backbone"] = r["flops_per_token"] / base["flops_per_token"]
        r["ms_vs_backbone"] = r["ms_per_token"] / base["ms_per_token"]
        # measured time relative to the backbone, over what the FLOPs predict (1: as predicted)
        r["time_over_flops"] = r["ms_vs_backbone"] / r["flops_vs_backbone"]
    return rows


def order_in_k(rows: Sequence[dict]) -> dict:
    """Whether the measured time per token of the bridge rows (K >= 1, one layer) rises with
    K within the timing's noise: sorted by K, every step down from one K to the next must be
    covered by the two rows' ranges over rounds (ms_per_token_low .. _high overlap). {"K":
    the Ks in order, "monotone": no step down at all, "within_noise": every step down
    covered, "inversions": [(K, next K)] of the steps down}. Rows without a range (a single
    round) count a step down as outside the noise."""
    bridge = sorted((r for r in rows if r.get("K", 0) >= 1), key=lambda r: r["K"])
    inversions, covered = [], True
    for a, b in zip(bridge, bridge[1:], strict=False):
        if b["ms_per_token"] < a["ms_per_token"]:
            inversions.append((a["K"], b["K"]))
            lo_a, hi_b = a.get("ms_per_token_low"), b.get("ms_per_token_high")
            covered &= lo_a is not None and hi_b is not None and lo_a <= hi_b
    return {"K": [r["K"] for r in bridge], "monotone": not inversions,
            "within_noise": covered, "inversions": inversions}


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    out = fn()
    seconds = getattr(out, "seconds", None)
    return seconds if seconds is not None else time.perf_counter() - t0


def ridge_map_flops(d_in: int, d_out: int) -> float:
    """FLOPs per token of a dense d_in x d_out map (the ridge control's one matmul)."""
    return 2.0 * d_in * d_out



# ---------------------------------------------------------------- the eval stage's cost table

COST_N, COST_LENGTH, COST_TIMED_LENGTH, COST_REPEATS = 4, 16, 32, 3
"""The eval stage's cost table: FLOPs per token over a decode of COST_LENGTH tokens (a count,
exact at any length); the timed decode COST_N sequences x COST_TIMED_LENGTH tokens (at most
the eval's length), cached, median of COST_REPEATS interleaved rounds. Over 2 x 8 tokens the
default run's times were not monotone in K (the per-call overhead of a decode and the load of
a shared machine outweigh one denoiser step); 4 x 32 tokens is 8 times the work per round, and
every eval checks whether DiHAL's times rise with K within the spread of the rounds
(order_in_k; the report says so) rather than assuming it."""

TIMING_NOTE = ("the one timing of each model: a cached decode of {n} sequences x {length} tokens "
               "in one batch from the start token, the median of {repeats} rounds that go round "
               "the models (fastest and slowest round beside it); per-token times depend on the "
               "batch, so only numbers of this one decode are compared")


PRICED_NOTE = ("; the rows of the backbone and of DiHAL at each K are priced by the FLOP model "
               "of those counts (its blocks, head and one denoiser step; the tests prove it equal "
               "to counting each decode), the control hybrids' counted over their own decode")


def eval_cost(backbone, denoiser: nn.Module, subjects: Sequence[CostSubject], *,
              length: int = COST_LENGTH, n: int = COST_N, repeats: int = COST_REPEATS,
              seed: int = 0, timed_length: int = COST_TIMED_LENGTH) -> dict:
    """The eval stage's cost table: the FlopModel of the backbone with the bridge's denoiser
    (counted over a decode of `length` tokens; it prices any hybrid (l, K), as the report's
    cost/quality plot and break-even do), and `cost_rows` of `subjects` (the backbone first;
    those with a `price` priced by that model, the others counted over `length` tokens; all
    timed over n x `timed_length` tokens: the one timing of each model the report quotes).
    {"flop_model", "rows", "n", "length" (timed), "flop_length", "repeats", "note",
    "timing", "order_in_k" (whether DiHAL's times rise with K within their noise)}."""
    model = with_bridge(backbone_flop_model(backbone, length), denoiser, length)
    rows = cost_rows(subjects, n=n, length=timed_length, seed=seed, repeats=repeats,
                     model=model, flop_length=length)
    return {"flop_model": model.to_dict(), "rows": rows, "n": n,
            "length": timed_length, "flop_length": length, "repeats": repeats,
            "note": FLOP_NOTE + PRICED_NOTE,
            "timing": TIMING_NOTE.format(n=n, length=timed_length, repeats=repeats),
            "order_in_k": order_in_k([r for r in rows if r["model"].startswith("DiHAL")])}
