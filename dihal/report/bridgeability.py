"""The report's bridgeability sections and their answers: does the score predict bridgeability better than depth; does the bridge beat its regression control; the training seeds."""

from __future__ import annotations

from dihal.inputs import BridgeabilitySummary, SeedInfo, SeedSpread
from dihal.report.common import (
    BRIDGEABILITY,
    REGRESSION,
    interval,
    key_value,
    layers_text,
    on_cpu,
    triple,
)
from dihal.report.document import Document
from dihal.report.inputs import ReportInputs
from dihal.rows import (
    ABOVE,
    BELOW,
    DEPTH,
    TARGETS,
    PrimaryTest,
    RegressionRow,
    Spearman,
    SpearmanRow,
    number,
)
from dihal.run.profiles import SEED_SUBSET
from dihal.uncertainty import MAX_UNDEFINED, PRIMARY_BETTER, PRIMARY_UNDECIDABLE


def _oracle_sentence(b: BridgeabilitySummary) -> str:
    """The oracle and worst swept layers full training follows (by hybrid NLL on the first half
    of the held-out sequences, so the second half judges them; on all of them where too few
    were held out to split), and by validation loss, saying whether the measures disagree."""
    by = b.oracle_by.by
    nll, loss = by["hybrid_nll"], by["val_loss"]
    half = by.get("hybrid_nll_select") if b.oracle_by.chosen_by == "hybrid_nll_select" else None
    if half:
        line = (f"the oracle layer by hybrid NLL on the first half of the held-out sequences is "
                f"{half.oracle} and the worst {half.worst} (full training follows these, "
                "and the second half, which did not choose them, judges them); on all held-out "
                f"sequences, {nll.oracle} and {nll.worst}; by validation loss, "
                f"{loss.oracle} and {loss.worst}")
    else:
        line = (f"the oracle layer by hybrid NLL is {nll.oracle} and the worst {nll.worst} "
                f"(full training follows these; chosen and judged on the same held-out "
                f"sequences: too few to split); by validation loss, "
                f"{loss.oracle} and {loss.worst}")
    split = [w for w, disagree in (("oracle", b.oracle_by.oracle_disagree),
                                   ("worst layer", b.oracle_by.worst_disagree)) if disagree]
    return line + (f": the measures disagree on the {' and the '.join(split)}" if split
                   else ": the measures agree")


def _family(rows: list[SpearmanRow]) -> int:
    """How many paired tests Holm's correction ran over (predictors x targets)."""
    return sum(1 for r in rows if not r.is_depth for s in r.targets.values() if s.p is not None)


def seed_cell(r: SeedSpread) -> str:
    sd = number(r.sd)
    return (f"{r.mean:.4g}" + (f" +- {sd:.2g}" if sd is not None else "")
            + f" [{r.min:.4g}, {r.max:.4g}]")


def seed_table(seeds: SeedInfo | None) -> list[dict]:
    """One line per swept layer: its seeds, and each measure's mean +- sd [min, max] over
    them (dihal.uncertainty.seed_spread)."""
    spread = seeds.spread if seeds else {}
    if not spread:
        return []
    first = next(iter(spread.values()))
    return [{"layer": row.layer, "seeds": row.n_seeds,
             **{f"{m} mean +- sd [min, max]": seed_cell(spread[m][i]) for m in spread}}
            for i, row in enumerate(first)]


def _seed_summary(b: BridgeabilitySummary) -> str:
    seeds = b.seeds
    if not seeds:
        return ("Each swept layer was trained under one seed: the intervals cover the choice of "
                "layers, not the bridge's training seed (bridge_sweep seeds and seed_layers, or "
                "the driver's --seeds and --seed-layers).")
    o = seeds.oracle
    line = (f"Each swept layer was trained under up to {seeds.n_seeds} seeds: every "
            "Spearman, paired test and the oracle above use the per-layer mean over seeds, with "
            "a two-level resample (layers, then seeds within layers). Over resampled seeds the "
            f"oracle by hybrid NLL stays layer {o.oracle} in {o.oracle_share:.0%} of "
            "replicates")
    if o.l_star_rank is not None:
        line += (f"; l* ranks {o.l_star_rank} of {len(b.swept_layers)} (95 % "
                 f"[{o.l_star_rank_low}, {o.l_star_rank_high}]), {o.gap:.3g} above the "
                 f"best mean NLL (95 % [{o.gap_low:.3g}, {o.gap_high:.3g}])")
    return line + ". The spread between seeds at each swept layer:"


