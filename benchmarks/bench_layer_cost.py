"""What one swept layer costs and what its controls buy, on the real embedded backbone: for each
layer, the seconds of building its training pairs, training the bridge at the sweep's budget,
each measurement of it (validation loss, the loss at t = 1, the K-step reconstruction error,
the hybrid's held-out NLL at K), training and measuring the regression network (the bridge's
network at t = 1, the former per-layer control) and fitting and measuring the closed-form ridge
map (the per-layer control now); and the hybrid NLL of each, so that the two controls can be
compared at the same layer.

Reads the hidden states of a Locate run (`python -m pipeline.main --stop-after locate`) under
$DIHAL_ARTIFACTS; trains in a temporary folder and writes no artifact.

    python benchmarks/bench_layer_cost.py --layers 2 16 [--backbone smollm2] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def measure_layer(bb, reader, train_ids, extract, layer: int, protocol) -> dict:
    """One layer's seconds and hybrid NLLs (see the module's docstring)."""
    from dihal.bridge import BrownianBridge, reconstruction_error, validation_loss
    from dihal.bridge.process import REGRESSION_T_GRID
    from dihal.replace.control_hybrids import held_out_nll, ridge_control
    from dihal.replace.hybrid import Hybrid
    from dihal.replace.stage import (
        load_layer_data,
        measure_bridge,
        stored_pairs,
        train_layer_bridge,
    )

    out = {"layer": layer}
    pairs, out["pairs_s"] = _timed(lambda: stored_pairs(reader, "train", layer))
    data, out["standardise_s"] = _timed(lambda: load_layer_data(reader, layer, protocol, pairs))
    with tempfile.TemporaryDirectory() as tmp:
        (den, res, _), out["bridge_train_s"] = _timed(lambda: train_layer_bridge(
            data, protocol, Path(tmp) / "b"))
        proc = BrownianBridge(sigma=protocol.sigma)
        _, out["t1_loss_s"] = _timed(lambda: validation_loss(den, data.val, proc,
                                                             REGRESSION_T_GRID, seed=0))
        _, out["recon_s"] = _timed(lambda: reconstruction_error(den, data.val, proc,
                                                                steps=protocol.steps, seed=0))
        hyb = Hybrid(bb, den, proc, data.cond_std, data.target_std, layer, steps=protocol.steps,
                     first_state=data.first_state)
        nll, out["hybrid_nll_s"] = _timed(lambda: held_out_nll(hyb, data.val_ids, data.reference))
        out["bridge_nll"] = nll["hybrid_nll"]
        _, out["bridge_measure_s"] = _timed(lambda: measure_bridge(bb, den, data, protocol,
                                                                   val_loss=res.val_loss))
        reg = replace(protocol, steps=1)
        (rden, rres, _), out["regression_train_s"] = _timed(lambda: train_layer_bridge(
            data, reg, Path(tmp) / "r", regression=True))
        rm, out["regression_measure_s"] = _timed(lambda: measure_bridge(
            bb, rden, data, reg, val_loss=rres.val_loss))
        out["regression_nll"] = rm["hybrid_nll"]
    # the ridge fits on pairs as a sweep partition builds them (load_layer_data standardised
    # the first copy in place)
    ridge, out["ridge_s"] = _timed(lambda: ridge_control(bb, reader, layer, protocol,
                                                         train_ids=train_ids, extract=extract))
    out["ridge_nll"] = ridge.metrics.hybrid_nll
    out["backbone_nll"] = ridge.metrics.backbone_nll
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backbone", default="smollm2")
    p.add_argument("--layers", type=int, nargs="+", default=[2, 16])
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    from located import located

    run = located(args.backbone)
    reader, train_ids, extract, bb, protocol = (run.reader, run.train_ids, run.extract,
                                                run.backbone, run.protocol)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
          f"load average at start {os.getloadavg()[0]:.1f}; {args.backbone}, the sweep's "
          f"default protocol (K = {protocol.steps}, {protocol.eval_sequences} held-out sequences)")
    keys = ["pairs_s", "standardise_s", "bridge_train_s", "t1_loss_s", "recon_s", "hybrid_nll_s",
            "bridge_measure_s", "regression_train_s", "regression_measure_s", "ridge_s",
            "bridge_nll", "regression_nll", "ridge_nll", "backbone_nll"]
    print("| layer | " + " | ".join(keys) + " | load avg after |")
    print("|---:|" + "---:|" * (len(keys) + 1))
    for layer in args.layers:
        row = measure_layer(bb, reader, train_ids, extract, layer, protocol)
        print(f"| {layer} | " + " | ".join(f"{row[k]:.3f}" if k.endswith("nll") else
                                           f"{row[k]:.1f}" for k in keys)
              + f" | {os.getloadavg()[0]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
