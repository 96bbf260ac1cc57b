"""What one swept layer costs and what its controls buy, on the real embedded backbone: for each
layer, the seconds of building its training pairs, training the bridge at the sweep's budget,
each measurement of it (validation loss, the loss at t = 1, the K-step reconstruction error,
the hybrid's held-out NLL at K), training and measuring the regression network (the bridge's
network at t = 1, the former per-layer control) and fitting and measuring the closed-form ridge
map (the per-layer control now); and the hybrid NLL of each, so that the two controls can be
compared at the same layer.

The measurement's two passes against its one (dihal.replace.stage.held_out_scores): for the
bridge and for the ridge map, the seconds of the reconstruction error and the hybrid NLL
measured apart (each sampling or mapping h_l of every held-out sequence, as the code did
before) and in one pass (h_l sampled once for both), the fastest of `--repeats` alternated
runs; and how far the one pass's numbers are from the two passes' (the NLL: 0 where every
number is the same to the bit; the reconstruction error: the one pass samples from the
hybrid's own condition, the embedding, where the dump stored hs[0] rounded to float16), beside
how far a second training seed moves them (`--seed-spread`).

Reads the hidden states of a Locate run (`python -m pipeline.main --stop-after locate`) under
$DIHAL_ARTIFACTS, or, with `--dump DIR` where there is none, makes a dump of the held-out split
in DIR (made_dump.py); trains in a temporary folder and writes no artifact.

    python benchmarks/bench_layer_cost.py --layers 2 16 [--backbone smollm2] [--threads 2] \\
        [--dump /tmp/dump] [--repeats 2] [--seed-spread] [--no-regression]
"""

from __future__ import annotations

import argparse
import math
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


