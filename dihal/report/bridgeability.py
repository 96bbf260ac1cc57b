"""The report's bridgeability sections and their answers: does the score predict bridgeability better than depth; does the bridge beat its regression control; the training seeds."""

from __future__ import annotations

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
from dihal.results import ReportInputs
from dihal.rows import (
    ABOVE,
    BELOW,
    DEPTH,
    TARGETS,
    RegressionRow,
    SpearmanRow,
    number,
    regression_rows,
    spearman_rows,
)


def _oracle_sentence(b: dict) -> str:
    """The oracle and worst swept layers by hybrid NLL (full training follows them) and by
    validation loss, saying whether the two measures disagree; older infos name one pair."""
    by = b.get("oracle_by", {}).get("by", {})
    nll, loss = by.get("hybrid_nll"), by.get("val_loss")
    if not (nll and loss):
        return f"the oracle layer is {b['oracle']} and the worst {b['worst']}"
    line = (f"the oracle layer by hybrid NLL is {nll['oracle']} and the worst {nll['worst']} "
            f"(full training follows these); by validation loss, {loss['oracle']} and "
            f"{loss['worst']}")
    split = [w for w, k in (("oracle", "oracle_disagree"), ("worst layer", "worst_disagree"))
             if b["oracle_by"].get(k)]
    return line + (f": the two measures disagree on the {' and the '.join(split)}" if split
                   else ": the two measures agree")


def _family(rows: list[SpearmanRow]) -> int:
    """How many paired tests Holm's correction ran over (predictors x targets)."""
    return sum(1 for r in rows if not r.is_depth for s in r.targets.values() if s.p is not None)


def picks(v: dict) -> str:
    return ", ".join(f"{ll}: {sh:.0%}" for ll, sh in list(v["picks"].items())[:4])


def seed_cell(r: dict) -> str:
    sd = number(r.get("sd"))
    return (f"{r['mean']:.4g}" + (f" +- {sd:.2g}" if sd is not None else "")
            + f" [{r['min']:.4g}, {r['max']:.4g}]")


def seed_table(seeds: dict) -> list[dict]:
    """One line per swept layer: its seeds, and each measure's mean +- sd [min, max] over
    them (dihal.uncertainty.seed_spread)."""
    spread = seeds.get("spread", {})
    if not spread:
        return []
    first = next(iter(spread.values()))
    return [{"layer": row["layer"], "seeds": row["n_seeds"],
             **{f"{m} mean +- sd [min, max]": seed_cell(spread[m][i]) for m in spread}}
            for i, row in enumerate(first)]


def _seed_summary(b: dict) -> str:
    seeds = b.get("seeds") or {}
    if not seeds:
        return ("Each swept layer was trained under one seed: the intervals cover the choice of "
                "layers, not the bridge's training seed (bridge_sweep seeds and seed_layers, or "
                "the driver's --seeds and --seed-layers).")
    o = seeds["oracle"]
    line = (f"Each swept layer was trained under up to {seeds['n_seeds']} seeds: every "
            "Spearman, paired test and the oracle above use the per-layer mean over seeds, with "
            "a two-level resample (layers, then seeds within layers). Over resampled seeds the "
            f"oracle by hybrid NLL stays layer {o['oracle']} in {o['oracle_share']:.0%} of "
            "replicates")
    if "l_star_rank" in o:
        line += (f"; l* ranks {o['l_star_rank']} of {len(b['swept_layers'])} (95 % "
                 f"[{o['l_star_rank_low']}, {o['l_star_rank_high']}]), {o['gap']:.3g} above the "
                 f"best mean NLL (95 % [{o['gap_low']:.3g}, {o['gap_high']:.3g}])")
    return line + ". The spread between seeds at each swept layer:"


def seed_counts(seeds: dict) -> dict[int, int]:
    """layer -> its training seeds (the kept bridge and its replicates), from the spread rows;
    {} where every swept layer had one."""
    first = next(iter((seeds.get("spread") or {}).values()), [])
    return {int(r["layer"]): int(r["n_seeds"]) for r in first}


