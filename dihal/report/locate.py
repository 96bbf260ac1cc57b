"""The report's Locate section and its answer: l* and its stability, the proxy tables."""

from __future__ import annotations

from dihal.inputs import LayerScoreSummary, Picks, PredictorRow, SequenceStability
from dihal.proxies import NAMES
from dihal.report.common import LOCATE
from dihal.report.document import Document
from dihal.report.inputs import ReportInputs


def _locate_summary(x: ReportInputs) -> str:
    score = x.locate.score
    sel, rho = score.selected, score.spearman_vs_depth
    primary = x.configs.primary_norm
    depthy = [n for n, r in rho.items() if r is not None and abs(r) >= 0.8]
    return (f"The geometry score selects l* = {score.l_star} under {primary} "
            f"(by normalisation: {', '.join(f'{n} {v}' for n, v in sorted(sel.items()))}); "
            + (f"under {', '.join(depthy)} it is largely depth (|Spearman with -l| >= 0.8)."
               if depthy else "no normalisation's score is mostly depth (|Spearman with -l| < 0.8)."))


def _stability_table(stability: dict[str, Picks]) -> list[dict]:
    return [{"normalisation": n, "l*": v.l_star, "l* [95 %] over resamples": f"[{v.low}, {v.high}]",
             "resamples picking l*": f"{v.same:.0%} of {v.replicates}",
             "layers picked (share)": v.shares()}
            for n, v in sorted(stability.items())]


def _stability_summary(stability: dict[str, Picks], n_resamples) -> str:
    firm = [n for n, v in sorted(stability.items()) if v.same >= 0.9]
    loose = [f"{n} ({v.same:.0%})" for n, v in sorted(stability.items()) if v.same < 0.9]
    return (f"Over {n_resamples} bootstrap resamples of the geometry tokens (the proxies recomputed "
            "on each: covariance, and the anchors' and pairs' statistics, with the full sample's "
            "neighbourhoods and preconditioner), "
            + (f"l* is the same in at least 90 % of resamples under {', '.join(firm)}" if firm
               else "l* is not the same in 90 % of resamples under any normalisation")
            + (f"; it moves under {', '.join(loose)}." if loose else "."))


def stability_by_method(score: LayerScoreSummary, primary: str) -> list[dict]:
    """l*'s stability under the primary normalisation by each check that was run: the token
    bootstrap (the geometry's, neighbourhoods and preconditioner kept), the sequence bootstrap
    (whole held-out sequences resampled, everything recomputed) and split halves (l* on two
    disjoint halves of the sequences)."""
    out = []
    tok = score.stability.get(primary)
    if tok:
        out.append({"check": "tokens resampled (neighbourhoods, preconditioner fixed)",
                    "l*": tok.l_star, "replicates": tok.replicates,
                    "picking l*": f"{tok.same:.0%}", "95 % range": f"[{tok.low}, {tok.high}]",
                    "layers picked (share)": tok.shares()})
    seq = score.sequence_stability
    if b := seq.bootstrap:
        out.append({"check": f"whole sequences resampled (of {seq.sequences}; all recomputed)",
                    "l*": b.l_star, "replicates": b.replicates,
                    "picking l*": f"{b.same:.0%}", "95 % range": f"[{b.low}, {b.high}]",
                    "layers picked (share)": b.shares()})
    if h := seq.split_half:
        out.append({"check": "split halves of the sequences", "l*": score.l_star,
                    "replicates": len(h.splits),
                    "picking l*": f"halves agree in {h.agreement:.0%}",
                    "95 % range": "",
                    "layers picked (share)": "; ".join(f"{a} and {b}" for a, b in h.splits)})
    return out


def _sequence_summary(seq: SequenceStability, primary: str) -> str:
    parts = []
    if b := seq.bootstrap:
        parts.append(f"resampling whole held-out sequences ({b.replicates} replicates, the "
                     f"geometry recomputed on each), {b.same:.0%} pick l* = {b.l_star} "
                     f"again, 95 % range [{b.low}, {b.high}]")
    if h := seq.split_half:
        parts.append("on two disjoint halves of the sequences l* is " + "; ".join(
            f"{a} and {b}" for a, b in h.splits)
            + (" (the halves agree)" if h.agreement == 1 else
               " (the halves disagree)" if h.agreement == 0 else
               f" (agreeing in {h.agreement:.0%} of splits)"))
    if not parts:
        return ("l*'s stability over resampled sequences was not computed (layer_score "
                "sequence_resamples and split_halves are 0).")
    return f"Under {primary}, " + "; ".join(parts) + (
        f" ({seq.seconds:.0f} s)." if seq.seconds is not None else ".")


