"""The report stage: lay out the finished results of one backbone as a results section (rendered
by dihal.document). Each section opens with one sentence saying what its numbers show; those
sentences are computed from the numbers. The inputs are gathered by the caller (the Dagster
layer reads them through storage)."""

from __future__ import annotations

from dihal.document import Document
from dihal.results import ReportInputs, ReportResult


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


def _number(v) -> float | None:
    return None if v is None or v != v else float(v)  # None and NaN: no number


def _bridgeability_summary(x: ReportInputs) -> str:
    rows = {r["predictor"]: r for r in x.bridgeability["spearman"]}
    depth = rows.pop("depth (-l)", None)
    b = x.bridgeability
    head = (f"Over {len(b['swept_layers'])} swept layers the oracle layer is {b['oracle']} and the "
            f"worst {b['worst']}; geometry picked {b['l_star']}")
    rho = {k: _number(r["spearman_vs_-val_loss"]) for k, r in rows.items()}
    rho = {k: v for k, v in rho.items() if v is not None}
    if not rho or depth is None:
        return head + "."
    best = max(rho, key=rho.get)
    above = [k for k, r in rows.items() if r.get("vs_depth_-val_loss") == "above"]
    verdict = (f"{len(above)} predictor(s) beat depth beyond the 95 % intervals: {', '.join(above)}"
               if above else "no predictor beats depth beyond the 95 % intervals "
               "(every one is above it by less than the resampling spread, or below it)")
    return (head + f". Against -val loss the highest Spearman is {best}'s, {rho[best]:.2f}; depth's "
            f"is {_number(depth['spearman_vs_-val_loss']) or float('nan'):.2f}. {verdict}.")


def _interval(row: dict, target: str) -> str:
    rho, lo, hi = (_number(row.get(f"{k}_vs_-{target}")) for k in ("spearman", "low", "high"))
    if rho is None:
        return "undefined"
    return f"{rho:.2f} [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else f"{rho:.2f}"


def _spearman_table(rows: list[dict]) -> list[dict]:
    """One line per predictor: Spearman with its interval per target, and where it stands
    against depth for -val loss."""
    return [{"predictor": r["predictor"],
             **{f"vs -{t}": _interval(r, t) for t in ("val_loss", "recon_error", "hybrid_nll")},
             "against depth (val loss)": r.get("vs_depth_-val_loss", "")} for r in rows]


def _regression_summary(rows: list[dict], swept: list[int]) -> str:
    if not rows:
        return ("No regression control was trained for these swept layers: materialise "
                "regression_sweep_<b> (the sweep job does) and then bridgeability again.")
    nll = [r["layer"] for r in rows if r["bridge_better_nll"]]
    rec = [r["layer"] for r in rows if r["bridge_better_recon"]]
    n = len(rows)
    verdict = ("The diffusion bridge beats the regressor" if len(nll) == n else
               "The regressor is at least as good as the diffusion bridge" if not nll else
               "Neither wins everywhere")
    missing = sorted(set(swept) - {r["layer"] for r in rows})
    return (f"{verdict}: under the same network and budget, the bridge has the lower hybrid NLL "
            f"at {len(nll)} of {n} layers" + (f" ({', '.join(map(str, nll))})" if nll else "")
            + f" and the lower reconstruction error at {len(rec)} of {n}."
            + (f" Layers without a control: {', '.join(map(str, missing))}." if missing else ""))


def _sampler_summary(curve: dict) -> str:
    rows = sorted(curve["rows"], key=lambda r: r["steps"])
    lo, hi = rows[0], rows[-1]
    best = min(rows, key=lambda r: r["hybrid_nll"])
    return (f"At l* = {curve['layer']} the bridge was trained for a {lo['trained_steps']}-step "
            f"sampler. With K = {lo['steps']} step(s) the hybrid's NLL is {lo['hybrid_nll']:.3f} "
            f"and its reconstruction error {lo['recon_error']:.3f}; with K = {hi['steps']}, "
            f"{hi['hybrid_nll']:.3f} and {hi['recon_error']:.3f} (the backbone: "
            f"{lo['backbone_nll']:.3f}). The lowest NLL is at K = {best['steps']}. Generation "
            f"costs {lo['ms_per_token']:.1f} ms per token at K = {lo['steps']} and "
            f"{hi['ms_per_token']:.1f} at K = {hi['steps']}.")


