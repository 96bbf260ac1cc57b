"""The main job on one backbone, end to end, through Dagster (runs show in the web UI):

    python -m pipeline.main                       # smollm2, the CPU default sweep
    python -m pipeline.main --backbone llama --all-layers

Locate (corpus -> layer score), the bridge sweep over candidate layers (one partition each),
bridgeability, the bridge at l* and its evaluation. Every step reuses what is up to date.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import dagster as dg


def _materialize(defs: dg.Definitions, selection: str, instance, partition: str | None = None):
    sel = dg.AssetSelection.from_string(selection)
    assets = list(defs.assets or [])
    t0 = time.monotonic()
    res = dg.materialize(
        assets + list(defs.asset_checks or []), selection=sel, partition_key=partition,
        instance=instance, resources=defs.resources, raise_on_error=False,
    )
    took = time.monotonic() - t0
    label = selection + (f" [partition {partition}]" if partition else "")
    if not res.success:
        errs = [e.step_failure_data.error.message.strip() for e in res.all_events
                if e.event_type_value == "STEP_FAILURE"]
        print(f"FAILED {label} after {took:.0f} s:\n" + "\n".join(errs), file=sys.stderr)
        raise SystemExit(1)
    cached = [e.asset_key.to_user_string() for e in res.get_asset_materialization_events()
              if e.step_materialization_data.materialization.metadata.get("cached")
              and e.step_materialization_data.materialization.metadata["cached"].value]
    print(f"done {label} in {took:.0f} s" + (f" (reused: {', '.join(cached)})" if cached else ""),
          flush=True)
    return res


STAGES = ["locate", "sweep", "bridge", "eval", "report"]


def main(argv: list[str] | None = None) -> None:
    from dihal.registry import BASELINES, get_spec
    from pipeline.definitions import defs
    from storage import Bridgeability, Comparison, Evaluation, LayerScore, Report

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--backbone", default="smollm2")
    ap.add_argument("--layers", help="comma-separated candidate layers to sweep")
    ap.add_argument("--sweep-count", type=int, default=10,
                    help="layers in the default sweep (1, 2, 3, then evenly spaced)")
    ap.add_argument("--all-layers", action="store_true", help="sweep every candidate layer")
    ap.add_argument("--stop-after", choices=STAGES, default="report")
    ap.add_argument("--baselines", default=",".join(BASELINES),
                    help="comma-separated baselines for the comparison")
    args = ap.parse_args(argv)
    b = args.backbone
    n_layers = get_spec(b).n_layers
    from dihal.replace import default_sweep_layers

    if args.all_layers:
        layers = list(range(1, n_layers))
    elif args.layers:
        layers = [int(x) for x in args.layers.split(",")]
    else:
        layers = default_sweep_layers(n_layers, args.sweep_count)
    instance = dg.DagsterInstance.get()
    t0 = time.monotonic()
    print(f"[dihal] backbone {b}: Locate", flush=True)
    _materialize(defs, f"+key:layer_score_{b}", instance)
    from resources import StorageResource

    layout = StorageResource().layout()
    score = LayerScore(layout, b).require()
    print(f"[dihal] l* = {score.info['l_star']} (by normalisation: {score.info['selected']})")
    last = STAGES.index(args.stop_after)

    def runs(stage: str) -> bool:
        return STAGES.index(stage) <= last

    if runs("sweep"):
        print(f"[dihal] bridge sweep over layers {layers}", flush=True)
        for ll in layers:
            _materialize(defs, f"key:bridge_sweep_{b}", instance, partition=str(ll))
        _materialize(defs, f"key:bridgeability_{b}", instance)
        bness = Bridgeability(layout, b).require()
        print(f"[dihal] oracle layer {bness.info['oracle']}, worst {bness.info['worst']}")
        print(json.dumps(bness.info["spearman"], indent=1))
    if runs("bridge"):
        print(f"[dihal] bridge at l* = {score.info['l_star']} (full budget)", flush=True)
        _materialize(defs, f"key:bridge_{b}", instance)
    if runs("eval"):
        _materialize(defs, f"key:eval_{b}", instance)
        ev = Evaluation(layout, b).require()
        for row in ev.info["rows"]:
            print("[dihal] " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                         for k, v in row.items()))
    if runs("report"):
        for name in [x for x in args.baselines.split(",") if x]:
            print(f"[dihal] baseline {name} at DiHAL's budget", flush=True)
            _materialize(defs, f"key:baseline_{b}", instance, partition=name)
        _materialize(defs, f"key:comparison_{b}", instance)
        for row in Comparison(layout, b).require().info["rows"]:
            print(f"[dihal] {row['model']}: Gen.PPL {row['gen_ppl']:.2f}, diversity "
                  f"{row['diversity']:.4f}")
        print("[dihal] full training at l*, the oracle and the worst layer", flush=True)
        _materialize(defs, f"key:full_training_{b}", instance)
        _materialize(defs, f"key:report_{b}", instance)
        print(f"[dihal] report: {Report(layout, b).html}")
    print(f"[dihal] finished in {time.monotonic() - t0:.0f} s; artifacts under {layout.root}")


if __name__ == "__main__":
    main()
