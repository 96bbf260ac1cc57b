"""The report stage: lay out the finished results of one backbone as a results section (rendered
by dihal.document). Each section opens with one sentence saying what its numbers show; those
sentences are computed from the numbers. The inputs are gathered by the caller (the Dagster
layer reads them through storage)."""

from __future__ import annotations

from dihal.document import Document
from dihal.results import ReportInputs, ReportResult
from dihal.rows import (
    ABOVE,
    BELOW,
    DEPTH,
    TARGETS,
    Estimate,
    RegressionRow,
    Spearman,
    SpearmanRow,
    generation_rows,
    number,
    regression_rows,
    spearman_rows,
)


def _key_value(d: dict, keys: list[str] | None = None) -> list[dict]:
    return [{"setting": k, "value": d[k]} for k in (keys or sorted(d)) if k in d]


def _locate_summary(x: ReportInputs) -> str:
    sel, rho = x.score["selected"], x.score["spearman_vs_depth"]
    primary = x.configs["layer_score"]["primary_norm"]
    depthy = [n for n, r in rho.items() if r is not None and abs(r) >= 0.8]
    return (f"The geometry score selects l* = {x.score['l_star']} under {primary} "
            f"(by normalisation: {', '.join(f'{n} {v}' for n, v in sorted(sel.items()))}); "
            + (f"under {', '.join(depthy)} it is largely depth (|Spearman with -l| >= 0.8)."
               if depthy else "no normalisation's score is mostly depth (|Spearman with -l| < 0.8)."))


def _stability_table(stability: dict[str, dict]) -> list[dict]:
    return [{"normalisation": n, "l*": v["l_star"], "l* [95 %] over resamples": f"[{v['low']}, {v['high']}]",
             "resamples picking l*": f"{v['same']:.0%} of {v['replicates']}",
             "layers picked (share)": ", ".join(f"{ll}: {sh:.0%}" for ll, sh in list(v["picks"].items())[:4])}
            for n, v in sorted(stability.items())]


def _stability_summary(stability: dict[str, dict], n_resamples) -> str:
    firm = [n for n, v in sorted(stability.items()) if v["same"] >= 0.9]
    loose = [f"{n} ({v['same']:.0%})" for n, v in sorted(stability.items()) if v["same"] < 0.9]
    return (f"Over {n_resamples} bootstrap resamples of the geometry tokens (the proxies recomputed "
            "on each: covariance, and the anchors' and pairs' statistics, with the full sample's "
            "neighbourhoods and preconditioner), "
            + (f"l* is the same in at least 90 % of resamples under {', '.join(firm)}" if firm
               else "l* is not the same in 90 % of resamples under any normalisation")
            + (f"; it moves under {', '.join(loose)}." if loose else "."))


def _bridgeability_summary(x: ReportInputs) -> str:
    rows = {r.predictor: r for r in spearman_rows(x.bridgeability["spearman"])}
    depth = rows.pop(DEPTH, None)
    b = x.bridgeability
    head = (f"Over {len(b['swept_layers'])} swept layers the oracle layer is {b['oracle']} and the "
            f"worst {b['worst']}; geometry picked {b['l_star']}")
    rho = {k: number(r.of().rho) for k, r in rows.items() if r.of()}
    rho = {k: v for k, v in rho.items() if v is not None}
    if not rho or depth is None:
        return head + "."
    best = max(rho, key=rho.get)
    above = [k for k, r in rows.items() if r.of() and r.of().vs_depth == ABOVE]
    verdict = (f"{len(above)} predictor(s) beat depth beyond the 95 % intervals: {', '.join(above)}"
               if above else "no predictor beats depth beyond the 95 % intervals "
               "(every one is above it by less than the resampling spread, or below it)")
    return (head + f". Against -val loss the highest Spearman is {best}'s, {rho[best]:.2f}; depth's "
            f"is {number(depth.of().rho) or float('nan'):.2f}. {verdict}.")


def _interval(s: Spearman | None) -> str:
    rho, lo, hi = s.interval() if s is not None else (None, None, None)
    if rho is None:
        return "undefined"
    return f"{rho:.2f} [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else f"{rho:.2f}"


def _spearman_table(rows: list[SpearmanRow]) -> list[dict]:
    """One line per predictor: Spearman with its interval per target, and where it stands
    against depth for -val loss."""
    return [{"predictor": r.predictor, **{f"vs -{t}": _interval(r.of(t)) for t in TARGETS},
             "against depth (val loss)": r.of().vs_depth if r.of() else ""} for r in rows]


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
    return (f"{verdict}: under the same network and budget, the bridge has the lower hybrid NLL "
            f"at {len(nll)} of {n} layers" + (f" ({', '.join(map(str, nll))})" if nll else "")
            + f" and the lower reconstruction error at {len(rec)} of {n}."
            + (f" Layers without a control: {', '.join(map(str, missing))}." if missing else ""))


