"""The bridgeability measurement sized by what it needs: a finished sweep's bridges and ridge
controls measured again (no retraining) on the first n of their held-out sequences and with K
sampler steps, for each (n, K) asked for; for each setting, the Spearman of its hybrid-NLL layer
ranking with the sweep's own measurement, the primary test's p and floor, the oracle and the
worst layer, the seconds of measuring, and whether every verdict of the bridgeability stage is
unchanged; then the smallest setting whose ranking agrees at least as well as a second training
seed's does and whose verdicts are unchanged (dihal.replace.sizing).

Reads the sweep (bridge_sweep_<b> and regression_sweep_<b> of every candidate layer, or of
--layers), the hidden states and the layer score under the artifact root, and writes no
artifact. After a default `make run` (about 30 minutes on 2 cores for SmolLM2's 29 layers at
the six default settings: an estimate from the layer profiled in benchmarks/RESULTS.md, whose
measurement took 18.5 s at (32, 16) and its ridge control's hybrid NLL 8.2 s):

    python benchmarks/measure_sizing.py --artifacts .dihal/artifacts --backbone smollm2 \\
        --sequences 32,16,8 --steps 16,8 --out sizing.json --out sizing.md
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from dihal.atomic import atomic_write_json, atomic_write_text
from dihal.errors import MissingArtifactError
from storage import (
    ArtifactLayout,
    Bridgeability,
    HiddenStates,
    LayerScore,
    RegressionControl,
    SweepBridge,
    regression_controls,
    swept_bridges,
)

WHOLE_SWEEP = "python -m pipeline.main --backbone {b} --stop-after sweep"


def int_list(text: str) -> list[int]:
    """'32,16,8' -> [32, 16, 8]; each an integer >= 1."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of integers") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give integers >= 1, e.g. 32,16,8")
    return values


def complete_sweep(layout: ArtifactLayout, backbone: str, layers: list[int] | None = None):
    """(the layers, their sweep bridges' manifests, the hidden states' reader) of a sweep
    whose every layer (`layers`, default every candidate layer of the dump) has a bridge made
    on the current hidden states and a ridge control made against that bridge; a
    MissingArtifactError naming each missing layer and the command that makes it otherwise."""
    states = HiddenStates(layout, backbone)
    hs = states.require()
    reader = states.reader()
    n_layers = reader.n_layers()
    wanted = sorted(set(layers or range(1, n_layers)))
    if bad := [ll for ll in wanted if not 1 <= ll <= n_layers - 1]:
        raise MissingArtifactError(f"layers {bad} are not candidate layers of {backbone} "
                                   f"(1..{n_layers - 1})")
    swept = {int(a.key): m for a, m in swept_bridges(layout, backbone, n_layers, hs)}
    controlled = {int(a.key) for a, _ in regression_controls(
        layout, backbone, [(SweepBridge(layout, backbone, ll), m) for ll, m in swept.items()])}
    no_bridge = [ll for ll in wanted if ll not in swept]
    no_control = [ll for ll in wanted if ll in swept and ll not in controlled]
    problems = []
    if no_bridge:
        problems.append(
            f"no sweep bridge made on the current hidden states for layers {no_bridge} (make "
            f"each: {SweepBridge(layout, backbone, no_bridge[0]).command()}, one --partition "
            "per layer)")
    if no_control:
        problems.append(
            f"no ridge control made against the current sweep bridge for layers {no_control} "
            f"(make each: {RegressionControl(layout, backbone, no_control[0]).command()}, one "
            "--partition per layer)")
    if problems:
        raise MissingArtifactError(
            f"the sweep of {backbone} under {layout.root} is incomplete: " + "; ".join(problems)
            + f". Or run the whole sweep: {WHOLE_SWEEP.format(b=backbone)}")
    return wanted, {ll: swept[ll] for ll in wanted}, reader


def loader(layout: ArtifactLayout, backbone: str) -> Callable[[int], object]:
    """layer -> its SavedLayer (the sweep bridge and its ridge control, checked as a stage
    reads them)."""
    from dihal.replace.sizing import SavedLayer

    return lambda ll: SavedLayer(SweepBridge(layout, backbone, ll).read(),
                                 RegressionControl(layout, backbone, ll).read())


