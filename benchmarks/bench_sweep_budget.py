"""Does a cheaper sweep protocol rank the layers as the default does? For each layer given,
train and measure the bridge under the sweep's default protocol and under a cheaper one (by
default: half the training steps, 16 of the 32 held-out sequences, K = 8 sampler steps instead
of 16), timing both, and under the default protocol again with the sweep's second training
seed; then Spearman's correlation, over the layers, of each bridgeability measure between the
cheap protocol and the default, against the same correlation between the default's two seeds
(how much two equally good runs of the default already disagree), and the seconds of each.

Reads the hidden states of a Locate run (`python -m pipeline.main --stop-after locate`) under
$DIHAL_ARTIFACTS; trains in a temporary folder and writes no artifact.

    python benchmarks/bench_sweep_budget.py --layers 1 4 7 10 13 16 19 22 25 29 \\
        [--cheap epochs=0.5 eval_sequences=16 sampler_steps=8] [--backbone smollm2] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import fields, replace
from pathlib import Path

import torch

MEASURES = ("val_loss", "t1_loss", "recon_error", "hybrid_nll")


def measure(bb, reader, layer: int, protocol) -> dict:
    """One layer under `protocol`: its bridgeability measures and the seconds of building its
    pairs, training (with the validation loss) and measuring."""
    from dihal.replace.stage import (
        load_layer_data,
        measure_bridge,
        stored_pairs,
        train_layer_bridge,
    )

    t0 = time.perf_counter()
    data = load_layer_data(reader, layer, protocol, stored_pairs(reader, "train", layer))
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        den, res, _ = train_layer_bridge(data, protocol, Path(tmp) / "b")
    t2 = time.perf_counter()
    m = measure_bridge(bb, den, data, protocol, val_loss=res.val_loss)
    t3 = time.perf_counter()
    return {**{k: m[k] for k in MEASURES}, "pairs_s": t1 - t0, "train_s": t2 - t1,
            "measure_s": t3 - t2}


def parse_overrides(items: list[str], protocol) -> object:
    names = {f.name for f in fields(protocol)}
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        if key not in names:
            raise SystemExit(f"--cheap {item}: BridgeProtocol has no field {key!r}")
        out[key] = float(value) if "." in value else int(value)
    return replace(protocol, **out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backbone", default="smollm2")
    p.add_argument("--layers", type=int, nargs="+", default=[1, 4, 7, 10, 13, 16, 19, 22, 25, 29])
    p.add_argument("--cheap", nargs="+", default=["epochs=0.5", "eval_sequences=16", "sampler_steps=8"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, help="also write the rows as JSON here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    from scipy.stats import spearmanr

    from dihal.backbones import load_backbone
    from dihal.config import BridgeProtocol
    from dihal.replace.stage import check_candidate, replicate_seed
    from storage import HiddenStates
    from storage.layout import ArtifactLayout

    default = BridgeProtocol()
    cheap = parse_overrides(args.cheap, default)
    seed2 = replace(default, seed=replicate_seed(default, 1))  # the sweep's second seed
    layout = ArtifactLayout(Path(os.environ.get("DIHAL_ARTIFACTS", ".dihal/artifacts")))
    states = HiddenStates(layout, args.backbone, None)
    states.require()
    reader = states.reader()
    bb = load_backbone(args.backbone, cache_dir=layout.model_cache())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average at start "
          f"{os.getloadavg()[0]:.1f}; {args.backbone}; cheap protocol: {' '.join(args.cheap)}")
    rows = []
    print("| layer | protocol | " + " | ".join(MEASURES) + " | pairs s | train s | measure s |")
    print("|---:|---|" + "---:|" * (len(MEASURES) + 3))
    for layer in args.layers:
        check_candidate(reader, layer)
        for name, protocol in (("default", default), ("seed 2", seed2), ("cheap", cheap)):
            row = {"layer": layer, "protocol": name, **measure(bb, reader, layer, protocol)}
            rows.append(row)
            print(f"| {layer} | {name} | " + " | ".join(f"{row[k]:.4f}" for k in MEASURES)
                  + " | " + " | ".join(f"{row[k]:.1f}" for k in ("pairs_s", "train_s",
                                                                 "measure_s")) + " |", flush=True)
    by = {name: [r for r in rows if r["protocol"] == name] for name in ("default", "seed 2",
                                                                         "cheap")}
    print(f"\nover {len(args.layers)} layers, load average at the end {os.getloadavg()[0]:.1f}")
    def rho(k: str, a: str, b: str) -> float:
        return spearmanr([r[k] for r in by[a]], [r[k] for r in by[b]]).statistic

    for k in MEASURES:
        print(f"- {k}: Spearman default vs cheap {rho(k, 'default', 'cheap'):+.3f}, default vs "
              f"its second seed {rho(k, 'default', 'seed 2'):+.3f}, second seed vs cheap "
              f"{rho(k, 'seed 2', 'cheap'):+.3f}")
    for name, rs in by.items():
        print(f"- {name}: {sum(r['train_s'] + r['measure_s'] for r in rs) / len(rs):.1f} s a "
              "layer of training and measuring")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
