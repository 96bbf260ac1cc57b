"""Does a swept layer's result depend on the torch threads its step gets? With `--workers N` on
a CPU host each sweep step gets the cores divided by N (`make run`: 2 workers, one thread each
on 2 cores), with one worker all of them. For each thread count this trains and measures the
layer as a sweep partition does (dihal.replace.stage.train_layer, then its ridge control) and
prints the seconds, a digest of the bridge's tensors and the measured numbers: equal digests and
numbers mean the worker count does not change the sweep's artifacts.

Reads the hidden states of a Locate run (`python -m pipeline.main --stop-after locate`) under
$DIHAL_ARTIFACTS; trains in a temporary folder and writes no artifact.

    python benchmarks/bench_threads.py --layer 2 --threads 1 2 [--backbone smollm2]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time
from pathlib import Path

import torch


def digest(tensors: dict) -> str:
    """sha256 (first 16 hex digits) of the tensors' bytes in the order of their sorted names."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(tensors[name].contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backbone", default="smollm2")
    p.add_argument("--layer", type=int, default=2)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = p.parse_args()

    from located import located

    from dihal.replace.control_hybrids import ridge_control
    from dihal.replace.stage import train_layer

    run = located(args.backbone)
    reader, train_ids, extract, bb, protocol = (run.reader, run.train_ids, run.extract,
                                                run.backbone, run.protocol)
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load average at start "
          f"{os.getloadavg()[0]:.1f}; {args.backbone} layer {args.layer}, the sweep's protocol")
    print("| threads | bridge (s) | ridge control (s) | bridge tensors | val loss | loss at t = 1 "
          "| reconstruction error | hybrid NLL | ridge hybrid NLL |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for threads in args.threads:
        torch.set_num_threads(threads)
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            bridge = train_layer(bb, reader, args.layer, protocol, Path(tmp) / "bridge",
                                 train_ids=train_ids, extract=extract, keep_pairs=True)
            t1 = time.perf_counter()
            ridge = ridge_control(bb, reader, args.layer, protocol, train_ids=train_ids,
                                  extract=extract)
            t2 = time.perf_counter()
        m = bridge.metrics
        print(f"| {threads} | {t1 - t0:.1f} | {t2 - t1:.1f} | {digest(bridge.tensors)} | "
              f"{m.val_loss!r} | {m.t1_loss!r} | {m.recon_error!r} | {m.hybrid_nll!r} | "
              f"{ridge.metrics.hybrid_nll!r} |", flush=True)


if __name__ == "__main__":
    main()
