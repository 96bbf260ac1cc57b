"""The main job on one backbone, end to end, through the Dagster instance: the named jobs of
pipeline.definitions are submitted to the run queue, the daemon launches them (the sweep as one
backfill over its layer partitions, at most --workers runs at once), and this command follows
them and prints a summary. The runs, the backfill and their logs show in the web UI.

    python -m pipeline.main                       # smollm2, the CPU default sweep
    python -m pipeline.main --workers 2           # two sweep partitions at a time
    python -m pipeline.main --profile gpu         # every layer, 1M training tokens, bf16
    python -m pipeline.main --backbone llama --all-layers

Locate (corpus -> layer score), the bridge sweep over candidate layers (one partition each),
bridgeability, the bridge at l* and its evaluation, the baselines, the comparison and the
report. Every step reuses what is up to date.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import NoReturn

import dagster as dg

from pipeline.launch import failure_causes  # noqa: F401 (the driver's failure lines; tests)


def _fail(label: str, took: float, causes: list[str]) -> NoReturn:
    """The failure, its causes as the last lines of stderr, exit status 1."""
    print(f"FAILED {label} after {took:.0f} s; the cause:\n" + "\n".join(causes), file=sys.stderr,
          flush=True)
    raise SystemExit(1)


STAGES = ["locate", "sweep", "bridge", "eval", "report"]  # bridge and eval: one job, bridge_eval


def plan(args: argparse.Namespace) -> tuple[list[int], list[str]]:
    """The layers to sweep and the baselines to compare, checked against the registry before
    anything runs; a ValueError names the valid values."""
    from dihal.config import MIN_SWEPT_LAYERS
    from dihal.profiles import ALL_LAYERS, load_profile
    from dihal.registry import BASELINES, get_spec

    n_layers = get_spec(args.backbone).n_layers  # UnknownBackboneError lists the known ones
    load_profile(args.profile)  # a ValueError names the profiles, or the field
    if args.workers < 1:
        raise ValueError(f"--workers {args.workers}: give at least 1")
    valid = f"{args.backbone} has {n_layers} layers, the candidate layers are 1..{n_layers - 1}"
    if args.sweep_count < MIN_SWEPT_LAYERS:
        raise ValueError(f"--sweep-count {args.sweep_count}: give at least {MIN_SWEPT_LAYERS} "
                         f"(bridgeability compares at least {MIN_SWEPT_LAYERS} layers; {valid})")
    if args.all_layers or (args.profile in ALL_LAYERS and not args.layers):
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


def _interrupted(*_) -> NoReturn:
    raise KeyboardInterrupt


class Chain:
    """The jobs of one backbone, launched through the instance and followed to the end."""

    def __init__(self, launch, say):
        self.launch, self.say = launch, say

    def job(self, name: str) -> None:
        self.follow(name, {name: self.launch.launch(name)})

    def backfill(self, name: str, partitions: list[str]) -> None:
        backfill_id, runs = self.launch.backfill(name, partitions)
        self.say(f"backfill {backfill_id} of {name}: {len(runs)} partitions "
                 f"({', '.join(partitions)}), at most {os.environ['DIHAL_WORKERS']} at a time")
        self.follow(f"{name} (backfill {backfill_id})", runs)

    def follow(self, label: str, runs: dict[str, str]) -> None:
        t0 = time.monotonic()
        done = self.launch.follow(runs, self.say)
        failed = [f for f in done if f.status != dg.DagsterRunStatus.SUCCESS]
        for f in done:
            if f.status == dg.DagsterRunStatus.SUCCESS and len(runs) > 1:
                took = f"{f.ended - f.started:.0f} s" if f.started else "?"
                self.say(f"  {f.label}: done in {took}" + (" (reused)" if f.cached else ""))
        if failed:
            causes = [c for f in failed for c in f.causes or [f"run {f.run_id} ended {f.status}"]]
            _fail(label, time.monotonic() - t0, causes)
        cached = sorted({c for f in done for c in f.cached})
        print(f"done {label} in {time.monotonic() - t0:.0f} s"
              + (f" (reused: {', '.join(cached)})" if cached else ""), flush=True)


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
    ap.add_argument("--workers", type=int, default=int(os.environ.get("DIHAL_WORKERS", "1")),
                    help="runs at once (sweep partitions, baselines); each step holds its own "
                         "GPU, or a share of the CPU cores (default: $DIHAL_WORKERS or 1)")
    ap.add_argument("--profile", default=os.environ.get("DIHAL_PROFILE", "cpu"),
                    help="cpu (default) | gpu | a JSON file of stage -> {field: value} "
                         "(dihal/profiles.py); gpu sweeps every layer unless --layers is given")
    ap.add_argument("--module", default="pipeline.definitions",
                    help="the Dagster code location (a Python module defining `defs`)")
    args = ap.parse_args(argv)
    try:
        layers, baselines = plan(args)
    except (UnknownBackboneError, ValueError) as exc:
        ap.error(str(exc))  # usage and the message on stderr, exit status 2; nothing ran
    # The code location (here, in the daemon and in every run) reads these at load time
    os.environ.update(DIHAL_PROFILE=args.profile, DIHAL_WORKERS=str(args.workers))
    if not os.environ.get("DAGSTER_HOME"):
        ap.error("DAGSTER_HOME is not set: runs go through a persistent Dagster instance. Run "
                 "`make run`, or `. ./env.sh` first.")
    instance = dg.DagsterInstance.get()
    signal.signal(signal.SIGTERM, _interrupted)
    # Ctrl-C cancels the runs in flight, even where the driver was started with SIGINT ignored
    # (a background job of a non-interactive shell inherits that, and Python then never raises
    # KeyboardInterrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from pipeline.launch import QueueStuck, daemon, launcher

    def say(msg: str) -> None:
        print(f"[dihal] {msg}", flush=True)

    t0 = time.monotonic()
    try:
        with daemon(instance, args.module, say), launcher(instance, args.module) as launch:
            _chain(Chain(launch, say), args, layers, baselines, say)
    except KeyboardInterrupt:
        print(f"INTERRUPTED after {time.monotonic() - t0:.0f} s: the runs in flight were canceled "
              "(see the web UI); run the same command again to resume (finished artifacts, "
              "dumped batches and training checkpoints are kept).", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    except QueueStuck as exc:
        _fail("the run queue", time.monotonic() - t0, [str(exc)])
    print(f"[dihal] finished in {time.monotonic() - t0:.0f} s")


def _chain(chain: Chain, args, layers: list[int], baselines: list[str], say) -> None:
    from resources import StorageResource
    from storage import Bridgeability, Comparison, Evaluation, LayerScore, Report, SamplerCurve

    b, layout = args.backbone, StorageResource().layout()
    last = STAGES.index(args.stop_after)
    say(f"backbone {b}, profile {args.profile}, {args.workers} worker(s): Locate")
    chain.job(f"locate_{b}")
    score = LayerScore(layout, b).require()
    say(f"l* = {score.info['l_star']} (by normalisation: {score.info['selected']})")
    if last >= STAGES.index("sweep"):
        say(f"bridge sweep over layers {layers}")
        chain.backfill(f"sweep_{b}", [str(ll) for ll in layers])
    if last >= STAGES.index("bridge"):
        say(f"bridgeability; the bridge at l* = {score.info['l_star']} (full budget); its eval")
        chain.job(f"bridge_eval_{b}")
        bness = Bridgeability(layout, b).require()
        by_loss = bness.info.get("oracle_by", {}).get("by", {}).get("val_loss")
        say(f"oracle layer (hybrid NLL) {bness.info['oracle']}, worst {bness.info['worst']}"
            + (f"; by val loss {by_loss['oracle']} and {by_loss['worst']}" if by_loss else ""))
        for row in bness.info["spearman"]:
            standing, diff = row.get("vs_depth_-val_loss"), row.get("diff_vs_depth_-val_loss")
            say(f"  {row['predictor']}: Spearman vs -val loss {row['spearman_vs_-val_loss']:.3f} "
                f"[{row.get('low_vs_-val_loss', float('nan')):.3f}, "
                f"{row.get('high_vs_-val_loss', float('nan')):.3f}]"
                + (f", {standing} {'from ' if standing.startswith('not') else ''}depth"
                   if standing else "")
                + (f" (paired difference {diff:+.3f}, Holm p "
                   f"{row.get('p_holm_vs_depth_-val_loss') or float('nan'):.3g})"
                   if diff is not None else ""))
        for row in Evaluation(layout, b).require().info["rows"]:
            say(", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in row.items()))
        for row in SamplerCurve(layout, b).require().info["rows"]:
            say(f"  sampler K={row['steps']}: hybrid NLL {row['hybrid_nll']:.4f}, reconstruction "
                f"error {row['recon_error']:.4f}, {row['ms_per_token']:.1f} ms/token")
    if last >= STAGES.index("report"):
        say(f"baselines {', '.join(baselines)} at DiHAL's budget")
        chain.backfill(f"baselines_{b}", baselines)
        say("comparison; full training at l*, the oracle and the worst layer; the report")
        chain.job(f"compare_{b}")
        for row in Comparison(layout, b).require().info["rows"]:
            say(f"{row['model']}: Gen.PPL {row['gen_ppl']:.2f}, diversity {row['diversity']:.4f}")
        say(f"report: {Report(layout, b).html}")
    say(f"artifacts under {layout.root}")


if __name__ == "__main__":
    main()