def _fastest(repeats: int, *fns) -> list[tuple[object, float]]:
    """(the last result, the fewest seconds) of each of `fns`, run in turn `repeats` times."""
    best = [(None, math.inf) for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            out, s = _timed(fn)
            best[i] = (out, min(s, best[i][1]))
    return best


def layer_pairs_of(bb, reader, train_ids, extract, layer: int):
    """The layer's raw training pairs: stored in the dump, else computed as a sweep partition
    computes them (the first `layer` blocks over the training tokens)."""
    from dihal.locate.extract import layer_pairs
    from dihal.replace.stage import stored_pairs

    if "train" in reader.splits:
        return stored_pairs(reader, "train", layer)
    return layer_pairs(bb, train_ids, layer, extract)


def bridge_passes(bb, den, data, protocol, repeats: int) -> dict:
    """The bridge's measurement in two passes (reconstruction_error, then the hybrid sampled
    again for its NLL, per-sequence NLLs included as measure_bridge keeps them) and in one."""
    from dihal.bridge import BrownianBridge, reconstruction_error
    from dihal.replace.hybrid import Hybrid
    from dihal.replace.stage import held_out_scores

    proc = BrownianBridge(sigma=protocol.sigma)
    hyb = Hybrid(bb, den, proc, data.cond_std, data.target_std, data.layer,
                 sampler_steps=protocol.sampler_steps, first_state=data.first_state,
                 noise_seed=protocol.seed)

    def two():
        recon = reconstruction_error(den, data.val, proc, steps=protocol.sampler_steps,
                                     seed=protocol.seed)
        return recon, held_out_scores(hyb, data.val_ids, data.reference, per_sequence=True)

    def one():
        return held_out_scores(hyb, data.val_ids, data.reference, val=data.val,
                               per_sequence=True)

    ((recon, two_held), two_s), (one_held, one_s) = _fastest(repeats, two, one)
    return {"two_pass_s": two_s, "one_pass_s": one_s,
            "recon_change": one_held.recon_error - recon,
            "nll_change": max(abs(one_held.hybrid_nll - two_held.hybrid_nll),
                              abs(one_held.top1_agreement - two_held.top1_agreement),
                              *(abs(a - b) for a, b in zip(one_held.per_sequence,
                                                           two_held.per_sequence, strict=True)))}


def ridge_passes(bb, data, repeats: int) -> dict:
    """The ridge map fitted on the layer's pairs, measured in two passes (its map of the
    stored held-out condition for the reconstruction error, then the ridge hybrid's NLL, as
    ridge_control did before) and in one."""
    from dihal.replace.control_hybrids import fit_ridge, held_out_nll, ridge_hybrid
    from dihal.replace.stage import held_out_scores

    ridge, fit_s = _timed(lambda: fit_ridge(data.train, data.val))
    hyb = ridge_hybrid(bb, data.layer, ridge, data.cond_std, data.target_std, data.first_state)

    def two():
        z, m = ridge(data.val.cond)[data.val.mask], data.val.target[data.val.mask]
        recon = math.sqrt(float(((z - m).double() ** 2).sum() / (m.double() ** 2).sum()))
        return recon, held_out_nll(hyb, data.val_ids, data.reference)

    def one():
        return held_out_scores(hyb, data.val_ids, data.reference, val=data.val)

    ((recon, nll), two_s), (held, one_s) = _fastest(repeats, two, one)
    return {"ridge_fit_s": fit_s, "ridge_two_pass_s": two_s, "ridge_one_pass_s": one_s,
            "ridge_recon_change": held.recon_error - recon,
            "ridge_nll_change": abs(held.hybrid_nll - nll["hybrid_nll"]),
            "ridge_nll": held.hybrid_nll, "backbone_nll": held.backbone_nll}


def measure_layer(bb, reader, train_ids, extract, layer: int, protocol, *, repeats: int = 1,
                  seed_spread: bool = False, regression: bool = True) -> dict:
    """One layer's seconds and hybrid NLLs (see the module's docstring)."""
    from dihal.bridge import BrownianBridge, reconstruction_error, validation_loss
    from dihal.bridge.process import REGRESSION_T_GRID
    from dihal.replace.control_hybrids import held_out_nll
    from dihal.replace.hybrid import Hybrid
    from dihal.replace.stage import (
        load_layer_data,
        measure_bridge,
        replicate_seed,
        train_layer_bridge,
    )

    out = {"layer": layer}
    pairs, out["pairs_s"] = _timed(lambda: layer_pairs_of(bb, reader, train_ids, extract, layer))
    data, out["standardise_s"] = _timed(lambda: load_layer_data(reader, layer, protocol, pairs))
    with tempfile.TemporaryDirectory() as tmp:
        (den, res, _), out["bridge_train_s"] = _timed(lambda: train_layer_bridge(
            data, protocol, Path(tmp) / "b"))
        proc = BrownianBridge(sigma=protocol.sigma)
        _, out["t1_loss_s"] = _timed(lambda: validation_loss(den, data.val, proc,
                                                             REGRESSION_T_GRID, seed=0))
        _, out["recon_s"] = _timed(lambda: reconstruction_error(den, data.val, proc,
                                                                steps=protocol.sampler_steps, seed=0))
        hyb = Hybrid(bb, den, proc, data.cond_std, data.target_std, layer,
                     sampler_steps=protocol.sampler_steps,
                     first_state=data.first_state)
        nll, out["hybrid_nll_s"] = _timed(lambda: held_out_nll(hyb, data.val_ids, data.reference))
        out["bridge_nll"] = nll["hybrid_nll"]
        measured, out["bridge_measure_s"] = _timed(lambda: measure_bridge(
            bb, den, data, protocol, val_loss=res.val_loss))
        out["recon_error"] = measured["recon_error"]
        out.update(bridge_passes(bb, den, data, protocol, repeats))
        if seed_spread:
            proto = replace(protocol, seed=replicate_seed(protocol, 1), seeds=1)
            rden = train_layer_bridge(data, proto, Path(tmp) / "s1")[0]
            other = measure_bridge(bb, rden, data, proto)
            out["recon_seed_spread"] = abs(other["recon_error"] - measured["recon_error"])
            out["nll_seed_spread"] = abs(other["hybrid_nll"] - measured["hybrid_nll"])
        if regression:
            reg = replace(protocol, sampler_steps=1)
            (rden, rres, _), out["regression_train_s"] = _timed(lambda: train_layer_bridge(
                data, reg, Path(tmp) / "r", regression=True))
            rm, out["regression_measure_s"] = _timed(lambda: measure_bridge(
                bb, rden, data, reg, val_loss=rres.val_loss))
            out["regression_nll"] = rm["hybrid_nll"]
    # the ridge map on the pairs the bridge trained on (a sweep partition's ridge control
    # reuses them: its seconds are the fit and the measurement)
    out.update(ridge_passes(bb, data, repeats))
    return out


KEYS = ["pairs_s", "standardise_s", "bridge_train_s", "t1_loss_s", "recon_s", "hybrid_nll_s",
        "bridge_measure_s", "two_pass_s", "one_pass_s", "regression_train_s",
        "regression_measure_s", "ridge_fit_s", "ridge_two_pass_s", "ridge_one_pass_s",
        "bridge_nll", "regression_nll", "ridge_nll", "backbone_nll", "recon_error",
        "recon_change", "recon_seed_spread", "nll_change", "nll_seed_spread",
        "ridge_recon_change", "ridge_nll_change"]


def _cell(key: str, value) -> str:
    if value is None:
        return "-"
    if key.endswith(("_change", "_spread")):
        return f"{value:.2e}"
    return f"{value:.3f}" if key.endswith(("nll", "error")) else f"{value:.1f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backbone", default="smollm2")
    p.add_argument("--layers", type=int, nargs="+", default=[2, 16])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dump", type=Path, help="where no Locate run is at hand: make (or read "
                   "again) a dump of the held-out split here")
    p.add_argument("--repeats", type=int, default=1, help="runs of the two and the one pass")
    p.add_argument("--seed-spread", action="store_true",
                   help="also train the sweep's second seed, for the spread of the numbers")
    p.add_argument("--no-regression", action="store_true",
                   help="leave out the regression network's training and measurement")
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    if args.dump is not None:
        from made_dump import made_dump

        run = made_dump(args.backbone, args.dump)
    else:
        from located import located

        run = located(args.backbone)
    reader, train_ids, extract, bb, protocol = (run.reader, run.train_ids, run.extract,
                                                run.backbone, run.protocol)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
          f"load average at start {os.getloadavg()[0]:.1f}; {args.backbone}, the sweep's "
          f"default protocol (K = {protocol.sampler_steps}, {protocol.eval_sequences} held-out sequences)"
          f", states stored as {extract.dtype}")
    print("| layer | " + " | ".join(KEYS) + " | load avg after |")
    print("|---:|" + "---:|" * (len(KEYS) + 1))
    for layer in args.layers:
        row = measure_layer(bb, reader, train_ids, extract, layer, protocol,
                            repeats=args.repeats, seed_spread=args.seed_spread,
                            regression=not args.no_regression)
        print(f"| {layer} | " + " | ".join(_cell(k, row.get(k)) for k in KEYS)
              + f" | {os.getloadavg()[0]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