def _ci(row: dict, key: str, fmt: str = ".1f") -> str:
    """"value [low, high]" of a generation metric with its interval over samples."""
    v, lo, hi = (_number(row.get(key + end)) for end in ("", "_low", "_high"))
    if v is None:
        return "n/a"
    return f"{v:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]" if lo is not None and hi is not None else f"{v:{fmt}}"


def _separated(a: dict, b: dict, key: str) -> bool:
    """The two rows' intervals of `key` do not overlap."""
    lo_a, hi_a, lo_b, hi_b = (_number(r.get(key + e)) for r in (a, b) for e in ("_low", "_high"))
    if None in (lo_a, hi_a, lo_b, hi_b):
        return False
    return hi_a < lo_b or hi_b < lo_a


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
        v = [_number(r.get(f"gen_ppl{e}")) for r in (row, o) for e in ("", "_low", "_high")]
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
    predictors: list[str] = []
    for s in summaries:
        predictors += [r["predictor"] for r in s["bridgeability"]["spearman"]
                       if r["predictor"] not in predictors]
    spearman = []
    for p in predictors:
        row = {"predictor": p}
        for s in summaries:
            got = [r for r in s["bridgeability"]["spearman"] if r["predictor"] == p]
            cell = _interval(got[0], "val_loss") if got else "not computed"
            standing = got[0].get("vs_depth_-val_loss", "") if got else ""
            row[s["backbone"]] = f"{cell} ({standing})" if standing in ("above", "below") else cell
        spearman.append(row)
    return main, spearman


def _cross_backbone_section(r: Document, x: ReportInputs) -> None:
    r.h2("5. Across backbones")
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


