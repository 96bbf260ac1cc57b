"""The main job on one backbone, end to end, through the Dagster instance: the named jobs of
pipeline.definitions are submitted to the run queue, the daemon launches them (the sweep as
--workers asset backfills over its layer partitions, each one run of consecutive layers, at
most --workers runs at once), and this command follows them and prints a summary. The runs,
the backfills and their logs show in the web UI.

    python -m pipeline.main                       # smollm2, the CPU default sweep
    python -m pipeline.main --workers 2           # the sweep in two runs at a time
    python -m pipeline.main --profile gpu         # every layer, 1M training tokens, bf16
    python -m pipeline.main --backbone llama --all-layers
    python -m pipeline.main --backbone mistralai/Mistral-7B-v0.3   # any supported HF model
    python -m pipeline.main --backbone /models/my-finetune        # a save_pretrained folder

Locate (corpus -> layer score), the bridge sweep over candidate layers (one partition each),
bridgeability, the bridge at l* and its evaluation, the baselines, the comparison and the
report. Every step reuses what is up to date.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import time
from typing import NoReturn

import dagster as dg

from dihal import environment
from dihal.errors import SettingError
from dihal.run.stages import DRIVER_STAGES, asset_key, job_name
from pipeline.launch import failure_causes  # noqa: F401 (the driver's failure lines; tests)


def _fail(label: str, took: float, causes: list[str]) -> NoReturn:
    """The failure, its causes as the last lines of stderr, exit status 1."""
    print(f"FAILED {label} after {took:.0f} s; the cause:\n" + "\n".join(causes), file=sys.stderr,
          flush=True)
    raise SystemExit(1)


STAGES = list(DRIVER_STAGES)  # the stage table's (dihal.run.stages): bridge and eval are one job


def _listed(option: str, text: str) -> list[str]:
    """The items of a comma-separated option: none empty, none twice, at least one."""
    items = [x.strip() for x in text.split(",")]
    if not text.strip() or any(not x for x in items):
        raise ValueError(f"{option} {text!r}: give a comma-separated list with no empty items")
    twice = sorted({x for x in items if items.count(x) > 1})
    if twice:
        raise ValueError(f"{option} {text}: {', '.join(twice)} given more than once")
    return items


def plan(args: argparse.Namespace) -> tuple[list[int], list[str]]:
    """Every argument's meaning, checked before any work: the layers to sweep and the baselines
    to compare, against the registry and against what the stages they feed need. A ValueError
    names the argument and the valid values. (`args.stop_after` is lowered to "sweep" where
    --skip-bridgeability is given.)"""
    from dihal.config import MIN_BRIDGEABILITY_LAYERS
    from dihal.registry import BASELINES, config_file_problem, get_spec
    from dihal.run.profiles import ALL_LAYERS, resolve_preset

    if (problem := config_file_problem()) is not None:  # dihal.toml not TOML, a misspelt key
        raise problem
    n_layers = get_spec(args.backbone).n_layers  # UnknownBackboneError lists the known ones
    # the one resolution every door uses; a ValueError names the presets, or the field
    args.profile = resolve_preset(args.profile).name
    if args.workers < 1:
        raise ValueError(f"--workers {args.workers}: give at least 1")
    valid = f"{args.backbone} has {n_layers} layers, the candidate layers are 1..{n_layers - 1}"
    if args.layers is not None and args.all_layers:
        raise ValueError(f"--layers {args.layers} and --all-layers: give one of them")
    if args.sweep_count is not None and (args.layers is not None or args.all_layers):
        raise ValueError(f"--sweep-count {args.sweep_count}: it sizes the default sweep; "
                         "drop it, or drop --layers / --all-layers")
    if args.sweep_count is not None and args.sweep_count < 1:
        raise ValueError(f"--sweep-count {args.sweep_count}: give at least 1 ({valid})")
    if args.layers is not None:
        items = _listed("--layers", args.layers)
        try:
            layers = [int(x) for x in items]
        except ValueError:
            raise ValueError(f"--layers {args.layers}: give comma-separated integers ({valid})"
                             ) from None
        bad = [ll for ll in layers if not 1 <= ll < n_layers]
        if bad:
            raise ValueError(f"--layers {args.layers}: {', '.join(map(str, bad))} out of range: "
                             f"{valid}")
        layers = sorted(layers)
    elif args.all_layers or (args.profile in ALL_LAYERS and args.sweep_count is None):
        layers = list(range(1, n_layers))
    else:  # --sweep-count sizes the sweep on every profile
        from dihal.replace.stage import default_sweep_layers

        layers = default_sweep_layers(n_layers, args.sweep_count or 10)
    if args.skip_bridgeability:
        args.stop_after = STAGES[min(STAGES.index(args.stop_after), STAGES.index("sweep"))]
    # bridgeability ranks the swept layers: with fewer, its Spearman takes a handful of values
    need = min(MIN_BRIDGEABILITY_LAYERS, n_layers - 1)
    if STAGES.index(args.stop_after) > STAGES.index("sweep") and len(layers) < need:
        raise ValueError(
            f"a sweep of {len(layers)} layer(s) ({', '.join(map(str, layers))}) feeds "
            f"bridgeability, which needs at least {need} distinct layers ({valid}): give more "
            "--layers (or --all-layers), or --skip-bridgeability (or --stop-after sweep) to "
            "sweep these only")
    baselines = _listed("--baselines", args.baselines)
    unknown = [x for x in baselines if x not in BASELINES]
    if unknown:
        raise ValueError(f"--baselines {args.baselines}: unknown {', '.join(unknown)}; the "
                         f"baselines are {', '.join(BASELINES)}")
    return layers, baselines


def seed_plan(args: argparse.Namespace, layers: list[int]) -> dict:
    """bridge_sweep's `seeds` and `seed_layers` for this run, checked against the swept
    `layers`: --seeds / --seed-layers where given; else, on a profile of
    dihal.run.profiles.SEED_SUBSET (cpu: 2 seeds on 4 layers, what fits its budget), its seeds on
    that many swept layers evenly spread, first and last included (default_seed_layers); else
    the profile's own bridge_sweep seeds and seed_layers (gpu: 3 on every layer). A
    ValueError names the flag and the fix."""
    from dihal.config import BridgeProtocol
    from dihal.replace.stage import default_seed_layers
    from dihal.run.profiles import SEED_SUBSET, resolve_preset

    base = BridgeProtocol(**resolve_preset(args.profile).stages.get("bridge_sweep", {}))
    subset = SEED_SUBSET.get(args.profile)
    if args.seeds is not None and args.seeds < 1:
        raise ValueError(f"--seeds {args.seeds}: give at least 1 (1: no replicate seeds)")
    seeds = args.seeds if args.seeds is not None else subset[0] if subset else base.seeds
    flag, given = "--seed-layers", args.seed_layers
    if given is not None and seeds == 1:
        raise ValueError(f"{flag} {given}: those layers would be trained under {seeds} seed; "
                         "give --seeds 2 or more with it, or drop it")
    if given is not None and given.strip() == "all":
        chosen: list[int] = []
    elif given is not None:
        items = _listed(flag, given)
        try:
            chosen = sorted(int(x) for x in items)
        except ValueError:
            raise ValueError(f"{flag} {given}: give comma-separated swept layers (integers), "
                             "or all") from None
    elif seeds == 1:
        chosen = []
    elif subset:
        chosen = default_seed_layers(layers, subset[1])
    else:
        chosen, flag, given = list(base.seed_layers), "the profile's bridge_sweep seed_layers", \
            ",".join(map(str, base.seed_layers))
    if bad := [ll for ll in chosen if ll not in layers]:
        raise ValueError(f"{flag} {given}: {', '.join(map(str, bad))} not swept (the swept "
                         f"layers are {', '.join(map(str, layers))}): give seed layers among "
                         "them, or add those to --layers")
    return {"seeds": seeds, "seed_layers": chosen}


def _preflight(args: argparse.Namespace, layers: list[int]) -> None:
    """Refuse, before any run, a run that would not fit (pipeline/preflight.py): the lines of
    dihal.run.preflight's refusals on stderr, exit status 2."""
    from dihal.errors import DihalError
    from dihal.run.preflight import PreflightError, require_folders
    from pipeline.preflight import folders, preflight

    try:
        require_folders(folders(args.module))  # a read-only or full DAGSTER_HOME or root
        preflight(args, layers, lambda msg: print(f"[dihal] {msg}", flush=True))
    except (PreflightError, DihalError) as exc:  # DihalError: a model folder without weights
        print(f"REFUSED: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


def _interrupted(*_) -> NoReturn:
    raise KeyboardInterrupt


class Chain:
    """The jobs of one backbone, launched through the instance and followed to the end."""

    def __init__(self, launch, say):
        self.launch, self.say = launch, say

    def job(self, name: str) -> None:
        self.follow(name, {name: self.launch.launch(name)})

    def backfill(self, name: str, partitions: list[str]) -> None:
        """The job's assets over `partitions`, as min(workers, partitions) asset backfills of
        consecutive partitions (each one run: it loads the backbone once), followed to the
        end."""
        ids = self.launch.backfill(name, partitions)
        self.say(f"{name}: {len(partitions)} partitions ({', '.join(partitions)}) as "
                 f"{len(ids)} backfill(s) of consecutive partitions ({', '.join(ids)}), at "
                 f"most {self.launch.workers} runs at a time")
        self.follow(f"{name} (backfill {', '.join(ids)})", {}, ids)

    def follow(self, label: str, runs: dict[str, str], backfills: list[str] | None = None) -> None:
        t0 = time.monotonic()
        done = self.launch.follow(runs, self.say, backfills=backfills or ())
        failed = [f for f in done if f.failed]
        for f in done:
            if f.status == dg.DagsterRunStatus.SUCCESS and (len(runs) > 1 or backfills):
                took = f"{f.ended - f.started:.0f} s" if f.started else "?"
                self.say(f"  {f.label}: done in {took}" + (" (reused)" if f.cached else ""))
        if failed:
            causes = [c for f in failed for c in f.causes or [f"run {f.run_id} ended {f.status}"]]
            _fail(label, time.monotonic() - t0, causes)
        cached = sorted({c for f in done for c in f.cached})
        print(f"done {label} in {time.monotonic() - t0:.0f} s"
              + (f" (reused: {', '.join(cached)})" if cached else ""), flush=True)


# dihal.backbones.DEVICE_MAPS, from the torch-free module that owns them (--help needs no torch)
DEVICE_MAP_CHOICES = environment.DEVICE_MAPS


def build_parser() -> argparse.ArgumentParser:
    from dihal.registry import BASELINES

    ap = argparse.ArgumentParser(prog="python -m pipeline.main", description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--backbone", default="smollm2",
                    help="a backbone name (built-in or declared in dihal.toml), or a Hugging "
                         "Face id / local folder of a supported decoder LM (declared for this "
                         "run, named after its last part, with a hash of its path or id "
                         "where another model holds that name)")
    ap.add_argument("--layers", help="comma-separated candidate layers to sweep (1..N-1)")
    ap.add_argument("--sweep-count", type=int, default=None,
                    help="layers in the default sweep (1, 2, 3, then evenly spaced; 10)")
    ap.add_argument("--all-layers", action="store_true", help="sweep every candidate layer")
    ap.add_argument("--seeds", type=int, default=None,
                    help="training seeds per seed layer of the sweep (default: the cpu profile "
                         "2, on 4 swept layers; gpu 3, on every layer)")
    ap.add_argument("--seed-layers",
                    help="comma-separated swept layers trained under --seeds, or all (default "
                         "on cpu: 4 of the swept layers, evenly spread, first and last included)")
    ap.add_argument("--stop-after", choices=STAGES, default="report")
    ap.add_argument("--skip-bridgeability", action="store_true",
                    help="sweep fewer layers than bridgeability needs (dihal.config."
                         "MIN_BRIDGEABILITY_LAYERS) and stop after the sweep")
    ap.add_argument("--baselines", default=",".join(BASELINES),
                    help="comma-separated baselines for the comparison")
    ap.add_argument("--workers", type=int,
                    help="runs at once (sweep partitions, baselines); each step holds its own "
                         "GPU, or a share of the CPU cores (default: $DIHAL_WORKERS or 1)")
    ap.add_argument("--profile", default=None,
                    help="the preset: cpu | gpu | gpu-smollm2 | tiny | a JSON file of stage -> "
                         "{field: value} (dihal/run/profiles.py); default: the one chosen for the "
                         "instance or project ($DIHAL_PROFILE, $DAGSTER_HOME/dihal-preset, "
                         "dihal.toml's preset), else cpu; gpu sweeps every layer unless --layers "
                         "is given")
    ap.add_argument("--device-map", choices=DEVICE_MAP_CHOICES,
                    help="spread the backbone over this host's GPUs (accelerate's device_map; "
                         "default: one device). Recorded in the dump's backbone info and "
                         "carried in every run's config")
    from pipeline.daemon import project_location
    from pipeline.dagster_daemon import backfill_interval_s

    ap.add_argument("--module", default=project_location()[0],
                    help="the Dagster code location (a Python module defining `defs`; default: "
                         "pyproject's [tool.dagster], which `dagster dev` and `dg dev` serve)")
    try:  # the defaults taken from the environment, refused like a wrong argument (--help too)
        ap.set_defaults(workers=environment.workers(), device_map=environment.device_map())
        backfill_interval_s()  # the daemon's, which the driver may start
    except SettingError as exc:
        ap.error(str(exc))
    return ap


def main(argv: list[str] | None = None) -> None:
    from dihal import heap

    heap.use_in_this_process()  # the garbage collector's settings of dihal's processes
    ap = build_parser()
    from pipeline.daemon import open_instance
    from pipeline.private_tmp import private_tmpdir

    args, layers, baselines, seeds = _checked(ap, argv)
    private_tmpdir()  # the code servers' Unix sockets where no other user can reach them
    instance = open_instance()  # safe beside another driver starting on a fresh DAGSTER_HOME
    _refuse_run_only_declaration(ap, args, instance)
    _record_model(ap, args.backbone)
    if args.backbone_note:  # which name a folder or id runs under, and why
        print(f"[dihal] {args.backbone_note}", flush=True)
    signal.signal(signal.SIGTERM, _interrupted)
    # Ctrl-C cancels the runs in flight, even where the driver was started with SIGINT ignored
    # (a background job of a non-interactive shell inherits that, and Python then never raises
    # KeyboardInterrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _drive(instance, args, argv, layers, baselines, seeds)


def _checked(ap: argparse.ArgumentParser, argv: list[str] | None):
    """(args, layers, baselines, sweep seeds): every check before any work happens here, and
    nothing runs on a refused command (usage and the message on stderr, exit status 2). Sets
    the environment the code location reads when the driver imports it
    (set_location_environment)."""
    from dihal.errors import DihalError
    from dihal.registry import declare_model
    from dihal.run.profiles import resolve_preset

    args = ap.parse_args(argv)
    try:
        args.profile = resolve_preset(args.profile).name  # as plan() resolves it
        set_location_environment(args)
        # $DIHAL_BACKBONE_MODELS for the daemon; a name another model holds is made unique
        recorded = artifact_layout().recorded_model
        args.backbone, args.backbone_note = declare_model(args.backbone, recorded)
        layers, baselines = plan(args)
        seeds = seed_plan(args, layers)
    except (DihalError, ValueError) as exc:
        ap.error(str(exc))
    if not os.environ.get("DAGSTER_HOME"):
        ap.error("DAGSTER_HOME is not set: runs go through a persistent Dagster instance. Run "
                 "`make run`, or `. ./env.sh` first.")
    _preflight(args, layers)  # the preset, backbone and workers must fit this host
    return args, layers, baselines, seeds


def set_location_environment(args: argparse.Namespace) -> None:
    """This run's profile, workers and device map in the environment, before anything imports
    the code location: the driver loads it in process (pipeline.launch.launcher), its config
    defaults are read when it is imported and become this profile's, and every run is
    submitted with them spelled out, so that a daemon or worker started under another profile
    runs what was asked here (the launcher refuses defaults read under another environment:
    pipeline.location.stale_defaults)."""
    os.environ.update(DIHAL_PROFILE=args.profile, DIHAL_WORKERS=str(args.workers))
    if args.device_map:  # the backbone resource's default
        os.environ["DIHAL_DEVICE_MAP"] = args.device_map


def preset_label(profile: str) -> str:
    """The label `profile` is recorded under (dihal.run.profiles.Preset.label)."""
    from dihal.run.profiles import resolve_preset

    return resolve_preset(profile).label


def artifact_layout():
    """The artifact root's layout (the storage resource's)."""
    from resources import StorageResource

    return StorageResource().layout()


def _record_model(ap: argparse.ArgumentParser, backbone: str) -> None:
    """Record which model a declared backbone's artifacts are made from, so that another
    folder or id whose derived name is the same gets another name (registry.declare_model)."""
    from dihal.errors import DihalError
    from dihal.registry import BACKBONES, get_spec

    if backbone in BACKBONES:
        return
    layout = artifact_layout()
    try:
        layout.record_model(backbone, get_spec(backbone).hf_id)
    except (DihalError, OSError) as exc:
        ap.error(f"--backbone {backbone}: the artifact root {layout.root} cannot record its "
                 f"model ({exc})")


def _refuse_run_only_declaration(ap: argparse.ArgumentParser, args, instance) -> None:
    """A backbone declared by --backbone for this run only is unknown to a daemon already
    running (dagster dev): refuse, saying how to declare it for both."""
    from dihal.registry import declared_by_flag
    from pipeline.daemon import daemon_alive

    by_flag = {e.get("name") for e in declared_by_flag()}
    if args.backbone in by_flag and daemon_alive(instance):
        ap.error(f"--backbone declared {args.backbone!r} for this run only, but a Dagster "
                 "daemon is already running (dagster dev) and its code location does not know "
                 "it: declare the model in dihal.toml ([backbones] table) and restart it, or "
                 "stop it.")


def _drive(instance, args, argv: list[str] | None, layers, baselines, seeds) -> None:
    """The chain through the daemon and the run queue, with its summary; an interrupt cancels
    the runs in flight and says how to resume."""
    from pipeline.daemon import QueueStuck, daemon, driver_tag
    from pipeline.launch import launcher

    def say(msg: str) -> None:
        print(f"[dihal] {msg}", flush=True)

    t0 = time.monotonic()
    try:
        tag = driver_tag()
        # the command a fix in an error message points to: it carries this run config
        command = shlex.join([os.path.basename(sys.executable), "-m", "pipeline.main",
                              *(sys.argv[1:] if argv is None else argv)])
        with daemon(instance, args.module, say, tag) as lease, launcher(
                instance, args.module, workers=args.workers,
                tags={"dihal/profile": args.profile, "dihal/driver": tag,
                      "dihal/command": command},
                ops={asset_key("bridge_sweep", args.backbone): {"config": seeds}}) as launch:
            launch.revive = lease.revive  # a daemon killed meanwhile is replaced, not waited on
            _chain(Chain(launch, say), args, layers, baselines, say, seeds)
    except KeyboardInterrupt:
        print(f"INTERRUPTED after {time.monotonic() - t0:.0f} s: the runs in flight were canceled "
              "(see the web UI); run the same command again to resume (finished artifacts, "
              "dumped batches and training checkpoints are kept).", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    except QueueStuck as exc:
        _fail("the run queue", time.monotonic() - t0, [str(exc)])
    print(f"[dihal] finished in {time.monotonic() - t0:.0f} s")



def bridgeability_lines(info: dict) -> list[str]:
    """The driver's lines on bridgeability, from its typed rows: the pre-registered primary
    test first (with the floor the design puts on its p-value), then each predictor's Spearman
    against -val loss with its interval and standing against depth, marked exploratory."""
    from dihal.rows import PrimaryTest, spearman_rows

    out = []
    if primary := PrimaryTest.from_dict(info.get("primary")):
        out.append(f"  primary test: {primary.predictor} vs depth on -{primary.target}, "
                   f"Spearman {primary.rho:+.3f} against {primary.rho_reference:+.3f}, one-sided "
                   f"p {primary.p:.3g} (the design's floor {primary.p_min:.3g} at "
                   f"{primary.layers} layers): {primary.verdict}")
    for row in spearman_rows(info["spearman"]):
        s = row.of("val_loss")
        if s is None:
            continue
        rho, low, high = (float("nan") if v is None else v for v in s.interval())
        diff = s.difference()[0]
        out.append(f"  {row.predictor}: Spearman vs -val loss {rho:.3f} [{low:.3f}, {high:.3f}]"
                   + (f", {s.vs_depth} {'from ' if s.vs_depth.startswith('not') else ''}depth"
                      if s.vs_depth else "")
                   + (f" (exploratory: paired difference {diff:+.3f}, Holm p "
                      f"{s.p_holm if s.p_holm is not None else float('nan'):.3g})"
                      if diff is not None else ""))
    return out

def eval_line(row: dict) -> str:
    """One generation row as the driver prints it: Gen.PPL with its interval, diversity, the
    mean length, ms per token, and its paired standing against DiHAL where it has one (the
    per-sample lists and the rest stay in the artifact and the report)."""
    def num(k: str, fmt: str = ".4g") -> str:
        v = row.get(k)
        return "n/a" if v is None else format(v, fmt)

    line = (f"  {row['model']}: Gen.PPL {num('gen_ppl', '.1f')} [{num('gen_ppl_low', '.1f')}, "
            f"{num('gen_ppl_high', '.1f')}], diversity {num('diversity', '.3f')}, mean length "
            f"{num('mean_length', '.1f')} words, {num('ms_per_token', '.2f')} ms/token")
    if row.get("dihal_verdict"):
        line += f"; DiHAL's log Gen.PPL minus this: {num('dihal_log_ppl_diff', '+.3f')} " \
                f"[{num('dihal_log_ppl_diff_low', '+.3f')}, " \
                f"{num('dihal_log_ppl_diff_high', '+.3f')}] ({row['dihal_verdict']})"
    return line


def seed_line(seeds: dict, layers: list[int]) -> str:
    """What the driver says of the sweep's training seeds."""
    if seeds["seeds"] == 1:
        return "one training seed per swept layer"
    where = seeds["seed_layers"] or layers
    rest = "" if len(where) == len(layers) else "; 1 on the others"
    return f"{seeds['seeds']} training seeds on layers {', '.join(map(str, where))}{rest}"


def _chain(chain: Chain, args, layers: list[int], baselines: list[str], say,
           seeds: dict) -> None:
    from dihal.results import SamplerCurveResult
    from storage import Bridgeability, Comparison, Evaluation, LayerScore, Report, SamplerCurve

    b, layout = args.backbone, artifact_layout()
    last = STAGES.index(args.stop_after)
    label = preset_label(args.profile)  # a JSON file's: its name and content digest
    profile = args.profile if label == args.profile else f"{args.profile} (label {label})"
    say(f"backbone {b}, profile {profile}, {args.workers} worker(s): Locate")
    if args.skip_bridgeability:
        say("--skip-bridgeability: the chain stops after the sweep")
    chain.job(job_name("locate", b))
    score = LayerScore(layout, b).require()
    say(f"l* = {score.info['l_star']} (by normalisation: {score.info['selected']})")
    if last >= STAGES.index("sweep"):
        say(f"bridge sweep over layers {layers}, {seed_line(seeds, layers)}")
        chain.backfill(job_name("sweep", b), [str(ll) for ll in layers])
    if last >= STAGES.index("bridge"):
        say(f"bridgeability; the bridge at l* = {score.info['l_star']} (full budget); its eval")
        chain.job(job_name("bridge_eval", b))
        bness = Bridgeability(layout, b).require()
        by_loss = bness.info.get("oracle_by", {}).get("by", {}).get("val_loss")
        say(f"oracle layer (hybrid NLL) {bness.info['oracle']}, worst {bness.info['worst']}"
            + (f"; by val loss {by_loss['oracle']} and {by_loss['worst']}" if by_loss else ""))
        for line in bridgeability_lines(bness.info):
            say(line)
        for row in Evaluation(layout, b).require().info["rows"]:
            say(eval_line(row))
        for p in SamplerCurveResult.from_dict(SamplerCurve(layout, b).require().info).rows:
            say(f"  sampler K={p.sampler_steps} ({p.rule}): hybrid NLL {p.hybrid_nll:.4f}, reconstruction "
                f"error {p.recon_error:.4f}, {p.ms_per_token:.1f} ms/token")
    if last >= STAGES.index("report"):
        say(f"baselines {', '.join(baselines)} at DiHAL's budget")
        chain.backfill(job_name("baselines", b), baselines)
        say("comparison; full training at l*, the oracle and the worst layer; the report")
        chain.job(job_name("compare", b))
        cmp_ = Comparison(layout, b).require().info
        for row in cmp_["rows"]:
            say(f"{row['model']}: Gen.PPL {row['gen_ppl']:.2f}, diversity {row['diversity']:.4f}")
        from dihal.evaluate.frontier import frontier_sentence

        say(f"temperature frontier: {frontier_sentence(cmp_.get('frontier', []))}")
        say(f"report: {Report(layout, b).html}")
    say(f"artifacts under {layout.root}")


if __name__ == "__main__":
    main()
