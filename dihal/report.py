"""The report stage: lay out the finished results of one backbone as a results section (rendered
by dihal.document). Each section opens with one sentence saying what its numbers show; those
sentences are computed from the numbers. The inputs are gathered by the caller (the Dagster
layer reads them through storage)."""

from __future__ import annotations

import math

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


def _picks(v: dict) -> str:
    return ", ".join(f"{ll}: {sh:.0%}" for ll, sh in list(v["picks"].items())[:4])


def stability_by_method(score: dict, primary: str) -> list[dict]:
    """l*'s stability under the primary normalisation by each check that was run: the token
    bootstrap (the geometry's, neighbourhoods and preconditioner kept), the sequence bootstrap
    (whole held-out sequences resampled, everything recomputed) and split halves (l* on two
    disjoint halves of the sequences)."""
    out = []
    tok = score.get("stability", {}).get(primary)
    if tok:
        out.append({"check": "tokens resampled (neighbourhoods, preconditioner fixed)",
                    "l*": tok["l_star"], "replicates": tok["replicates"],
                    "picking l*": f"{tok['same']:.0%}", "95 % range": f"[{tok['low']}, {tok['high']}]",
                    "layers picked (share)": _picks(tok)})
    seq = score.get("sequence_stability") or {}
    if seq.get("bootstrap"):
        b = seq["bootstrap"]
        out.append({"check": f"whole sequences resampled (of {seq['sequences']}; all recomputed)",
                    "l*": b["l_star"], "replicates": b["replicates"],
                    "picking l*": f"{b['same']:.0%}", "95 % range": f"[{b['low']}, {b['high']}]",
                    "layers picked (share)": _picks(b)})
    if seq.get("split_half"):
        h = seq["split_half"]
        out.append({"check": "split halves of the sequences", "l*": score["l_star"],
                    "replicates": len(h["splits"]),
                    "picking l*": f"halves agree in {h['agreement']:.0%}",
                    "95 % range": "",
                    "layers picked (share)": "; ".join(f"{s['l_star_a']} and {s['l_star_b']}"
                                                       for s in h["splits"])})
    return out


def _sequence_summary(score: dict, primary: str) -> str:
    seq = score.get("sequence_stability") or {}
    parts = []
    if seq.get("bootstrap"):
        b = seq["bootstrap"]
        parts.append(f"resampling whole held-out sequences ({b['replicates']} replicates, the "
                     f"geometry recomputed on each), {b['same']:.0%} pick l* = {b['l_star']} "
                     f"again, 95 % range [{b['low']}, {b['high']}]")
    if seq.get("split_half"):
        h = seq["split_half"]
        parts.append("on two disjoint halves of the sequences l* is " + "; ".join(
            f"{s['l_star_a']} and {s['l_star_b']}" for s in h["splits"])
            + (" (the halves agree)" if h["agreement"] == 1 else
               " (the halves disagree)" if h["agreement"] == 0 else
               f" (agreeing in {h['agreement']:.0%} of splits)"))
    if not parts:
        return ("l*'s stability over resampled sequences was not computed (layer_score "
                "sequence_resamples and split_halves are 0, or made before layer_score 3).")
    return f"Under {primary}, " + "; ".join(parts) + (
        f" ({seq['seconds']:.0f} s)." if "seconds" in seq else ".")


def _seed_cell(r: dict) -> str:
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
             **{f"{m} mean +- sd [min, max]": _seed_cell(spread[m][i]) for m in spread}}
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


def _layers_text(layers: list[int]) -> str:
    return ("layer " if len(layers) == 1 else "layers ") + ", ".join(map(str, layers))


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
        f"{n} at {_layers_text(ls)}" for n, ls in sorted(by_n.items(), reverse=True)) + "."
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


def _on_cpu(x: ReportInputs) -> bool | None:
    """Whether the run was on the CPU, as the eval recorded it (its sampling threads, 0 on a
    GPU); None where not recorded."""
    threads = ((x.evaluation or {}).get("rows") or [{}])[0].get("cpu_threads")
    return None if threads is None else threads > 0


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


