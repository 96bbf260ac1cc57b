"""A CoDAR training step against a bridge step on this machine, at DiHAL's default size on
SmolLM2's width (d = 576, 128 tokens, the default protocol's batch of 4): the ratio that
dihal.run.estimates.CODAR_STEP_RATIO takes to price CoDAR's training from the
bridge's measured seconds a step. Random inputs (bridge pairs; token ids over a restricted
vocabulary of --vocab rows, as restrict_vocab trims SmolLM2's to the training tokens), each
model trained by the one training loop (train_model) with its own loss (the bridge's,
bridge_training_loss; the baseline's, baseline_loss), no validation, for --steps steps after
one warm-up run of the same length.

    PYTHONPATH=. python benchmarks/bench_codar_step.py --steps 8 --threads 2
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch


def timed(run) -> float:
    """Seconds of run(tmp folder), the second of two runs (the first warms up)."""
    out = []
    for _ in range(2):
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            run(Path(tmp))
            out.append(time.perf_counter() - t)
    return out[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--dim", type=int, default=576)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=16384)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    from dihal.bridge import BridgeData, BrownianBridge, build_denoiser
    from dihal.bridge.denoiser import denoiser_config_of
    from dihal.bridge.train import bridge_training_loss, loop_config
    from dihal.compare.baselines import build_baseline
    from dihal.compare.baselines.base import baseline_loss
    from dihal.config import BridgeProtocol
    from dihal.run.capacity import denoiser_parameters
    from dihal.training import train_model

    torch.set_num_threads(args.threads)
    proto = BridgeProtocol(checkpoint_every=10**6)
    n = args.steps * proto.batch_size
    tcfg = replace(loop_config(proto, "cpu"), epochs=1.0)
    gen = torch.Generator().manual_seed(0)
    shape = (n, args.seq_len, args.dim)
    mask = torch.ones(shape[:2], dtype=torch.bool)
    pairs = BridgeData(torch.randn(shape, generator=gen), torch.randn(shape, generator=gen), mask)
    ids = torch.randint(2, args.vocab, (n, args.seq_len), generator=gen)
    ids[:, 0] = 1
    size = denoiser_parameters(args.dim, proto, args.seq_len)

    def bridge(tmp: Path) -> None:
        net = build_denoiser(denoiser_config_of(proto, args.dim, args.seq_len), seed=0)
        train_model(net, bridge_training_loss(pairs, BrownianBridge(sigma=proto.sigma)), n,
                    tcfg, tmp, protocol={"bridge": "default"})

    def codar(tmp: Path) -> None:
        model = build_baseline("codar", embeddings=torch.randn(args.vocab, args.dim, generator=gen),
                               seq_len=args.seq_len, target_params=size, seed=0, bos_id=1,
                               eos_id=0)
        train_model(model, baseline_loss(ids), n, tcfg, tmp, protocol={"baseline": "codar"})

    b, c = timed(bridge), timed(codar)
    print(json.dumps({"threads": torch.get_num_threads(), "steps": args.steps, "vocab": args.vocab,
                      "denoiser_parameters": size, "bridge_s_per_step": round(b / args.steps, 3),
                      "codar_s_per_step": round(c / args.steps, 3),
                      "codar_over_bridge": round(c / b, 2)}))


if __name__ == "__main__":
    main()
