"""The training-budget study of one backbone (budget_<b>): is it the method or the budget?

    python -m pipeline.budget --backbone smollm2                 # l*, a shallow, the middle, the last
    python -m pipeline.budget --layers 1,15 --budgets 128,512 --no-residual
    python -m pipeline.budget --dry-run                          # the plan and its estimate only
    python -m pipeline.budget --generation [--dry-run]           # DiHAL at l* and CoDAR generating

After a run that swept the layers (`make run`, or `python -m pipeline.main --stop-after
sweep`): it picks the study's layers from the layer score (or --layers), states the whole
study's time and disk, then materialises budget_<b> one layer partition after another through
`dagster asset materialize`, so each shows in the web UI with its lineage. Each layer states its
own estimate (with its tokens counted) and is refused before any training where it does not
fit. A layer interrupted resumes from the points it kept; a layer already made is reused. The
report made afterwards (`dagster asset materialize --select report_<b>`) shows the section "How
the answers move with the training budget". Refused before any work (exit status 1): a
layer score or a sweep bridge of a study layer not made, naming the command that makes it.

With --generation it materialises budget_generation_<b> instead (job budget_generate_<b>): DiHAL's
bridge at l* and CoDAR trained at the lowest and the highest budget on the study's training
sequences, each sampled and scored as the eval samples; it states its time and disk first (the
dry run stops there), resumes from the rows it kept, and the report shows them in the budget
section.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from dihal.errors import DihalError

NOT_THERE = 1


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers"
                                         ) from None
    if not values:
        raise argparse.ArgumentTypeError("give at least one value")
    return values


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m pipeline.budget", description=(
        "The training-budget study: the bridge, its ridge and network controls and our "
        "ridge-started variant at several budgets of training steps, per layer."))
    ap.add_argument("--backbone", default="smollm2")
    ap.add_argument("--layers", type=int_list, help="comma-separated candidate layers "
                    "(default: l*, one more shallow layer, the middle one and the last)")
    ap.add_argument("--budgets", type=int_list, help="comma-separated training steps "
                    "(default: the preset's, dihal.config.BudgetConfig)")
    ap.add_argument("--no-residual", action="store_true",
                    help="leave out our ridge-started residual bridge")
    ap.add_argument("--generation", action="store_true",
                    help="instead of the study's layers: DiHAL at l* and CoDAR trained at the "
                    "lowest and the highest budget, then sampled and scored "
                    "(budget_generation_<b>)")
    ap.add_argument("--dry-run", action="store_true", help="state the plan and its estimate only")
    return ap


def plan(backbone: str, layers: list[int] | None, cfg) -> tuple[list[int], object]:
    """The study's layers (checked: each a candidate with its sweep bridge made on the current
    hidden states) and its estimate before the tokens are counted."""
    from dihal.replace.budget import BudgetStudyConfig, default_study_layers, study_protocol
    from dihal.run.estimates import estimate_study
    from pipeline.hybrids import layout_of
    from storage import HiddenStates, LayerScore, Sequences, SweepBridge

    layout = layout_of()
    score, states, seqs = (LayerScore(layout, backbone), HiddenStates(layout, backbone),
                           Sequences(layout, backbone))
    sm, _, qm = score.require(), states.require(), seqs.require()
    attrs = states.reader().attrs
    n_layers = int(attrs["n_layers"])
    layers = layers or list(default_study_layers(int(sm.info["l_star"]), n_layers))
    protocols = [study_protocol(SweepBridge(layout, backbone, ll).require().config, cfg)
                 for ll in layers]
    protocol = protocols[0]
    study = BudgetStudyConfig(layers=tuple(layers), budgets=cfg.budgets, residual=cfg.residual)
    estimate = estimate_study(study, protocol, n_layers=n_layers, hidden=int(attrs["hidden_size"]),
                              seq_len=int(qm.config["seq_len"]), available=None,
                              sweep_sequences=int(qm.config["n_train"]),
                              stored="train" in states.reader().splits)
    return layers, estimate


def plan_generation(backbone: str, cfg) -> tuple[int, object]:
    """(l*, as the study picks it, with its sweep bridge made on the current hidden states;
    the estimate of generation at the budget's ends before the tokens are counted)."""
    from dihal.replace.budget import study_protocol
    from dihal.run.estimates import estimate_generation
    from pipeline.hybrids import layout_of
    from storage import HiddenStates, LayerScore, Sequences, SweepBridge

    layout = layout_of()
    sm, hm, qm = (LayerScore(layout, backbone).require(), HiddenStates(layout, backbone).require(),
                  Sequences(layout, backbone).require())
    layer = int(sm.info["l_star"])
    protocol = study_protocol(SweepBridge(layout, backbone, layer).require().config, cfg)
    estimate = estimate_generation(
        cfg, protocol, layer=layer, hidden=int(hm.info["backbone"]["hidden_size"]),
        vocab=int(hm.info["backbone"]["vocab_size"]), seq_len=int(qm.config["seq_len"]),
        available=None, sweep_sequences=int(qm.config["n_train"]),
        stored="train" in HiddenStates(layout, backbone).reader().splits)
    return layer, estimate


def materialize(backbone: str, layer: int | None, cfg, stage: str = "budget") -> int:
    """`dagster asset materialize` of `stage`'s asset of `backbone` with `cfg` as its run
    config: budget_<b>'s partition `layer`, or (layer None) the unpartitioned
    budget_generation_<b>. Its exit status."""
    from dataclasses import asdict

    from dihal.run.stages import asset_key

    asset = asset_key(stage, backbone)
    values = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(cfg).items()}
    config = {"ops": {asset: {"config": values}}}
    cmd = ["dagster", "asset", "materialize", "-m", "pipeline.definitions", "--select", asset,
           *(["--partition", str(layer)] if layer is not None else []),
           "--config-json", json.dumps(config)]
    what = f"layer {layer}" if layer is not None else "generation at l*"
    print(f"[budget] {what}: {' '.join(cmd[:8])} ...", file=sys.stderr, flush=True)
    return subprocess.run(cmd, cwd=Path(__file__).resolve().parents[1]).returncode