def seed_counts(seeds: SeedInfo | None) -> dict[int, int]:
    """layer -> its training seeds (the kept bridge and its replicates), from the spread rows;
    {} where every swept layer had one."""
    return seeds.counts() if seeds else {}


def _seed_coverage(seeds: SeedInfo, on_cpu: bool) -> str:
    """Which layers had how many seeds; where fewer than all had the most, what bringing the
    others up would cost by the replicates' own timings, and on the CPU that the subset is what
    fits the run's budget. "" where every swept layer had one seed."""

    counts = seed_counts(seeds)
    if not counts:
        return ""
    by_n: dict[int, list[int]] = {}
    for ll, n in sorted(counts.items()):
        by_n.setdefault(n, []).append(ll)
    line = "Training seeds per swept layer: " + "; ".join(
        f"{n} at {layers_text(ls)}" for n, ls in sorted(by_n.items(), reverse=True)) + "."
    top, short = max(by_n), [ll for ll, n in counts.items() if n < max(by_n)]
    reps, rep_s = seeds.replicates, seeds.replicate_seconds
    if not short or not reps or rep_s is None:
        return line
    each = rep_s / reps
    more = sum(top - counts[ll] for ll in short) * each
    line += (f" The {reps} replicates took {rep_s:.0f} s ({each:.0f} s each; the kept bridges "
             f"{seeds.bridge_seconds or 0:.0f} s in all): {top} seeds on the other "
             f"{len(short)} layer{'s' if len(short) > 1 else ''} would add about {more:.0f} s")
    if seeds.bridge_seconds:
        line += f", {more / seeds.bridge_seconds:.0%} of the kept bridges' time"
    if on_cpu:
        n, k = SEED_SUBSET["cpu"]
        return line + (f". On the CPU the sweep trains replicates on a subset, what fits the run's "
                       f"budget (the driver's cpu default: {n} seeds on {k} swept layers, evenly "
                       "spread; --seeds and --seed-layers, or bridge_sweep seeds and seed_layers, "
                       "choose others).")
    return line + (". The replicates cover the layers the sweep's seed_layers named (bridge_sweep "
                   "seeds and seed_layers; the driver's --seeds, --seed-layers).")


def _bridgeability_head(x: ReportInputs) -> str:
    """The oracle layers and geometry's pick: what the section's tests are about."""
    b = x.bridges.info
    return (f"Over {len(b.swept_layers)} swept layers {_oracle_sentence(b)}; geometry picked "
            f"{b.l_star}.")


def _exploratory_summary(x: ReportInputs) -> str:
    """The other predictors' standings, labelled exploratory where the paragraph starts (the
    primary test is read before it): S_l's standing against depth on -val loss and who is above
    depth on any target (_exploratory), then the highest Spearman against -val loss and, per
    target, how many predictors the paired test puts above or below depth."""
    typed = x.bridges.info.spearman
    rows = {r.predictor: r for r in typed}
    geo = rows.get(f"S_l ({x.configs.primary_norm})")
    text = _exploratory(rows, geo, _family(typed))
    depth = rows.pop(DEPTH, None)
    rho = {k: number(r.of().rho) for k, r in rows.items() if r.of()}
    rho = {k: v for k, v in rho.items() if v is not None}
    if not rho or depth is None:
        return text + "."
    best = max(rho, key=rho.get)
    parts = []
    for target, label in (("val_loss", "-val loss"), ("hybrid_nll", "-hybrid NLL")):
        above = [k for k, r in rows.items() if r.of(target) and r.of(target).vs_depth == ABOVE]
        below = [k for k, r in rows.items() if r.of(target) and r.of(target).vs_depth == BELOW]
        parts.append(f"against {label}, " + (f"{len(above)} above depth ({', '.join(above)})"
                                             if above else "none above depth")
                     + f", {len(below)} below it")
    return (text + f". The highest Spearman against -val loss is {best}'s, {rho[best]:.2f}; "
            f"depth's is {number(depth.of().rho) or float('nan'):.2f}; " + "; ".join(parts) + ".")


