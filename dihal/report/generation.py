"""The report's generation sections and their answer: the sampler's steps, the generation tables with their paired differences, the judge, latency and samples."""

from __future__ import annotations

import math

from dihal.config import DEFAULT_SAMPLER_RULE
from dihal.evaluate.metrics import MAUVE_RESULT_SAMPLES, rate_difference, wilson
from dihal.evaluate.ppl_difference import log_ppl_difference, samples_for_effect
from dihal.generation_inputs import CostRow
from dihal.generation_rows import GenerationRow
from dihal.labels import BACKBONE, BASELINE, DIHAL, NATIVE_ROLE
from dihal.plots import plot_quality_diversity
from dihal.report.common import GENERATION, SAMPLER, SAMPLES, key_value
from dihal.report.cost import timed_row, timing_text
from dihal.report.document import Document
from dihal.report.inputs import ReportInputs
from dihal.rows import ABOVE, BELOW, number, or_none
from dihal.uncertainty import holm, paired_verdict


def _sampler_summary(x: ReportInputs) -> str:

    curve, layer = x.evaluate.curve, x.evaluate.curve_layer
    rows = sorted((r for r in curve if (r.rule or DEFAULT_SAMPLER_RULE) == DEFAULT_SAMPLER_RULE),
                  key=lambda r: r.sampler_steps) or curve
    lo, hi = rows[0], rows[-1]
    best = min(curve, key=lambda r: (r.hybrid_nll, r.sampler_steps))
    return (f"At l* = {layer} the bridge was trained for a {lo.protocol_sampler_steps}-step "
            f"sampler. With K = {lo.sampler_steps} step(s) the hybrid's NLL is {lo.hybrid_nll:.3f} "
            f"and its reconstruction error {lo.recon_error:.3f}; with K = {hi.sampler_steps}, "
            f"{hi.hybrid_nll:.3f} and {hi.recon_error:.3f} (the backbone: "
            f"{lo.backbone_nll:.3f}). The lowest NLL is at K = {best.sampler_steps}"
            f"{' (' + best.rule + ' rule)' if best.rule else ''}. "
            + _k_timing(*(timed_row(x, sampler_steps=r.sampler_steps, layer=layer) for r in (lo, hi)),
                        lo.sampler_steps, hi.sampler_steps))


def _k_timing(lo: CostRow | None, hi: CostRow | None, k_lo: int, k_hi: int) -> str:
    """Generation's time per token at the curve's smallest and largest K, from the cost table
    (the report's one timing per model)."""
    if lo is None or hi is None:
        return "Its time per token at these K is not in the cost table (section 3b)."
    return (f"Generation costs {lo.ms_per_token:.1f} ms per token at K = {k_lo} and "
            f"{hi.ms_per_token:.1f} at K = {k_hi} (the cost table's timing, section 3b).")


def _mauve_is_diagnostic(rows: list[GenerationRow]) -> bool:
    """MAUVE is a diagnostic, not a result, where some row has it from fewer than 512 samples a
    side (or unequal counts), or did not record its counts."""

    measured = [r for r in rows if r.mauve.value is not None]
    return any(r.mauve_diagnostic or min(r.mauve_n_p or 0, r.mauve_n_q or 0)
               < MAUVE_RESULT_SAMPLES for r in measured)


def _mauve_header(rows: list[GenerationRow]) -> str:
    return "MAUVE [95 %] (diagnostic)" if _mauve_is_diagnostic(rows) else "MAUVE [95 %]"


def _at_length_header(rows: list[GenerationRow]) -> str:
    lengths = sorted({r.ppl_length for r in rows if r.ppl_length})
    return (f"Gen.PPL, first {lengths[0]} judge tokens [95 %]" if len(lengths) == 1 else
            "Gen.PPL, first L judge tokens [95 %]")


def temperature(r: GenerationRow) -> str:
    if not r.temperature_recorded:
        return "not recorded"
    t = r.temperature
    return "none (deterministic rounding)" if t is None else f"{t:g}"


