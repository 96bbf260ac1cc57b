"""Benchmark: the full Locate geometry of one backbone on CPU.

Synthetic hidden states shaped like the default backbone (SmolLM2-135M: 30 layers, d = 576) with
the default GeometryConfig (n = 4096 sampled states, 2048 anchors, k = 32, 4096 pairs), and the
features that make real states awkward: low-rank structure, norms growing with depth, a few
"massive activation" dimensions on some tokens and one token ~100x the median norm.
Times layer_proxies for every layer under all three normalisations (kNN included).

    .venv/bin/python benchmarks/bench_geometry.py [--layers 30] [--n 4096] [--d 576] [--threads 0]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch

from dihal.locate.geometry import GeometryConfig, layer_proxies, make_plan


def synthetic_states(layer: int, n: int, d: int, generator: torch.Generator) -> torch.Tensor:
    """One layer's (n, d) float32 states: rank-64 signal + noise, scale growing with depth,
    massive activations in 2 dimensions on 2 % of the tokens, and one token 100x the rest."""
    rank = 64
    basis = torch.randn(rank, d, generator=generator)
    signal = torch.randn(n, rank, generator=generator) @ basis
    x = signal + 0.5 * torch.randn(n, d, generator=generator)
    x *= 1.0 + 0.2 * layer
    massive_tokens = torch.randperm(n, generator=generator)[: max(1, n // 50)]
    x[massive_tokens[:, None], torch.tensor([7, 123]) % d] *= 100.0
    x[massive_tokens[0]] *= 100.0
    return x.to(torch.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--d", type=int, default=576)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    cfg = GeometryConfig(n_tokens=args.n)
    gen = torch.Generator().manual_seed(cfg.seed)
    plan = make_plan(args.n, cfg, gen)
    states = [synthetic_states(layer, args.n, args.d, gen) for layer in range(args.layers)]

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
        f"{platform.processor() or platform.machine()}, load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{args.layers} layers x {len(cfg.normalizations)} normalisations, n = {args.n}, "
        f"d = {args.d}, anchors = {cfg.n_anchors}, k = {cfg.k_neighbors}, pairs = {cfg.n_pairs}"
    )
    per_layer = []
    start = time.perf_counter()
    for x in states:
        t0 = time.perf_counter()
        rows = layer_proxies(x, plan, cfg)
        per_layer.append(time.perf_counter() - t0)
    total = time.perf_counter() - start
    assert len(rows) == len(cfg.normalizations)
    print(
        f"total {total:.1f} s, per layer mean {total / args.layers:.2f} s "
        f"(min {min(per_layer):.2f}, max {max(per_layer):.2f})"
    )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print("last layer:", {r["norm"]: round(r["k_eff"], 2) for r in rows}, "(k_eff)")


if __name__ == "__main__":
    main()