def _spearman_table(rows: list[SpearmanRow]) -> list[dict]:
    """One line per predictor: Spearman with its interval per target, and where it stands
    against depth for -val loss and -hybrid NLL (the paired test)."""
    return [{"predictor": r.predictor, **{f"vs -{t}": interval(r.of(t)) for t in TARGETS},
             "against depth (val loss)": r.of().vs_depth if r.of() else "",
             "against depth (hybrid NLL)": r.of("hybrid_nll").vs_depth if r.of("hybrid_nll")
             else ""} for r in rows]


def _paired_table(rows: list[SpearmanRow]) -> list[dict]:
    """One line per predictor and target: the paired difference from depth's Spearman with
    its interval, the raw and Holm-corrected p-values, the verdict, and the partial Spearman
    given depth with its interval."""
    return [{"predictor": r.predictor, "target": f"-{t}", "Spearman": interval(s),
             "minus depth's [95 %]": triple(s.difference()),
             "p": "" if s.p is None else f"{s.p:.3g}",
             "p (Holm)": "" if s.p_holm is None else f"{s.p_holm:.3g}",
             "against depth": s.vs_depth,
             "partial given depth [95 %]": partial_cell(s)}
            for r in rows if not r.is_depth for t, s in r.targets.items() if s.p is not None]


def partial_cell(s: Spearman) -> str:
    """The partial Spearman given depth with its interval and the share of resamples where it
    was undefined (never dropped silently); with the interval suppressed, why."""

    value, lo, hi = s.partial_interval()
    share = number(s.partial_undefined)
    if value is None or share is None:
        return triple((value, lo, hi))
    if share > MAX_UNDEFINED:
        return (f"{value:+.2f} (no interval: undefined in {share:.0%} of resamples, where the "
                "predictor or the target ranks the drawn layers as depth does; an interval "
                "over the rest would rest on the few layers that break the tie)")
    return triple((value, lo, hi)) + f" (undefined in {share:.1%} of resamples)"


def _regression_summary(rows: list[RegressionRow], swept: list[int]) -> str:
    if not rows:
        return ("No regression control was trained for these swept layers: materialise "
                "regression_sweep_<b> (the sweep job does) and then bridgeability again.")
    nll = [r.layer for r in rows if r.bridge_better_nll]
    rec = [r.layer for r in rows if r.bridge_better_recon]
    n = len(rows)
    verdict = ("The diffusion bridge beats the regressor" if len(nll) == n else
               "The regressor is at least as good as the diffusion bridge" if not nll else
               "Neither wins everywhere")
    missing = sorted(set(swept) - {r.layer for r in rows})
    return (f"{verdict}: against the closed-form ridge map on the same training pairs, the bridge "
            f"has the lower hybrid NLL "
            f"at {len(nll)} of {n} layers" + (f" ({', '.join(map(str, nll))})" if nll else "")
            + f" and the lower reconstruction error at {len(rec)} of {n}."
            + (f" {LOSING_TO_THE_BAR}" if len(nll) < n else "")
            + (f" Layers without a control: {', '.join(map(str, missing))}." if missing else ""))


# What the ridge control is, and what losing to it says: the report reads it as no more
RIDGE_BAR = ("a positionwise linear map of each token's own hs[0], blind to the prefix, while h_l "
             "at l >= 1 depends on the prefix: a context-free linear lower bar, not the best a "
             "denoiser can do")