EMPTY = "empty samples (failures) [95 %]"
GEN_PPL = "Gen.PPL, non-empty samples [95 %]"


def n_samples(r: GenerationRow) -> int | None:
    """Every sample of a row, as recorded; None for a row that records none (a frontier
    point at the main row's temperature, which is that row's)."""
    return None if or_none(r.n_samples) is None else int(r.n_samples)


def empty_text(r: GenerationRow) -> str:
    """"k of n (p %) [low, high]": the row's empty samples, each a failure, with the Wilson
    interval of their rate; "n/a" where not recorded."""

    k, n = or_none(r.empty_samples), n_samples(r)
    if k is None or not n:
        return "n/a"
    lo, hi = wilson(int(k), n)
    return f"{k} of {n} ({100 * k / n:.0f} %) [{100 * lo:.0f}, {100 * hi:.0f} %]"


def samples_over(r: GenerationRow) -> str:
    """"50 of 64": the non-empty samples a row's Gen.PPL is over, of all its samples; "" where
    the row did not record them."""
    k, n = or_none(r.empty_samples), n_samples(r)
    return "" if k is None or not n else f"{n - int(k)} of {n}"


def fails_more(a: GenerationRow, b: GenerationRow) -> bool:
    """Row `a` has more empty samples than row `b` beyond the 95 % interval of the difference
    of their rates (metrics.rate_difference); False where either did not record them."""

    na, nb = n_samples(a), n_samples(b)
    if not na or not nb or or_none(a.empty_samples) is None or or_none(b.empty_samples) is None:
        return False
    return rate_difference(int(a.empty_samples), na, int(b.empty_samples), nb)[1] > 0


def _reaching(r: GenerationRow) -> str:
    """How many of ALL the row's samples reach the common length L (an empty one does not)."""
    if or_none(r.ppl_length_scored) is None:
        return "n/a"
    n = n_samples(r)
    return "n/a" if n is None else f"{r.ppl_length_scored} of {n}"


def generation_table(rows: list[GenerationRow], lead: list[dict], extra: list[dict]
                     ) -> list[dict]:
    """One line per model: its `lead` cells, every metric with its interval, and beside them
    what they depend on: the decoding temperature, the empty samples (failures: Gen.PPL is over
    the others), the samples' mean length in words and in judge tokens, and how many of all the
    samples reach the common length L; then its `extra` cells."""
    mauve, at = _mauve_header(rows), _at_length_header(rows)
    return [{**first, "temperature": temperature(r), EMPTY: empty_text(r),
             GEN_PPL: r.gen_ppl.text(), at: r.gen_ppl_at_length.text(),
             "samples reaching L": _reaching(r),
             "Gen.PPL, mean of samples [95 %]": r.gen_ppl_mean.text(),
             "diversity [95 %]": r.diversity.text(".3f"),
             "diversity (spaCy, as LD4LG)": (f"{spacy:.3f}"
                                             if (spacy := number(r.diversity_spacy)) is not None
                                             else "n/a"),
             mauve: r.mauve.text(".3f"),
             "mean length (words)": or_none(r.mean_length),
             "mean length (judge tokens)": or_none(r.mean_judge_length),
             **more} for r, first, more in zip(rows, lead, extra, strict=True)]


def generation_columns(rows: list[GenerationRow], extra: list[str], lead: list[str]) -> list[str]:
    return [*lead, "temperature", EMPTY, GEN_PPL, _at_length_header(rows), "samples reaching L",
            "Gen.PPL, mean of samples [95 %]", "diversity [95 %]", "diversity (spaCy, as LD4LG)",
            _mauve_header(rows), "mean length (words)", "mean length (judge tokens)", *extra]


def _per_text(row: GenerationRow) -> list[tuple[float, int]] | None:
    nll, tokens = row.sample_nll, row.sample_tokens
    if not nll or not tokens or len(nll) < 2 or len(nll) != len(tokens):
        return None
    return [(float(a), int(b)) for a, b in zip(nll, tokens, strict=True)]


