"""What each verdict of the eval, the baselines and the comparison reads, and whether its
sample size still lets it come out every way it is written.

    python benchmarks/verdict_samples.py                      # the default (cpu) preset
    python benchmarks/verdict_samples.py --profile study      # another preset
    python benchmarks/verdict_samples.py --n-samples 32       # what a smaller sample would do
    python benchmarks/verdict_samples.py --artifacts .dihal/artifacts --backbone smollm2

One row per verdict: the sentence or decision the code computes from samples (where), the
samples it reads (how many, which config field sets them), its floor (the smallest p-value
it can reach: the verdict's own function run on samples made as far apart as they can be, at
the preset's sample count) or its resolution, its interval's half-width (from a run's
artifacts where given: the intervals the run's samples gave; else the formula the code uses),
and whether each outcome it is written for still comes out: each outcome is asked of the
verdict's own function with samples made to give it, at the preset's sample count.

Probe samples are (judge NLL, judge tokens) per sample, seeded (numpy's generator, seed 0):
every number printed is computed by the project's functions here, none is typed in.
"""

from __future__ import annotations

import argparse
import inspect
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dihal.config import BaselineRunConfig, EvalConfig, SequenceConfig  # noqa: E402
from dihal.evaluate.cost import COST_N, COST_REPEATS, COST_TIMED_LENGTH, CostSubject  # noqa: E402
from dihal.evaluate.frontier import anchor_point, at_matched_diversity, on_frontier, point  # noqa: E402
from dihal.evaluate.metrics import (  # noqa: E402
    MAUVE_RESULT_SAMPLES,
    mauve_interval_seeds,
    metric_intervals,
    wilson,
)
from dihal.generation_inputs import FullTrainingRow  # noqa: E402
from dihal.generation_rows import EVAL_ROW, GenerationRow, RoleSample, Sample  # noqa: E402
from dihal.labels import (  # noqa: E402
    BACKBONE,
    BASELINE,
    CHOSEN_K,
    CONTROL,
    DIHAL,
    FULL_TRAINING_ROLES,
    PROTOCOL_K,
)
from dihal.registry import BASELINES  # noqa: E402
from dihal.rows import ROLE_PAIRS
from dihal.run.profiles import resolve_preset  # noqa: E402
from dihal.uncertainty import LEVEL  # noqa: E402

ALPHA = round(1 - LEVEL, 12)
NEEDS_RUN = "needs a run's samples (none given): "


def default_of(fn: Callable, name: str):
    """The default of `fn`'s parameter `name` (a resample count the verdict runs with)."""
    return inspect.signature(fn).parameters[name].default


@dataclass
class Verdict:
    """One row of the table; `reached` is what the probes got out of the verdict's function."""

    name: str
    stage: str
    reads: str
    floor: str
    half_width: str
    written: tuple[str, ...]
    reached: set[str] = field(default_factory=set)

    def every_way(self) -> str:
        missing = [w for w in self.written if w not in self.reached]
        return (f"yes ({', '.join(self.written)})" if not missing else
                f"no: never {', '.join(repr(m) for m in missing)}")


# ----------------------------------------------------------------------- probe samples
def per_text(n: int, log_ppl: float, rng: np.random.Generator) -> list[tuple[float, int]]:
    """n samples of (judge NLL, judge tokens) whose token-weighted log Gen.PPL is about
    `log_ppl`: 20-40 tokens each, a per-token NLL spread of 0.05 around it."""
    tokens = rng.integers(20, 41, size=n)
    nll = tokens * (log_ppl + 0.05 * rng.standard_normal(n))
    return [(float(a), int(b)) for a, b in zip(nll, tokens, strict=True)]


def gen_row(model: str, role: str, scored: list[tuple[float, int]], n: int,
            empty: int = 0) -> GenerationRow:
    """A generation row as the comparison stores it, from its samples' scores."""
    nll = sum(a for a, _ in scored)
    tokens = sum(b for _, b in scored)
    return GenerationRow.from_dict({
        "model": model, "role": role, "gen_ppl": math.exp(nll / tokens) if tokens else math.nan,
        "sample_nll": [a for a, _ in scored], "sample_tokens": [b for _, b in scored],
        "n_samples": n, "empty_samples": empty})


