"""Benchmark: cost per generated token of the backbone, DiHAL at each K and the
control hybrids, on the embedded SmolLM2: FLOPs counted while decoding (dihal/evaluate/cost.py) and
measured ms per token, with the break-even over layers.

The bridge has the default size and random weights (the cost does not depend on training);
the ridge map is a random d x d matrix (likewise). Sampled as the eval samples (temperature 1,
BOS prompt, cached), n sequences x length tokens in one batch, median of --repeats.

    .venv/bin/python benchmarks/bench_cost.py [--layer 3] [--n 4] [--length 32] [--threads 1]
        [--repeats 3] [--steps 1 2 4 8 16]
"""

from __future__ import annotations

import argparse
import functools
import os
from pathlib import Path

import torch

from dihal.backbones import load_backbone
from dihal.bridge import BrownianBridge, DenoiserConfig, Standardizer, build_denoiser
from dihal.evaluate.cost import (
    FLOP_NOTE,
    CostSubject,
    backbone_flop_model,
    break_even,
    cost_rows,
    order_in_k,
    with_bridge,
)
from dihal.replace.control_hybrids import RidgeMap, layer_drop_hybrid, ridge_hybrid
from dihal.replace.hybrid import Hybrid, decode_backbone

TEXT = ("The river rose through the night, and by morning the old stone bridge stood alone in a "
        "wide brown lake.")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layer", type=int, default=3)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--length", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    bb = load_backbone("smollm2", cache_dir=Path(".dihal/artifacts/cache/models"))
    ids = torch.cat([torch.tensor([[bb.bos_id]]), bb.tokenizer(TEXT, return_tensors="pt").input_ids], 1)
    hs = bb.hidden_states(ids)
    stds = Standardizer.fit(hs[0]), Standardizer.fit(hs[args.layer])
    cfg = DenoiserConfig(d_in=bb.hidden_size, d_model=256, n_layers=4, n_heads=4, max_len=256)
    den = build_denoiser(cfg, seed=0)
    with torch.no_grad():
        torch.nn.init.normal_(den.out_proj.weight, std=0.02)
    d = bb.hidden_size
    g = torch.Generator().manual_seed(0)
    ridge = RidgeMap(torch.randn(d, d, generator=g) / d ** 0.5, torch.zeros(d), lam=1.0)

    subjects = [CostSubject("backbone", functools.partial(decode_backbone, bb))]
    for k in args.steps:
        h = Hybrid(bb, den, BrownianBridge(), *stds, layer=args.layer, sampler_steps=k)
        subjects.append(CostSubject(f"DiHAL K={k}", h.decode, sampler_steps=k, layer=args.layer))
    subjects.append(CostSubject("ridge", ridge_hybrid(bb, args.layer, ridge, *stds).decode,
                                layer=args.layer))
    subjects.append(CostSubject("layer-drop", layer_drop_hybrid(bb, args.layer).decode,
                                layer=args.layer))
    rows = cost_rows(subjects, n=args.n, length=args.length, repeats=args.repeats)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}; SmolLM2 (30 layers, d={d}); hybrids at layer "
          f"{args.layer}; {args.n} x {args.length} tokens, median of {args.repeats}")
    print(f"({FLOP_NOTE}; the regression hybrid costs what DiHAL K=1 costs)\n")
    print("| model | K | MFLOPs / token | ms / token | fastest / slowest round | "
          "FLOPs x backbone | time x backbone | time over FLOPs |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['K']} | {r['flops_per_token'] / 1e6:.1f} | "
              f"{r['ms_per_token']:.2f} | {r['ms_per_token_low']:.2f} / "
              f"{r['ms_per_token_high']:.2f} | {r['flops_vs_backbone']:.3f} | "
              f"{r['ms_vs_backbone']:.3f} | {r['time_over_flops']:.3f} |")
    order = order_in_k([r for r in rows if r["model"].startswith("DiHAL")])
    print(f"\nDiHAL's time per token in K: monotone {order['monotone']}, every step down within "
          f"the rounds' spread {order['within_noise']}, steps down {order['inversions']}")
    flops = with_bridge(backbone_flop_model(bb, args.length), den, args.length)
    print("\nbreak-even (FLOPs): the largest K at which the hybrid at layer l is cheaper than "
          "the backbone")
    layers = [1, 2, 3, 4, 8, 12, 16, 21, 25, 29]
    be = {r["layer"]: r["max_cheaper_steps"] for r in break_even(flops, layers, [1])}
    print("| l | " + " | ".join(str(x) for x in layers) + " |")
    print("|---|" + "---:|" * len(layers))
    print("| max K | " + " | ".join(str(be[x]) for x in layers) + " |")


if __name__ == "__main__":
    main()
