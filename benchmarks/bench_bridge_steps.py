"""Bridge training steps per second with the code on PYTHONPATH: run it against two checkouts
to compare the loop before and after a change (the pairs kept on the step's device, no host
read per step on a GPU). Random standardised pairs at the gpu profile's width (d = 576,
T = 128) by default; the profile's denoiser (d_model 272, 4 blocks).

    PYTHONPATH=. python benchmarks/bench_bridge_steps.py --device cpu --steps 20 --batch 8
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--sequences", type=int, default=512)
    ap.add_argument("--dim", type=int, default=576)
    ap.add_argument("--seq-len", type=int, default=128)
    args = ap.parse_args()
    import dihal
    from dihal.bridge import BridgeData, BrownianBridge, build_denoiser, train_bridge
    from dihal.config import BridgeProtocol
    from dihal.run.profiles import PROFILES

    try:  # this checkout's builders; an older checkout built both from the protocol itself
        from dihal.bridge.denoiser import denoiser_config_of
        from dihal.bridge.train import loop_config
    except ImportError:
        def denoiser_config_of(p, d_in, max_len):
            return p.denoiser_config(d_in, max_len)

        def loop_config(p, device):
            return p.train_config(device)

    gen = torch.Generator().manual_seed(0)
    shape = (args.sequences, args.seq_len, args.dim)
    mask = torch.ones(shape[:2], dtype=torch.bool)
    train = BridgeData(torch.randn(shape, generator=gen), torch.randn(shape, generator=gen), mask)
    val = BridgeData(train.cond[:8], train.target[:8], mask[:8])
    proto = BridgeProtocol(**{**PROFILES["gpu"]["bridge_sweep"], "batch_size": args.batch,
                              "checkpoint_every": 10**6})
    tcfg = replace(loop_config(proto, args.device),
                   epochs=args.steps * args.batch / args.sequences)
    out = {"code": str(Path(dihal.__file__).parent.parent), "device": args.device,
           "threads": torch.get_num_threads(), "batch": args.batch, "runs": []}
    for _ in range(2):  # the first warms up
        net = build_denoiser(denoiser_config_of(proto, args.dim, args.seq_len), seed=0)
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            res = train_bridge(net.to(args.device), train, val, BrownianBridge(), tcfg, Path(tmp))
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            s = time.perf_counter() - t
        out["runs"].append({"steps": res.step, "seconds": round(s, 3),
                            "steps_per_s": round(res.step / s, 3)})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
