"""The report's cost section and its answers: cost per generated token, the break-even."""

from __future__ import annotations

from dihal.generation_inputs import CostRow
from dihal.labels import DIHAL
from dihal.plots import plot_cost_quality
from dihal.report.common import COST
from dihal.report.document import Document
from dihal.report.inputs import ReportInputs


def timed_row(x: ReportInputs, *, sampler_steps: int | None = None, layer: int | None = None,
              name: str | None = None) -> CostRow | None:
    """The cost table's row of one model: the one timing of it the report quotes (a cached
    decode of n x length tokens, the median of rounds that go round the models).
    `sampler_steps`:
    DiHAL at that K (at `layer`, default l*: the rule does not change the work of a step);
    `name`: the row of that model (the backbone, a control hybrid). None where not timed."""
    cost = x.evaluate.cost
    if cost is None:
        return None
    if name is not None:
        return cost.row(name)
    return cost.dihal(sampler_steps, int(x.bridges.info.l_star) if layer is None else layer)


def timing_text(x: ReportInputs) -> str:
    """How the one timing per model was measured, from the cost table."""
    cost = x.evaluate.cost
    return (f"a cached decode of {cost.n} x {cost.length} tokens in one batch, the "
            f"median of {cost.repeats} rounds" if cost else "not timed")


def timing_sentence(x: ReportInputs) -> str:
    """What generating with the hybrid costs against the backbone (the cost table's one timing
    of each), and what the bridge cost."""
    dihal = next(r for r in x.comparison.rows if r.role == "dihal")
    k0 = int(dihal.sampler_steps)
    hyb, ref = timed_row(x, sampler_steps=k0), timed_row(x, name="backbone")
    if hyb is None or ref is None:
        timing = ("DiHAL's time per token is not measured (the evaluation has no cost table "
                  "with it: materialise eval again)")
    else:
        ratio = hyb.ms_per_token / ref.ms_per_token
        pace = "slower" if ratio > 1 else "faster" if ratio < 1 else "as fast"
        timing = (f"DiHAL at K = {k0} generates at {hyb.ms_per_token:.2f} ms per token "
                  f"against the backbone's {ref.ms_per_token:.2f} ({ratio:.2f}x the "
                  f"backbone's time: {pace}; {timing_text(x)})")
    return (f"{timing}; its bridge has {dihal.denoiser_parameters:,} parameters, was trained on "
            f"{dihal.train_tokens:,} tokens and samples in {dihal.sampler_steps} step(s).")


def _cost_model(x: ReportInputs):
    """The FLOP model the eval stage counted, None where the evaluation has none."""
    cost = x.evaluate.cost
    return cost.flop_model if cost else None


def _cheaper_layers(model, layers: list[int], steps: int) -> list[int]:
    from dihal.evaluate.cost import break_even

    return [b["layer"] for b in break_even(model, layers, [steps]) if b["cheaper"]]


NO_COST = ("What the replacement costs per token is not settled: the evaluation has no cost "
           "table (materialise eval again).")


def _break_even(x: ReportInputs, model):
    """What the cost answer and the break-even sentence read: l*, DiHAL's K, its FLOPs over the
    backbone's, the sweep's K, the swept layers and those where a hybrid at that K is cheaper."""
    dihal = next(r for r in x.comparison.rows if r.role == DIHAL)
    l_star, k0 = int(x.bridges.info.l_star), int(dihal.sampler_steps)
    k_sweep = x.bridges.protocol.sampler_steps
    layers = sorted(x.bridges.info.swept_layers)
    return (l_star, k0, model.hybrid(l_star, k0) / model.backbone(), k_sweep, layers,
            _cheaper_layers(model, layers, k_sweep))


def answer_cost(x: ReportInputs) -> tuple[str, str]:
    """What DiHAL at l* costs per generated token against the backbone, in counted FLOPs and
    measured time, and where a hybrid would be cheaper (the section has the whole reading)."""
    model = _cost_model(x)
    if model is None:
        return NO_COST, COST
    l_star, k0, ratio, k_sweep, layers, cheaper = _break_even(x, model)
    hyb, ref = timed_row(x, sampler_steps=k0), timed_row(x, name="backbone")
    most = model.max_cheaper_steps(l_star)
    return (f"DiHAL at l* = {l_star}, K = {k0} costs {ratio:.2f}x the backbone's FLOPs per "
            "generated token" + (f" and {hyb.ms_per_token / ref.ms_per_token:.2f}x its "
                                 "measured time" if hyb and ref else "")
            + (f"; at l* it is cheaper only for K <= {most}" if most else
               "; at l* it is never cheaper")
            + f"; at the sweep's K = {k_sweep}, cheaper at {len(cheaper)} of {len(layers)} "
            "swept layers.", COST)


