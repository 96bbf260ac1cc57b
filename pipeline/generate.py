"""The command-line door to a trained hybrid (docs/api.md): prompt the backbone, DiHAL's hybrid
and, on request, its ridge and layer-drop controls, and read their continuations side by side
with each one's time per token.

    python -m pipeline.generate --backbone smollm2 --prompt "The weather today"
    python -m pipeline.generate --prompt "Once upon a time" --prompt "The river" \\
        --max-new-tokens 48 --do-sample --temperature 0.8 --top-p 0.95 --seed 1 --ridge

It reads what the pipeline made (after `make run`: the bridge at l*; `--layer L`: the sweep's
bridge of layer L) from the artifact root ($DIHAL_ARTIFACTS, else .dihal/artifacts) and
trains nothing. Refused before any work, with the reason and the fix on stderr: an unknown
backbone, a bad value, a prompt longer than a model takes (exit status 2); a bridge or control
that was never made (naming the command that makes it), another backbone's bridge, a damaged
artifact (exit status 1). Progress goes to stderr, the continuations to stdout. No Dagster.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time

from dihal.errors import DihalError, UnknownBackboneError

REFUSED_INPUT = 2  # the command's own input is wrong (argparse's status)
NOT_THERE = 1  # what it needs is missing, damaged, or another backbone's


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m pipeline.generate",
        description="Continue prompts with the backbone and its trained DiHAL hybrid (and, on "
                    "request, the ridge and layer-drop controls), side by side, with the time "
                    "per token of each. Reads the artifacts `make run` made; trains nothing.")
    ap.add_argument("--backbone", default="smollm2",
                    help="backbone name (or the Hugging Face id or folder the driver was given)")
    ap.add_argument("--prompt", action="append", required=True,
                    help="a prompt (give it again for more; '' samples from the BOS alone)")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--do-sample", action="store_true",
                    help="sample (temperature, top-p, seed) instead of greedy decoding")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sampler-steps", type=int, default=None,
                    help="the bridge sampler's steps K (default: the bridge's protocol's)")
    ap.add_argument("--rule", choices=("ancestral", "marginal"), default=None,
                    help="the bridge sampler's update rule (default: ancestral)")
    ap.add_argument("--layer", type=int, default=None,
                    help="the sweep's bridge of this layer instead of the bridge at l*")
    ap.add_argument("--ridge", action="store_true",
                    help="add the ridge hybrid (regression_sweep's ridge map at the same layer)")
    ap.add_argument("--layer-drop", action="store_true",
                    help="add the layer-drop hybrid (hs[0] straight into block l)")
    ap.add_argument("--root", default=None,
                    help="artifact root (default: $DIHAL_ARTIFACTS, else .dihal/artifacts)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
    ap.add_argument("--width", type=int, default=None,
                    help="output width in characters (default: the terminal's)")
    return ap


def say(msg: str) -> None:
    print(f"[dihal] {msg}", file=sys.stderr, flush=True)


def checked_name(args: argparse.Namespace) -> str:
    """The backbone's name, once every value of the command is known to be valid."""
    from dihal.api import SamplingConfig
    from dihal.registry import get_spec
    from pipeline.hybrids import backbone_name

    SamplingConfig(args.max_new_tokens, args.do_sample, args.temperature, args.top_p, args.seed)
    if args.sampler_steps is not None and args.sampler_steps < 1:
        raise ValueError(f"--sampler-steps {args.sampler_steps}: the bridge sampler takes at least "
                         "1 step")
    name = backbone_name(args.backbone, args.root)
    n_layers = get_spec(name).n_layers
    if args.layer is not None and not 1 <= args.layer <= n_layers - 1:
        raise ValueError(f"--layer {args.layer}: the candidate layers of {name} are 1.."
                         f"{n_layers - 1}")
    return name


def models_of(args: argparse.Namespace, name: str) -> list:
    """The backbone, the hybrid and the controls asked for; what is read from the artifact root
    is found there before the backbone is loaded."""
    from dihal.api import DihalHybrid, control_model
    from pipeline.hybrids import (
        bridge_artifact,
        load_named_backbone,
        read_ridge,
        read_trained,
        what_bridge,
    )

    trained = read_trained(bridge_artifact(name, args.root, args.layer), what_bridge(args.layer))
    ridge = read_ridge(name, trained.layer, args.root) if args.ridge else None
    say(f"{what_bridge(args.layer)} of {name}: layer {trained.layer}, K = "
        f"{trained.hparams.protocol.sampler_steps}")
    backbone = load_named_backbone(name, args.root, device=args.device, progress=say)
    hybrid = DihalHybrid(backbone, trained, sampler_steps=args.sampler_steps, rule=args.rule)
    models = [hybrid.backbone_model(), hybrid]
    if ridge is not None:
        models.append(control_model(backbone, ridge))
    if args.layer_drop:
        models.append(hybrid.layer_drop())
    return models


def run(args: argparse.Namespace) -> str:
    """The side-by-side text of the command's models; every refusal raises before the first
    token is generated."""
    from dihal.api import compare, side_by_side

    t0 = time.monotonic()
    name = checked_name(args)
    models = models_of(args, name)
    say(f"ready in {time.monotonic() - t0:.1f} s: " + ", ".join(m.name for m in models))
    gens = compare(models, args.prompt, max_new_tokens=args.max_new_tokens,
                   do_sample=args.do_sample, temperature=args.temperature, top_p=args.top_p,
                   seed=args.seed, progress=say)
    how = (f"sampled at temperature {args.temperature:g}, top_p {args.top_p:g}, seed {args.seed}"
           if args.do_sample else "greedy")
    width = args.width or shutil.get_terminal_size((120, 24)).columns
    backbone = models[0].backbone
    return (f"{name}, {args.max_new_tokens} new tokens at most, {how}; ms/token: wall time of "
            f"the decoding loop per generated token on {backbone.device}\n\n"
            + side_by_side(gens, backbone.tokenizer, width=width))


def main(argv: list[str] | None = None) -> int:
    """Parse, run, print; the exit status (0, or a refusal's: status_of)."""
    args = build_parser().parse_args(argv)
    try:
        text = run(args)
    except (DihalError, ValueError) as exc:
        print(f"python -m pipeline.generate: error: {exc}", file=sys.stderr, flush=True)
        return status_of(exc)
    print(text, flush=True)
    return 0


def status_of(exc: Exception) -> int:
    """REFUSED_INPUT for the command's own input (an unknown backbone, a value out of range, a
    prompt longer than a model takes), NOT_THERE for what it needs (a bridge never made,
    another backbone's bridge, missing weights, a damaged artifact)."""
    from dihal.api import BackboneMismatchError

    if isinstance(exc, UnknownBackboneError) or (isinstance(exc, ValueError)
                                                 and not isinstance(exc, BackboneMismatchError)):
        return REFUSED_INPUT
    return NOT_THERE


if __name__ == "__main__":
    raise SystemExit(main())