def _sampler_summary(curve: dict) -> str:
    from dihal.config import DEFAULT_SAMPLER_RULE

    rows = sorted((r for r in curve["rows"] if r.get("rule", DEFAULT_SAMPLER_RULE)
                   == DEFAULT_SAMPLER_RULE), key=lambda r: r["steps"]) or curve["rows"]
    lo, hi = rows[0], rows[-1]
    best = min(curve["rows"], key=lambda r: (r["hybrid_nll"], r["steps"]))
    return (f"At l* = {curve['layer']} the bridge was trained for a {lo['trained_steps']}-step "
            f"sampler. With K = {lo['steps']} step(s) the hybrid's NLL is {lo['hybrid_nll']:.3f} "
            f"and its reconstruction error {lo['recon_error']:.3f}; with K = {hi['steps']}, "
            f"{hi['hybrid_nll']:.3f} and {hi['recon_error']:.3f} (the backbone: "
            f"{lo['backbone_nll']:.3f}). The lowest NLL is at K = {best['steps']}"
            f"{' (' + best['rule'] + ' rule)' if best.get('rule') else ''}. Generation "
            f"costs {lo['ms_per_token']:.1f} ms per token at K = {lo['steps']} and "
            f"{hi['ms_per_token']:.1f} at K = {hi['steps']}.")


def _ci(row: dict, key: str, fmt: str = ".1f") -> str:
    """"value [low, high]" of a generation metric with its interval over samples."""
    return Estimate.of(row, key).text(fmt)


def _separated(a: dict, b: dict, key: str) -> bool:
    """The two rows' intervals of `key` do not overlap."""
    return Estimate.of(a, key).separated_from(Estimate.of(b, key))


def _generation_table(rows: list[dict], extra: list[str]) -> list[dict]:
    return [{**{k: r.get(k) for k in ("model", "role", "layer") if k in r},
             "Gen.PPL [95 %]": _ci(r, "gen_ppl"), "Gen.PPL, mean of samples [95 %]":
             _ci(r, "gen_ppl_mean"), "diversity [95 %]": _ci(r, "diversity", ".3f"),
             "MAUVE [95 %]": _ci(r, "mauve", ".3f"),
             **{k: r.get(k) for k in extra}} for r in rows]


def _generation_summary(x: ReportInputs) -> str:
    rows = x.comparison["rows"]
    dihal = next(r for r in rows if r["role"] == "dihal")
    ref = next(r for r in rows if r["role"] == "backbone")
    bases = [r for r in rows if r["role"] == "baseline"]
    line = (f"DiHAL samples with Gen.PPL {dihal['gen_ppl']:.1f} and diversity "
            f"{dihal['diversity']:.3f}, against the backbone's {ref['gen_ppl']:.1f} and "
            f"{ref['diversity']:.3f}")
    if bases:
        beaten = [r["model"] for r in bases if dihal["gen_ppl"] < r["gen_ppl"]]
        line += (f"; at the matched budget it has a lower Gen.PPL than {len(beaten)} of "
                 f"{len(bases)} baselines" + (f" ({', '.join(beaten)})" if beaten else ""))
    ranked = [r["model"] for r in [ref, *bases] if _separated(dihal, r, "gen_ppl")]
    others = len(bases) + 1
    line += (f". With the 95 % intervals over samples, DiHAL's Gen.PPL is separated from "
             f"{len(ranked)} of the {others} other models" + (f" ({', '.join(ranked)})" if ranked
                                                             else "") +
             ("" if len(ranked) == others else "; the others cannot be ranked against it at "
              "this sample count"))
    need = _samples_needed(dihal, [r for r in [ref, *bases] if r["model"] not in ranked],
                           int(x.configs["eval"]["n_samples"]))
    return line + "." + (f" Shrinking the intervals as 1/sqrt(n), separating it would take about "
                         f"{need} samples per model." if need else "")


def _samples_needed(row: dict, others: list[dict], n: int) -> str:
    """"N for X, M for Y": samples per model at which `row`'s Gen.PPL interval and each other's
    (from n samples each) would stop overlapping (dihal.uncertainty.samples_to_separate)."""
    from dihal.uncertainty import samples_to_separate

    parts = []
    for o in others:
        v = [number(r.get(f"gen_ppl{e}")) for r in (row, o) for e in ("", "_low", "_high")]
        if None in v:
            continue
        need = samples_to_separate(v[0], (v[1], v[2]), v[3], (v[4], v[5]), n)
        parts.append(f"{need} for {o['model']}" if need else f"no count for {o['model']} (equal)")
    return ", ".join(parts)