def _seed_coverage(seeds: dict, on_cpu: bool | None) -> str:
    """Which layers had how many seeds; where fewer than all had the most, what bringing the
    others up would cost by the replicates' own timings, and on the CPU that the subset is what
    fits the run's budget. "" where every swept layer had one seed."""
    from dihal.profiles import SEED_SUBSET

    counts = seed_counts(seeds)
    if not counts:
        return ""
    by_n: dict[int, list[int]] = {}
    for ll, n in sorted(counts.items()):
        by_n.setdefault(n, []).append(ll)
    line = "Training seeds per swept layer: " + "; ".join(
        f"{n} at {layers_text(ls)}" for n, ls in sorted(by_n.items(), reverse=True)) + "."
    top, short = max(by_n), [ll for ll, n in counts.items() if n < max(by_n)]
    reps, rep_s = seeds.get("replicates"), seeds.get("replicate_seconds")
    if not short or not reps or rep_s is None:
        return line
    each = rep_s / reps
    more = sum(top - counts[ll] for ll in short) * each
    line += (f" The {reps} replicates took {rep_s:.0f} s ({each:.0f} s each; the kept bridges "
             f"{seeds.get('bridge_seconds', 0):.0f} s in all): {top} seeds on the other "
             f"{len(short)} layer{'s' if len(short) > 1 else ''} would add about {more:.0f} s")
    if seeds.get("bridge_seconds"):
        line += f", {more / seeds['bridge_seconds']:.0%} of the kept bridges' time"
    if on_cpu:
        n, k = SEED_SUBSET["cpu"]
        return line + (f". On the CPU the sweep trains replicates on a subset, what fits the run's "
                       f"budget (the driver's cpu default: {n} seeds on {k} swept layers, evenly "
                       "spread; --seeds and --seed-layers, or bridge_sweep seeds and seed_layers, "
                       "choose others).")
    return line + (". The replicates cover the layers the sweep's seed_layers named (bridge_sweep "
                   "seeds and seed_layers; the driver's --seeds, --seed-layers).")


def _bridgeability_summary(x: ReportInputs) -> str:
    typed = spearman_rows(x.bridgeability["spearman"])
    rows = {r.predictor: r for r in typed}
    depth = rows.pop(DEPTH, None)
    b = x.bridgeability
    head = (f"Over {len(b['swept_layers'])} swept layers {_oracle_sentence(b)}; geometry picked "
            f"{b['l_star']}")
    rho = {k: number(r.of().rho) for k, r in rows.items() if r.of()}
    rho = {k: v for k, v in rho.items() if v is not None}
    if not rho or depth is None:
        return head + "."
    best = max(rho, key=rho.get)
    parts = []
    for target, label in (("val_loss", "-val loss"), ("hybrid_nll", "-hybrid NLL")):
        above = [k for k, r in rows.items() if r.of(target) and r.of(target).vs_depth == ABOVE]
        below = [k for k, r in rows.items() if r.of(target) and r.of(target).vs_depth == BELOW]
        parts.append(f"against {label}, " + (f"{len(above)} above depth ({', '.join(above)})"
                                             if above else "none above depth")
                     + f", {len(below)} below it")
    return (head + f". Against -val loss the highest Spearman is {best}'s, {rho[best]:.2f}; depth's "
            f"is {number(depth.of().rho) or float('nan'):.2f}. By the paired difference from "
            f"depth (95 %, Holm-corrected over {_family(typed)} predictor x target tests): "
            + "; ".join(parts) + ".")


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
             "partial given depth [95 %]": triple(s.partial_interval())}
            for r in rows if not r.is_depth for t, s in r.targets.items() if s.p is not None]


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
            + (f" Layers without a control: {', '.join(map(str, missing))}." if missing else ""))


def answer_geometry_vs_depth(x: ReportInputs) -> tuple[str, str]:
    """Does the geometry score (primary normalisation) predict the bridges' validation loss
    better than depth does: above, below, or not distinguishable (95 % intervals)?"""
    primary = x.configs["layer_score"]["primary_norm"]
    rows = {r.predictor: r for r in spearman_rows(x.bridgeability["spearman"])}
    geo, depth = rows.get(f"S_l ({primary})"), rows.get(DEPTH)
    n = len(x.bridgeability["swept_layers"])
    if geo is None or depth is None or geo.of() is None or depth.of() is None:
        return (f"Whether geometry beats depth is not settled: no Spearman of S_l ({primary}) "
                f"and of depth against -val loss over the {n} swept layers.", BRIDGEABILITY)
    g, d = geo.of(), depth.of()
    how = "by the paired difference of the Spearman correlations (95 %, Holm-corrected)"
    verdict = {ABOVE: f"geometry predicts how well a bridge learns better than depth does, {how}",
               BELOW: f"depth predicts how well a bridge learns better than geometry does, {how}"
               }.get(g.vs_depth, f"geometry and depth cannot be told apart at {n} swept layers "
                                 f"{how}")
    nll = geo.of("hybrid_nll")
    rivals = [r.predictor for r in rows.values()
              if not r.is_depth and r is not geo and r.of() and r.of().vs_depth == ABOVE]
    return (f"Over {n} swept layers, S_l ({primary}) has Spearman {interval(g)} with -val loss "
            f"and depth {interval(d)}"
            + (f" (difference {triple(g.difference())})" if g.diff is not None else "")
            + f": {verdict}"
            + (f"; against -hybrid NLL it is {nll.vs_depth} depth" if nll and nll.vs_depth in
               (ABOVE, BELOW) else "; against -hybrid NLL it is not distinguishable from depth"
               if nll and nll.vs_depth else "")
            + (f"; predictors above depth: {', '.join(rivals)}" if rivals else "") + ".",
            BRIDGEABILITY)