def generation(backbone: str, budgets: list[int] | None, dry_run: bool) -> int:
    """The --generation run: its plan and estimate, then budget_generation_<b> (its exit
    status; NOT_THERE where its inputs are not made)."""
    from dataclasses import replace

    from assets.configs import RUN_CONFIGS

    cfg = RUN_CONFIGS["budget_generation"]().to_dihal()  # the preset's
    try:
        cfg = replace(cfg, **({"budgets": tuple(budgets)} if budgets else {}))
        layer, estimate = plan_generation(backbone, cfg)
    except (DihalError, ValueError) as exc:
        print(f"python -m pipeline.budget: {exc}", file=sys.stderr)
        return NOT_THERE
    print(f"[budget] {backbone}: DiHAL at l* = {layer} and CoDAR at "
          f"{', '.join(map(str, cfg.ends))} steps, {cfg.n_samples} samples of {cfg.length} "
          f"tokens each; before its tokens are counted, {estimate.summary()}", file=sys.stderr,
          flush=True)
    if dry_run:
        return 0
    if (rc := materialize(backbone, None, cfg, "budget_generation")) != 0:
        print(f"python -m pipeline.budget: generation failed (exit status {rc}); the rows it "
              "made are kept: run the same command again to resume", file=sys.stderr)
        return rc
    print(f"[budget] done: `dagster asset materialize --select report_{backbone}` shows it in "
          "the report", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    from dataclasses import replace

    from assets.configs import RUN_CONFIGS

    args = build_parser().parse_args(argv)
    if args.generation:
        return generation(args.backbone, args.budgets, args.dry_run)
    cfg = RUN_CONFIGS["budget"]().to_dihal()  # the preset's
    try:
        cfg = replace(cfg, **({"budgets": tuple(args.budgets)} if args.budgets else {}),
                      **({"residual": False} if args.no_residual else {}))
        layers, estimate = plan(args.backbone, args.layers, cfg)
    except (DihalError, ValueError) as exc:
        print(f"python -m pipeline.budget: {exc}", file=sys.stderr)
        return NOT_THERE
    print(f"[budget] {args.backbone}: layers {layers}, budgets {list(cfg.budgets)} steps"
          f"{'' if cfg.residual else ', without the residual variant'}; before its tokens are "
          f"counted, {estimate.summary()}", file=sys.stderr, flush=True)
    if args.dry_run:
        return 0
    for layer in layers:
        if (rc := materialize(args.backbone, layer, cfg)) != 0:
            print(f"python -m pipeline.budget: layer {layer} failed (exit status {rc}); the "
                  "points it made are kept: run the same command again to resume",
                  file=sys.stderr)
            return rc
    print(f"[budget] done: `dagster asset materialize --select report_{args.backbone}` shows it "
          "in the report", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
