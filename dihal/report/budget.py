"""The report's section "How the answers move with the training budget" (docs/method.md §2,
budget study).

Pure functions over the study's points (dihal.replace.budget.BudgetPoint: one model at one
layer after a number of optimiser steps), the layer score's l* and, where given, the layers'
S_l: the hybrid NLL of each layer against the budget (a figure), whether and where the bridge
crosses the closed-form ridge map (with a labelled extrapolation where it does not within the
range measured), whether the layer ranking by hybrid NLL moves with the budget, and whether
"geometry vs depth" reads the same at every budget on the study's layers. Every sentence is
computed from the points, and each way it can come out has a test
(tests/unit/test_report_budget.py).

The ridge-started bridge ("residual", dihal.bridge.residual) is our variant, not the paper's:
it has its own table, its own sentence and its own dashed lines, and is never a row of the
paper's table nor a term of its verdicts.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from dihal.report.common import layers_text
from dihal.report.document import Document
from dihal.rows import BUDGET_MODELS, BudgetPoint
from dihal.uncertainty import spearman_interval

BUDGET = "training-budget"  # the section's anchor
BRIDGE, RIDGE, NETWORK, RESIDUAL, BACKBONE = MODELS = BUDGET_MODELS
VARIANT = "our variant, not the paper's"

Index = dict[tuple[str, int], dict[int, float]]  # (model, layer) -> {steps: hybrid NLL}


# ---------------------------------------------------------------- the points


def index_points(points: Sequence[BudgetPoint]) -> Index:
    """(model, layer) -> {steps: hybrid NLL}; a clear error on an unknown model, a non-finite
    NLL or a point given twice."""
    out: Index = {}
    for p in points:
        if p.model not in MODELS:
            raise ValueError(f"budget point of unknown model {p.model!r} (layer {p.layer}, "
                             f"{p.train_steps} steps): the models are {MODELS}")
        if not math.isfinite(p.hybrid_nll):
            raise ValueError(f"the {p.model} point at layer {p.layer}, {p.train_steps} steps has "
                             f"hybrid NLL {p.hybrid_nll}: measure it again")
        curve = out.setdefault((p.model, p.layer), {})
        if p.train_steps in curve:
            raise ValueError(f"two {p.model} points at layer {p.layer}, {p.train_steps} steps: keep "
                             "one point per (model, layer, steps)")
        curve[p.train_steps] = float(p.hybrid_nll)
    return out


def study_layers(index: Index, model: str = BRIDGE) -> list[int]:
    return sorted(layer for m, layer in index if m == model)


def budgets_of(index: Index, model: str = BRIDGE) -> list[int]:
    return sorted({s for (m, _), curve in index.items() if m == model for s in curve})


def floor(index: Index, layer: int) -> float | None:
    """The backbone's NLL for `layer`: its own point where there is one, else the one value
    every backbone point shares, else None."""
    own = index.get((BACKBONE, layer))
    if own:
        return next(iter(own.values()))
    values = {v for (m, _), curve in index.items() if m == BACKBONE for v in curve.values()}
    return values.pop() if len(values) == 1 else None


def steps_text(steps: Sequence[int]) -> str:
    return ", ".join(f"{s:,}" for s in steps)


def layer_label(layer: int, l_star: int) -> str:
    return f"{layer} (l*)" if layer == l_star else str(layer)


# ---------------------------------------------------------------- crossing the ridge map


@dataclass(frozen=True)
class LogFit:
    """hybrid NLL = intercept + slope * log10(steps), least squares over `n` budgets."""

    intercept: float
    slope: float  # nats per tenfold budget
    n: int
    r2: float | None  # None through two points (exact)

    def at(self, steps: float) -> float:
        return self.intercept + self.slope * math.log10(steps)

    def text(self) -> str:
        how = (f"through {self.n} budgets, exact" if self.r2 is None
               else f"least squares over {self.n} budgets, R^2 {self.r2:.2f}")
        sign = "-" if self.slope < 0 else "+"
        return (f"hybrid NLL = {self.intercept:.3f} {sign} {abs(self.slope):.3f} log10(steps) "
                f"({how})")


def fit_log_steps(curve: dict[int, float]) -> LogFit | None:
    """The least-squares line of hybrid NLL against log10(steps); None below two budgets."""
    if len(curve) < 2:
        return None
    xs = [math.log10(s) for s in sorted(curve)]
    ys = [curve[s] for s in sorted(curve)]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = my - slope * mx
    r2 = None
    if len(xs) > 2:
        syy = sum((y - my) ** 2 for y in ys)
        res = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
        r2 = 1.0 - res / syy if syy > 0 else 1.0
    return LogFit(intercept, slope, len(xs), r2)


@dataclass(frozen=True)
class Crossing:
    """Where a layer's bridge (or the variant) crosses the ridge map of the same budget.

    kind: "unmeasured" (no budget with both), "below throughout", "crosses" (above, then below
    from `at` on), "mixed" (below at some budget, above again at a later one), "not crossed".
    For "not crossed", `outcome` says what `fit`, the line through the last two shared budgets
    (a line over all of them carries a flattening curve's steep start past its end), gives:
    "one budget", "never" (it does not fall), or "extrapolated" (it reaches `target`, the ridge
    map's NLL at the largest shared budget, at 10 ** needed_log10 steps). `first`: the line
    through the first two, where there are three or more (whether the curve flattens)."""

    layer: int
    kind: str
    below: tuple[int, ...] = ()
    above: tuple[int, ...] = ()
    at: int | None = None
    gaps: tuple[float, ...] = ()  # bridge - ridge at each shared budget, in order
    fit: LogFit | None = None
    target: float | None = None
    outcome: str | None = None
    needed_log10: float | None = None
    first: LogFit | None = None


def crossing(layer: int, bridge: dict[int, float], ridge: dict[int, float]) -> Crossing:
    shared = sorted(set(bridge) & set(ridge))
    if not shared:
        return Crossing(layer, "unmeasured")
    gaps = tuple(bridge[s] - ridge[s] for s in shared)
    below = tuple(s for s, g in zip(shared, gaps, strict=True) if g < 0)
    above = tuple(s for s in shared if s not in below)
    common = {"below": below, "above": above, "gaps": gaps}
    if below and not above:
        return Crossing(layer, "below throughout", at=shared[0], **common)
    if below and all(s < below[0] for s in above):
        return Crossing(layer, "crosses", at=below[0], **common)
    if below:
        return Crossing(layer, "mixed", **common)
    fit, target = fit_log_steps({s: bridge[s] for s in shared[-2:]}), ridge[shared[-1]]
    first = fit_log_steps({s: bridge[s] for s in shared[:2]}) if len(shared) > 2 else None
    if fit is None:
        return Crossing(layer, "not crossed", target=target, outcome="one budget", **common)
    if fit.slope >= 0:
        return Crossing(layer, "not crossed", fit=fit, target=target, outcome="never",
                        first=first, **common)
    # through the last shared point, at or above the target: it reaches it beyond the range
    needed = (target - fit.intercept) / fit.slope
    return Crossing(layer, "not crossed", fit=fit, target=target, outcome="extrapolated",
                    needed_log10=needed, first=first, **common)


def flattening_text(c: Crossing) -> str:
    """Whether the curve flattens: its slope over the first two budgets against the last two
    ("" with fewer than three budgets)."""
    if c.first is None or c.fit is None:
        return ""
    slopes = (f"{c.first.slope:+.3f} nats per tenfold budget over the first two budgets, "
              f"{c.fit.slope:+.3f} over the last two")
    if c.fit.slope > c.first.slope:
        return (f" The curve flattens ({slopes}): if it keeps flattening, it reaches the ridge "
                "map later than that, or never.")
    return f" The curve does not flatten ({slopes})."


def crossings(index: Index, model: str = BRIDGE) -> list[Crossing]:
    """One Crossing per layer of `model` (the bridge, or the variant) against the ridge map."""
    return [crossing(layer, index[(model, layer)], index.get((RIDGE, layer), {}))
            for layer in study_layers(index, model)]


def rounded(value: float) -> str:
    """`value` to two significant figures, in plain digits with thousands separators where
    it is 10 or more (an extrapolation claims no more)."""
    if value < 10:
        return f"{value:.2g}"
    digits = math.floor(math.log10(value)) - 1
    return f"{round(value / 10 ** digits) * 10 ** digits:,.0f}"


def power_text(log10_steps: float) -> str:
    return rounded(10 ** log10_steps) if log10_steps < 9 else f"10^{log10_steps:.1f}"


def crossing_sentence(c: Crossing, l_star: int, what: str = "the bridge") -> str:
    """What `c` says, as one or two sentences."""
    head = f"Layer {layer_label(c.layer, l_star)}: "
    if c.kind == "unmeasured":
        return (head + f"no budget has both {what} and the ridge map, so whether {what} "
                "crosses it is not measured.")
    shared = sorted(c.below + c.above)
    last = f"{c.gaps[-1]:+.3f} nats at {shared[-1]:,} steps"
    if c.kind == "below throughout":
        return (head + f"{what} is below the ridge map at every budget measured, from the "
                f"smallest ({shared[0]:,} steps) on (by {-max(c.gaps):.3f} to "
                f"{-min(c.gaps):.3f} nats).")
    if c.kind == "crosses":
        return (head + f"{what} crosses the ridge map at {c.at:,} steps: at or above it at "
                f"{steps_text(c.above)} steps, below from {c.at:,} on ({last}).")
    if c.kind == "mixed":
        later = [s for s in c.above if s > c.below[0]]
        return (head + f"{what} is below the ridge map at {steps_text(c.below)} steps but "
                f"at or above it again at {steps_text(later)}: it does not stay below within the "
                "range measured.")
    text = (head + f"{what} stays at or above the ridge map at every budget measured "
            f"({steps_text(shared)} steps; {last}).")
    if c.outcome == "one budget":
        return text + " One budget only: no fit to extrapolate from."
    if c.outcome == "never":
        return (text + f" Extrapolation: the line through the last two budgets, {c.fit.text()}, "
                f"does not fall with steps, so it never reaches the ridge map's "
                f"{c.target:.3f}.")
    ratio = c.needed_log10 - math.log10(shared[-1])
    return (text + f" Extrapolation, not measured: the line through the last two budgets, "
            f"{c.fit.text()}, reaches the ridge map's {c.target:.3f} (its NLL at "
            f"{shared[-1]:,} steps) at about {power_text(c.needed_log10)} steps, "
            f"{power_text(ratio)}x the largest budget measured." + flattening_text(c))


# ---------------------------------------------------------------- the layer ranking


def rankings(index: Index) -> tuple[list[int], dict[int, list[int]]]:
    """(the layers whose bridge was measured at every budget, {steps: those layers ordered by
    the bridge's hybrid NLL, best first})."""
    budgets = budgets_of(index)
    layers = [layer for layer in study_layers(index)
              if set(budgets) <= set(index[(BRIDGE, layer)])]
    return layers, {s: sorted(layers, key=lambda layer: (index[(BRIDGE, layer)][s], layer))
                    for s in budgets}


def order_text(order: Sequence[int]) -> str:
    return " < ".join(map(str, order))


def settled(orders: dict[int, list[int]]) -> tuple[str, int | None]:
    """("one budget" | "stable" | "settles" | "unsettled", the budget from which the order is
    the largest budget's)."""
    budgets = sorted(orders)
    if len(budgets) < 2:
        return "one budget", None
    final = orders[budgets[-1]]
    start = len(budgets) - 1
    while start > 0 and orders[budgets[start - 1]] == final:
        start -= 1
    if start == 0:
        return "stable", budgets[0]
    if start == len(budgets) - 1:
        return "unsettled", None
    return "settles", budgets[start]


def ranking_sentence(index: Index) -> str:
    layers, orders = rankings(index)
    left = [layer for layer in study_layers(index) if layer not in layers]
    note = (f" Layers {', '.join(map(str, left))} are left out of the rankings: not measured at "
            "every budget." if left else "")
    if len(layers) < 2:
        return ("Fewer than 2 layers were measured at every budget: there is no layer ranking "
                "to follow." + note)
    kind, at = settled(orders)
    budgets = sorted(orders)
    if kind == "one budget":
        return (f"One budget only ({budgets[0]:,} steps): whether the layer ranking moves with "
                "the budget cannot be read." + note)
    if kind == "stable":
        return (f"The layer ranking by the bridge's hybrid NLL is the same at every budget "
                f"measured ({order_text(orders[at])}, best first): it does not move between "
                f"{budgets[0]:,} and {budgets[-1]:,} steps." + note)
    if kind == "settles":
        return (f"The layer ranking by the bridge's hybrid NLL moves up to {at:,} steps and "
                f"is the same from there on ({order_text(orders[at])}, best first): verdicts "
                f"are read at {at:,} steps or more." + note)
    return (f"The layer ranking by the bridge's hybrid NLL still moves between the two largest "
            f"budgets ({order_text(orders[budgets[-2]])} at {budgets[-2]:,} steps, "
            f"{order_text(orders[budgets[-1]])} at {budgets[-1]:,}): unsettled in the range "
            "measured." + note)


def spearman_text(x: Sequence[float], y: Sequence[float]) -> tuple[float | None, str]:
    """(rho, "rho [low, high]") of the project's Spearman with its bootstrap over the layers;
    (None, why) below 3 layers or where a side is constant."""
    if len(x) < 3:
        return None, "n/a (fewer than 3 layers)"
    s = spearman_interval(x, y)
    if math.isnan(s["rho"]):
        return None, "undefined (a constant side)"
    lo, hi = s["low"], s["high"]
    return s["rho"], (f"{s['rho']:.2f} [{lo:.2f}, {hi:.2f}]" if math.isfinite(lo)
                      and math.isfinite(hi) else f"{s['rho']:.2f}")


def ranking_pairs(index: Index) -> list[dict]:
    """For each pair of budgets: the Spearman of the layers' bridge hybrid NLL between them."""
    layers, orders = rankings(index)
    rows = []
    for a, b in combinations(sorted(orders), 2):
        x = [index[(BRIDGE, layer)][a] for layer in layers]
        y = [index[(BRIDGE, layer)][b] for layer in layers]
        rows.append({"budgets (steps)": f"{a:,} vs {b:,}",
                     "Spearman of the ranking [95 %]": spearman_text(x, y)[1],
                     "same order": "yes" if orders[a] == orders[b] else "no"})
    return rows


# ---------------------------------------------------------------- geometry vs depth


def closer(rho_s: float | None, rho_depth: float | None) -> str:
    if rho_s is None or rho_depth is None:
        return "undefined"
    if math.isclose(rho_s, rho_depth, abs_tol=1e-12):
        return "tie"
    return "S_l" if rho_s > rho_depth else "depth"


def geometry_rows(index: Index, scores: dict[int, float] | None, l_star: int) -> list[dict]:
    """Per budget: the layers by the bridge's hybrid NLL, and the Spearman of -hybrid NLL with
    depth (-l, shallower is better) and with S_l (where given), and which is closer."""
    layers, orders = rankings(index)
    rows = []
    for s, order in orders.items():
        y = [-index[(BRIDGE, layer)][s] for layer in layers]
        rho_d, depth = spearman_text([-layer for layer in layers], y)
        row = {"steps": s, "layers by hybrid NLL (best first)":
               order_text(layer_label(layer, l_star) for layer in order),
               "Spearman with depth (-l) [95 %]": depth}
        if scores is not None:
            rho_s, geo = spearman_text([scores[layer] for layer in layers], y)
            row |= {"Spearman with S_l [95 %]": geo, "closer": closer(rho_s, rho_d)}
        rows.append(row)
    return rows


def missing_scores(index: Index, scores: dict[int, float] | None) -> list[int]:
    layers, _ = rankings(index)
    return [] if scores is None else [layer for layer in layers if layer not in scores]


def geometry_sentence(index: Index, scores: dict[int, float] | None, l_star: int) -> str:
    layers, orders = rankings(index)
    if len(layers) < 3:
        return ("With fewer than 3 layers measured at every budget, no ranking statistic "
                "compares geometry with depth on the study's layers.")
    if scores is None:
        return ("The layer scores S_l were not given: the table shows the depth control alone "
                "(Spearman of -l with -hybrid NLL at each budget).")
    rows = geometry_rows(index, scores, l_star)
    verdicts = {row["steps"]: row["closer"] for row in rows}
    by_score = sorted(layers, key=lambda layer: (-scores[layer], layer))
    alike = (f" S_l orders these layers as depth does ({order_text(by_score)}), so on them the "
             "two cannot be told apart at any budget." if by_score == sorted(layers) else "")
    if len(set(verdicts.values())) == 1:
        who = next(iter(verdicts.values()))
        what = {"S_l": "S_l ranks them closer to the bridge's hybrid NLL than depth does",
                "depth": "depth ranks them closer to the bridge's hybrid NLL than S_l does",
                "tie": "S_l and depth rank them equally close to the bridge's hybrid NLL",
                "undefined": "no Spearman is defined (a constant side)"}[who]
        return (f"Geometry vs depth reads the same at every budget on these {len(layers)} "
                f"layers: {what} at each ({steps_text(sorted(verdicts))} steps)." + alike)
    groups = {}
    for s, who in sorted(verdicts.items()):
        groups.setdefault(who, []).append(s)
    parts = [f"{'a tie' if who == 'tie' else who + ' closer'} at {steps_text(ss)} steps"
             for who, ss in groups.items()]
    return (f"Geometry vs depth reads differently with the budget on these {len(layers)} "
            f"layers: {'; '.join(parts)}. A verdict read at one budget does not hold at "
            "another." + alike)


# ---------------------------------------------------------------- tables


def paper_rows(points: Sequence[BudgetPoint], index: Index, l_star: int) -> list[dict]:
    """One row per (layer, budget) of the paper's bridge with its controls beside it (the ridge
    map, the network regression and the backbone); never the variant."""
    by = {(p.model, p.layer, p.train_steps): p for p in points}
    rows = []
    for layer in study_layers(index):
        for s in sorted(index[(BRIDGE, layer)]):
            b = by[(BRIDGE, layer, s)]
            ridge = index.get((RIDGE, layer), {}).get(s)
            rows.append({
                "layer": layer_label(layer, l_star), "steps": s, "tokens": b.tokens,
                "repeats": b.tokens / b.distinct_tokens if b.distinct_tokens else None,
                "bridge NLL": b.hybrid_nll, "ridge NLL": ridge,
                "network NLL": index.get((NETWORK, layer), {}).get(s),
                "backbone NLL": floor(index, layer),
                "bridge - ridge": None if ridge is None else b.hybrid_nll - ridge,
                "bridge val_loss": b.val_loss, "bridge t1_loss": b.t1_loss,
                "bridge recon_error": b.recon_error, "bridge seconds": b.seconds})
    return rows


def variant_rows(points: Sequence[BudgetPoint], index: Index, l_star: int) -> list[dict]:
    """One row per (layer, budget) of the ridge-started bridge, our variant, with the ridge
    map and the paper's bridge of the same budget beside it."""
    rows = []
    for p in sorted((p for p in points if p.model == RESIDUAL), key=lambda p: (p.layer, p.train_steps)):
        ridge = index.get((RIDGE, p.layer), {}).get(p.train_steps)
        bridge = index.get((BRIDGE, p.layer), {}).get(p.train_steps)
        rows.append({
            "layer": layer_label(p.layer, l_star), "steps": p.train_steps,
            f"residual NLL ({VARIANT})": p.hybrid_nll, "ridge NLL": ridge,
            "bridge NLL": bridge,
            "residual - ridge": None if ridge is None else p.hybrid_nll - ridge,
            "residual - bridge": None if bridge is None else p.hybrid_nll - bridge,
            "val_loss": p.val_loss, "t1_loss": p.t1_loss, "recon_error": p.recon_error,
            "seconds": p.seconds})
    return rows


def variant_sentence(index: Index) -> str:
    """Where the ridge-started bridge (our variant) ends below its starting point, the ridge map."""
    name = f"The ridge-started bridge ({VARIANT})"
    pairs = [(layer, s, nll - index[(RIDGE, layer)][s])
             for (m, layer), curve in sorted(index.items()) if m == RESIDUAL
             for s, nll in sorted(curve.items()) if s in index.get((RIDGE, layer), {})]
    if not any(m == RESIDUAL for m, _ in index):
        return f"{name} was not run in this study."
    if not pairs:
        return f"{name} has no point with a ridge map of the same layer and budget to compare."
    below = [(layer, s, g) for layer, s, g in pairs if g < 0]
    n = len(pairs)
    if len(below) == n:
        gaps = [-g for _, _, g in pairs]
        return (f"{name} is below the ridge map, its starting point, at every layer and budget "
                f"measured ({n} points, by {min(gaps):.3f} to {max(gaps):.3f} nats): training "
                "added what the context brings.")
    if not below:
        return (f"{name} is at or above the ridge map, its starting point, at every layer and "
                f"budget measured ({n} points): training did not take it below where it "
                "started.")
    where = "; ".join(f"layer {layer} at {s:,} steps ({g:+.3f})" for layer, s, g in below)
    return (f"{name} is below the ridge map, its starting point, at {len(below)} of {n} "
            f"(layer, budget) points ({where}) and at or above it at the others.")


# ---------------------------------------------------------------- the figure


def plot_budget(index: Index, l_star: int, title: str) -> bytes:
    """Hybrid NLL against optimiser steps (log scale), one panel per layer: the bridge, the
    ridge map, the network regression, the variant (dashed, labelled as ours) and the backbone
    (grey, the floor). Deterministic PNG bytes (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = study_layers(index)
    cols = min(4, len(layers))
    rows = -(-len(layers) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(max(3.6 * cols, 5.6), 3.2 * rows), squeeze=False)
    styles = ((BRIDGE, "o-", "C0", "bridge (paper)"), (RIDGE, "s--", "C1", "ridge map"),
              (NETWORK, "^:", "C2", "network regression"),
              (RESIDUAL, "D--", "C3", f"residual ({VARIANT})"))
    for ax, layer in zip(axes.flat, layers, strict=False):
        for model, style, color, label in styles:
            curve = index.get((model, layer))
            if curve:
                ss = sorted(curve)
                ax.plot(ss, [curve[s] for s in ss], style, color=color, ms=4, label=label)
        base = floor(index, layer)
        if base is not None:
            ax.axhline(base, color="grey", lw=1, label="backbone (floor)")
        ax.set_xscale("log", base=2)
        ticks = sorted({s for (_, at), c in index.items() if at == layer for s in c if s > 0})
        ax.set_xticks(ticks, [f"{s:,}" for s in ticks], fontsize=7)
        ax.minorticks_off()
        ax.set_title(f"layer {layer_label(layer, l_star)}", fontsize=9)
        ax.set_xlabel("optimiser steps")
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(layers):]:
        ax.set_visible(False)
    axes[0][0].set_ylabel("held-out hybrid NLL (nats)")
    legend = {}  # every series of every panel, once (a layer may lack the variant)
    for ax in axes.flat[:len(layers)]:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    axes[0][0].legend(list(legend.values()), list(legend), fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


# ---------------------------------------------------------------- the section


def intro_sentence(points: Sequence[BudgetPoint], index: Index) -> str:
    budgets, layers = budgets_of(index), study_layers(index)
    bridge = [p for p in points if p.model == BRIDGE and p.train_steps == budgets[-1]]
    repeats = max(p.tokens / p.distinct_tokens for p in bridge) if all(
        p.distinct_tokens for p in bridge) else None
    fresh = ("every training token is fresh at every budget" if repeats is not None
             and repeats <= 1 else f"each training token is seen {repeats:.1f} times on "
             f"average at {budgets[-1]:,} steps" if repeats is not None
             else "how often training tokens repeat was not recorded")
    return (f"Bridges trained for {steps_text(budgets)} optimiser steps at "
            f"{layers_text(layers)}, under the sweep's protocol otherwise; beside each, "
            "the ridge map fitted in closed form on the same tokens, the network regression "
            f"control and the backbone (the floor); {fresh}. The ridge-started bridge is "
            f"{VARIANT}: its own lines and table, never in the paper's rows.")


def budget_section(r: Document, points: Sequence[BudgetPoint], *, l_star: int,
                   scores: dict[int, float] | None = None, backbone: str = "") -> None:
    """The section "How the answers move with the training budget". `scores`: S_l of the
    study's layers (the layer score's primary normalisation), None where not given;
    `backbone`: its name, for the figure's title."""
    r.h2("How the answers move with the training budget", BUDGET)
    index = index_points(points)
    if not study_layers(index):
        r.p("The budget study has no bridge points: nothing to show.")
        return
    r.p(intro_sentence(points, index))
    r.image(plot_budget(index, l_star, f"{backbone} hybrid NLL against the training budget"
                        .strip()),
            "Held-out hybrid NLL against optimiser steps (log scale), one panel per layer; "
            f"dashed red: the ridge-started bridge, {VARIANT}; grey: the backbone.")
    r.table(paper_rows(points, index, l_star),
            ["layer", "steps", "tokens", "repeats", "bridge NLL", "ridge NLL", "network NLL",
             "backbone NLL", "bridge - ridge", "bridge val_loss", "bridge t1_loss",
             "bridge recon_error", "bridge seconds"], ".4g")
    r.h3("Does the bridge cross the ridge map?")
    r.p(" ".join(crossing_sentence(c, l_star) for c in crossings(index)))
    r.h3("Does the layer ranking move with the budget?")
    r.p(ranking_sentence(index))
    ranked = len(rankings(index)[0])  # the layers measured at every budget
    pairs = ranking_pairs(index)
    if pairs and ranked > 1:  # one layer: its sentence says there is no ranking
        r.table(pairs, list(pairs[0]))
    r.h3("Geometry vs depth at each budget")
    missing = missing_scores(index, scores)
    if missing:
        r.p(f"S_l was not given for layers {', '.join(map(str, missing))}: the geometry "
            "columns are left out.")
        scores = None
    r.p(geometry_sentence(index, scores, l_star))
    if ranked > 1:
        rows = geometry_rows(index, scores, l_star)
        r.table(rows, list(rows[0]))
    r.h3(f"The ridge-started bridge: {VARIANT}")
    r.p(variant_sentence(index))
    rows = variant_rows(points, index, l_star)
    if rows:
        r.table(rows, list(rows[0]), ".4g")
        variant = crossings(index, RESIDUAL)
        r.p(" ".join(crossing_sentence(c, l_star, "the ridge-started bridge") for c in variant))