def _interval(s: Spearman | None) -> str:
    rho, lo, hi = s.interval() if s is not None else (None, None, None)
    if rho is None:
        return "undefined"
    return f"{rho:.2f} [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else f"{rho:.2f}"


def _spearman_table(rows: list[SpearmanRow]) -> list[dict]:
    """One line per predictor: Spearman with its interval per target, and where it stands
    against depth for -val loss and -hybrid NLL (the paired test)."""
    return [{"predictor": r.predictor, **{f"vs -{t}": _interval(r.of(t)) for t in TARGETS},
             "against depth (val loss)": r.of().vs_depth if r.of() else "",
             "against depth (hybrid NLL)": r.of("hybrid_nll").vs_depth if r.of("hybrid_nll")
             else ""} for r in rows]


def _triple(v: tuple[float | None, float | None, float | None], fmt: str = "+.2f") -> str:
    value, lo, hi = v
    if value is None:
        return "undefined"
    return f"{value:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]" if lo is not None and hi is not None \
        else f"{value:{fmt}}"


def _paired_table(rows: list[SpearmanRow]) -> list[dict]:
    """One line per predictor and target: the paired difference from depth's Spearman with
    its interval, the raw and Holm-corrected p-values, the verdict, and the partial Spearman
    given depth with its interval."""
    return [{"predictor": r.predictor, "target": f"-{t}", "Spearman": _interval(s),
             "minus depth's [95 %]": _triple(s.difference()),
             "p": "" if s.p is None else f"{s.p:.3g}",
             "p (Holm)": "" if s.p_holm is None else f"{s.p_holm:.3g}",
             "against depth": s.vs_depth,
             "partial given depth [95 %]": _triple(s.partial_interval())}
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


NATIVE_ROLE = "baseline (native temperature)"  # dihal.compare's; not imported (torch)


def _separated(a: dict, b: dict, key: str) -> bool:
    """The two rows' intervals of `key` do not overlap."""
    return Estimate.of(a, key).separated_from(Estimate.of(b, key))


def _mauve_is_diagnostic(rows: list[dict]) -> bool:
    """MAUVE is a diagnostic, not a result, where some row has it from fewer than 512 samples a
    side (or unequal counts), or did not record its counts."""
    from dihal.metrics import MAUVE_RESULT_SAMPLES

    measured = [r for r in rows if number(r.get("mauve")) is not None]
    return any(r.get("mauve_diagnostic", True) or min(r.get("mauve_n_p") or 0, r.get("mauve_n_q")
                                                       or 0) < MAUVE_RESULT_SAMPLES
               for r in measured)


def _mauve_header(rows: list[dict]) -> str:
    return "MAUVE [95 %] (diagnostic)" if _mauve_is_diagnostic(rows) else "MAUVE [95 %]"


def _at_length_header(rows: list[dict]) -> str:
    lengths = sorted({r["ppl_length"] for r in rows if r.get("ppl_length")})
    return (f"Gen.PPL, first {lengths[0]} judge tokens [95 %]" if len(lengths) == 1 else
            "Gen.PPL, first L judge tokens [95 %]")


def _temperature(r: dict) -> str:
    t = r.get("temperature", "")
    return "none (deterministic rounding)" if t is None else "not recorded" if t == "" else f"{t:g}"


def _generation_table(rows: list[dict], extra: list[str]) -> list[dict]:
    """One line per model: every metric with its interval, and beside them what they depend on:
    the decoding temperature, the samples' mean length in words and in judge tokens, and how
    many samples reach the common length L (of those scored)."""
    mauve, at = _mauve_header(rows), _at_length_header(rows)
    return [{**{k: r.get(k) for k in ("model", "role", "layer") if k in r},
             "temperature": _temperature(r),
             "Gen.PPL [95 %]": _ci(r, "gen_ppl"), at: _ci(r, "gen_ppl_at_length"),
             "samples reaching L": (f"{r['ppl_length_scored']} of "
                                    f"{r['ppl_length_scored'] + r.get('ppl_length_short', 0)}"
                                    if r.get("ppl_length_scored") is not None else "n/a"),
             "Gen.PPL, mean of samples [95 %]": _ci(r, "gen_ppl_mean"),
             "diversity [95 %]": _ci(r, "diversity", ".3f"),
             "diversity (spaCy, as LD4LG)": (f"{r['diversity_spacy']:.3f}"
                                             if number(r.get("diversity_spacy")) is not None
                                             else "n/a"),
             mauve: _ci(r, "mauve", ".3f"),
             "mean length (words)": r.get("mean_length"),
             "mean length (judge tokens)": r.get("mean_judge_length"),
             **{k: r.get(k) for k in extra}} for r in rows]


def _generation_columns(rows: list[dict], extra: list[str], lead: list[str]) -> list[str]:
    return [*lead, "temperature", "Gen.PPL [95 %]", _at_length_header(rows), "samples reaching L",
            "Gen.PPL, mean of samples [95 %]", "diversity [95 %]", "diversity (spaCy, as LD4LG)",
            _mauve_header(rows), "mean length (words)", "mean length (judge tokens)", *extra]


def _per_text(row: dict) -> list[tuple[float, int]] | None:
    nll, tokens = row.get("sample_nll"), row.get("sample_tokens")
    if not nll or not tokens or len(nll) < 2 or len(nll) != len(tokens):
        return None
    return [(float(a), int(b)) for a, b in zip(nll, tokens, strict=True)]


def generation_pairs(dihal: dict, others: list[dict], level: float = 0.95) -> list[dict]:
    """DiHAL's Gen.PPL against each other row that kept its per-sample scores: the difference
    of log Gen.PPL (token-weighted) with a percentile interval (each side's samples resampled
    independently: different models' samples), its p-value Holm-corrected over the pairs, the
    verdict ("higher" / "lower" / "not distinguishable": DiHAL's Gen.PPL against the other's);
    and how many samples per model a paired t-test would need for 80 % power at the level on
    the mean per-sample log-PPL difference (samples paired by index, the first min(n_a, n_b):
    dihal.uncertainty.samples_for_power)."""
    from dihal.uncertainty import (
        holm,
        log_ppl_difference,
        paired_log_ppl_differences,
        paired_verdict,
        samples_for_power,
    )

    a = _per_text(dihal)
    out = []
    for o in others:
        b = _per_text(o)
        if a is None or b is None:
            continue
        n = min(len(a), len(b))
        out.append({"model": o["model"],
                    **log_ppl_difference(a, b, n_boot=1000, seed=0, level=level),
                    "power": samples_for_power(paired_log_ppl_differences(a[:n], b[:n]),
                                               level=level)})
    for r, adj in zip(out, holm([r["p"] for r in out]), strict=True):
        side = paired_verdict(r["diff"], adj, level)
        r.update(p_holm=adj, verdict={ABOVE: "higher", BELOW: "lower"}.get(side, side))
    return out


def _power_text(pw: dict) -> str:
    return (f"{pw['n']}" if pw["n"] is not None else "no count (equal means)" if pw["mean"] == 0
            else "more than 10,000,000")


def _pairs_table(pairs: list[dict]) -> list[dict]:
    return [{"DiHAL against": p["model"], "Gen.PPL ratio [95 %]":
             f"{p['ratio']:.2f} [{math.exp(p['low']):.2f}, {math.exp(p['high']):.2f}]",
             "p (Holm)": f"{p['p_holm']:.3g}", "DiHAL's Gen.PPL": p["verdict"],
             "samples per model for 80 % power": _power_text(p["power"]),
             "samples now": p["power"]["observed_n"]} for p in pairs]


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
    pairs = generation_pairs(dihal, [ref, *bases])
    others = len(bases) + 1
    if len(pairs) == others:
        ranked = [p["model"] for p in pairs if p["verdict"] != "not distinguishable"]
        line += (f". By the difference of log Gen.PPL (95 %, Holm over the {others} pairs), "
                 f"DiHAL's Gen.PPL is told apart from {len(ranked)} of the {others} other models"
                 + (f" ({', '.join(ranked)})" if ranked else ""))
        power = [f"{_power_text(p['power'])} for {p['model']}" for p in pairs
                 if p["model"] not in ranked]
        return line + "." + (" A paired t-test on the per-sample log-perplexity would need, "
                             "for 80 % power at the 5 % level, about " + ", ".join(power)
                             + " samples per model." if power else "")
    ranked = [r["model"] for r in [ref, *bases] if _separated(dihal, r, "gen_ppl")]
    return (line + f". With the 95 % intervals over samples, DiHAL's Gen.PPL is separated from "
            f"{len(ranked)} of the {others} other models" + (f" ({', '.join(ranked)})" if ranked
                                                            else "")
            + ("" if len(ranked) == others else "; the others cannot be ranked against it at "
               "this sample count (these rows kept no per-sample scores for a power "
               "calculation)") + ".")


def _generation_setting(x: ReportInputs) -> str:
    """What every generation row shares: the start token, the temperature, the common length."""
    rows, ev = x.comparison["rows"], x.evaluation["rows"][0]
    token = ev.get("start_token")
    start = (f"Every sample is drawn unconditionally from the backbone's start token "
             f"{token!r} (id {ev.get('start_token_id')}), the BOS that opens every training "
             "sequence; for an Instruct backbone that token may be a chat-turn opener, and the "
             "samples are compared with plain corpus text." if token is not None else
             "The unconditional start token was not recorded (evaluation made before eval 6).")
    ranked = {_temperature(r) for r in rows if r["role"] != NATIVE_ROLE}
    rounding = "none (deterministic rounding)"
    temps = ranked - {rounding}
    native = [r["model"] for r in rows if r["role"] == NATIVE_ROLE]
    temp = (f" Every ranked row decodes at temperature {temps.pop()}" if len(temps) == 1 else
            f" The rows decode at different temperatures ({', '.join(sorted(temps))}): their "
            "Gen.PPL and diversity are not comparable")
    temp += (" (SED and Diffusion-LM round to tokens deterministically and have none)"
             if rounding in ranked else "")
    temp += (f"; {', '.join(native)}: the recipe's own temperature, an extra row, not ranked."
             if native else ".")
    lengths = sorted({r["ppl_length"] for r in rows if r.get("ppl_length")})
    at = (f" Samples end at their first EOS, so their lengths differ: a second Gen.PPL scores "
          f"only each sample's first {lengths[0]} judge tokens (samples shorter than that left "
          "out and counted), and every row shows its mean length." if len(lengths) == 1 else "")
    mauve = (" MAUVE here is a diagnostic, not a result: fewer than 512 samples a side "
             "(mauve-text's quantisation has too few clusters to separate shifts of half a "
             "standard deviation)." if _mauve_is_diagnostic(rows) else "")
    return start + temp + at + mauve


def _trained_rows(x: ReportInputs) -> list[dict]:
    """One full-training row per role: its bridge sampled at the protocol's K."""
    return [r for r in x.full_training if r.get("sampler", "protocol") == "protocol"]


def _full_training_summary(x: ReportInputs) -> str:
    rows = {r["role"]: r for r in _trained_rows(x)}
    geo, oracle, worst = (rows.get(k) for k in ("geometry l*", "oracle", "worst"))
    if not (geo and oracle and worst):
        return "Full training did not cover all three roles."
    return (f"With the full budget (the oracle and worst layers chosen by the sweep's hybrid "
            f"NLL), the geometry-selected layer {geo['layer']} reaches hybrid NLL "
            f"{geo['hybrid_nll']:.3f} and validation loss {geo['val_loss']:.3f} (oracle layer "
            f"{oracle['layer']}: {oracle['hybrid_nll']:.3f} and {oracle['val_loss']:.3f}, worst "
            f"layer {worst['layer']}: {worst['hybrid_nll']:.3f} and {worst['val_loss']:.3f}) and "
            f"Gen.PPL {geo['gen_ppl']:.1f} (oracle {oracle['gen_ppl']:.1f}, worst "
            f"{worst['gen_ppl']:.1f})." + _by_loss_note(x.bridgeability))


def _by_loss_note(b: dict) -> str:
    """What validation loss would have chosen for full training, where it disagrees."""
    by = b.get("oracle_by", {})
    loss = by.get("by", {}).get("val_loss")
    if not loss or not (by.get("oracle_disagree") or by.get("worst_disagree")):
        return ""
    return (f" By the sweep's validation loss the oracle would be layer {loss['oracle']} and the "
            f"worst {loss['worst']}: the two measures disagree, and full training follows the "
            "hybrid NLL, the one closer to generation.")


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
        "-val loss with its 95 % interval over layers; (above)/(below) where the paired "
        "difference from depth's Spearman says so (Holm-corrected, section 2).")
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
CONTROLS, COST, FRONTIER = "control-hybrids", "cost", "temperature-frontier"