# the log Gen.PPL of DiHAL against every other model in each probe: lower, higher, the same
SIDES = {"DiHAL lower": (3.0, 4.0), "DiHAL higher": (5.0, 4.0), "the same": (4.0, 4.0)}


# ----------------------------------------------------------------------------- verdicts
def generation_pairs_verdict(ev: EvalConfig, base: BaselineRunConfig) -> Verdict:
    """dihal.report.generation.generation_pairs: DiHAL's Gen.PPL against the backbone's and
    each baseline's (unpaired bootstrap of the log Gen.PPL difference, Holm over the pairs)."""
    from dihal.report.generation import generation_pairs

    m = 1 + len(BASELINES)
    v = Verdict("DiHAL's Gen.PPL higher / lower than each other model's, or not told apart "
                f"(dihal.report.generation.generation_pairs: Holm over the {m} pairs; the "
                "answer and section 3)", "eval + baselines (report)",
                f"the non-empty of {ev.n_samples} DiHAL and {ev.n_samples} backbone samples "
                f"(eval.n_samples), {base.n_samples} per baseline x {len(BASELINES)} "
                "(baseline.n_samples)", "", "",
                ("higher", "lower", "not distinguishable"))
    floor = raw = 1.0
    for mine, other in SIDES.values():
        rng = np.random.default_rng(0)
        dihal = gen_row("DiHAL", DIHAL, per_text(ev.n_samples, mine, rng), ev.n_samples)
        others = [gen_row("backbone", BACKBONE, per_text(ev.n_samples, other, rng), ev.n_samples)]
        others += [gen_row(b, BASELINE, per_text(base.n_samples, other, rng), base.n_samples)
                   for b in BASELINES]
        if mine == other:  # the same samples a side: nothing to tell apart
            same = dihal.to_dict()
            others = [gen_row(o.name, o.role, list(zip(same["sample_nll"], same["sample_tokens"],
                                                     strict=True)), ev.n_samples)
                      for o in others]
        for p in generation_pairs(dihal, others):
            v.reached.add(p["verdict"])
            floor, raw = min(floor, p["p_holm"]), min(raw, p["p"])
    v.floor = (f"p (Holm) >= {floor:.3g} (the bootstrap's own floor {raw:.3g}, x {m} pairs); "
               f"below alpha {ALPHA:g}: {'yes' if floor < ALPHA else 'no'}")
    v.half_width = (NEEDS_RUN + "in log Gen.PPL about 1.96 sqrt(var_a / n_a + var_b / n_b), var "
                    "the per-sample variance of (nll_i - r n_i) / mean(n) (the delta method of "
                    "dihal.evaluate.ppl_difference)")
    return v


def point_order_verdict(ev: EvalConfig) -> Verdict:
    """dihal.report.generation.answer_generation's side: DiHAL's Gen.PPL lower or higher than
    the backbone's, and lower than how many baselines' (point estimates)."""
    v = Verdict("DiHAL's Gen.PPL lower / higher than the backbone's; lower than k of the "
                "baselines' (point values; dihal.report.generation.answer_generation)",
                "eval + baselines (report)",
                f"the non-empty of {ev.n_samples} samples a model (eval.n_samples, "
                "baseline.n_samples)", "none (a point comparison)",
                "the Gen.PPL intervals beside it (percentile bootstrap, "
                f"{default_of(metric_intervals, 'n_boot')} resamples: metric_intervals)",
                ("lower", "higher"))
    for mine, other in SIDES.values():
        if mine == other:
            continue
        rng = np.random.default_rng(0)
        a = gen_row("DiHAL", DIHAL, per_text(ev.n_samples, mine, rng), ev.n_samples)
        b = gen_row("backbone", BACKBONE, per_text(ev.n_samples, other, rng), ev.n_samples)
        v.reached.add("lower" if a.gen_ppl.below(b.gen_ppl) else "higher")
    return v