def _full_training_summary(x: ReportInputs) -> str:
    rows = {r["role"]: r for r in x.full_training}
    geo, oracle, worst = (rows.get(k) for k in ("geometry l*", "oracle", "worst"))
    if not (geo and oracle and worst):
        return "Full training did not cover all three roles."
    return (f"With the full budget, the geometry-selected layer {geo['layer']} reaches validation "
            f"loss {geo['val_loss']:.3f} (oracle layer {oracle['layer']}: {oracle['val_loss']:.3f}, "
            f"worst layer {worst['layer']}: {worst['val_loss']:.3f}) and Gen.PPL "
            f"{geo['gen_ppl']:.1f} (oracle {oracle['gen_ppl']:.1f}, worst {worst['gen_ppl']:.1f}).")


def cross_backbone_tables(summaries: list[dict]) -> tuple[list[dict], list[dict]]:
    """The cross-backbone tables from one summary per materialised backbone (storage's
    backbone_summary: its l* per normalisation, bridgeability info, evaluation rows or None,
    judge): (one row per backbone: l* per normalisation, oracle, worst, hybrid and backbone
    Gen.PPL with the judge; one row per predictor: its Spearman vs -val loss on each backbone,
    with the interval and its standing against depth)."""
    return _backbone_lines(summaries), _predictor_lines(summaries)


def _backbone_lines(summaries: list[dict]) -> list[dict]:
    norms = sorted({n for s in summaries for n in s["selected"]})
    main = []
    for s in summaries:
        b, gen = s["bridgeability"], {r["role"]: r for r in s["eval_rows"] or []}
        main.append({
            "backbone": s["backbone"], **{f"l* ({n})": s["selected"].get(n, "") for n in norms},
            "oracle": b["oracle"], "worst": b["worst"], "swept layers": len(b["swept_layers"]),
            "hybrid Gen.PPL [95 %]": _ci(gen["dihal"], "gen_ppl") if "dihal" in gen else "not evaluated",
            "backbone Gen.PPL [95 %]": (_ci(gen["backbone"], "gen_ppl") if "backbone" in gen
                                        else "not evaluated"),
            "judge": s["judge"] or "",
        })
    return main


def _predictor_lines(summaries: list[dict]) -> list[dict]:
    typed = {s["backbone"]: {r.predictor: r for r in spearman_rows(s["bridgeability"]["spearman"])}
             for s in summaries}
    predictors = list(dict.fromkeys(p for rows in typed.values() for p in rows))
    spearman = []
    for p in predictors:
        row = {"predictor": p}
        for b, rows in typed.items():
            got = rows[p].of() if p in rows else None
            cell = _interval(got) if p in rows else "not computed"
            standing = got.vs_depth if got else ""
            row[b] = f"{cell} ({standing})" if standing in (ABOVE, BELOW) else cell
        spearman.append(row)
    return spearman


def _cross_backbone_section(r: Document, x: ReportInputs) -> None:
    r.h2("5. Across backbones", BACKBONES)
    names = [s["backbone"] for s in x.backbones]
    if not names:
        r.p("No backbone summaries were given.")
        return
    r.p(f"Every backbone whose layer score and bridgeability are materialised in this artifact "
        f"root: {', '.join(names)}. Each backbone's samples are scored by its own judge (never itself). Spearman against "
        "-val loss with its 95 % interval over layers; (above)/(below) where the interval "
        "does not overlap depth's.")
    main, spearman = cross_backbone_tables(x.backbones)
    r.table(main, list(main[0]))
    r.table(spearman, list(spearman[0]))
    if len(names) == 1:
        r.p(f"Only {names[0]} has been materialised here; materialise another backbone (for "
            f"example `python -m pipeline.main --backbone {another_backbone(names[0])}`) and "
            "this report again to compare them.")


def another_backbone(name: str) -> str:
    """An embedded backbone other than `name`, to suggest beside it (both run offline)."""
    return "smollm2" if name == "gemma3" else "gemma3"


# ----------------------------------------------------------------------------- the answers
# Where each section starts: the answers link to them
LOCATE, BRIDGEABILITY, REGRESSION, SAMPLER, GENERATION, FULL, BACKBONES, SAMPLES, CONFIG = (
    "locate", "bridgeability", "regression-control", "sampler-steps", "generation",
    "full-training", "across-backbones", "samples", "configuration")
CONTROLS, COST = "control-hybrids", "cost"


