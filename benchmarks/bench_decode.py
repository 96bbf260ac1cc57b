"""Benchmark: per-token decoding latency of the DiHAL hybrid against its backbone, on CPU.

The embedded backbone (SmolLM2-135M, 30 layers, d = 576) with a bridge denoiser of the default
size (d_model = 256, 4 layers, 4 heads; random weights: the cost does not depend on training)
inserted at layer 3, K = 16 sampler steps. Sampled the same way (temperature 1, BOS prompt):
  - backbone, cached: the model's own KV cache;
  - hybrid, cached: bridge K/V caches (one per denoising step) + upper-layer cache;
  - hybrid, uncached: the whole sequence recomputed at every step (reference);
and, for the cached hybrid, the time split between the 16 denoiser passes and the 27 upper
layers. Each row is the median of --repeats runs after a warm-up.

Against the FLOP model (dihal/evaluate/cost.py): the FLOPs per generated token of the backbone
and of the hybrid, counted by torch's FlopCounterMode over a cached decode of --length tokens,
and the hybrid's measured time per token relative to the backbone's over what its FLOPs predict
(target: within 1.15x).

    .venv/bin/python benchmarks/bench_decode.py [--n 4] [--length 64] [--steps 16] [--layer 3]
        [--threads 0] [--repeats 3] [--max-len 1024]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import torch

from dihal.backbones import load_backbone
from dihal.bridge import BrownianBridge, DenoiserConfig, Standardizer, build_denoiser
from dihal.evaluate.cost import backbone_flop_model, with_bridge
from dihal.replace.hybrid import Generation, Hybrid, autoregress, decode_backbone

TEXT = (
    "The river rose through the night, and by morning the old stone bridge stood alone in a "
    "wide brown lake. Farmers gathered on the hill to watch the water, counting the fields "
    "they had lost and the ones that might still be saved."
)


def split_stepper(hybrid: Hybrid, totals: dict[str, float]):
    """`Hybrid.stepper(cached=True)` with the bridge and the upper layers timed apart."""
    state = hybrid.sampler.new_state()
    cache = hybrid.backbone.new_cache()

    def step(ids):
        seen = state.length
        t0 = time.perf_counter()
        z0 = hybrid.sampler.extend(state, hybrid.condition(ids[:, seen:], seen))
        h = hybrid.restore(z0, seen)
        t1 = time.perf_counter()
        logits = hybrid.backbone.run_upper(h, hybrid.layer, cache=cache, start_pos=seen)[:, -1]
        t2 = time.perf_counter()
        totals["bridge"] += t1 - t0
        totals["upper"] += t2 - t1
        return logits

    return step


def median_run(fn, repeats: int) -> Generation:
    runs = [fn() for _ in range(repeats)]
    return sorted(runs, key=lambda g: g.seconds)[len(runs) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--layer", type=int, default=3)
    parser.add_argument("--max-len", type=int, default=1024, help="denoiser max_len (cache size)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-uncached", action="store_true")
    parser.add_argument("--target", type=float, default=1.15,
                        help="the time ratio over the FLOP ratio must lie within this factor")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    t0 = time.perf_counter()
    bb = load_backbone("smollm2", cache_dir=Path(".dihal/artifacts/cache/models"))
    load_s = time.perf_counter() - t0
    ids = torch.cat([torch.tensor([[bb.bos_id]]), bb.tokenizer(TEXT, return_tensors="pt").input_ids], 1)
    hs = bb.hidden_states(ids)
    stds = Standardizer.fit(hs[0]), Standardizer.fit(hs[args.layer])
    cfg = DenoiserConfig(d_in=bb.hidden_size, d_model=256, n_layers=4, n_heads=4, max_len=args.max_len)
    denoiser = build_denoiser(cfg, seed=0)
    with torch.no_grad():  # a fresh denoiser outputs zeros; give it a non-trivial output layer
        torch.nn.init.normal_(denoiser.out_proj.weight, std=0.02)
    hybrid = Hybrid(bb, denoiser, BrownianBridge(), *stds, layer=args.layer,
                    sampler_steps=args.steps)

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
        f"{platform.processor() or platform.machine()}, load average {os.getloadavg()[0]:.2f}; "
        f"backbone loaded in {load_s:.1f} s"
    )
    print(
        f"backbone {bb.spec.name} ({bb.n_layers} layers, d={bb.hidden_size}); bridge at layer "
        f"{args.layer}: d_model={cfg.d_model}, {cfg.n_layers} layers, {cfg.n_heads} heads, "
        f"max_len={cfg.max_len}, {denoiser.param_count():,} parameters; K={args.steps} steps; "
        f"{args.n} sequences x {args.length} tokens, one batch, median of {args.repeats}"
    )

    kw = dict(temperature=1.0, seed=0, batch_size=args.n)
    # warm-up (allocator, kernels, lazy imports)
    decode_backbone(bb, args.n, 4, **kw)
    hybrid.decode(args.n, 4, **kw)

    rows: list[tuple[str, Generation]] = []
    rows.append(("backbone, cached", median_run(lambda: decode_backbone(bb, args.n, args.length, **kw), args.repeats)))
    rows.append(("hybrid, cached", median_run(lambda: hybrid.decode(args.n, args.length, **kw), args.repeats)))
    if not args.skip_uncached:
        rows.append(("hybrid, uncached", median_run(
            lambda: hybrid.decode(args.n, args.length, cached=False, **kw), 1)))

    totals = {"bridge": 0.0, "upper": 0.0}
    split = autoregress(
        lambda b, _s: split_stepper(hybrid, totals), torch.tensor([bb.bos_id]), args.n,
        args.length, temperature=1.0, seed=0, batch_size=args.n, device=bb.device,
    )
    base = rows[0][1].seconds_per_token
    print("\n| decoding | ms / token | ms / step (batch) | tokens / s | x backbone |")
    print("|---|---:|---:|---:|---:|")
    for name, g in rows:
        print(
            f"| {name} | {1e3 * g.seconds_per_token:.2f} | {1e3 * g.seconds_per_step:.1f} | "
            f"{g.tokens_per_s:.1f} | {g.seconds_per_token / base:.2f} |"
        )
    t0 = time.perf_counter()
    flops = with_bridge(backbone_flop_model(bb, args.length), denoiser, args.length)
    count_s = time.perf_counter() - t0
    f_bb, f_hy = flops.backbone(), flops.hybrid(args.layer, args.steps)
    predicted = f_hy / f_bb
    measured = rows[1][1].seconds_per_token / base
    off = measured / predicted
    within = 1 / args.target <= off <= args.target
    print(f"\nFLOPs per generated token (torch FlopCounterMode, cached decode of {args.length} "
          f"tokens, counted in {count_s:.1f} s): backbone {f_bb / 1e6:.1f} M (blocks "
          f"{sum(flops.block_flops) / 1e6:.1f} M, head {flops.head_flops / 1e6:.1f} M); hybrid "
          f"{f_hy / 1e6:.1f} M ({args.steps} x {flops.denoiser_step_flops / 1e6:.2f} M denoiser "
          f"+ {flops.upper(args.layer) / 1e6:.1f} M upper layers and head)")
    print(f"hybrid / backbone: FLOPs {predicted:.3f}, measured time {measured:.3f}; time over "
          f"FLOPs {off:.3f}: {'within' if within else 'OUTSIDE'} {args.target}x; break-even at "
          f"layer {args.layer}: K <= {flops.max_cheaper_steps(args.layer)}")
    steps = args.length  # decoding steps of the one batch
    other = split.seconds - totals["bridge"] - totals["upper"]
    print(
        f"\ncached hybrid, one more run ({1e3 * split.seconds_per_step:.1f} ms / step): bridge "
        f"({args.steps} denoiser passes) {1e3 * totals['bridge'] / steps:.1f} ms / step, upper "
        f"layers ({bb.n_layers - args.layer} + norm + head) {1e3 * totals['upper'] / steps:.1f} "
        f"ms / step, sampling and the rest {1e3 * other / steps:.1f} ms / step"
    )


if __name__ == "__main__":
    main()