def answer_l_star(x: ReportInputs) -> tuple[str, str]:
    """Which layer geometry selects, and how firmly (over the token bootstrap)."""
    primary = x.configs["layer_score"]["primary_norm"]
    line = f"Geometry selects l* = {x.score['l_star']} (S_l under {primary})"
    st = x.score.get("stability", {}).get(primary)
    if st:
        line += (f"; {st['same']:.0%} of {st['replicates']} bootstrap resamples of the tokens "
                 f"pick it again, 95 % range [{st['low']}, {st['high']}]")
    seq = x.score.get("sequence_stability") or {}
    if seq.get("bootstrap"):
        b = seq["bootstrap"]
        line += (f"; {b['same']:.0%} of {b['replicates']} resamples of whole sequences, "
                 f"95 % range [{b['low']}, {b['high']}]")
    if seq.get("split_half"):
        agree = seq["split_half"]["agreement"]
        line += ("; two disjoint halves of the sequences " + (
            "agree on it" if agree == 1 else "disagree" if agree == 0 else
            f"agree in {agree:.0%} of splits"))
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
    how = "by the paired difference of the Spearman correlations (95 %, Holm-corrected)"
    verdict = {ABOVE: f"geometry predicts how well a bridge learns better than depth does, {how}",
               BELOW: f"depth predicts how well a bridge learns better than geometry does, {how}"
               }.get(g.vs_depth, f"geometry and depth cannot be told apart at {n} swept layers "
                                 f"{how}")
    nll = geo.of("hybrid_nll")
    rivals = [r.predictor for r in rows.values()
              if not r.is_depth and r is not geo and r.of() and r.of().vs_depth == ABOVE]
    return (f"Over {n} swept layers, S_l ({primary}) has Spearman {_interval(g)} with -val loss "
            f"and depth {_interval(d)}"
            + (f" (difference {_triple(g.difference())})" if g.diff is not None else "")
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
    return verdict + " (lower hybrid NLL, same network and budget).", REGRESSION


def answer_generation(x: ReportInputs) -> tuple[str, str]:
    """DiHAL's Gen.PPL against the backbone's and the baselines': by the difference of log
    Gen.PPL (Holm over the pairs) where the rows kept their per-sample scores, else by whether
    the 95 % intervals over samples are separated."""
    rows = generation_rows(x.comparison["rows"])
    dihal = next(r for r in rows if r.role == "dihal")
    ref = next(r for r in rows if r.role == "backbone")
    bases = [r for r in rows if r.role == "baseline"]
    pairs = {p["model"]: p for p in generation_pairs(dihal.columns,
                                                     [o.columns for o in (ref, *bases)])}
    tested = len(pairs) == len(bases) + 1

    def apart(o) -> bool:
        return (pairs[o.name]["verdict"] != "not distinguishable" if tested
                else dihal.gen_ppl.separated_from(o.gen_ppl))

    side = "lower" if dihal.gen_ppl.value < ref.gen_ppl.value else "higher"
    how = "the difference of log Gen.PPL" if tested else "the intervals"
    sep = (f"told apart by {how}" if tested and apart(ref) else
           f"not told apart by {how}" if tested else
           "the intervals are separated" if apart(ref) else "the intervals overlap")
    line = (f"DiHAL's Gen.PPL is {dihal.gen_ppl.text()}, {side} than the backbone's "
            f"{ref.gen_ppl.text()} ({sep})")
    if bases:
        beaten = [r.name for r in bases if dihal.gen_ppl.value < r.gen_ppl.value]
        clear = [r.name for r in bases if r.name in beaten and apart(r)]
        line += (f"; at the matched budget it is lower than {len(beaten)} of {len(bases)} "
                 f"baselines' ({', '.join(beaten)}), beyond {how}"
                 + (" (Holm over the pairs)" if tested else "") + f" for {len(clear)} of them"
                 if beaten else f"; at the matched budget it is lower than none of the "
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


def answer_frontier(x: ReportInputs) -> tuple[str, str]:
    """Who lies on the Gen.PPL/diversity frontier across the decoding temperatures measured
    (dihal.frontier.frontier_sentence over the comparison's frontier points)."""
    from dihal.frontier import frontier_sentence

    return frontier_sentence(x.comparison.get("frontier") or []), FRONTIER


ANSWERS = (answer_l_star, answer_geometry_vs_depth, answer_bridge_vs_regression,
           answer_generation, answer_frontier, answer_cost, answer_controls, answer_break_even)


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
    primary = x.configs["layer_score"]["primary_norm"]
    r.p(_sequence_summary(score, primary) + " The token bootstrap resamples single tokens "
        "from few sequences and keeps the neighbourhoods and the preconditioner fixed, so it "
        "overstates how stable l* is; the checks below resample whole sequences:")
    by_method = stability_by_method(score, primary)
    if by_method:
        r.table(by_method, list(by_method[0]))
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
        r.p(_seed_coverage(x.bridgeability["seeds"], _on_cpu(x)))
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
    r.table(_key_value(proto), ["setting", "value"])


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
    extra = ["repetition", "denoiser_parameters", "train_tokens", "sampler_steps", "seq_len"]
    r.p(_generation_setting(x))
    r.p("Gen.PPL token-weighted (exp of the judge's total NLL over all scored tokens), on the "
        "first L judge tokens of every sample, and as the mean of per-sample perplexities (the "
        "convention of LD4LG's evaluation code); diversity with our word regex and with spaCy's "
        "English tokenizer (as LD4LG computes it); MAUVE (mauve-text, its defaults) against "
        "held-out corpus text cut like the samples, on equal counts a side, on the judge's "
        "last-token features; 95 % intervals over samples: percentile bootstrap (1000 "
        "resamples) for Gen.PPL, for MAUVE with the k-means fit refitted under 5 seeds inside "
        "the interval, the jackknife for diversity (duplicated samples would bias a bootstrap "
        "of pooled n-gram counts).")
    r.table(_generation_table(cmp_["rows"], extra),
            _generation_columns(cmp_["rows"], extra, ["model"]), ".4g")
    pairs = generation_pairs(next(r for r in cmp_["rows"] if r["role"] == "dihal"),
                             [r for r in cmp_["rows"] if r["role"] in ("backbone", "baseline")])
    if pairs:
        r.p("DiHAL against each model: the ratio of Gen.PPL with its 95 % interval (each side's "
            "samples resampled), Holm-corrected over the pairs, and the samples per model a "
            "paired t-test on the per-sample log-perplexity would need for 80 % power at the 5 % "
            "level, taking the observed spread as the truth:")
        r.table(_pairs_table(pairs), list(_pairs_table(pairs)[0]))
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
        "head: the regression hybrid (the regression control of that layer trained with the "
        "bridge's full budget: the bridge network trained at t = 1 only, with the bridge "
        "stage's protocol and one seed, sampled in one step; the sweep-budget controls are "
        "bridgeability's), the layer-drop hybrid (hs[0] "
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
    r.p(f"{cost['note']} ({cost.get('flop_length', cost['length'])} tokens); ms per token "
        f"measured over a cached decode of {cost['n']} x {cost['length']} tokens, the median "
        f"of {cost['repeats']} rounds that go round the models (a load change falls on all "
        "alike). Time over FLOPs: the measured time relative to the backbone's over what the "
        "FLOPs predict (1: as predicted).")
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


def frontier_table(points: list[dict]) -> list[dict]:
    """One line per frontier point: model, T, Gen.PPL with its interval, diversity (ours and
    spaCy's), mean length in judge tokens, whether it lies on the frontier, and whether another
    point dominates it beyond both intervals (dihal.frontier.clearly_dominates)."""
    from dihal.frontier import on_frontier

    return [{"model": p["model"], "T": _temperature(p), "Gen.PPL [95 %]": _ci(p, "gen_ppl"),
             "diversity": p["diversity"], "diversity (spaCy)": p.get("diversity_spacy"),
             "mean length (judge tokens)": p.get("mean_judge_length"),
             "on the frontier": "yes" if on else "no",
             "dominated beyond the 95 % intervals": "no" if clear else "yes"}
            for p, on, clear in zip(points, on_frontier(points),
                                    on_frontier(points, clearly=True), strict=True)]


def _frontier_section(r: Document, x: ReportInputs) -> None:
    """Gen.PPL against diversity of every model at each decoding temperature measured."""
    from dihal.frontier import frontier_sentence
    from dihal.plots import plot_frontier

    points = x.comparison.get("frontier") or []
    r.h2("3c. Gen.PPL against diversity across temperatures", FRONTIER)
    r.p(frontier_sentence(points))
    if not points:
        return
    r.p("A lower temperature can buy a lower Gen.PPL with less diverse samples, so one "
        "temperature's Gen.PPL alone can favour the less diverse model. DiHAL (at its "
        "protocol's K), the backbone and each baseline with a temperature are sampled at each "
        "temperature with the main table's count, length, seed and judge (no MAUVE); the point "
        "at the main table's temperature, and CoDAR's at its own, are those rows. SED and "
        "Diffusion-LM round to tokens deterministically: one point each, at no temperature.")
    r.image(plot_frontier(points, f"{x.backbone}: Gen.PPL vs diversity across temperatures"),
            "Gen.PPL against diversity across temperatures")
    table = frontier_table(points)
    r.table(table, list(table[0]), ".4g")


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
    trained = _trained_rows(x)
    r.p(full_training_seeds(trained))
    spread = [{"role": row["role"], "layer": row["layer"], "seeds": row.get("n_seeds", 1),
               **{f"{m} mean +- sd [min, max]": _seed_cell(
                   {k: row.get(f"{m}_seed_{k}") for k in ("mean", "sd", "min", "max")})
                  if number(row.get(f"{m}_seed_mean")) is not None else "n/a"
                  for m in ("val_loss", "t1_loss", "hybrid_nll")}}
              for row in trained if (row.get("n_seeds") or 1) > 1
              and row.get("val_loss_seed_mean") is not None]
    r.table(trained, ["role", "layer", "val_loss", "t1_loss", "recon_error", "hybrid_nll",
                      "top1_agreement", "train_tokens", "train_seconds"], ".4g")
    if spread:
        r.table(spread, list(spread[0]))
    r.p(full_training_sampler(x.full_training_sampler) + " The control hybrids at l* are "
        "copied from the eval (from eval: not sampled again, under the eval's settings), with "
        "their paired ratio against DiHAL at l* there; a row at the chosen K has its ratio "
        "against the same bridge at the protocol's K. Where the eval sampled the bridge at l* "
        "with the same settings, l*'s rows are the eval's samples (marked), not drawn again.")
    rows = full_training_generation_rows(x)
    extra = ["DiHAL / this [paired 95 %]", "train_tokens"]
    r.table(_generation_table(rows, ["sampler", *extra]),
            _generation_columns(rows, extra, ["role", "layer", "sampler"]))


def full_training_seeds(trained: list[dict]) -> str:
    """How many training seeds the full-training bridges had, and with one, what a second
    would cost (their measured training seconds)."""
    if not trained:
        return ""
    n = max(int(row.get("n_seeds") or 1) for row in trained)
    if n > 1:
        total = sum(row.get("train_seconds_all_seeds") or 0.0 for row in trained)
        return (f"Each full-training bridge was trained under {n} seeds (the bridge stage's "
                f"`seeds`; {total:.0f} s of training in all): the first table shows the kept "
                "seed's measures, the second the mean +- sd [min, max] over the seeds of "
                "validation loss, the loss at t = 1 and hybrid NLL.")
    secs = [row.get("train_seconds") for row in trained]
    cost = (f"; training took {sum(secs):.0f} s here ("
            + ", ".join(f"{row['role']} {row['train_seconds']:.0f} s" for row in trained)
            + "), so a second seed would cost about that again"
            if all(number(t) is not None for t in secs) else "")
    return ("Each full-training bridge was trained under one seed (the bridge stage's `seeds` "
            "= 1, the CPU default): these numbers carry no spread between training seeds"
            + cost + " (set `seeds` in the bridge config, as the gpu profile's 3, for the "
            "spread).")


def full_training_sampler(sampler: dict) -> str:
    """Which sampler the full-training bridges were sampled with: the protocol's K and the
    (rule, K) chosen on validation at l*, or one of them where they are the same."""
    chosen, k0 = sampler.get("chosen"), sampler.get("protocol_steps")
    if not chosen:
        return "Each full-training bridge is sampled at the protocol's K only."
    which = (f"the {chosen['rule']} rule with K = {chosen['steps']} (held-out hybrid NLL "
             f"{chosen['hybrid_nll']:.4f})")
    if sampler.get("chosen_is_protocol"):
        return (f"The sampler-steps curve at l* chose {which}: the protocol's own K = {k0} and "
                "rule, so each bridge has one generation row (no duplicate).")
    return (f"Each full-training bridge is sampled twice: at the protocol's K = {k0} and at "
            f"{which}, chosen on validation at l*.")


def full_training_generation_rows(x: ReportInputs) -> list[dict]:
    """The full-training generation rows, each labelled by its sampler, then the eval's control
    hybrids at l* (labelled "from eval"), each with its paired ratio where computed."""
    from dihal.generation import CONTROL

    def ratio(row: dict) -> str:
        got = _against_dihal(row)
        return "" if got is None else f"{got[0]:.3f} [{got[1]:.3f}, {got[2]:.3f}]"

    rows = [{**row, "sampler": (f"K={row['steps']} {row['rule']} ({row['sampler']}"
                                + (", the eval's samples)" if row.get("from_eval") else ")"))
             if row.get("steps") is not None else "protocol K",
             "DiHAL / this [paired 95 %]": ratio(row)} for row in x.full_training]
    rows += [{**row, "role": f"{row['model']}, from eval", "sampler": "from eval",
              "DiHAL / this [paired 95 %]": ratio(row)}
             for row in x.evaluation.get("rows", []) if row.get("role") == CONTROL]
    return rows


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
            _frontier_section,
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