LOSING_TO_THE_BAR = ("The ridge map is a context-free linear lower bar: a causal bridge sees "
                     "everything it sees, so where the bridge loses to it the bridge is "
                     "undertrained or too small.")


def primary_sentence(t: PrimaryTest, n: int) -> str:
    """The pre-registered primary test read out: what was tested, its p and the smallest p
    its design could reach, and the verdict, which says when the design could not have told
    the two apart (and what sweep could)."""

    alpha = f"{t.alpha:g}"
    head = (f"The pre-registered primary test ({t.predictor} against depth on -hybrid NLL over "
            f"{n} swept layers, one-sided, {t.n_boot:,} resamples of layers): Spearman "
            f"{t.rho:.2f} against depth's {t.rho_reference:.2f}, difference {t.diff:+.2f}, "
            f"p = {t.p:.3g}; the smallest p these layers allow is {t.p_min:.3g} (in "
            f"{t.ties:.0%} of resamples {t.predictor} and depth rank the drawn layers alike, "
            "and no outcome of the bridges can separate them there)")
    if t.verdict == PRIMARY_BETTER:
        return head + (f": geometry predicts the bridges' hybrid NLL better than depth does "
                       f"(p < {alpha})")
    if t.verdict != PRIMARY_UNDECIDABLE:
        return head + (f": geometry and depth cannot be told apart at these {n} layers (p >= "
                       f"{alpha}), though the design could have told them apart (its smallest "
                       f"p is under {alpha})")
    line = head + (f": the design cannot decide: at these {n} swept layers no outcome could "
                   f"have told geometry and depth apart (smallest attainable p >= {alpha})")
    if t.p_min_all is not None:
        line += (f"; over all {t.layers_all} candidate layers the floor is {t.p_min_all:.2g}"
                 + (f", and {t.layers_needed} evenly spread swept layers bring it under {alpha} "
                    "(--layers, --all-layers)" if t.layers_needed is not None else
                    f", still not under {alpha}: no sweep of this backbone can decide it"))
    return line


def _exploratory(rows: dict[str, SpearmanRow], geo: SpearmanRow | None, family: int) -> str:
    """The other predictor x target standings against depth, as exploratory findings."""
    above = [r.predictor for r in rows.values() if not r.is_depth
             for t in TARGETS if r.of(t) and r.of(t).vs_depth == ABOVE]
    val = geo.of() if geo else None
    return (f"Exploratory, not the primary test (two-sided, Holm over {family} predictor x "
            "target tests): "
            + (f"against -val loss {geo.predictor} is {val.vs_depth} depth"
               + (f" (difference {triple(val.difference())})" if val.diff is not None else "")
               if val and val.vs_depth else f"no standing of {geo.predictor if geo else 'S_l'} "
               "against -val loss")
            + ("; above depth on some target: " + ", ".join(dict.fromkeys(above))
               if above else "; no predictor above depth on any target"))


def primary_answer(t: PrimaryTest, n: int) -> str:
    """The primary test's verdict in one sentence, with its key numbers: the Spearmans, the
    difference and its one-sided lower bound, p and the smallest p the design allows."""
    numbers = (f"Spearman {t.rho:.2f} against depth's {t.rho_reference:.2f}, difference "
               f"{t.diff:+.2f} (one-sided {1 - t.alpha:.0%} lower bound {t.low:+.2f}), p = "
               f"{t.p:.3g}, smallest attainable {t.p_min:.2g}")
    if t.verdict == PRIMARY_BETTER:
        return (f"Yes: geometry predicts the bridges' hybrid NLL better than depth over {n} "
                f"layers (pre-registered test: {numbers})")
    if t.verdict != PRIMARY_UNDECIDABLE:
        return (f"Not shown: geometry does not predict the bridges' hybrid NLL significantly "
                f"better than depth over {n} layers, though the design could have shown it "
                f"(pre-registered test: {numbers})")
    more = ("" if t.p_min_all is None else
            f"; {t.layers_needed} evenly spread layers could" if t.layers_needed is not None
            else "; no sweep of this backbone could")
    return (f"Undecided: at these {n} layers no outcome could tell geometry from depth "
            f"(pre-registered test: {numbers}{more})")