def answer_l_star(x: ReportInputs) -> tuple[str, str]:
    """Which layer geometry selects, and how firmly (over the token bootstrap)."""
    primary = x.configs["layer_score"]["primary_norm"]
    line = f"Geometry selects l* = {x.score['l_star']} (S_l under {primary})"
    st = x.score.get("stability", {}).get(primary)
    if st:
        line += (f"; {st['same']:.0%} of {st['replicates']} bootstrap resamples of the tokens "
                 f"pick it again, 95 % range [{st['low']}, {st['high']}]")
    return line + ".", LOCATE


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
    verdict = {ABOVE: "geometry predicts how well a bridge learns better than depth does, "
                      "beyond the 95 % intervals",
               BELOW: "depth predicts how well a bridge learns better than geometry does, "
                      "beyond the 95 % intervals"}.get(
        g.vs_depth, f"geometry and depth cannot be told apart at {n} swept layers (their 95 % "
                    "intervals overlap)")
    rivals = [r.predictor for r in rows.values()
              if not r.is_depth and r is not geo and r.of() and r.of().vs_depth == ABOVE]
    return (f"Over {n} swept layers, S_l ({primary}) has Spearman {_interval(g)} with -val loss "
            f"and depth {_interval(d)}: {verdict}"
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
    return verdict + " (lower hybrid NLL, same network and budget).", REGRESSION


def answer_generation(x: ReportInputs) -> tuple[str, str]:
    """DiHAL's Gen.PPL against the backbone's and the baselines' (95 % intervals over samples)."""
    rows = generation_rows(x.comparison["rows"])
    dihal = next(r for r in rows if r.role == "dihal")
    ref = next(r for r in rows if r.role == "backbone")
    bases = [r for r in rows if r.role == "baseline"]
    side = "lower" if dihal.gen_ppl.value < ref.gen_ppl.value else "higher"
    sep = ("the intervals are separated" if dihal.gen_ppl.separated_from(ref.gen_ppl)
           else "the intervals overlap")
    line = (f"DiHAL's Gen.PPL is {dihal.gen_ppl.text()}, {side} than the backbone's "
            f"{ref.gen_ppl.text()} ({sep})")
    if bases:
        beaten = [r.name for r in bases if dihal.gen_ppl.value < r.gen_ppl.value]
        clear = [r.name for r in bases if r.name in beaten and dihal.gen_ppl.separated_from(r.gen_ppl)]
        line += (f"; at the matched budget it is lower than {len(beaten)} of {len(bases)} "
                 f"baselines' ({', '.join(beaten)}), beyond the intervals for {len(clear)} of "
                 "them" if beaten else f"; at the matched budget it is lower than none of the "
                 f"{len(bases)} baselines'")
    else:
        line += "; no baseline was compared"
    return line + ".", GENERATION


def answer_cost(x: ReportInputs) -> tuple[str, str]:
    """What generating with the hybrid costs against the backbone, and what the bridge cost."""
    ev = {r.role: r for r in generation_rows(x.evaluation["rows"])}
    dihal = next(r for r in generation_rows(x.comparison["rows"]) if r.role == "dihal")
    hyb, ref = ev["dihal"], ev["backbone"]
    ratio = hyb.columns["latency_vs_backbone"]
    pace = "slower" if ratio > 1 else "faster" if ratio < 1 else "as fast"
    c = dihal.columns
    return (f"DiHAL generates at {hyb.ms_per_token:.2f} ms per token against the backbone's "
            f"{ref.ms_per_token:.2f} ({ratio:.2f}x the backbone's time per step: {pace}); its "
            f"bridge has {c['denoiser_parameters']:,} parameters, was trained on "
            f"{c['train_tokens']:,} tokens and samples in {c['sampler_steps']} step(s).",
            GENERATION)


def _against_dihal(row: dict) -> tuple[float, float, float] | None:
    """Gen.PPL of DiHAL over `row`'s (exp of the paired log difference) with its paired 95 %
    interval; None where the row has no paired difference."""
    import math

    v = [number(row.get(k)) for k in ("dihal_log_ppl_diff", "dihal_log_ppl_diff_low",
                                      "dihal_log_ppl_diff_high")]
    return None if None in v else tuple(math.exp(x) for x in v)


def _control_phrase(row: dict) -> str:
    """"the ridge (l=3)'s: 1.23x [1.05, 1.41], higher beyond the paired interval"."""
    got = _against_dihal(row)
    if got is None:
        return f"{row['model']}: no paired difference (fewer than 2 samples scored on both sides)"
    ratio, lo, hi = got
    verdict = {"below": "lower beyond the paired 95 % interval",
               "above": "higher beyond the paired 95 % interval"}.get(
        row.get("dihal_verdict"), "not distinguishable at the paired 95 % level")
    return f"{ratio:.2f}x {row['model']}'s [{lo:.2f}, {hi:.2f}], {verdict}"


def answer_controls(x: ReportInputs) -> tuple[str, str]:
    """DiHAL's Gen.PPL against its control hybrids' (regression, layer-drop, ridge) and its
    own at the K chosen on validation, each as a ratio with a paired interval; which wins."""
    from dihal.generation import CHOSEN_K, CONTROL

    rows = x.comparison["rows"]
    dihal = next(r for r in rows if r["role"] == "dihal")
    others = [r for r in rows if r["role"] in (CONTROL, CHOSEN_K)]
    if not others:
        return ("Whether DiHAL beats its control hybrids is not settled: the evaluation has no "
                "control rows (materialise eval and comparison again).", CONTROLS)
    best = min([dihal, *others], key=lambda r: r["gen_ppl"])
    beaten = [r["model"] for r in others if r.get("dihal_verdict") == "below"]
    lost = [r["model"] for r in others if r.get("dihal_verdict") == "above"]
    head = ("DiHAL has the lowest Gen.PPL of itself and its controls" if best is dihal else
            f"{best['model']} has the lowest Gen.PPL of DiHAL and its controls")
    return (f"{head}: DiHAL's Gen.PPL is " + "; ".join(_control_phrase(r) for r in others)
            + f" (DiHAL lower beyond the paired interval than {len(beaten)}, higher than "
            f"{len(lost)} of {len(others)}).", CONTROLS)


def _cost_model(x: ReportInputs):
    """The FLOP model the eval stage counted, None where the evaluation has none."""
    from dihal.cost import flop_model_of

    cost = x.evaluation.get("cost")
    return flop_model_of(cost["flop_model"]) if cost else None


def _cheaper_layers(model, layers: list[int], steps: int) -> list[int]:
    from dihal.cost import break_even

    return [b["layer"] for b in break_even(model, layers, [steps]) if b["cheaper"]]


def answer_break_even(x: ReportInputs) -> tuple[str, str]:
    """What replacing the lower layers costs per generated token, in FLOPs counted from the
    shapes (and measured time): DiHAL at l* against the backbone, and at which swept layers
    and K a hybrid is cheaper than the backbone (dihal.cost.break_even)."""
    model = _cost_model(x)
    if model is None:
        return ("What the replacement costs per token is not settled: the evaluation has no "
                "cost table (materialise eval again).", COST)
    dihal = next(r for r in x.comparison["rows"] if r["role"] == "dihal")
    l_star, k0 = int(x.bridgeability["l_star"]), int(dihal["sampler_steps"])
    ratio = model.hybrid(l_star, k0) / model.backbone()
    timed = next((r for r in x.evaluation["cost"]["rows"]
                  if r.get("layer") == l_star and r.get("K") == k0
                  and r["model"].startswith("DiHAL")), None)
    k_sweep = int(x.sweep_protocol.get("steps", k0))
    layers = sorted(x.bridgeability["swept_layers"])
    cheaper = _cheaper_layers(model, layers, k_sweep)
    line = (f"Per generated token the backbone costs {model.backbone() / 1e6:.3g} MFLOPs; DiHAL "
            f"at l* = {l_star} with K = {k0} costs {ratio:.2f}x that"
            + (f" ({timed['ms_vs_backbone']:.2f}x in measured time)" if timed else "")
            + f", and at l* it is cheaper only for K <= {model.max_cheaper_steps(l_star)}"
            + (" (never)" if model.max_cheaper_steps(l_star) == 0 else "")
            + f". At the sweep's K = {k_sweep} a hybrid is cheaper than the backbone at "
            + (f"{len(cheaper)} of {len(layers)} swept layers ({', '.join(map(str, cheaper))})"
               if cheaper else f"none of the {len(layers)} swept layers"))
    return line + ".", COST


ANSWERS = (answer_l_star, answer_geometry_vs_depth, answer_bridge_vs_regression,
           answer_generation, answer_cost, answer_controls, answer_break_even)


def _answers_section(r: Document, x: ReportInputs) -> None:
    r.h2("What this run shows", "answers")
    r.links([answer(x) for answer in ANSWERS])


# ---------------------------------------------------------------------------- the sections
def _intro(r: Document, x: ReportInputs) -> None:
    bb = x.backbone_info
    r.p(f"Backbone {bb['hf_id']} ({bb['architecture']}, {bb['n_layers']} layers, hidden "
        f"{bb['hidden_size']}), weights {bb['revision']}. Every number below was measured by the "
        "pipeline from the artifacts listed at the end; nothing is copied from the paper.")


def _proxy_tables(x: ReportInputs) -> dict[str, list[dict]]:
    """One table per normalisation: the proxies and S_l of each layer."""
    score = {(s["norm"], s["layer"]): s.get("S") for s in x.score_rows}
    out: dict[str, list[dict]] = {}
    for g in sorted(x.geometry_rows, key=lambda g: (g["norm"], g["layer"])):
        out.setdefault(g["norm"], []).append(
            {"layer": g["layer"], **{k: g[k] for k in ("m_curv", "m_mono", "k_eff")},
             "S": score.get((g["norm"], g["layer"]))})
    return out


def _locate_section(r: Document, x: ReportInputs) -> None:
    geo_cfg, score = x.configs["geometry"], x.score
    r.h2("1. Locate: geometry per layer", LOCATE)
    r.p(_locate_summary(x))
    r.table([{"normalisation": n, "l*": score["selected"][n],
              "Spearman(S_l, -l)": score["spearman_vs_depth"][n]} for n in sorted(score["selected"])],
            ["normalisation", "l*", "Spearman(S_l, -l)"], ".3f")
    if score.get("stability"):
        r.p(_stability_summary(score["stability"], geo_cfg.get("n_resamples")))
        r.table(_stability_table(score["stability"]),
                ["normalisation", "l*", "l* [95 %] over resamples", "resamples picking l*",
                 "layers picked (share)"])
    r.image(x.plots["proxies"], "Proxies against layer, per normalisation")
    r.image(x.plots["score"], "Layer score S_l and l* per normalisation")
    r.p(f"{geo_cfg['n_tokens']} held-out tokens per layer (position 0 dropped), "
        f"{geo_cfg['n_anchors']} anchors, k = {geo_cfg['k_neighbors']}, "
        f"{geo_cfg['n_pairs']} pairs. k_eff is unchanged by a global rescaling, so it is the "
        "same under none and rms; standardize rescales each dimension and changes it. "
        "Layer 0 is shown for reference and has no score. One table per normalisation:")
    for norm, table in _proxy_tables(x).items():
        r.h3(f"Proxies and S_l under {norm}")
        r.table(table, ["layer", "m_curv", "m_mono", "k_eff", "S"], ".3g")
    if x.predictor_rows:
        r.p("Rival predictors on the same tokens (dihal.predictors): distance and linear CKA "
            "from the condition hs[0], the block influence of ShortGPT, the cross-validated R^2 "
            "of a ridge regression from the condition, the TwoNN intrinsic dimension, and the "
            "share of variance carried by the top 0.1 % tokens by norm (massive activations).")
        r.table(x.predictor_rows, list(x.predictor_rows[0]), ".3g")


def _bridgeability_section(r: Document, x: ReportInputs) -> None:
    r.h2("2. Does the score predict bridgeability?", BRIDGEABILITY)
    r.p(_bridgeability_summary(x))
    r.p("Spearman correlation of each predictor with -val loss, -reconstruction error and "
        "-hybrid NLL over the swept layers, with a 95 % percentile bootstrap interval over layers "
        "(2000 resamples, the same for every predictor). Each rival predictor enters with the "
        "sign fixed before the sweep under which higher should mean easier (a leading minus: "
        "lower should). A predictor is marked above or below depth only where its interval and "
        "depth's do not overlap.")
    r.table(_spearman_table(spearman_rows(x.bridgeability["spearman"])),
            ["predictor", "vs -val_loss", "vs -recon_error", "vs -hybrid_nll",
             "against depth (val loss)"])
    r.image(x.plots["scatter"], "S_l vs bridge validation loss per normalisation, and the depth control")
    r.table(x.sweep_layers, ["layer", "init_val_loss", "val_loss", "recon_error", "hybrid_nll",
                             "backbone_nll", "top1_agreement", "steps", "seconds"], ".4g")
    r.p("The protocol every swept layer was trained under:")
    r.table(_key_value(x.sweep_protocol), ["setting", "value"])


def _regression_section(r: Document, x: ReportInputs) -> None:
    rows = regression_rows(x.bridgeability.get("regression", []))
    r.h2("2a. The bridge against a regression control", REGRESSION)
    r.p(_regression_summary(rows, x.bridgeability["swept_layers"]))
    if rows:
        r.p("The regression control is the sweep's denoiser, loss and budget trained only at "
            "t = 1, where the bridge's input is the condition itself: it predicts h_l from hs[0] "
            "in one step, with no noise. Both are measured the same way on held-out text.")
        r.table([row.to_dict() for row in rows],
                ["layer", "bridge_hybrid_nll", "regression_hybrid_nll", "bridge_recon_error",
                 "regression_recon_error", "bridge_top1", "regression_top1"], ".4g")


def _sampler_section(r: Document, x: ReportInputs) -> None:
    r.h2("2b. What the sampler's steps buy at l*", SAMPLER)
    r.p(_sampler_summary(x.sampler_curve))
    r.table(x.sampler_curve["rows"], ["rule", "steps", "recon_error", "hybrid_nll",
                                      "top1_agreement", "ms_per_token"], ".4g")


def _generation_section(r: Document, x: ReportInputs) -> None:
    from dihal.plots import plot_quality_diversity

    cmp_ = x.comparison
    r.h2("3. Generation: DiHAL, the backbone and the baselines at a matched budget", GENERATION)
    r.p(_generation_summary(x))
    extra = ["repetition", "mean_length", "denoiser_parameters", "train_tokens", "sampler_steps",
             "seq_len"]
    r.p("Gen.PPL token-weighted (exp of the judge's total NLL over all scored tokens) and as the "
        "mean of per-sample perplexities (the convention of LD4LG's evaluation code); MAUVE "
        "(mauve-text, its defaults) against held-out corpus text cut like the samples, on the "
        "judge's last-token features; 95 % intervals over samples: percentile bootstrap "
        "(1000 resamples) for Gen.PPL, and for MAUVE under its fitted quantisation, the "
        "jackknife for diversity (duplicated samples would bias a bootstrap of pooled n-gram "
        "counts).")
    r.table(_generation_table(cmp_["rows"], extra),
            ["model", "Gen.PPL [95 %]", "Gen.PPL, mean of samples [95 %]", "diversity [95 %]",
             "MAUVE [95 %]", *extra], ".4g")
    r.image(plot_quality_diversity(cmp_["rows"], f"{x.backbone}: Gen.PPL vs diversity"),
            "Gen.PPL against diversity, every model of the comparison")
    if cmp_.get("missing"):
        r.p(f"Not run: {', '.join(cmp_['missing'])}.")
    _judge_and_latency(r, x)


def _controls_section(r: Document, x: ReportInputs) -> None:
    """DiHAL against its control hybrids and against itself at the K chosen on validation."""
    from dihal.generation import CHOSEN_K, CONTROL

    r.h2("3a. DiHAL against its control hybrids", CONTROLS)
    rows = x.comparison["rows"]
    shown = [row for row in rows if row["role"] in ("dihal", CHOSEN_K, CONTROL)]
    r.p(answer_controls(x)[0])
    notes = x.evaluation.get("controls", {})
    r.p("Each control replaces layers 0..l-1 as DiHAL does and keeps the upper layers and the "
        "head: the regression hybrid (the sweep's regression control of that layer: the bridge "
        "network trained at t = 1 only, sampled in one step), the layer-drop hybrid (hs[0] "
        "straight into block l) and the ridge hybrid (a linear map hs[0] -> h_l fitted on the "
        "training pairs, its penalty chosen on held-out pairs). All are sampled with the same "
        "count, length, temperature and seeds as DiHAL and scored by the same judge; sample i "
        "of each is paired with DiHAL's sample i (the same uniforms), and the ratio of Gen.PPL "
        "(DiHAL over the row) has a paired percentile-bootstrap 95 % interval.")
    if notes.get("regression"):
        r.p(f"Regression hybrid: {notes['regression']}.")
    chosen = notes.get("chosen")
    if chosen:
        r.p(f"The sampler-steps curve chose the {chosen['rule']} rule with K = {chosen['steps']} "
            f"(held-out hybrid NLL {chosen['hybrid_nll']:.4f}) against the protocol's K = "
            f"{notes.get('protocol_steps')}"
            + (": the same sampler, so DiHAL's row is that K's." if notes.get("chosen_is_protocol")
               else "; DiHAL at that K has its own row."))

    def ratio(row: dict) -> str:
        got = _against_dihal(row)
        return "" if got is None else f"{got[0]:.3f} [{got[1]:.3f}, {got[2]:.3f}]"

    r.table([{"model": row["model"], "role": row["role"], "Gen.PPL [95 %]": _ci(row, "gen_ppl"),
              "diversity [95 %]": _ci(row, "diversity", ".3f"),
              "MAUVE [95 %]": _ci(row, "mauve", ".3f"),
              "Gen.PPL DiHAL / this [paired 95 %]": ratio(row),
              "paired p": row.get("dihal_log_ppl_diff_p"),
              "DiHAL is": row.get("dihal_verdict", "")} for row in shown],
            ["model", "role", "Gen.PPL [95 %]", "diversity [95 %]", "MAUVE [95 %]",
             "Gen.PPL DiHAL / this [paired 95 %]", "paired p", "DiHAL is"], ".3g")


def _cost_points(x: ReportInputs, model) -> list[dict]:
    """Hybrid NLL against FLOPs per token of each swept layer: the bridge at the sweep's K and
    its regression control (one step)."""
    k_sweep = int(x.sweep_protocol.get("steps", 1))
    pts = [{"kind": f"bridge (K = {k_sweep})", "layer": r["layer"],
            "flops": model.hybrid(r["layer"], k_sweep), "nll": r["hybrid_nll"]}
           for r in x.sweep_layers]
    pts += [{"kind": "regression control (1 step)", "layer": r["layer"],
             "flops": model.hybrid(r["layer"], 1), "nll": r["regression_hybrid_nll"]}
            for r in x.bridgeability.get("regression", [])]
    return pts


def _cost_section(r: Document, x: ReportInputs) -> None:
    """Cost per generated token: FLOPs and measured time of the backbone, DiHAL at each K and
    the controls; hybrid NLL against FLOPs per swept layer; the break-even."""
    from dihal.cost import break_even
    from dihal.plots import plot_cost_quality

    r.h2("3b. Cost per generated token", COST)
    model = _cost_model(x)
    r.p(answer_break_even(x)[0])
    if model is None:
        return
    cost = x.evaluation["cost"]
    r.p(f"{cost['note']}; ms per token measured over a cached decode of {cost['n']} x "
        f"{cost['length']} tokens, the median of {cost['repeats']} rounds that go round the "
        "models (a load change falls on all alike). Time over FLOPs: the measured time "
        "relative to the backbone's over what the FLOPs predict (1: as predicted).")
    r.table([{"model": c["model"], "K": c["K"], "MFLOPs per token": c["flops_per_token"] / 1e6,
              "ms per token": c["ms_per_token"], "FLOPs x backbone": c["flops_vs_backbone"],
              "time x backbone": c["ms_vs_backbone"], "time over FLOPs": c["time_over_flops"]}
             for c in cost["rows"]],
            ["model", "K", "MFLOPs per token", "ms per token", "FLOPs x backbone",
             "time x backbone", "time over FLOPs"], ".4g")
    pts = _cost_points(x, model)
    if pts:
        base = {"flops": model.backbone(), "nll": x.sweep_layers[0]["backbone_nll"]}
        r.image(plot_cost_quality(pts, base, f"{x.backbone}: hybrid NLL vs cost per token"),
                "Held-out hybrid NLL against FLOPs per generated token, per swept layer")
    layers = sorted(x.bridgeability["swept_layers"])
    steps = sorted({int(c["K"]) for c in cost["rows"] if c["model"].startswith("DiHAL")})
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


def _judge_and_latency(r: Document, x: ReportInputs) -> None:
    ev_cfg, first = x.configs["eval"], x.evaluation["rows"][0]
    r.p("Samples are scored by the judge below, the same for every model:")
    r.table(_key_value({**x.evaluation["judge"], "samples": ev_cfg["n_samples"],
                        "length": ev_cfg["length"], "temperature": ev_cfg["temperature"],
                        "seed": ev_cfg["seed"],
                        "CPU threads while sampling (0: GPU)": first.get("cpu_threads"),
                        "CPU kernels while sampling (torch's CPU capability)":
                            first.get("cpu_kernels", "not recorded")}),
            ["setting", "value"])
    r.table([{"model": e["model"], "ms per token": e["ms_per_token"],
              "vs backbone": e["latency_vs_backbone"]} for e in x.evaluation["rows"]],
            ["model", "ms per token", "vs backbone"], ".3g")


def _full_training_section(r: Document, x: ReportInputs) -> None:
    r.h2("4. Full training: geometry-selected vs oracle vs worst layer", FULL)
    r.p(_full_training_summary(x))
    r.table(x.full_training, ["role", "layer", "val_loss", "recon_error", "hybrid_nll",
                              "top1_agreement", "train_tokens"], ".4g")
    r.table(_generation_table(x.full_training, []),
            ["role", "layer", "Gen.PPL [95 %]", "Gen.PPL, mean of samples [95 %]",
             "diversity [95 %]", "MAUVE [95 %]"])


def _samples_section(r: Document, x: ReportInputs) -> None:
    r.h2("6. Sample texts", SAMPLES)
    r.p("The first samples of each model, unedited.")
    r.pre("".join(f"== {model}\n" + "".join(f"- {t[:240]!r}\n" for t in texts[:4])
                  for model, texts in x.samples.items()))


def _configuration_section(r: Document, x: ReportInputs) -> None:
    r.h2("7. Configuration and inputs", CONFIG)
    r.p(f"Artifacts under {x.artifacts}. The configuration of each stage:")
    r.table([{"stage": stage, "setting": k, "value": v} for stage, cfg in x.configs.items()
             for k, v in sorted(cfg.items())], ["stage", "setting", "value"])
    r.p("The artifacts this report was built from, by fingerprint:")
    r.table([{"artifact": name, "fingerprint": fp[:16]} for name, fp in x.fingerprints.items()],
            ["artifact", "fingerprint"])


SECTIONS = (_answers_section, _locate_section, _bridgeability_section, _regression_section,
            _sampler_section, _generation_section, _controls_section, _cost_section,
            _full_training_section, _cross_backbone_section, _samples_section,
            _configuration_section)


def build_report(x: ReportInputs) -> ReportResult:
    """The report: it opens on its answers (each linking to its evidence), then one section
    per question, wide tables last in each."""
    r = Document(f"DiHAL on {x.backbone_info['hf_id']} ({x.backbone})")
    _intro(r, x)
    for section in SECTIONS:
        section(r, x)
    return ReportResult(html=r.html(), markdown=r.markdown())