def break_even_sentence(x: ReportInputs) -> str:
    """What replacing the lower layers costs per generated token, in FLOPs counted from the
    shapes (and measured time): DiHAL at l* against the backbone, and at which swept layers
    and K a hybrid is cheaper than the backbone (dihal.evaluate.cost.break_even)."""
    model = _cost_model(x)
    if model is None:
        return NO_COST
    l_star, k0, ratio, k_sweep, layers, cheaper = _break_even(x, model)
    timed = x.evaluate.cost.dihal(k0, l_star)
    line = (f"Per generated token the backbone costs {model.backbone() / 1e6:.3g} MFLOPs; DiHAL "
            f"at l* = {l_star} with K = {k0} costs {ratio:.2f}x that"
            + (f" ({timed.ms_vs_backbone:.2f}x in measured time)" if timed else "")
            + f", and at l* it is cheaper only for K <= {model.max_cheaper_steps(l_star)}"
            + (" (never)" if model.max_cheaper_steps(l_star) == 0 else "")
            + f". At the sweep's K = {k_sweep} a hybrid is cheaper than the backbone at "
            + (f"{len(cheaper)} of {len(layers)} swept layers ({', '.join(map(str, cheaper))})"
               if cheaper else f"none of the {len(layers)} swept layers"))
    return line + "."


def _cost_points(x: ReportInputs, model) -> list[dict]:
    """Hybrid NLL against FLOPs per token of each swept layer: the bridge at the sweep's K and
    its regression control (the ridge map: one d x d matmul a token)."""
    k_sweep = x.bridges.protocol.sampler_steps
    pts = [{"kind": f"bridge (K = {k_sweep})", "layer": r.layer,
            "flops": model.hybrid(r.layer, k_sweep), "nll": r.hybrid_nll}
           for r in x.bridges.layers]
    from dihal.evaluate.cost import ridge_map_flops

    d = int(x.backbone_info.hidden_size)
    pts += [{"kind": "regression control (ridge map)", "layer": r.layer,
             "flops": model.hybrid(r.layer, 0, ridge_map_flops(d, d)),
             "nll": r.regression_hybrid_nll}
            for r in x.bridges.info.regression]
    return pts


def cost_section(r: Document, x: ReportInputs) -> None:
    """Cost per generated token: FLOPs and measured time of the backbone, DiHAL at each K and
    the controls; hybrid NLL against FLOPs per swept layer; the break-even."""
    from dihal.evaluate.cost import break_even

    r.h2("3b. Cost per generated token", COST)
    model = _cost_model(x)
    r.p(break_even_sentence(x))
    if model is None:
        return
    r.p(timing_sentence(x))
    cost = x.evaluate.cost
    r.p(f"{cost.note} ({cost.flop_length} tokens); ms per token "
        f"measured over {timing_text(x)} that go round the models (a load change falls on all "
        "alike), with the fastest and slowest round: this is the one timing of each model in "
        "this report. Time over FLOPs: the measured time relative to the backbone's over what "
        "the FLOPs predict (1: as predicted).")
    r.table([{"model": c.model, "K": c.K, "MFLOPs per token": c.flops_per_token / 1e6,
              "ms per token": c.ms_per_token, "fastest / slowest round": _spread(c),
              "FLOPs x backbone": c.flops_vs_backbone,
              "time x backbone": c.ms_vs_backbone, "time over FLOPs": c.time_over_flops}
             for c in cost.rows],
            ["model", "K", "MFLOPs per token", "ms per token", "fastest / slowest round",
             "FLOPs x backbone", "time x backbone", "time over FLOPs"], ".4g")
    order = cost.order_in_k
    if order and len(order.K) > 1:
        r.p(f"DiHAL's time per token over K = {', '.join(map(str, order.K))}: "
            + ("rises with K." if order.monotone else
               "falls from " + ", ".join(f"K = {a} to {b}" for a, b in order.inversions)
               + (", within the spread of the rounds." if order.within_noise else
                  ", beyond the spread of the rounds: the timing is too noisy to order "
                  "these K.")))
    pts = _cost_points(x, model)
    if pts:
        base = {"flops": model.backbone(), "nll": x.bridges.layers[0].backbone_nll}
        r.image(plot_cost_quality(pts, base, f"{x.backbone}: hybrid NLL vs cost per token"),
                "Held-out hybrid NLL against FLOPs per generated token, per swept layer")
    layers = sorted(x.bridges.info.swept_layers)
    steps = sorted({int(c.K) for c in cost.rows if c.is_dihal})
    if layers and steps:
        r.p(f"Break-even (FLOPs): a denoising step costs {model.denoiser_step_flops / 1e6:.3g} "
            "MFLOPs per token; the largest K at which the hybrid at layer l costs fewer FLOPs "
            "than the backbone, and the hybrid's FLOPs over the backbone's at each K:")
        by_layer: dict[int, dict] = {}
        for b in break_even(model, layers, steps):
            row = by_layer.setdefault(b["layer"], {"l": b["layer"],
                                                   "max K cheaper": b["max_cheaper_steps"]})
            row[f"K={b['steps']}"] = b["flops_vs_backbone"]
        r.table(list(by_layer.values()), ["l", "max K cheaper", *(f"K={k}" for k in steps)],
                ".3g")


def _spread(row: CostRow) -> str:
    lo, hi = row.ms_per_token_low, row.ms_per_token_high
    return f"{lo:.3g} / {hi:.3g}" if lo is not None and hi is not None else "n/a"