def answer_geometry_vs_depth(x: ReportInputs) -> tuple[str, str]:
    """Does the geometry score (primary normalisation) predict bridgeability better than
    depth? Answered by the pre-registered primary test (one-sided, -hybrid NLL), with the
    smallest p its design could reach; the exploratory standings are its section's."""
    t = x.bridges.info.primary
    return primary_answer(t, len(x.bridges.info.swept_layers)) + ".", BRIDGEABILITY


def answer_bridge_vs_regression(x: ReportInputs) -> tuple[str, str]:
    """Does the diffusion bridge beat its regression control (hybrid NLL), at how many layers;
    the two hybrid NLLs at l* where it has a control."""
    rows = x.bridges.info.regression
    if not rows:
        return ("Whether the diffusion bridge beats its regression control is not settled: no "
                "control was trained for the swept layers.", REGRESSION)
    wins = [r.layer for r in rows if r.bridge_better_nll]
    n = len(rows)
    ridge = "the ridge map (closed-form, a context-free linear lower bar)"
    if len(wins) == n:
        verdict = f"Yes: the diffusion bridge beats {ridge} on hybrid NLL at all {n} layers"
    elif not wins:
        verdict = (f"No: {ridge} is at least as good as the diffusion bridge on hybrid NLL at "
                   f"all {n} layers, so the bridges are undertrained or too small")
    else:
        listed = f" ({', '.join(map(str, wins))})" if len(wins) <= 6 else ""
        verdict = (f"Not everywhere: the diffusion bridge beats {ridge} on hybrid NLL at "
                   f"{len(wins)} of {n} layers{listed}")
    l_star = x.bridges.info.l_star
    at = next((r for r in rows if r.layer == l_star), None)
    numbers = ("" if at is None else f"; at l* = {l_star}, {at.bridge_hybrid_nll:.3f} against "
               f"{at.regression_hybrid_nll:.3f}")
    return f"{verdict}{numbers}.", REGRESSION


def bridgeability_section(r: Document, x: ReportInputs) -> None:
    r.h2("2. Does the score predict bridgeability?", BRIDGEABILITY)
    r.p(_bridgeability_head(x))
    _primary_paragraph(r, x)
    typed = x.bridges.info.spearman
    if explored := _exploratory_summary(x):
        r.p(explored)
    r.p("Exploratory: every other predictor x target pair. "
        "Spearman correlation of each predictor with -val loss, -reconstruction error and "
        "-hybrid NLL over the swept layers, with a 95 % percentile bootstrap interval over layers "
        "(2000 resamples, the same for every predictor). Each rival predictor enters with the "
        "sign fixed before the sweep under which higher should mean easier (a leading minus: "
        "lower should). A predictor is marked above or below depth where the paired difference "
        "of its Spearman and depth's (both recomputed on the same resampled layers) differs from "
        "0: its two-sided p-value, from inverting the percentile interval, is under 0.05 after "
        f"Holm's correction over all {_family(typed)} predictor x target tests. Two overlapping "
        "intervals are not the test: both statistics come from the same layers.")
    r.table(_spearman_table(typed),
            ["predictor", "vs -val_loss", "vs -recon_error", "vs -hybrid_nll",
             "against depth (val loss)", "against depth (hybrid NLL)"])
    paired = _paired_table(typed)
    if paired:
        r.p("The paired test per predictor and target, and the partial Spearman of the "
            "predictor with the target given depth (what it says beyond depth; undefined where "
            "the predictor ranks the layers as depth does):")
        r.table(paired, list(paired[0]))
    r.p(_seed_summary(x.bridges.info))
    seeds = seed_table(x.bridges.info.seeds)
    if seeds:
        r.table(seeds, list(seeds[0]))
        r.p(_seed_coverage(x.bridges.info.seeds, on_cpu(x)))
    r.image(x.plots.scatter, "S_l vs bridge validation loss per normalisation, and the depth control")
    r.p("Each swept layer: validation loss (the training loss averaged over t in 0.1..0.9, "
        "where x_t still carries most of the target), the same loss at t = 1 alone (t1_loss: "
        "from the condition only, what the sampler's first step faces; n/a where not "
        "measured), and what generation sees: reconstruction error and hybrid NLL.")
    r.table([s.to_dict() for s in x.bridges.layers],
            ["layer", "init_val_loss", "val_loss", "t1_loss", "recon_error", "hybrid_nll",
             "backbone_nll", "top1_agreement", "train_steps", "seconds"], ".4g")
    r.p("The protocol every swept layer was trained under:")
    counts = seed_counts(x.bridges.info.seeds)
    proto: dict = x.bridges.protocol.to_dict()  # the oracle's; the seeds are each layer's
    if len(set(counts.values())) > 1:
        proto["seeds"] = "per layer (the seed table above): " + ", ".join(
            f"{ll}: {n}" for ll, n in sorted(counts.items()))
    r.table(key_value(proto), ["setting", "value"])


