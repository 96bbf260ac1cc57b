"""The report's section "The paper's claims at this run's scale": one row per claim of the
DiHAL paper, with the paper's figure (dihal.report.paper: data/paper_claims.json, where the
paper's figures live with their source, never in code), this run's figure with its interval, a
verdict computed from the numbers, and both scales.

A verdict is one of four: the claim holds, it does not hold, the design cannot decide at this
scale (its floor given: the interval's width, the samples a test would need), or the input it
needs was not measured (the row names what is missing). Each reads the tests the report
already runs: l*'s resample range (section 1), the Spearman interval of bridgeability (2),
the generation pairs with their Holm-corrected p and the diversity intervals (3), the
full-training pairs of roles (4), the cost table's rounds (3b). Where a test cannot tell two
models apart, the paper's own gap decides between "does not hold" and "cannot decide": the
run could have seen a gap that large (enough samples for 80 % power, or intervals narrower
than it) or not. Each rule is the docstring of its claim's function.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from dihal.evaluate.ppl_difference import samples_for_effect
from dihal.generation_inputs import FullTrainingRow
from dihal.generation_rows import GenerationRow
from dihal.labels import BACKBONE, BASELINE, DIHAL
from dihal.report.common import BRIDGEABILITY, COST, FULL, GENERATION, LOCATE
from dihal.report.cost import timed_row, timing_text
from dihal.report.document import Document
from dihal.report.generation import fails_more, generation_pairs, samples_over
from dihal.report.inputs import ReportInputs
from dihal.report.paper import PaperClaims, load_paper_claims
from dihal.rows import DEPTH, Estimate, or_none

CLAIMS = "paper-claims"  # the section's anchor

HOLDS, FAILS, UNDECIDED, MISSING = (
    "holds", "does not hold", "the design cannot decide at this scale", "not measured")
# a row's verdict from its parts: the first of these that any part has
PRECEDENCE = (FAILS, MISSING, UNDECIDED, HOLDS)
NOT_STATED = "not stated in what we have of the paper"


# ----------------------------------------------------------------------- the rows and parts


@dataclass(frozen=True)
class Part:
    """One measured piece of a claim (DiHAL against one baseline on one metric, ...): what
    this run measured, its outcome (one of the four verdicts) and why."""

    name: str
    run: str
    outcome: str
    why: str


@dataclass(frozen=True)
class ClaimRow:
    """One claim: the paper's figure, this run's, the verdict and the rule that gave it, both
    scales, the section with the evidence, and the parts the verdict combines."""

    claim: str
    paper: str
    run: str
    verdict: str
    why: str
    paper_scale: str
    run_scale: str
    section: str
    parts: list[Part] = field(default_factory=list)

    def to_dict(self) -> dict[str, str]:
        return dict(zip(COLUMNS, (self.claim, self.paper, self.run, self.verdict, self.why,
                                  self.paper_scale, self.run_scale, self.section), strict=True))


COLUMNS = ("claim", "the paper", "this run [95 %]", "verdict", "how decided",
           "the paper's scale", "this run's scale", "evidence")


def combine(parts: list[Part]) -> str:
    """A row's verdict from its parts: does not hold where any part does not; else not
    measured where any input is missing; else undecided where any part is; else holds."""
    outcomes = {p.outcome for p in parts}
    return next((v for v in PRECEDENCE if v in outcomes), MISSING)


# ------------------------------------------------------------------------------ the scales


def backbone_parameters(x: ReportInputs) -> int | None:
    """The backbone's parameter count as the dump recorded it (Backbone.info()'s
    n_parameters), None where the inputs do not carry it."""
    return x.backbone_info.n_parameters


def parameters_text(n: int | None) -> str:
    if n is None:
        return "parameters not in the report's inputs"
    if n >= 1e9:
        return f"{n / 1e9:.2f}B parameters"
    return f"{n / 1e6:.0f}M parameters" if n >= 1e6 else f"{n:,} parameters"


def _dihal_row(x: ReportInputs) -> GenerationRow | None:
    return next((r for r in x.comparison.rows if r.role == DIHAL), None)


def _sweep_steps(x: ReportInputs) -> str:
    steps = sorted({int(s.train_steps) for s in x.bridges.layers if s.train_steps is not None})
    return (f"{'/'.join(map(str, steps))} training steps per swept bridge" if steps
            else "the swept bridges' training steps not recorded")


def _full_steps(dihal: GenerationRow | None, full: FullTrainingRow | None) -> str:
    """The steps of the bridge at l* with the full budget, as the comparison recorded them,
    and of each full-training bridge (l*'s), as full training recorded them."""
    text = ("the full budget's steps not recorded" if dihal is None or or_none(dihal.train_steps) is None
            else f"{int(dihal.train_steps):,} for the bridge at l* (full budget)")
    if full is not None and or_none(full.train_steps) is not None:
        text += f"; {int(full.train_steps):,} per full-training bridge"
    return text


def _tokens(n: Any, absent: str = "not recorded") -> str:
    return f"{int(n):,}" if n is not None else absent


def _this_backbone(x: ReportInputs) -> str:
    bb = x.backbone_info
    return f"{bb.hf_id}: {bb.n_layers} layers, {parameters_text(backbone_parameters(x))}"


def _paper_backbones(p: PaperClaims, keys: list[str] | None = None) -> str:
    return "; ".join(f"{b.name} ({b.n_layers} layers, {parameters_text(b.n_parameters)})"
                     for k, b in p.backbones.items() if keys is None or k in keys)


def _paper_budget(p: PaperClaims) -> str:
    if p.train_tokens is None and p.train_steps is None:
        return "the bridges' training tokens and steps not stated"
    return (f"bridge training tokens: {_tokens(p.train_tokens, NOT_STATED)}; steps: "
            f"{_tokens(p.train_steps, NOT_STATED)}")


def scale_table(x: ReportInputs, p: PaperClaims) -> list[dict]:
    """The two scales side by side: backbone, parameters, layers, the bridge's training
    tokens and steps (the paper's from the data file; null there: not stated)."""
    dihal = _dihal_row(x)
    full = {r.role: r for r in x.full_training.trained()}.get("geometry l*")
    tokens = f"{_tokens(or_none(dihal.train_tokens) if dihal else None)} (the bridge at l*, full budget)"
    if full is not None and or_none(full.train_tokens) is not None:
        tokens += f"; {int(full.train_tokens):,} per full-training bridge"
    bb, n = x.backbone_info, backbone_parameters(x)
    rows = (("backbone", lambda b: b.name, bb.hf_id),
            ("parameters", lambda b: f"{b.n_parameters:,}",
             _tokens(n, "not in the report's inputs")),
            ("decoder layers", lambda b: b.n_layers, bb.n_layers),
            ("bridge training tokens", lambda b: _tokens(p.train_tokens, NOT_STATED), tokens),
            ("bridge training steps", lambda b: _tokens(p.train_steps, NOT_STATED),
             _sweep_steps(x) + "; " + _full_steps(dihal, full)))
    return [{"scale": label, **{f"the paper, {b.name}": paper(b) for b in p.backbones.values()},
             "this run": run} for label, paper, run in rows]


# -------------------------------------------------------------------------- claim 1: l*


def _l_star_range(x: ReportInputs) -> tuple[int, int, str] | None:
    """l*'s 95 % range over resamples: of whole sequences where run, else of the tokens under
    the primary normalisation; None where neither was run."""
    score = x.locate.score
    if b := score.sequence_stability.bootstrap:
        return b.low, b.high, f"95 % range [{b.low}, {b.high}] over {b.replicates} resamples " \
                              "of whole sequences"
    if t := score.stability.get(x.configs.primary_norm):
        return t.low, t.high, f"95 % range [{t.low}, {t.high}] over {t.replicates} resamples " \
                              "of the tokens"
    return None


def claim_l_star(x: ReportInputs, p: PaperClaims) -> ClaimRow:
    """l* near the embedding. Near means l*/N at most the deepest the paper reports (3 of 32
    layers). Holds where the whole 95 % range of l* over resamples is within that depth; does
    not hold where the whole range is beyond it; the design cannot decide where the range
    straddles it. With no resample range, l* itself decides, and the row says so."""
    n, l_star = int(x.backbone_info.n_layers), int(x.locate.score.l_star)
    bound = p.near_embedding
    deepest = math.floor(bound * n)  # the deepest layer within the bound
    got = _l_star_range(x)
    low, high, spread = got if got else (l_star, l_star, "no resample range recorded: l* "
                                                         "alone decides")
    if Fraction(high, n) <= bound:
        outcome = HOLDS
    elif Fraction(low, n) > bound:
        outcome = FAILS
    else:
        outcome = UNDECIDED
    ref = max(p.backbones.values(), key=lambda b: b.depth)
    within = (f"layers 1..{deepest}" if deepest > 1 else "layer 1" if deepest == 1 else
              "no candidate layer")
    why = (f"near: l*/N <= {float(bound):.3f}, the deepest the paper reports ({ref.l_star} of "
           f"{ref.n_layers}), here {within}; "
           + {HOLDS: "the whole range is within it", FAILS: "the whole range is beyond it",
              UNDECIDED: f"the range [{low}, {high}] straddles it"}[outcome])
    run = f"l* = {l_star} of {n} layers ({l_star / n:.3f} of the depth); {spread}"
    paper = "; ".join(f"l* = {b.l_star} of {b.n_layers} ({b.name})" for b in p.backbones.values())
    part = Part("l* near the embedding", run, outcome, why)
    return ClaimRow("l* lies near the embedding", paper, run, outcome, why,
                    _paper_backbones(p), _this_backbone(x), f"1 ({LOCATE})", [part])


# -------------------------------------------------------------------- claim 2: Spearman


def claim_spearman(x: ReportInputs, p: PaperClaims) -> ClaimRow:
    """Spearman of the layer score with the bridge's validation loss in the paper's range.
    This run's: S_l under the primary normalisation against -val loss over the swept layers,
    with bridgeability's 95 % interval over layers. Holds where the interval's low end is at
    least the paper's low figure; does not hold where its high end is below it; the design
    cannot decide where the interval contains it (its width, from the swept layers, is the
    floor). A missing or undefined Spearman is not measured."""
    primary, target = x.configs.primary_norm, p.spearman_target
    rows = {r.predictor: r for r in x.bridges.info.spearman}
    geo = rows.get(f"S_l ({primary})")
    s = geo.of(target) if geo else None
    rho, lo, hi = s.interval() if s else (None, None, None)
    n = len(x.bridges.info.swept_layers)
    paper = (f"Spearman {p.spearman_low:.2f}-{p.spearman_high:.2f} (layer score vs the "
             f"bridge's validation loss)")
    depth = rows.get(DEPTH)
    d = depth.of(target).interval() if depth and depth.of(target) else (None, None, None)
    if s is None or rho is None:
        run = (f"no Spearman of S_l ({primary}) with -{target} in bridgeability" if s is None
               else f"the Spearman of S_l ({primary}) with -{target} is undefined")
        outcome, why = MISSING, run + " (materialise bridgeability again)"
    else:
        run = (f"{rho:.2f}" + (f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None
                               else "") + f" over {n} swept layers (S_l {primary})"
               + (f"; depth's {d[0]:.2f}" if d[0] is not None else ""))
        low = p.spearman_low
        if lo is None or hi is None:
            outcome, why = UNDECIDED, "no interval recorded for this Spearman"
        elif lo >= low:
            outcome, why = HOLDS, f"the interval's low end {lo:.2f} >= the paper's {low:.2f}"
        elif hi < low:
            outcome, why = FAILS, f"the interval's high end {hi:.2f} < the paper's {low:.2f}"
        else:
            outcome, why = UNDECIDED, (f"the interval contains {low:.2f}; its width "
                                       f"{hi - lo:.2f} over {n} swept layers is the floor")
    scale = f"{n} swept layers of {int(x.backbone_info.n_layers) - 1} candidates; {_sweep_steps(x)}"
    return ClaimRow("the layer score predicts bridgeability", paper, run, outcome, why,
                    f"{_paper_backbones(p, p.spearman_backbones)}; {_paper_budget(p)}",
                    scale, f"2 ({BRIDGEABILITY})", [Part("Spearman", run, outcome, why)])


# ----------------------------------------------------------- claim 3: the baselines' table


@dataclass(frozen=True)
class GenerationEvidence:
    """What the generation claims read: DiHAL's row, the baselines' by name, the pairs of the
    generation section (dihal.report.generation.generation_pairs over the backbone and the
    baselines, Holm over them: the same p-values the report prints) and the baselines not run."""

    dihal: GenerationRow | None
    baselines: dict[str, GenerationRow]
    pairs: dict[str, dict]
    missing: list[str]

    @classmethod
    def of(cls, x: ReportInputs) -> GenerationEvidence:
        rows = x.comparison.rows
        dihal = _dihal_row(x)
        others = [r for r in rows if r.role in (BACKBONE, BASELINE)]
        pairs = {q["model"]: q for q in generation_pairs(dihal, others)} if dihal else {}
        return cls(dihal, {r.name: r for r in rows if r.role == BASELINE}, pairs,
                   list(x.comparison.missing))


def _per_text(row: GenerationRow) -> list[tuple[float, int]]:
    return [(float(a), int(b)) for a, b in zip(row.sample_nll, row.sample_tokens, strict=True)]


def _log_half_width(e: Estimate) -> float | None:
    """Half the width of an interval in log units; None without one (or one reaching 0)."""
    if not e.has_interval or e.low <= 0:
        return None
    return (math.log(e.high) - math.log(e.low)) / 2


def _resolves(a: Estimate, b: Estimate, ratio: float) -> tuple[bool, str]:
    """Whether a gap of `ratio` between two values would have separated their intervals (the
    half-widths in log units add up to less than log ratio), and the floor as text."""
    wa, wb = _log_half_width(a), _log_half_width(b)
    if wa is None or wb is None:
        return False, "no interval on one side"
    return (wa + wb < abs(math.log(ratio)),
            f"the intervals' half-widths add up to {math.exp(wa + wb):.3f}x, against the "
            f"paper's gap {ratio:.3f}x")


def gen_ppl_part(ev: GenerationEvidence, name: str, ratio: float) -> Part:
    """DiHAL's Gen.PPL against baseline `name`. Holds where DiHAL's is lower beyond the
    generation section's test (the log Gen.PPL difference, Holm over the pairs; the intervals
    where the rows kept no per-sample scores) and DiHAL does not fail more often; does not
    hold where it is higher beyond it, lower only with more empty samples beyond their
    interval, or not told apart although the run could see the paper's gap `ratio` (enough
    samples for 80 % power at Holm's strictest step, or intervals narrower than the gap); the
    design cannot decide where it could not. Not measured: no row for `name`."""
    label = f"Gen.PPL against {name}"
    row, dihal = ev.baselines.get(name), ev.dihal
    if row is None or dihal is None:
        return Part(label, f"{name} was not run" if dihal else "no DiHAL row", MISSING,
                    "the comparison has no row for it")
    pair = ev.pairs.get(name)
    if pair is not None:
        run = (f"DiHAL/{name} {pair['ratio']:.2f}x [{math.exp(pair['low']):.2f}, "
               f"{math.exp(pair['high']):.2f}], p (Holm) {pair['p_holm']:.3g}")
        lower, higher = pair["verdict"] == "lower", pair["verdict"] == "higher"
    else:
        run = f"DiHAL {dihal.gen_ppl.text()} against {row.gen_ppl.text()}"
        apart = dihal.gen_ppl.separated_from(row.gen_ppl)
        lower, higher = apart and dihal.gen_ppl.below(row.gen_ppl), apart and row.gen_ppl.below(
            dihal.gen_ppl)
    if (or_none(dihal.empty_samples) or or_none(row.empty_samples)) and (
            a := samples_over(dihal)) and (b := samples_over(row)):
        run += f"; over {a} and {b} samples (the rest empty)"
    if lower and fails_more(dihal, row):
        return Part(label, run, FAILS, "lower only with more empty samples beyond their interval")
    if lower or higher:
        return Part(label, run, HOLDS if lower else FAILS,
                    f"DiHAL's Gen.PPL {'lower' if lower else 'higher'} beyond the 95 % level")
    if pair is not None:
        power = samples_for_effect(_per_text(dihal), _per_text(row), ratio=ratio,
                                   family=len(ev.pairs))
        enough = power["observed_n"] >= power["n"]
        floor = (f"{power['n']:,} samples per model give 80 % power at the paper's gap "
                 f"{ratio:.3f}x; the run has {power['observed_n']:,}")
    else:
        enough, floor = _resolves(dihal.gen_ppl, row.gen_ppl, ratio)
    return Part(label, run, FAILS if enough else UNDECIDED, "not told apart; " + floor)


def diversity_part(dihal: GenerationRow | None, row: GenerationRow | None, name: str,
                   ratio: float) -> Part:
    """DiHAL's diversity against baseline `name`, by the jackknife intervals of the generation
    table: holds where DiHAL's is higher and the intervals are separated; does not hold where
    it is lower and separated, or where they overlap although a gap of the paper's `ratio`
    would have separated them; the design cannot decide otherwise."""
    label = f"diversity against {name}"
    if row is None or dihal is None:
        return Part(label, f"{name} was not run" if dihal else "no DiHAL row", MISSING,
                    "the comparison has no row for it")
    a, b = dihal.diversity, row.diversity
    run = f"DiHAL {a.text('.3f')} against {b.text('.3f')}"
    if a.value is None or b.value is None:
        return Part(label, run, MISSING, "diversity not recorded")
    if a.separated_from(b):
        higher = b.below(a)
        return Part(label, run, HOLDS if higher else FAILS,
                    f"DiHAL's {'higher' if higher else 'lower'} beyond the 95 % intervals")
    enough, floor = _resolves(a, b, ratio)
    return Part(label, run, FAILS if enough else UNDECIDED, "the intervals overlap; " + floor)


def claim_generation(x: ReportInputs, p: PaperClaims, ev: GenerationEvidence) -> ClaimRow:
    """DiHAL has the lowest Gen.PPL and the highest diversity of it and the paper's four
    baselines at a matched budget: every baseline's Gen.PPL part (gen_ppl_part) and diversity
    part (diversity_part), against the paper's CoDAR gaps, combined (combine): a baseline not
    run makes the row not measured unless another part already does not hold."""
    parts = []
    for name in p.baselines.values():
        parts.append(gen_ppl_part(ev, name, p.gen_ppl_ratio))
        parts.append(diversity_part(ev.dihal, ev.baselines.get(name), name, p.diversity_ratio))
    verdict = combine(parts)
    dihal = ev.dihal
    run = (f"DiHAL Gen.PPL {dihal.gen_ppl.text()}, diversity {dihal.diversity.text('.3f')}"
           if dihal else "no DiHAL row in the comparison")
    why = (f"of {len(parts)} parts (Gen.PPL and diversity against each baseline): "
           + tally_text([q.outcome for q in parts])
           + (f"; not run: {', '.join(ev.missing)}" if ev.missing else ""))
    backbone = p.backbones[p.generation_backbone]
    paper = (f"lowest Gen.PPL and highest diversity of {len(p.baselines) + 1} "
             f"({', '.join(p.baselines)}); {backbone.name}: Gen.PPL {p.gen_ppl['dihal']:g} vs "
             f"CoDAR's {p.gen_ppl['codar']:g}, diversity {p.diversity['dihal']:g} vs "
             f"{p.diversity['codar']:g}")
    scale = parameters_text(backbone_parameters(x)) + (
        f"; bridge {dihal.denoiser_parameters:,} parameters, {_tokens(or_none(dihal.train_tokens))} "
        f"training tokens, K = {dihal.sampler_steps}; {x.configs.eval.n_samples} samples a "
        "model" if dihal and or_none(dihal.denoiser_parameters) is not None else "")
    return ClaimRow("DiHAL beats the four baselines at a matched budget", paper, run, verdict,
                    why, f"{_paper_backbones(p, [p.generation_backbone])}; matched budget: "
                    f"{_paper_budget(p)}", scale, f"3 ({GENERATION})", parts)


# -------------------------------------------------------------- claim 4: full training


def _role_part(label: str, geo, other, better_needed: bool) -> Part:
    """l* against one other full-training role by the paired test of section 4. Against the
    oracle (`better_needed` False): competitive, holds, unless l*'s Gen.PPL is higher beyond
    the paired 95 % level (does not hold). Against the worst layer: holds where l*'s is lower
    beyond it, does not hold where higher or where l* is the worst layer, and the design
    cannot decide where the pair is not told apart (its interval and p are the floor: the
    paper gives no figure to size it against)."""
    if geo.layer == other.layer:
        same = f"l* is the {label} layer ({geo.layer})"
        return Part(f"against the {label}", same, FAILS if better_needed else HOLDS, same)
    pair = other.pairs.get("geometry l*")
    if pair is None:
        return Part(f"against the {label}", "no paired test", MISSING,
                    "the full-training rows have no paired test of the roles (fewer than 2 "
                    "samples a pair scored)")
    run = (f"l*/{label} Gen.PPL {math.exp(pair.log_ppl_diff):.2f}x "
           f"[{math.exp(pair.log_ppl_diff_low):.2f}, {math.exp(pair.log_ppl_diff_high):.2f}], "
           f"p (Holm) {pair.p_holm:.3g}")
    if pair.verdict == "above":
        return Part(f"against the {label}", run, FAILS, f"l*'s Gen.PPL higher than the {label}'s")
    if pair.verdict == "below":
        return Part(f"against the {label}", run, HOLDS, f"l*'s Gen.PPL lower than the {label}'s")
    if not better_needed:
        return Part(f"against the {label}", run, HOLDS, "competitive: not told apart")
    return Part(f"against the {label}", run, UNDECIDED,
                f"not told apart: the paired interval spans {math.exp(pair.log_ppl_diff_low):.2f}"
                f"-{math.exp(pair.log_ppl_diff_high):.2f}x")


def claim_full_training(x: ReportInputs, p: PaperClaims, ev: GenerationEvidence) -> ClaimRow:
    """Under full training the geometry-selected layer is competitive with the oracle and
    significantly better than the worst layer (_role_part, section 4's paired tests) and
    than CoDAR (gen_ppl_part on the eval's DiHAL, the bridge at l* with the full budget),
    combined (combine). Missing roles are not measured."""
    roles = {r.role: r for r in x.full_training.trained()}
    absent = [k for k in ("geometry l*", "oracle", "worst") if k not in roles]
    if absent:
        parts = [Part("full training", f"no full-training row for {', '.join(absent)}", MISSING,
                      "materialise full_training")]
    else:
        geo = roles["geometry l*"]
        parts = [_role_part("oracle", geo, roles["oracle"], False),
                 _role_part("worst", geo, roles["worst"], True)]
    codar = p.baselines["CoDAR"]
    parts.append(gen_ppl_part(ev, codar, p.gen_ppl_ratio))
    verdict = combine(parts)
    run = "; ".join(f"{q.name}: {q.run}" for q in parts)
    why = "; ".join(f"{q.name}: {q.outcome} ({q.why})" for q in parts)
    geo = roles.get("geometry l*")
    tokens, steps = ((or_none(geo.train_tokens), or_none(geo.train_steps)) if geo is not None
                     else (None, None))
    scale = (f"{int(tokens):,} training tokens per full-training bridge" if tokens is not None
             else "the full-training bridges' tokens not recorded") + (
        f" in {int(steps):,} optimiser steps" if steps is not None else "") + (
        "; the oracle and the worst by the sweep's hybrid NLL")
    return ClaimRow("full training: l* near the oracle, above the worst layer and CoDAR",
                    "l* competitive with the validation-loss oracle, significantly better than "
                    "the worst layer and than CoDAR (no figure quoted)", run, verdict, why,
                    f"{_paper_backbones(p)}; {_paper_budget(p)}", scale, f"4 ({FULL})", parts)


# ------------------------------------------------------------------- claim 5: latency


def claim_latency(x: ReportInputs, p: PaperClaims) -> ClaimRow:
    """Inference slower than the backbone, by the cost table's one timing of each (section
    3b): holds where DiHAL's fastest round is slower than the backbone's slowest; does not
    hold where DiHAL's slowest is faster than the backbone's fastest; the design cannot decide
    where the rounds overlap (their spread is the floor). Without the rounds' spread the
    medians decide, and the row says so. No cost table, or DiHAL not timed: not measured."""
    dihal = _dihal_row(x)
    k0 = int(dihal.sampler_steps) if dihal and or_none(dihal.sampler_steps) is not None else None
    hyb = timed_row(x, sampler_steps=k0) if k0 is not None else None
    ref = timed_row(x, name="backbone")
    paper = "higher latency than the backbone (no figure quoted)"
    scale = f"{parameters_text(backbone_parameters(x))}; {timing_text(x)}"
    if hyb is None or ref is None:
        run = "DiHAL's or the backbone's time per token is not in the cost table"
        return ClaimRow("inference is slower than the backbone", paper, run, MISSING,
                        run + " (materialise eval again)", _paper_backbones(p), scale,
                        f"3b ({COST})", [Part("latency", run, MISSING, run)])
    ratio = hyb.ms_per_token / ref.ms_per_token
    run = (f"{hyb.ms_per_token:.3g} ms per token against {ref.ms_per_token:.3g} ({ratio:.2f}x "
           f"at K = {k0}; FLOPs {hyb.flops_vs_backbone:.2f}x)")
    spread = None not in (hyb.ms_per_token_low, hyb.ms_per_token_high, ref.ms_per_token_low,
                          ref.ms_per_token_high)
    if spread:
        run += (f"; rounds {hyb.ms_per_token_low:.3g}-{hyb.ms_per_token_high:.3g} against "
                f"{ref.ms_per_token_low:.3g}-{ref.ms_per_token_high:.3g}")
        slower, faster = (hyb.ms_per_token_low > ref.ms_per_token_high,
                          hyb.ms_per_token_high < ref.ms_per_token_low)
        how = "the rounds' ranges"
    else:
        slower, faster = ratio > 1, ratio < 1
        how = "the medians alone (no spread of the rounds recorded)"
    outcome = HOLDS if slower else FAILS if faster else UNDECIDED
    why = {HOLDS: f"slower by {how}", FAILS: f"faster by {how}",
           UNDECIDED: f"the rounds overlap: {how} cannot order them"
           if spread else f"as fast by {how}"}[outcome]
    return ClaimRow("inference is slower than the backbone", paper, run, outcome, why,
                    _paper_backbones(p), scale, f"3b ({COST})",
                    [Part("latency", run, outcome, why)])


# ----------------------------------------------------------------------------- the section


def claim_rows(x: ReportInputs, paper: PaperClaims | None = None) -> list[ClaimRow]:
    """One row per claim of the paper, in the paper's order."""
    p = paper or load_paper_claims()
    ev = GenerationEvidence.of(x)
    return [claim_l_star(x, p), claim_spearman(x, p), claim_generation(x, p, ev),
            claim_full_training(x, p, ev), claim_latency(x, p)]


def answer_claims(x: ReportInputs, paper: PaperClaims | None = None) -> tuple[str, str]:
    """How many of the paper's claims hold at this run's scale, how many do not, and how many
    the design cannot decide or did not measure (the scorecard's verdicts counted)."""
    rows = claim_rows(x, paper)
    held = [c.claim for c in rows if c.verdict == HOLDS]
    return (f"Of the paper's {len(rows)} claims at this run's scale, "
            f"{tally_text([c.verdict for c in rows])}"
            + (f" (holding: {'; '.join(held)})" if 0 < len(held) <= 2 else "") + ".", CLAIMS)


# each verdict counted in words (one claim, several)
TALLY_WORDS = {HOLDS: ("holds", "hold"), FAILS: ("does not hold", "do not hold"),
               UNDECIDED: ("the design cannot decide", "the design cannot decide"),
               MISSING: ("was not measured", "were not measured")}


def tally_text(verdicts: list[str]) -> str:
    """"2 do not hold, 1 holds": how many of `verdicts` are each verdict, in PRECEDENCE's
    order, those with none left out."""
    counts = {v: verdicts.count(v) for v in PRECEDENCE}
    return ", ".join(f"{n} {TALLY_WORDS[v][n != 1]}" for v, n in counts.items() if n)


def claims_section(r: Document, x: ReportInputs, paper: PaperClaims | None = None) -> None:
    """The paper's claims against this run: the table, the parts each verdict combines, and
    the two scales."""
    p = paper or load_paper_claims()
    rows = claim_rows(x, p)
    r.h2("The paper's claims at this run's scale", CLAIMS)
    r.p(f"Each claim of the paper ({p.source}; its figures from data/paper_claims.json, "
        "where a figure the paper's quoted text does not give is left unstated) against this "
        "run's own measurement, with its interval, and a verdict computed from the numbers: "
        + tally_text([c.verdict for c in rows])
        + ". A claim the tests here cannot tell apart does not hold where the run could "
        "have seen a gap as large as the paper's (enough samples for 80 % power, or "
        "intervals narrower than it) and is left undecided where it could not; the scales "
        "differ by orders of magnitude, so a verdict here is about this scale.")
    r.table([c.to_dict() for c in rows], list(COLUMNS))
    r.p("The parts of the claims that combine several (a claim does not hold where any part "
        "does not; else it is not measured where an input is missing; else undecided where "
        "any part is):")
    r.table([{"claim": c.claim, "part": q.name, "this run": q.run, "outcome": q.outcome,
              "why": q.why} for c in rows if len(c.parts) > 1 for q in c.parts],
            ["claim", "part", "this run", "outcome", "why"])
    r.p("The two scales (the paper's from data/paper_claims.json: " + NOT_STATED
        + " where its quoted text gives no figure):")
    scales = scale_table(x, p)
    r.table(scales, list(scales[0]))