def empty_rate_verdict(ev: EvalConfig, base: BaselineRunConfig) -> Verdict:
    """dihal.report.generation.fails_more: a model has more empty samples (failures) than
    another beyond the 95 % interval of the difference of the rates (Newcombe)."""
    from dihal.report.generation import fails_more

    n = min(ev.n_samples, base.n_samples)
    v = Verdict("a lower Gen.PPL that comes with more failures (empty samples) beyond the "
                "interval of the difference of the rates is not counted as better "
                "(dihal.report.generation.fails_more, empty_clause)", "eval + baselines (report)",
                f"every sample of each model: {ev.n_samples} (eval.n_samples), "
                f"{base.n_samples} per baseline (baseline.n_samples)", "", "",
                ("more failures", "not more failures"))
    none = gen_row("b", BACKBONE, [], n, empty=0)
    k_min = None
    for k in range(n + 1):
        more = fails_more(gen_row("a", DIHAL, [], n, empty=k), none)
        v.reached.add("more failures" if more else "not more failures")
        if more and k_min is None:
            k_min = k
    lo, hi = wilson(0, n)
    mid_lo, mid_hi = wilson(n // 2, n)
    v.floor = (f"at least {k_min} empty of {n} against none" if k_min is not None else
               f"never, even {n} of {n} against none")
    v.half_width = (f"Wilson 95 % interval of the empty rate: [{lo:.3f}, {hi:.3f}] at 0 of {n}; "
                    f"+-{(mid_hi - mid_lo) / 2:.3f} at {n // 2} of {n}")
    return v


class ProbeJudge:
    """A judge whose scores of the probe texts are given: text -> (NLL, judge tokens)."""

    def __init__(self, scores: dict[str, tuple[float, int]]) -> None:
        self.scores = scores

    def nll_each(self, texts: list[str]) -> list[tuple[float, int]]:
        return [self.scores[t] for t in texts]


def controls_verdict(ev: EvalConfig) -> Verdict:
    """dihal.evaluate.generation.paired_against_first: each control hybrid's (and DiHAL's at
    the chosen K) Gen.PPL against DiHAL's, paired by sample index, no multiplicity correction."""
    from dihal.evaluate.generation import paired_against_first

    v = Verdict("DiHAL's Gen.PPL below / above each control hybrid's (regression, layer-drop, "
                "ridge) and its own at the K chosen on validation, paired by sample "
                "(dihal.evaluate.generation.paired_against_first; section 3a)", "eval",
                f"the samples both scored of {ev.n_samples} a model (eval.n_samples)", "", "",
                ("below", "above", "not distinguishable"))
    floor = 1.0
    for mine, other in SIDES.values():
        rng = np.random.default_rng(0)
        a = per_text(ev.n_samples, mine, rng)
        b = a if mine == other else per_text(ev.n_samples, other, rng)
        scores = {f"DiHAL {i}": s for i, s in enumerate(a)} | {f"ridge {i}": s
                                                               for i, s in enumerate(b)}
        rows = [GenerationRow(EVAL_ROW, model="DiHAL"), GenerationRow(EVAL_ROW, model="ridge")]
        samples = [Sample(m, i, ev.seed, f"{m} {i}") for m in ("DiHAL", "ridge")
                   for i in range(ev.n_samples)]
        ridge = paired_against_first(rows, samples, ProbeJudge(scores), seed=ev.seed)[1]
        v.reached.add(ridge.dihal_verdict)
        floor = min(floor, ridge.dihal_log_ppl_diff_p)
    v.floor = (f"p >= {floor:.3g} (each row alone, no correction); below alpha {ALPHA:g}: "
               f"{'yes' if floor < ALPHA else 'no'}")
    v.half_width = (NEEDS_RUN + "in log Gen.PPL about 1.96 sd / sqrt(n), sd of the per-index "
                    "difference of the delta-method shares (paired)")
    return v


def full_training_verdict(ev: EvalConfig) -> Verdict:
    """dihal.compare.stage.paired_roles: l*, the oracle and the worst layer against each other
    at the protocol's K, paired by sample index, Holm over the pairs."""
    from dihal.compare.stage import paired_roles

    v = Verdict("l*, the oracle and the worst layer's Gen.PPL told apart pair by pair "
                f"(dihal.compare.stage.paired_roles: paired, Holm over the {len(ROLE_PAIRS)} "
                "pairs; section 4)", "full_training (compare job)",
                f"the samples both scored of {ev.n_samples} a role (full_training's run config: "
                "eval.n_samples)", "", "", ("below", "above", "not distinguishable"))
    floor = 1.0
    for mine, other in SIDES.values():
        rng = np.random.default_rng(0)
        logs = dict(zip(FULL_TRAINING_ROLES, (mine, (mine + other) / 2, other), strict=True))
        same = per_text(ev.n_samples, mine, rng)
        rows = [FullTrainingRow(r, layer, sampler=PROTOCOL_K)
                for layer, r in enumerate(FULL_TRAINING_ROLES, start=1)]
        samples = [RoleSample(r, layer, PROTOCOL_K, Sample(r, i, ev.seed, f"{r} {i}"), a, b)
                   for layer, r in enumerate(FULL_TRAINING_ROLES, start=1)
                   for i, (a, b) in enumerate(same if mine == other else
                                              per_text(ev.n_samples, logs[r], rng))]
        by = {r.role: r for r in paired_roles(rows, samples, seed=ev.seed)}
        for first, second in ROLE_PAIRS:
            v.reached.add(by[second].pair_tests[first].verdict)
            floor = min(floor, by[second].pair_tests[first].p_holm)
    v.floor = (f"p (Holm) >= {floor:.3g}; below alpha {ALPHA:g}: "
               f"{'yes' if floor < ALPHA else 'no'}")
    v.half_width = NEEDS_RUN + "as the control hybrids' (paired, by sample index)"
    return v


def mauve_verdict(ev: EvalConfig, base: BaselineRunConfig, seq: SequenceConfig) -> Verdict:
    """dihal.evaluate.metrics.mauve_interval_seeds' flag, read by dihal.report.generation:
    MAUVE is a result only with MAUVE_RESULT_SAMPLES samples a side, else a diagnostic."""
    v = Verdict("MAUVE a result, or a diagnostic (dihal.evaluate.metrics.mauve_interval_seeds; "
                "the header of every generation table)", "eval + baselines",
                f"min({ev.n_samples} samples (eval.n_samples; baselines: {base.n_samples}, "
                f"baseline.n_samples), the non-empty of {seq.n_val} held-out texts "
                "(sequences.n_val)) a side", "", "", ("a result", "a diagnostic"))
    # text_metrics compares equal counts a side: min(samples, non-empty held-out texts), and
    # mauve_interval_seeds flags fewer than MAUVE_RESULT_SAMPLES a side as a diagnostic
    for n in (ev.n_samples, base.n_samples):
        for texts in (seq.n_val, 2):  # every held-out sequence gives a text, or very few do
            side = min(n, texts)
            v.reached.add("a result" if side >= MAUVE_RESULT_SAMPLES else "a diagnostic")
    v.floor = f"a result needs >= {MAUVE_RESULT_SAMPLES} a side (MAUVE_RESULT_SAMPLES)"
    v.half_width = (NEEDS_RUN + "the percentile interval over "
                    f"{default_of(mauve_interval_seeds, 'n_boot')} resamples of both sides, the "
                    f"k-means refitted under {default_of(mauve_interval_seeds, 'n_seeds')} seeds")
    return v


def _point(model: str, role: str, t: float, metrics: dict, sampled: bool) -> dict:
    """A frontier point (dihal.evaluate.frontier.point) of `metrics`, as stored."""
    return point(model, role, t, GenerationRow.from_dict(metrics, EVAL_ROW),
                 sampled=sampled).to_dict()


def _probe_points(temps: tuple[float, ...], anchor: float) -> list[dict]:
    """A model's frontier points at `temps`, their diversities on both sides of the held-out
    text's where it has two or more (alternately 0.1 below and above), lower Gen.PPL where
    less diverse."""
    out = []
    for i, t in enumerate(sorted(temps)):
        d = anchor + (0.1 if i % 2 else -0.1)
        out.append(_point("DiHAL", DIHAL, t, {"gen_ppl": 50.0 * (1 + d), "diversity": d},
                          sampled=True))
    return out


def frontier_verdicts(ev: EvalConfig, base: BaselineRunConfig) -> list[Verdict]:
    """dihal.evaluate.frontier: on the frontier (point dominance), dominated beyond the
    intervals, and each model's Gen.PPL at the held-out text's diversity (interpolated between
    a model's temperatures)."""
    temps = tuple(ev.frontier_temperatures)

    def at(ts: tuple[float, ...]) -> str:
        return ", ".join(f"{t:g}" for t in ts) or "none"

    reads = (f"{ev.n_samples} samples a model and temperature (eval.n_samples; baselines "
             f"{base.n_samples}, baseline.n_samples) at T = {at(temps)} "
             f"(eval.frontier_temperatures; baselines at {at(base.frontier_temperatures)}, "
             "baseline.frontier_temperatures), and as many held-out texts")
    anchor = anchor_point({"gen_ppl": 40.0, "diversity": 0.8}, ev.n_samples).to_dict()
    on = Verdict("a model on the Gen.PPL / diversity frontier, or every point of it dominated "
                 "(dihal.evaluate.frontier.on_frontier; section 3c)", "comparison", reads,
                 "none (point dominance)", "the points' intervals, read by the next row",
                 ("on the frontier", "dominated"))
    clear = Verdict("a dominated point dominated beyond both 95 % intervals, or within "
                    "sampling noise (dihal.evaluate.frontier.clearly_dominates; section 3c)",
                    "comparison", reads, "none (interval overlap)",
                    NEEDS_RUN + "the points' Gen.PPL (bootstrap) and diversity (jackknife) "
                    "intervals", ("beyond the intervals", "within the intervals"))
    matched = Verdict("each model's Gen.PPL at the held-out text's diversity, interpolated "
                      "between its temperatures, or not reached "
                      "(dihal.evaluate.frontier.at_matched_diversity; section 3c)", "comparison",
                      reads, f"{len(temps)} temperature(s) a model: two around the held-out "
                      "text's diversity are needed", "n/a (an interpolation)",
                      ("interpolated", "not reached"))
    if temps:
        for ppl in (30.0, 60.0):  # DiHAL below, then above, the backbone's Gen.PPL
            pts = [_point("DiHAL", DIHAL, temps[0], {"gen_ppl": ppl, "diversity": 0.7,
                                                     "gen_ppl_low": ppl * 0.9,
                                                     "gen_ppl_high": ppl * 1.1}, sampled=False),
                   _point("backbone", BACKBONE, temps[0], {"gen_ppl": 45.0, "diversity": 0.7,
                                                           "gen_ppl_low": 44.0,
                                                           "gen_ppl_high": 46.0}, sampled=False)]
            on.reached.add("on the frontier" if on_frontier(pts)[0] else "dominated")
            for width in (0.01, 0.5):  # narrow, then wide intervals
                narrow = [{**p, "gen_ppl_low": p["gen_ppl"] * (1 - width),
                           "gen_ppl_high": p["gen_ppl"] * (1 + width)} for p in pts]
                if not on_frontier(narrow)[0]:
                    clear.reached.add("within the intervals" if on_frontier(
                        narrow, clearly=True)[0] else "beyond the intervals")
        for side in (True, False):  # points around the held-out text's diversity, or below it
            pts = _probe_points(temps, anchor["diversity"] if side else 0.0)
            got = at_matched_diversity([*pts, anchor], anchor["diversity"])
            matched.reached.update("interpolated" if g["gen_ppl"] is not None else "not reached"
                                   for g in got)
    return [on, clear, matched]


def cost_verdicts(ev: EvalConfig) -> list[Verdict]:
    """dihal.report.cost: DiHAL slower or faster than the backbone per token, and its time per
    token over K rising, falling within the rounds' spread, or beyond it
    (dihal.evaluate.cost.order_in_k on dihal.evaluate.cost.cost_rows, run on probe timings)."""
    from types import SimpleNamespace

    from dihal.evaluate.cost import cost_rows, order_in_k

    length = min(ev.length, COST_TIMED_LENGTH)
    reads = (f"{COST_REPEATS} timed rounds (COST_REPEATS) of {COST_N} x {length} tokens "
             "(COST_N, min(eval.length, COST_TIMED_LENGTH)) a model")
    pace = Verdict("DiHAL at its K slower / faster than the backbone per token "
                   "(dihal.report.cost.answer_cost)", "eval", reads, "none (medians compared)",
                   "the fastest and slowest round beside each median", ("slower", "faster"))
    order = Verdict("DiHAL's time per token over K: rises, falls within the rounds' spread, or "
                    "beyond it (dihal.evaluate.cost.order_in_k; section 3b)", "eval", reads,
                    f"{COST_REPEATS} rounds: the spread is the fastest to the slowest",
                    "n/a (the rounds' range)", ("rises", "within the spread", "beyond the spread"))

    def rows(ms: dict[int, list[float]]) -> list[dict]:
        """cost_rows over probe models whose timed rounds take `ms` (K -> seconds a round)."""
        subjects = []
        for k, rounds in ms.items():
            left = iter([0.0, *rounds])  # its warm-up decode, then each timed round

            def decode(n, tokens, *, left=left, **kw):
                return SimpleNamespace(seconds=next(left))

            subjects.append(CostSubject(f"K={k}", decode, k, 1, price=lambda m: 1.0))
        return cost_rows(subjects, n=COST_N, length=length, repeats=COST_REPEATS,
                         model=object())

    step = [0.01 * j for j in range(COST_REPEATS)]  # the rounds' spread
    probes = {"rises": {1: [1.0 + s for s in step], 2: [2.0 + s for s in step]},
              "falls a little": {1: [1.0 + 2 * s for s in step], 2: [0.999 + 2 * s for s in step]},
              "falls a lot": {1: [2.0 + s for s in step], 2: [1.0 + s for s in step]}}
    for ms in probes.values():
        got = order_in_k(rows(ms))
        order.reached.add("rises" if got["monotone"] else "within the spread"
                          if got["within_noise"] else "beyond the spread")
        r = rows(ms)
        pace.reached.add("slower" if r[1]["ms_per_token"] > r[0]["ms_per_token"] else "faster")
    return [pace, order]


# --------------------------------------------------------------- a run's own numbers
def run_half_widths(verdicts: list[Verdict], root: Path, backbone: str,
                    n_new: int | None) -> None:
    """Replace each `needs a run` half-width by the run's own: the intervals its samples gave
    (the comparison's and full training's rows), and at `n_new` samples their projection
    (half-width x sqrt(n now / n_new): the delta method and the bootstrap scale so)."""
    from dihal.report.generation import generation_pairs
    from storage import ArtifactLayout, Comparison, FullTraining

    layout = ArtifactLayout(root)
    info = Comparison(layout, backbone).require().info
    rows = [GenerationRow.from_dict(r) for r in info["rows"]]
    dihal = next(r for r in rows if r.role == DIHAL)
    n_now = dihal.n_samples or len(dihal.sample_nll or [])

    def text(widths: list[float], unit: str) -> str:
        widths = [w for w in widths if w is not None and math.isfinite(w)]
        if not widths:
            return "the run's rows hold none"
        lo, hi = min(widths), max(widths)
        out = f"+-{lo:.3g}..{hi:.3g} {unit} at {n_now} samples (this run)"
        if n_new:
            f = math.sqrt(n_now / n_new)
            out += f"; about +-{lo * f:.3g}..{hi * f:.3g} at {n_new}"
        return out

    pairs = generation_pairs(dihal, [r for r in rows if r.role in (BACKBONE, BASELINE)])
    power = ", ".join(f"{p['model']} {p['power']['n']}" for p in pairs)
    found = {
        "generation_pairs": text([(p["high"] - p["low"]) / 2 for p in pairs], "in log Gen.PPL")
        + (f"; samples a model for 80 % power at Gen.PPL 1.25x apart: {power}" if power else ""),
        "paired_against_first": text([(r.vs_dihal.high - r.vs_dihal.low) / 2 for r in rows
                                      if r.role in (CONTROL, CHOSEN_K)
                                      and r.vs_dihal.high is not None],
                                     "in log Gen.PPL"),
        "mauve": text([(r.mauve.high - r.mauve.low) / 2 for r in rows
                       if r.mauve.high is not None], "in MAUVE"),
        "clearly_dominates": text([(p.gen_ppl.high - p.gen_ppl.low) / 2 / p.gen_ppl.value
                                   for p in (GenerationRow.from_dict(q)
                                             for q in info.get("frontier", []))
                                   if p.gen_ppl.high is not None and p.gen_ppl.value],
                                  "of Gen.PPL, relative"),
    }
    full = FullTraining(layout, backbone).manifest()
    if full is not None:
        widths = [(t.log_ppl_diff_high - t.log_ppl_diff_low) / 2
                  for r in map(FullTrainingRow.from_dict, full.info["rows"])
                  for a, b in ROLE_PAIRS if r.role == b and (t := r.pair_tests.get(a)) is not None
                  and t.log_ppl_diff_high is not None]
        found["paired_roles"] = text(widths, "in log Gen.PPL")
    keys = {"generation_pairs": "generation_pairs", "paired_against_first":
            "paired_against_first", "mauve_interval_seeds": "mauve",
            "clearly_dominates": "clearly_dominates", "paired_roles": "paired_roles"}
    for v in verdicts:
        key = next((k for where, k in keys.items() if where in v.name), None)
        if key in found and v.half_width.startswith(NEEDS_RUN):
            v.half_width = found[key]


# ------------------------------------------------------------------------------ the table
def configs(profile: str, n_samples: int | None) -> tuple[EvalConfig, BaselineRunConfig,
                                                          SequenceConfig]:
    """The eval's, the baselines' and the sequences' configs of `profile` (its overrides on
    the dataclasses' defaults), with `n_samples` samples a model where given."""
    stages = resolve_preset(profile).stages

    def build(cls, stage):
        return cls(**{k: tuple(v) if isinstance(v, list) else v
                      for k, v in stages.get(stage, {}).items()})

    ev, base = build(EvalConfig, "eval"), build(BaselineRunConfig, "baseline")
    if n_samples:
        ev, base = replace(ev, n_samples=n_samples), replace(base, n_samples=n_samples)
    return ev, base, build(SequenceConfig, "sequences")


def verdicts(profile: str, n_samples: int | None = None) -> list[Verdict]:
    """Every verdict of the eval, the baselines and the comparison under `profile`."""
    ev, base, seq = configs(profile, n_samples)
    makers: list[Callable[[], Verdict | list[Verdict]]] = [
        lambda: point_order_verdict(ev), lambda: generation_pairs_verdict(ev, base),
        lambda: empty_rate_verdict(ev, base), lambda: controls_verdict(ev),
        lambda: full_training_verdict(ev), lambda: mauve_verdict(ev, base, seq),
        lambda: frontier_verdicts(ev, base), lambda: cost_verdicts(ev)]
    out: list[Verdict] = []
    for make in makers:
        got = make()
        out += got if isinstance(got, list) else [got]
    return out


def table(rows: list[Verdict]) -> str:
    head = ["verdict (where computed)", "stage", "samples it reads (config field)",
            "floor / resolution", "interval half-width", "can come out every way written"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v in rows:
        cells = [v.name, v.stage, v.reads, v.floor, v.half_width, v.every_way()]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="cpu", help="the preset (default: cpu, the default)")
    ap.add_argument("--n-samples", type=int, default=None,
                    help="the table at this many samples a model (eval and baselines)")
    ap.add_argument("--artifacts", type=Path, default=None,
                    help="an artifact root with a finished run: its intervals' half-widths")
    ap.add_argument("--backbone", default="smollm2", help="the run's backbone (with --artifacts)")
    args = ap.parse_args(argv)
    if args.n_samples is not None and args.n_samples < 2:
        ap.error("--n-samples must be at least 2 (a bootstrap needs two samples a side)")
    rows = verdicts(args.profile, args.n_samples)
    if args.artifacts is not None:
        run_half_widths(rows, args.artifacts, args.backbone, args.n_samples)
    ev, base, _ = configs(args.profile, args.n_samples)
    print(f"preset {args.profile}: eval.n_samples {ev.n_samples}, baseline.n_samples "
          f"{base.n_samples}, eval.frontier_temperatures {list(ev.frontier_temperatures)}, "
          f"alpha {ALPHA:g}\n")
    print(table(rows))


if __name__ == "__main__":
    main()