def _primary_paragraph(r: Document, x: ReportInputs) -> None:
    """The primary test: what was fixed before the sweep, its outcome and its design's floor."""
    t = x.bridges.info.primary
    r.p("The primary test, fixed before any bridge was trained: S_l under the primary "
        "normalisation against depth (-l), on -hybrid NLL (the measure full training follows, "
        "the one closest to generation), one-sided (H1: S_l's Spearman with the target is "
        f"higher than depth's). Each of {t.n_boot:,} resamples draws the swept layers with "
        "replacement (and each drawn layer's training seeds) and recomputes both correlations; "
        "p = (1 + resamples whose difference is <= 0) / (1 + resamples). Where S_l and depth "
        "rank the drawn layers alike their correlations with any target are equal, so those "
        "resamples bound p from below whatever the bridges measure: that floor is the smallest "
        "p the design can reach (the p a target ranked exactly as S_l would get). "
        + primary_sentence(t, len(x.bridges.info.swept_layers)) + ".")
    r.table([{"predictor": t.predictor, "target": f"-{t.target}", "Spearman": f"{t.rho:.3f}",
              "depth's": f"{t.rho_reference:.3f}", "difference": f"{t.diff:+.3f}",
              f"one-sided {1 - t.alpha:.0%} lower bound": f"{t.low:+.3f}",
              "p (one-sided)": f"{t.p:.3g}", "smallest attainable p": f"{t.p_min:.3g}",
              "resamples tied": f"{t.ties:.1%}",
              "smallest p, all candidates": "n/a" if t.p_min_all is None else
              f"{t.p_min_all:.3g} ({t.layers_all} layers)", "verdict": t.verdict}],
            ["predictor", "target", "Spearman", "depth's", "difference",
             f"one-sided {1 - t.alpha:.0%} lower bound", "p (one-sided)",
             "smallest attainable p", "resamples tied", "smallest p, all candidates", "verdict"])


def regression_section(r: Document, x: ReportInputs) -> None:
    rows = x.bridges.info.regression
    r.h2("2a. The bridge against a regression control", REGRESSION)
    r.p(_regression_summary(rows, x.bridges.info.swept_layers))
    if rows:
        r.p("The regression control of each swept layer is the closed-form ridge map hs[0] -> "
            "h_l fitted on the bridge's own training pairs and standardisation, its penalty "
            f"chosen on the held-out pairs: {RIDGE_BAR}. Both are measured the same way on "
            "held-out text. The eval's regression row at l* is a network: the bridge's, "
            "trained only at t = 1 with the full budget.")
        r.table([row.to_dict() for row in rows],
                ["layer", "bridge_hybrid_nll", "regression_hybrid_nll", "bridge_recon_error",
                 "regression_recon_error", "bridge_top1", "regression_top1"], ".4g")