def size(layout: ArtifactLayout, backbone: str, model, settings, *,
         layers: list[int] | None = None, agreement: float | None = None,
         progress: Callable[[str], None] | None = None, sweep=None):
    """The tool's core: the complete sweep of `backbone` under `layout` (`sweep`: what
    complete_sweep returned for it, else checked here) measured again at each setting with the
    loaded backbone `model`, compared with its own measurement
    (dihal.replace.sizing.SizingReport)."""
    from dihal.replace.sizing import full_setting, remeasure_sweep, size_measurement

    wanted, manifests, reader = sweep or complete_sweep(layout, backbone, layers)
    full = full_setting(m.config for m in manifests.values())
    score = LayerScore(layout, backbone)
    sm = score.require()
    measures = remeasure_sweep(model, reader, wanted, loader(layout, backbone), settings,
                               progress=progress)
    return size_measurement(measures, full, score.rows(), int(sm.info["l_star"]),
                            sm.config.get("primary_norm", "none"), agreement=agreement)


def recorded(layout: ArtifactLayout, backbone: str) -> str | None:
    """The run's own bridgeability as recorded (its primary test resamples the replicate
    seeds too), or None where it was not made."""
    m = Bridgeability(layout, backbone).manifest()
    if m is None or not m.info.get("primary"):
        return None
    p = m.info["primary"]
    return (f"The run's bridgeability as recorded (with its replicate seeds): primary test "
            f"{p['verdict']!r}, p {p['p']:.3g}, floor {p['p_min']:.3g}; oracle "
            f"{m.info['oracle']}, worst {m.info['worst']}.")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--artifacts", type=Path, default=Path(".dihal/artifacts"),
                    help="the artifact root (default .dihal/artifacts, make run's)")
    ap.add_argument("--backbone", default="smollm2")
    ap.add_argument("--sequences", type=int_list, default=[32, 16, 8],
                    help="held-out sequences of each setting (default 32,16,8)")
    ap.add_argument("--steps", type=int_list, default=[16, 8],
                    help="sampler steps K of each setting (default 16,8)")
    ap.add_argument("--layers", type=int_list, default=None,
                    help="the swept layers (default: every candidate layer)")
    ap.add_argument("--agreement", type=float, default=None,
                    help="the Spearman a setting must reach (default: the run's own seed "
                         "agreement over >= 7 layers, else 0.964)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, action="append", default=[],
                    help="also write the result: FILE.json (every number) or FILE.md (the "
                         "table); may be given twice")
    args = ap.parse_args(argv)
    if bad := [p for p in args.out if p.suffix not in (".json", ".md")]:
        ap.error(f"--out {bad[0]}: give a .json or a .md file")

    import torch

    from dihal.backbones import load_backbone
    from dihal.replace.sizing import markdown, settings_grid

    torch.set_num_threads(args.threads)
    layout = ArtifactLayout(args.artifacts)
    settings = settings_grid(args.sequences, args.steps)

    def log(line: str) -> None:
        print(f"[sizing] {line}", file=sys.stderr, flush=True)

    sweep = complete_sweep(layout, args.backbone, args.layers)  # before the backbone loads
    t0 = time.perf_counter()
    model = load_backbone(args.backbone, cache_dir=layout.model_cache(), device=args.device)
    log(f"{args.backbone} loaded in {time.perf_counter() - t0:.1f} s; {torch.get_num_threads()}"
        f" threads; settings {', '.join(s.label for s in settings)} (sequences, K)")
    report = size(layout, args.backbone, model, settings, agreement=args.agreement,
                  progress=log, sweep=sweep)
    text = markdown(report)
    if note := recorded(layout, args.backbone):
        text += "\n" + note + "\n"
    print(text)
    for path in args.out:
        if path.suffix == ".json":
            atomic_write_json(path, report.to_dict())
        else:
            atomic_write_text(path, text)


if __name__ == "__main__":
    main()