def generation_pairs(dihal: GenerationRow, others: list[GenerationRow], level: float = 0.95
                     ) -> list[dict]:
    """DiHAL's Gen.PPL against each other row that kept its per-sample scores: the difference
    of log Gen.PPL (token-weighted) with a percentile interval (each side's samples resampled
    independently: different models' samples), its p-value Holm-corrected over the pairs, the
    verdict ("higher" / "lower" / "not distinguishable": DiHAL's Gen.PPL against the other's);
    and, prospectively, the samples per model that this same test, at Holm's strictest step
    over these pairs, needs for 80 % power against a NAMED effect, Gen.PPL 25 % apart
    (dihal.evaluate.ppl_difference.samples_for_effect; the observed spread as a pilot, not the observed
    effect)."""

    a = _per_text(dihal)
    out = []
    for o in others:
        b = _per_text(o)
        if a is None or b is None:
            continue
        out.append({"model": o.model, "per_text": b,
                    **log_ppl_difference(a, b, n_boot=1000, seed=0, level=level)})
    for r, adj in zip(out, holm([r["p"] for r in out]), strict=True):
        side = paired_verdict(r["diff"], adj, level)
        r.update(p_holm=adj, verdict={ABOVE: "higher", BELOW: "lower"}.get(side, side),
                 power=samples_for_effect(a, r.pop("per_text"), family=len(out), level=level))
    return out


def _power_text(pw: dict) -> str:
    return f"{pw['n']:,}"


def _power_header(pairs: list[dict]) -> str:
    pw = pairs[0]["power"]
    return (f"samples per model for {pw['power']:.0%} power at a Gen.PPL ratio of "
            f"{pw['ratio']:g} (alpha {pw['alpha']:.3g})")


def _pairs_table(pairs: list[dict]) -> list[dict]:
    head = _power_header(pairs) if pairs else ""
    return [{"DiHAL against": p["model"], "Gen.PPL ratio [95 %]":
             f"{p['ratio']:.2f} [{math.exp(p['low']):.2f}, {math.exp(p['high']):.2f}]",
             "p (Holm)": f"{p['p_holm']:.3g}", "DiHAL's Gen.PPL": p["verdict"],
             head: _power_text(p["power"]), "samples now": p["power"]["observed_n"]}
            for p in pairs]


def _generation_summary(x: ReportInputs) -> str:
    rows = x.comparison.rows
    dihal = next(r for r in rows if r.role == DIHAL)
    ref = next(r for r in rows if r.role == BACKBONE)
    bases = [r for r in rows if r.role == BASELINE]
    line = (f"DiHAL samples with Gen.PPL {dihal.gen_ppl.formatted('.1f')} and diversity "
            f"{dihal.diversity.formatted('.3f')}, against the backbone's "
            f"{ref.gen_ppl.formatted('.1f')} and {ref.diversity.formatted('.3f')}")
    if bases:
        beaten = [r.model for r in bases if dihal.gen_ppl.below(r.gen_ppl)
                  and not fails_more(dihal, r)]
        line += (f"; at the matched budget it has a lower Gen.PPL than {len(beaten)} of "
                 f"{len(bases)} baselines" + (f" ({', '.join(beaten)})" if beaten else "")
                 + " without failing more often")
    line += empty_clause(dihal, [ref, *bases])
    pairs = generation_pairs(dihal, [ref, *bases])
    others = len(bases) + 1
    if len(pairs) == others:
        ranked = [p["model"] for p in pairs if p["verdict"] != "not distinguishable"]
        line += (f". By the difference of log Gen.PPL (95 %, Holm over the {others} pairs), "
                 f"DiHAL's Gen.PPL is told apart from {len(ranked)} of the {others} other models"
                 + (f" ({', '.join(ranked)})" if ranked else ""))
        power = [f"{_power_text(p['power'])} for {p['model']}" for p in pairs
                 if p["model"] not in ranked]
        pw = pairs[0]["power"]
        return line + "." + (
            f" Planned ahead, this test (Holm over the {others} pairs, at its strictest step) "
            f"would need for {pw['power']:.0%} power against Gen.PPL {pw['ratio']:g}x apart, "
            "the spread per sample taken from these samples, about " + ", ".join(power)
            + " samples per model." if power else "")
    ranked = [r.model for r in [ref, *bases] if dihal.gen_ppl.separated_from(r.gen_ppl)]
    return (line + f". With the 95 % intervals over samples, DiHAL's Gen.PPL is separated from "
            f"{len(ranked)} of the {others} other models" + (f" ({', '.join(ranked)})" if ranked
                                                            else "")
            + ("" if len(ranked) == others else "; the others cannot be ranked against it at "
               "this sample count (these rows kept no per-sample scores for a power "
               "calculation)") + ".")


