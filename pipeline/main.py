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
from typing import NoReturn

import dagster as dg


def _materialize(defs: dg.Definitions, selection: str, instance, partition: str | None = None):
    sel = dg.AssetSelection.from_string(selection)
    assets = list(defs.assets or [])
    t0 = time.monotonic()
    label = selection + (f" [partition {partition}]" if partition else "")
    try:
        res = dg.materialize(
            assets + list(defs.asset_checks or []), selection=sel, partition_key=partition,
            instance=instance, resources=defs.resources, raise_on_error=False,
        )
    except dg.DagsterError as exc:  # refused before any step ran (partition key, run config)
        _fail(label, time.monotonic() - t0, [str(exc).strip()])
    took = time.monotonic() - t0
    if not res.success:
        causes = failure_causes(res.all_events)
        if any("DagsterExecutionInterruptedError" in c for c in causes):
            print(f"INTERRUPTED {label} after {took:.0f} s: run {res.run_id} is marked failed; "
                  "run the same command again to resume (finished artifacts, dumped batches and "
                  "training checkpoints are kept).", file=sys.stderr, flush=True)
            raise SystemExit(130)
        _fail(label, took, causes)
    cached = [e.asset_key.to_user_string() for e in res.get_asset_materialization_events()
              if e.step_materialization_data.materialization.metadata.get("cached")
              and e.step_materialization_data.materialization.metadata["cached"].value]
    print(f"done {label} in {took:.0f} s" + (f" (reused: {', '.join(cached)})" if cached else ""),
          flush=True)
    return res


def root_cause(error) -> str:
    """The innermost message of a Dagster error chain: what went wrong and, in our messages,
    the fix (Dagster's wrapper, "Error occurred while executing op ...", is dropped)."""
    while error.cause is not None:
        error = error.cause
    head, sep, text = error.message.strip().partition(": ")
    if sep and head.rsplit(".", 1)[-1] == error.cls_name:  # "pkg.mod.KeyError: ..." -> "KeyError: ..."
        return f"{error.cls_name}: {text}"
    return error.message.strip()


def failure_causes(events) -> list[str]:
    """One line per failed step: its name and the cause (a dg.Failure's description, else the
    innermost error). Errors outside a step (resource start-up, the run) where no step failed."""
    causes = []
    for e in events:
        data = e.event_specific_data
        if e.event_type_value == "STEP_FAILURE":
            user = data.user_failure_data
            why = (user.description if user is not None and user.description else None
                   ) or root_cause(data.error)
            causes.append(why if why.startswith(f"{e.step_key}:") else f"{e.step_key}: {why}")
    if not causes:
        causes = [root_cause(err) for e in events
                  if (err := getattr(e.event_specific_data, "error", None)) is not None]
    return causes or ["no error was recorded: see Dagster's log above"]


def _fail(label: str, took: float, causes: list[str]) -> NoReturn:
    """The failure, its causes as the last lines of stderr, exit status 1."""
    print(f"FAILED {label} after {took:.0f} s; the cause:\n" + "\n".join(causes), file=sys.stderr,
          flush=True)
    raise SystemExit(1)


STAGES = ["locate", "sweep", "bridge", "eval", "report"]


def plan(args: argparse.Namespace) -> tuple[list[int], list[str]]:
    """The layers to sweep and the baselines to compare, checked against the registry before
    anything runs; a ValueError names the valid values."""
    from dihal.config import MIN_SWEPT_LAYERS
    from dihal.registry import BASELINES, get_spec

    n_layers = get_spec(args.backbone).n_layers  # UnknownBackboneError lists the known ones
    valid = f"{args.backbone} has {n_layers} layers, the candidate layers are 1..{n_layers - 1}"
    if args.sweep_count < MIN_SWEPT_LAYERS:
        raise ValueError(f"--sweep-count {args.sweep_count}: give at least {MIN_SWEPT_LAYERS} "
                         f"(bridgeability compares at least {MIN_SWEPT_LAYERS} layers; {valid})")
    if args.all_layers:
        layers = list(range(1, n_layers))
    elif args.layers:
        try:
            layers = [int(x) for x in args.layers.split(",")]
        except ValueError:
            raise ValueError(f"--layers {args.layers}: give comma-separated integers ({valid})"
                             ) from None
        bad = [ll for ll in layers if not 1 <= ll < n_layers]
        if bad:
            raise ValueError(f"--layers {args.layers}: {', '.join(map(str, bad))} out of range: "
                             f"{valid}")
    else:
        from dihal.replace import default_sweep_layers

        layers = default_sweep_layers(n_layers, args.sweep_count)
    baselines = [x for x in args.baselines.split(",") if x]
    unknown = [x for x in baselines if x not in BASELINES]
    if unknown:
        raise ValueError(f"--baselines {args.baselines}: unknown {', '.join(unknown)}; the "
                         f"baselines are {', '.join(BASELINES)}")
    return layers, baselines


def main(argv: list[str] | None = None) -> None:
    from dihal.errors import UnknownBackboneError
    from dihal.registry import BASELINES

    ap = argparse.ArgumentParser(prog="python -m pipeline.main", description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--backbone", default="smollm2")
    ap.add_argument("--layers", help="comma-separated candidate layers to sweep (1..N-1)")
    ap.add_argument("--sweep-count", type=int, default=10,
                    help="layers in the default sweep (1, 2, 3, then evenly spaced)")
    ap.add_argument("--all-layers", action="store_true", help="sweep every candidate layer")
    ap.add_argument("--stop-after", choices=STAGES, default="report")
    ap.add_argument("--baselines", default=",".join(BASELINES),
                    help="comma-separated baselines for the comparison")
    args = ap.parse_args(argv)
    try:
        layers, baselines = plan(args)
    except (UnknownBackboneError, ValueError) as exc:
        ap.error(str(exc))  # usage and the message on stderr, exit status 2; nothing ran
    from pipeline.definitions import defs
    from storage import Bridgeability, Comparison, Evaluation, LayerScore, Report

    b = args.backbone
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
        for name in baselines:
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