def answer_l_star(x: ReportInputs) -> tuple[str, str]:
    """Which layer geometry selects, and how firmly: over resampled whole sequences where they
    were resampled, else over the token bootstrap (which overstates it; the section has both
    and the split halves)."""
    primary, score = x.configs.primary_norm, x.locate.score
    line = f"Geometry selects l* = {score.l_star} (S_l under {primary})"
    if b := score.sequence_stability.bootstrap:
        line += (f"; {b.same:.0%} of {b.replicates} resamples of whole sequences pick it "
                 f"again (95 % range [{b.low}, {b.high}])")
    elif st := score.stability.get(primary):
        line += (f"; {st.same:.0%} of {st.replicates} bootstrap resamples of the tokens pick "
                 f"it again (95 % range [{st.low}, {st.high}]; tokens only, which overstates it)")
    return line + ".", LOCATE


def _proxy_tables(x: ReportInputs) -> dict[str, list[dict]]:
    """One table per normalisation: the proxies and S_l of each layer."""
    score = {(s.norm, s.layer): s.S for s in x.locate.scores}
    out: dict[str, list[dict]] = {}
    for g in sorted(x.locate.geometry, key=lambda g: (g.norm, g.layer)):
        out.setdefault(g.norm, []).append(
            {"layer": g.layer, **{k: getattr(g, k) for k in NAMES},
             "S": score.get((g.norm, g.layer))})
    return out


def locate_section(r: Document, x: ReportInputs) -> None:
    geo_cfg, score = x.configs.geometry, x.locate.score
    r.h2("1. Locate: geometry per layer", LOCATE)
    r.p(_locate_summary(x))
    r.table([{"normalisation": n, "l*": score.selected[n],
              "Spearman(S_l, -l)": score.spearman_vs_depth[n]} for n in sorted(score.selected)],
            ["normalisation", "l*", "Spearman(S_l, -l)"], ".3f")
    if score.stability:
        r.p(_stability_summary(score.stability, geo_cfg.n_resamples))
        r.table(_stability_table(score.stability),
                ["normalisation", "l*", "l* [95 %] over resamples", "resamples picking l*",
                 "layers picked (share)"])
    primary = x.configs.primary_norm
    r.p(_sequence_summary(score.sequence_stability, primary) + " The token bootstrap resamples "
        "single tokens from few sequences and keeps the neighbourhoods and the preconditioner "
        "fixed, so it overstates how stable l* is; the checks below resample whole sequences:")
    by_method = stability_by_method(score, primary)
    if by_method:
        r.table(by_method, list(by_method[0]))
    r.image(x.plots.proxies, "Proxies against layer, per normalisation")
    r.image(x.plots.score, "Layer score S_l and l* per normalisation")
    r.p(f"{geo_cfg.n_tokens} held-out tokens per layer (position 0 dropped), "
        f"{geo_cfg.n_anchors} anchors, k = {geo_cfg.k_neighbors}, "
        f"{geo_cfg.n_pairs} pairs. k_eff is unchanged by a global rescaling, so it is the "
        "same under none and rms; standardize rescales each dimension and changes it. "
        "Layer 0 is shown for reference and has no score. One table per normalisation:")
    for norm, table in _proxy_tables(x).items():
        r.h3(f"Proxies and S_l under {norm}")
        r.table(table, ["layer", *NAMES, "S"], ".3g")
    if x.locate.predictors:
        r.p("Rival predictors on the same tokens (dihal.locate.predictors): distance and linear CKA "
            "from the condition hs[0], the block influence of ShortGPT, the cross-validated R^2 "
            "of a ridge regression from the condition, the TwoNN intrinsic dimension, and the "
            "share of variance carried by the top 0.1 % tokens by norm (massive activations).")
        r.table([p.to_dict() for p in x.locate.predictors],
                list(PredictorRow.__dataclass_fields__), ".3g")