def empty_clause(dihal: GenerationRow, others: list[GenerationRow]) -> str:
    """What the empty samples (failures) change in a comparison of DiHAL's Gen.PPL with
    `others`' (rows): every row's count where any row has one, and each model whose lower
    Gen.PPL comes with more failures beyond the 95 % interval of the difference of the empty
    rates (fails_more): its Gen.PPL is over fewer samples and does not count as better. ""
    where no row has an empty sample."""
    rows = [dihal, *others]
    if not any(r.empty_samples for r in rows):
        return ""
    counts = ", ".join(f"{r.model} {empty_text(r).split(' [')[0]}" for r in rows
                       if or_none(r.empty_samples) is not None)
    line = f"; empty samples, each a failure (Gen.PPL is over the rest): {counts}"
    unfair = [o.model for o in others if o.gen_ppl.below(dihal.gen_ppl) and fails_more(o, dihal)]
    if fails_more_than := [o.model for o in others if dihal.gen_ppl.below(o.gen_ppl)
                           and fails_more(dihal, o)]:
        line += (f"; DiHAL's lower Gen.PPL than {', '.join(fails_more_than)} comes with more "
                 "failures beyond the 95 % interval, so it is not counted as better")
    if unfair:
        line += (f"; the lower Gen.PPL of {', '.join(unfair)} comes with more failures than "
                 "DiHAL's beyond the 95 % interval")
    return line


def _generation_setting(x: ReportInputs) -> str:
    """What every generation row shares: the start token, the temperature, the common length."""
    rows, ev = x.comparison.rows, x.evaluate.setting
    token = ev.start_token
    start = (f"Every sample is drawn unconditionally from the backbone's start token "
             f"{token!r} (id {ev.start_token_id}), the BOS that opens every training "
             "sequence; for an Instruct backbone that token may be a chat-turn opener, and the "
             "samples are compared with plain corpus text.")
    ranked = {temperature(r) for r in rows if r.role != NATIVE_ROLE}
    rounding = "none (deterministic rounding)"
    temps = ranked - {rounding}
    native = [r.model for r in rows if r.role == NATIVE_ROLE]
    temp = (f" Every ranked row decodes at temperature {temps.pop()}" if len(temps) == 1 else
            f" The rows decode at different temperatures ({', '.join(sorted(temps))}): their "
            "Gen.PPL and diversity are not comparable")
    temp += (" (SED and Diffusion-LM round to tokens deterministically and have none)"
             if rounding in ranked else "")
    temp += (f"; {', '.join(native)}: the recipe's own temperature, an extra row, not ranked."
             if native else ".")
    lengths = sorted({r.ppl_length for r in rows if r.ppl_length})
    at = (f" Samples end at their first EOS, so their lengths differ: a second Gen.PPL scores "
          f"only each sample's first {lengths[0]} judge tokens (samples shorter than that left "
          "out and counted), and every row shows its mean length." if len(lengths) == 1 else "")
    mauve = (" MAUVE here is a diagnostic, not a result: fewer than 512 samples a side "
             "(mauve-text's quantisation has too few clusters to separate shifts of half a "
             "standard deviation)." if _mauve_is_diagnostic(rows) else "")
    return start + temp + at + mauve