def answer_bridge_vs_regression(x: ReportInputs) -> tuple[str, str]:
    """Does the diffusion bridge beat its regression control (hybrid NLL), at how many layers?"""
    rows = regression_rows(x.bridgeability.get("regression", []))
    if not rows:
        return ("Whether the diffusion bridge beats its regression control is not settled: no "
                "control was trained for the swept layers.", REGRESSION)
    wins = [r.layer for r in rows if r.bridge_better_nll]
    n = len(rows)
    if len(wins) == n:
        verdict = f"The diffusion bridge beats its regression control at all {n} layers"
    elif not wins:
        verdict = f"The regression control is at least as good as the diffusion bridge at all {n} layers"
    else:
        verdict = (f"The diffusion bridge beats its regression control at {len(wins)} of {n} "
                   f"layers ({', '.join(map(str, wins))}), not everywhere")
    return verdict + " (lower hybrid NLL; the control: the closed-form ridge map per layer).", \
        REGRESSION


def bridgeability_section(r: Document, x: ReportInputs) -> None:
    r.h2("2. Does the score predict bridgeability?", BRIDGEABILITY)
    r.p(_bridgeability_summary(x))
    typed = spearman_rows(x.bridgeability["spearman"])
    r.p("Spearman correlation of each predictor with -val loss, -reconstruction error and "
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
    r.p(_seed_summary(x.bridgeability))
    seeds = seed_table(x.bridgeability.get("seeds") or {})
    if seeds:
        r.table(seeds, list(seeds[0]))
        r.p(_seed_coverage(x.bridgeability["seeds"], on_cpu(x)))
    r.image(x.plots["scatter"], "S_l vs bridge validation loss per normalisation, and the depth control")
    r.p("Each swept layer: validation loss (the training loss averaged over t in 0.1..0.9, "
        "where x_t still carries most of the target), the same loss at t = 1 alone (t1_loss: "
        "from the condition only, what the sampler's first step faces; n/a where not "
        "measured), and what generation sees: reconstruction error and hybrid NLL.")
    r.table(x.sweep_layers, ["layer", "init_val_loss", "val_loss", "t1_loss", "recon_error",
                             "hybrid_nll", "backbone_nll", "top1_agreement", "steps", "seconds"],
            ".4g")
    r.p("The protocol every swept layer was trained under:")
    counts = seed_counts(x.bridgeability.get("seeds") or {})
    proto = dict(x.sweep_protocol)  # the oracle's; the seeds are each layer's
    if len(set(counts.values())) > 1:
        proto["seeds"] = "per layer (the seed table above): " + ", ".join(
            f"{ll}: {n}" for ll, n in sorted(counts.items()))
    r.table(key_value(proto), ["setting", "value"])


def regression_section(r: Document, x: ReportInputs) -> None:
    rows = regression_rows(x.bridgeability.get("regression", []))
    r.h2("2a. The bridge against a regression control", REGRESSION)
    r.p(_regression_summary(rows, x.bridgeability["swept_layers"]))
    if rows:
        r.p("The regression control of each swept layer is the closed-form ridge map hs[0] -> "
            "h_l fitted on the bridge's own training pairs and standardisation, its penalty "
            "chosen on the held-out pairs: it predicts h_l from hs[0] in one step, with no noise "
            "(the best a denoiser can do where h_l is a function of hs[0]). Both are measured the "
            "same way on held-out text. The eval's regression row at l* is a network: the "
            "bridge's, trained only at t = 1 with the full budget.")
        r.table([row.to_dict() for row in rows],
                ["layer", "bridge_hybrid_nll", "regression_hybrid_nll", "bridge_recon_error",
                 "regression_recon_error", "bridge_top1", "regression_top1"], ".4g")