def build_report(x: ReportInputs) -> ReportResult:
    from dihal.plots import plot_quality_diversity

    bb, score, bness = x.backbone_info, x.score, x.bridgeability
    geo_cfg, ev_cfg = x.configs["geometry"], x.configs["eval"]
    r = Document(f"DiHAL on {bb['hf_id']} ({x.backbone})")
    r.p(f"Backbone {bb['hf_id']} ({bb['architecture']}, {bb['n_layers']} layers, hidden "
        f"{bb['hidden_size']}), weights {bb['revision']}. Every number below was measured by the "
        "pipeline from the artifacts listed at the end; nothing is copied from the paper.")

    r.h2("1. Locate: geometry per layer")
    r.p(_locate_summary(x))
    srows = {(s["norm"], s["layer"]): s for s in x.score_rows}
    norms = sorted({g["norm"] for g in x.geometry_rows})
    geo = {(g["norm"], g["layer"]): g for g in x.geometry_rows}
    keys = ("m_curv", "m_mono", "k_eff", "S")
    table = [{"layer": layer, **{f"{k}[{n}]": (srows.get((n, layer), {}).get("S") if k == "S"
                                               else geo[(n, layer)][k]) for n in norms for k in keys}}
             for layer in sorted({g["layer"] for g in x.geometry_rows})]
    r.p(f"{geo_cfg['n_tokens']} held-out tokens per layer (position 0 dropped), "
        f"{geo_cfg['n_anchors']} anchors, k = {geo_cfg['k_neighbors']}, "
        f"{geo_cfg['n_pairs']} pairs. k_eff is unchanged by a global rescaling, so it is the "
        "same under none and rms; standardize rescales each dimension and changes it. "
        "Layer 0 is shown for reference and has no score.")
    r.table(table, ["layer"] + [f"{k}[{n}]" for n in norms for k in keys], ".3g")
    r.image(x.plots["proxies"], "Proxies against layer, per normalisation")
    r.image(x.plots["score"], "Layer score S_l and l* per normalisation")
    if x.score.get("stability"):
        r.p(_stability_summary(x.score["stability"], geo_cfg.get("n_resamples")))
        r.table(_stability_table(x.score["stability"]),
                ["normalisation", "l*", "l* [95 %] over resamples", "resamples picking l*",
                 "layers picked (share)"])
    if x.predictor_rows:
        r.p("Rival predictors on the same tokens (dihal.predictors): distance and linear CKA "
            "from the condition hs[0], the block influence of ShortGPT, the cross-validated R^2 "
            "of a ridge regression from the condition, the TwoNN intrinsic dimension, and the "
            "share of variance carried by the top 0.1 % tokens by norm (massive activations).")
        r.table(x.predictor_rows, list(x.predictor_rows[0]), ".3g")
    r.table([{"normalisation": n, "l*": score["selected"][n],
              "Spearman(S_l, -l)": score["spearman_vs_depth"][n]} for n in sorted(score["selected"])],
            ["normalisation", "l*", "Spearman(S_l, -l)"], ".3f")

    r.h2("2. Does the score predict bridgeability?")
    r.p(_bridgeability_summary(x))
    r.table(x.sweep_layers, ["layer", "init_val_loss", "val_loss", "recon_error", "hybrid_nll",
                             "backbone_nll", "top1_agreement", "steps", "seconds"], ".4g")
    r.p("Spearman correlation of each predictor with -val loss, -reconstruction error and "
        "-hybrid NLL over the swept layers, with a 95 % percentile bootstrap interval over layers "
        "(2000 resamples, the same for every predictor). Each rival predictor enters with the "
        "sign fixed before the sweep under which higher should mean easier (a leading minus: "
        "lower should). A predictor is marked above or below depth only where its interval and "
        "depth's do not overlap.")
    r.table(_spearman_table(bness["spearman"]),
            ["predictor", "vs -val_loss", "vs -recon_error", "vs -hybrid_nll",
             "against depth (val loss)"])
    r.image(x.plots["scatter"], "S_l vs bridge validation loss per normalisation, and the depth control")
    r.p("The protocol every swept layer was trained under:")
    r.table(_key_value(x.sweep_protocol), ["setting", "value"])

    r.h2("2a. The bridge against a regression control")
    r.p(_regression_summary(bness.get("regression", []), bness["swept_layers"]))
    if bness.get("regression"):
        r.p("The regression control is the sweep's denoiser, loss and budget trained only at "
            "t = 1, where the bridge's input is the condition itself: it predicts h_l from hs[0] "
            "in one step, with no noise. Both are measured the same way on held-out text.")
        r.table(bness["regression"], ["layer", "bridge_hybrid_nll", "regression_hybrid_nll",
                                      "bridge_recon_error", "regression_recon_error",
                                      "bridge_top1", "regression_top1"], ".4g")

    r.h2("2b. What the sampler's steps buy at l*")
    r.p(_sampler_summary(x.sampler_curve))
    r.table(x.sampler_curve["rows"], ["steps", "recon_error", "hybrid_nll", "top1_agreement",
                                      "ms_per_token"], ".4g")

    r.h2("3. Generation: DiHAL, the backbone and the baselines at a matched budget")
    cmp_ = x.comparison
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
    judge = x.evaluation["judge"]
    r.p("Samples are scored by the judge below, the same for every model:")
    first = x.evaluation["rows"][0]
    r.table(_key_value({**judge, "samples": ev_cfg["n_samples"], "length": ev_cfg["length"],
                        "temperature": ev_cfg["temperature"], "seed": ev_cfg["seed"],
                        "CPU threads while sampling (0: GPU)": first.get("cpu_threads"),
                        "CPU kernels while sampling (torch's CPU capability)":
                            first.get("cpu_kernels", "not recorded")}),
            ["setting", "value"])
    r.table([{"model": e["model"], "ms per token": e["ms_per_token"],
              "vs backbone": e["latency_vs_backbone"]} for e in x.evaluation["rows"]],
            ["model", "ms per token", "vs backbone"], ".3g")

    r.h2("4. Full training: geometry-selected vs oracle vs worst layer")
    r.p(_full_training_summary(x))
    r.table(x.full_training, ["role", "layer", "val_loss", "recon_error", "hybrid_nll",
                              "top1_agreement", "train_tokens"], ".4g")
    r.table(_generation_table(x.full_training, []),
            ["role", "layer", "Gen.PPL [95 %]", "Gen.PPL, mean of samples [95 %]",
             "diversity [95 %]", "MAUVE [95 %]"])

    _cross_backbone_section(r, x)

    r.h2("6. Sample texts")
    r.p("The first samples of each model, unedited.")
    r.pre("".join(f"== {model}\n" + "".join(f"- {t[:240]!r}\n" for t in texts[:4])
                  for model, texts in x.samples.items()))

    r.h2("7. Configuration and inputs")
    r.p(f"Artifacts under {x.artifacts}. The configuration of each stage:")
    r.table([{"stage": stage, "setting": k, "value": v} for stage, cfg in x.configs.items()
             for k, v in sorted(cfg.items())], ["stage", "setting", "value"])
    r.p("The artifacts this report was built from, by fingerprint:")
    r.table([{"artifact": name, "fingerprint": fp[:16]} for name, fp in x.fingerprints.items()],
            ["artifact", "fingerprint"])
    return ReportResult(html=r.html(), markdown=r.markdown())