def answer_generation(x: ReportInputs) -> tuple[str, str]:
    """DiHAL's Gen.PPL against the backbone's and the baselines': by the difference of log
    Gen.PPL (Holm over the pairs) where the rows kept their per-sample scores, else by whether
    the 95 % intervals over samples are separated."""
    rows = x.comparison.rows
    dihal = next(r for r in rows if r.role == "dihal")
    ref = next(r for r in rows if r.role == "backbone")
    bases = [r for r in rows if r.role == "baseline"]
    pairs = {p["model"]: p for p in generation_pairs(dihal, [ref, *bases])}
    tested = len(pairs) == len(bases) + 1

    def apart(o) -> bool:
        return (pairs[o.name]["verdict"] != "not distinguishable" if tested
                else dihal.gen_ppl.separated_from(o.gen_ppl))

    side = "lower" if dihal.gen_ppl.below(ref.gen_ppl) else "higher"
    how = "the log-difference test" if tested else "the intervals"
    sep = (f"told apart by {how}" if apart(ref) else f"not told apart by {how}")
    line = (f"DiHAL's Gen.PPL {dihal.gen_ppl.text()} is {side} than the backbone's "
            f"{ref.gen_ppl.text()} ({sep})")
    if bases:
        # a lower Gen.PPL with more failures (empty samples) beyond their noise is not better
        beaten = [r.name for r in bases if dihal.gen_ppl.below(r.gen_ppl)
                  and not fails_more(dihal, r)]
        clear = [r.name for r in bases if r.name in beaten and apart(r)]
        line += (f"; at a matched budget, lower than {len(beaten)} of {len(bases)} baselines' "
                 f"({', '.join(beaten)}), {len(clear)} of them told apart"
                 if beaten else f"; at a matched budget, lower than none of the "
                 f"{len(bases)} baselines'")
    else:
        line += "; no baseline was compared"
    return line + _failures_in_short(dihal, bases) + ".", GENERATION


def _failures_in_short(dihal: GenerationRow, bases: list[GenerationRow]) -> str:
    """The answer's word on empty samples (the section's empty_clause has every row's): how
    many of DiHAL's samples its Gen.PPL is over, and that a lower Gen.PPL resting on more
    failures was not counted; "" where DiHAL has none and nothing was left uncounted."""
    k, n = or_none(dihal.empty_samples), n_samples(dihal)
    if not k or not n:
        return ""  # without failures of its own, DiHAL never fails more than a baseline
    line = f"; over {samples_over(dihal)} samples ({k} empty"
    if any(dihal.gen_ppl.below(r.gen_ppl) and fails_more(dihal, r) for r in bases):
        line += "; a lower Gen.PPL on more failures does not count"
    return line + ")"


def sampler_section(r: Document, x: ReportInputs) -> None:
    r.h2("2b. What the sampler's steps buy at l*", SAMPLER)

    r.p(_sampler_summary(x))
    layer = x.evaluate.curve_layer
    rows = [{"rule": c.rule, "steps": c.sampler_steps, "recon_error": c.recon_error,
             "hybrid_nll": c.hybrid_nll, "top1_agreement": c.top1_agreement,
             "ms per token (cost table)": t.ms_per_token if t else "n/a"}
            for c in x.evaluate.curve for t in [timed_row(x, sampler_steps=c.sampler_steps, layer=layer)]]
    r.table(rows, ["rule", "steps", "recon_error", "hybrid_nll", "top1_agreement",
                   "ms per token (cost table)"], ".4g")


