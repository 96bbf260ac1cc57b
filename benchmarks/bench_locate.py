"""Benchmark: Locate's two repeated computations on the default's shape, the geometry stage
(dihal.locate.stage.compute_geometry: the proxies of every layer under every normalisation,
their token bootstrap and the rival predictors) and the layer score's sequence resamples
(dihal.locate.stage.sequence_stability: 5 cluster-bootstrap replicates and 1 split half, each
recomputing the geometry of every candidate layer), with a digest of each one's output.

Synthetic dump shaped like SmolLM2-135M's under the cpu preset (31 hidden states: the
embeddings and 30 blocks; 64 held-out sequences of 128 tokens; d = 576; float16 as stored),
with the default GeometryConfig and LayerScoreConfig: a rank-64 signal plus noise, growing with
depth, and two "massive activation" dimensions on 2 % of the tokens.

Before/after on the same machine: the same script against another tree's dihal package, e.g.

    git archive <commit> dihal storage | tar -x -C /tmp/before
    PYTHONPATH=/tmp/before .venv/bin/python benchmarks/bench_locate.py --threads 1
    .venv/bin/python benchmarks/bench_locate.py --threads 1

The digests must agree (the outputs bitwise equal); the seconds are wall and this process's CPU
time (the CPU seconds move less than the wall on a shared machine). `--layers` cuts the dump
for a quick look; `--only geometry|sequences` runs one of the two. `--units R` times instead
one unit of each, the fastest of R repeats (what a busy machine disturbs least): one layer of
the geometry stage (its proxies under every normalisation with the token bootstrap, then its
rival predictors) and one sample-layer of the sequence resamples (the proxies under `none`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time

import numpy as np
import torch

import dihal
from dihal.config import GeometryConfig, LayerScoreConfig


class SyntheticDump:
    """An in-memory stand-in for storage.states.StateReader: shape(split), layer(split, l)."""

    def __init__(self, n_layers: int, n_seq: int, seq_len: int, d: int, seed: int = 0):
        gen = torch.Generator().manual_seed(seed)
        basis = torch.randn(64, d, generator=gen)
        n = n_seq * seq_len
        self.layers = []
        for layer in range(n_layers):
            x = torch.randn(n, 64, generator=gen) @ basis + 0.5 * torch.randn(n, d, generator=gen)
            x *= 1.0 + 0.05 * layer
            massive = torch.randperm(n, generator=gen)[: n // 50]
            x[massive[:, None], torch.tensor([7, 123]) % d] *= 30.0
            self.layers.append(x.reshape(n_seq, seq_len, d).to(torch.float16).numpy())
        self._shape = (n_layers, n_seq, seq_len, d)

    def shape(self, split: str) -> tuple[int, ...]:
        return self._shape

    def layer(self, split: str, layer: int) -> np.ndarray:
        return self.layers[layer]


def digest(value) -> str:
    """sha256 of a JSON rendering in which every float is its exact hex form."""
    def exact(v):
        if isinstance(v, float):
            return v.hex()
        if isinstance(v, dict):
            return {str(k): exact(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [exact(x) for x in v]
        if isinstance(v, np.ndarray):
            return exact(v.tolist())
        return v
    return hashlib.sha256(json.dumps(exact(value), sort_keys=True).encode()).hexdigest()[:16]


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def units(reader: SyntheticDump, repeats: int) -> None:
    """The fastest of `repeats` CPU times of one geometry layer and one sequence sample-layer."""
    import dataclasses

    from dihal.locate.geometry import (
        layer_proxies,
        layer_proxies_resampled,
        make_plan,
        resample_weights,
        sample_positions,
    )
    from dihal.locate.predictors import RidgeFolds, layer_predictors

    cfg = GeometryConfig()
    gen = torch.Generator().manual_seed(0)
    pos = sample_positions(64, 128, cfg.n_tokens, gen)
    plan = make_plan(cfg.n_tokens, cfg, gen)
    weights = resample_weights(cfg.n_tokens, cfg.n_resamples, gen)
    x0, prev, x = (torch.from_numpy(np.asarray(reader.layer("val", layer)[pos[:, 0], pos[:, 1]],
                                               dtype=np.float64)) for layer in (0, 1, 2))
    ridge = RidgeFolds(x0, seed=cfg.seed)
    one = dataclasses.replace(cfg, normalizations=("none",), n_resamples=0)
    for name, fn in (("geometry layer (proxies + bootstrap)",
                      lambda: layer_proxies_resampled(x, plan, cfg, weights)),
                     ("geometry layer (rival predictors)",
                      lambda: layer_predictors(x0, prev, x, seed=cfg.seed, ridge=ridge)),
                     ("sequence sample-layer", lambda: layer_proxies(x, plan, one))):
        best = min(timed(fn)[2] for _ in range(repeats))
        print(f"{name}: {best:.3f} s CPU (fastest of {repeats})")


def main() -> None:
    from dihal.locate.stage import compute_geometry, score_summary, sequence_stability

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=31, help="hidden states (31: SmolLM2)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    parser.add_argument("--only", choices=("geometry", "sequences"), default=None)
    parser.add_argument("--units", type=int, default=0, metavar="R",
                        help="time one unit of each, the fastest of R repeats (0: the stages)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    reader = SyntheticDump(3 if args.units else args.layers, 64, 128, 576)
    geometry, score = GeometryConfig(), LayerScoreConfig()
    print(f"dihal from {os.path.dirname(dihal.__file__)}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f}; dump {reader.shape('val')}")
    if args.units:
        units(reader, args.units)
        return
    candidates = list(range(1, args.layers))
    if args.only != "sequences":
        result, wall, cpu = timed(lambda: compute_geometry(reader, geometry, backbone="smollm2"))
        out = {"rows": result.rows, "predictors": result.predictors,
               "resamples": result.resamples.columns()}
        print(f"geometry: {wall:.1f} s wall, {cpu:.1f} s CPU, digest {digest(out)}")
        l_star = score_summary(result.rows)["l_star"]
    else:
        l_star = 1
    if args.only != "geometry":
        result, wall, cpu = timed(lambda: sequence_stability(
            reader, geometry, candidates, l_star, score, backbone="smollm2"))
        result.pop("seconds")
        print(f"sequence resamples: {wall:.1f} s wall, {cpu:.1f} s CPU, digest {digest(result)}, "
              f"picks {result['bootstrap']['picks'] if result['bootstrap'] else None}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