def generation_section(r: Document, x: ReportInputs) -> None:

    cmp_ = x.comparison
    r.h2("3. Generation: DiHAL, the backbone and the baselines at a matched budget", GENERATION)
    r.p(_generation_summary(x))
    extra = ["repetition", "denoiser_parameters", "train_tokens", "sampler_steps", "seq_len"]
    lead = [{"model": r.model, "role": r.role, "layer": or_none(r.layer)} for r in cmp_.rows]
    cells = [{"repetition": r.repetition, "denoiser_parameters": r.denoiser_parameters,
              "train_tokens": r.train_tokens, "sampler_steps": r.sampler_steps,
              "seq_len": r.seq_len} for r in cmp_.rows]
    r.p(_generation_setting(x))
    r.p("An empty sample (the model ends it at once) is a failure: every row gives how many "
        "of its samples are empty, with the Wilson 95 % interval of that rate; Gen.PPL, which "
        "needs judge tokens, is over the non-empty samples and is read beside that rate (a "
        "lower Gen.PPL with more failures beyond the interval of the difference of the rates "
        "is not counted as better); the samples reaching L are out of all the samples; "
        "diversity pools the n-grams of every sample (an empty one adds none); MAUVE compares "
        "every sample, an empty one by the judge's features of an empty text. "
        "Gen.PPL token-weighted (exp of the judge's total NLL over all scored tokens), on the "
        "first L judge tokens of every sample, and as the mean of per-sample perplexities (the "
        "convention of LD4LG's evaluation code); diversity with our word regex and with spaCy's "
        "English tokenizer (as LD4LG computes it); MAUVE (mauve-text, its defaults) against "
        "held-out corpus text cut like the samples, on equal counts a side, on the judge's "
        "last-token features; 95 % intervals over samples: percentile bootstrap (1000 "
        "resamples) for Gen.PPL, for MAUVE with the k-means fit refitted under 5 seeds inside "
        "the interval, the jackknife for diversity (duplicated samples would bias a bootstrap "
        "of pooled n-gram counts).")
    r.table(generation_table(cmp_.rows, lead, cells),
            generation_columns(cmp_.rows, extra, ["model"]), ".4g")
    pairs = generation_pairs(next(r for r in cmp_.rows if r.role == DIHAL),
                             [r for r in cmp_.rows if r.role in (BACKBONE, BASELINE)])
    if pairs:
        r.p("DiHAL against each model: the ratio of Gen.PPL with its 95 % interval (each side's "
            "samples resampled), Holm-corrected over the pairs, and, planned ahead for a named "
            "effect (not the one observed), the samples per model this same test needs for 80 % "
            "power against Gen.PPL 1.25x apart at Holm's strictest step, the spread per sample "
            "(delta method on the token-weighted log Gen.PPL) taken from these samples:")
        r.table(_pairs_table(pairs), list(_pairs_table(pairs)[0]))
    r.image(plot_quality_diversity([row.to_dict() for row in cmp_.rows],
                                   f"{x.backbone}: Gen.PPL vs diversity"),
            "Gen.PPL against diversity, every model of the comparison")
    if cmp_.missing:
        r.p(f"Not run: {', '.join(cmp_.missing)}.")
    _judge_and_latency(r, x)


def _judge_and_latency(r: Document, x: ReportInputs) -> None:
    ev_cfg, first = x.configs.eval, x.evaluate.setting
    r.p("Samples are scored by the judge below, the same for every model:")
    r.table(key_value({**x.evaluate.judge.to_dict(), "samples": ev_cfg.n_samples,
                        "length": ev_cfg.length, "temperature": ev_cfg.temperature,
                        "seed": ev_cfg.seed,
                        "CPU threads while sampling (0: GPU)": first.cpu_threads,
                        "CPU kernels while sampling (torch's CPU capability)":
                            first.cpu_kernels}),
            ["setting", "value"])

    r.p(f"Time per token: section 3b, one timing per model ({timing_text(x)}); the sampling "
        "of these rows (a larger batch, whose per-token time is lower) is not quoted.")


def samples_section(r: Document, x: ReportInputs) -> None:
    r.h2("6. Sample texts", SAMPLES)
    r.p("The first samples of each model, unedited.")
    r.pre("".join(f"== {model}\n" + "".join(f"- {t[:240]!r}\n" for t in texts[:4])
                  for model, texts in x.samples.items()))
