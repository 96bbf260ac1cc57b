"""The report's full-training section: l*, the oracle and the worst layer under the full budget."""

from __future__ import annotations

import math

from dihal.generation_inputs import SEED_MEASURES, FullTrainingRow, SamplerChoice
from dihal.generation_rows import GenerationRow
from dihal.inputs import OracleBy
from dihal.labels import CONTROL
from dihal.report.bridgeability import seed_cell
from dihal.report.common import FULL
from dihal.report.controls import against_dihal
from dihal.report.document import Document
from dihal.report.generation import generation_columns, generation_table
from dihal.report.inputs import ReportInputs
from dihal.rows import ROLE_PAIRS, number, or_none


def _full_training_summary(x: ReportInputs) -> str:
    rows = {r.role: r for r in x.full_training.trained()}
    geo, oracle, worst = (rows.get(k) for k in ("geometry l*", "oracle", "worst"))
    if not (geo and oracle and worst):
        return "Full training did not cover all three roles."
    return (f"With the full budget (the oracle and worst layers chosen by the sweep's hybrid "
            f"NLL), the geometry-selected layer {geo.layer} reaches hybrid NLL "
            f"{geo.hybrid_nll:.3f} and validation loss {geo.val_loss:.3f} (oracle layer "
            f"{oracle.layer}: {oracle.hybrid_nll:.3f} and {oracle.val_loss:.3f}, worst "
            f"layer {worst.layer}: {worst.hybrid_nll:.3f} and {worst.val_loss:.3f}) and "
            f"Gen.PPL {_ppl(geo)} (oracle {_ppl(oracle)}, worst {_ppl(worst)})."
            + _judged(geo, oracle, worst) + _by_loss_note(x.bridges.info.oracle_by))


def _ppl(row: FullTrainingRow) -> str:
    return row.generation.gen_ppl.formatted(".1f")


def _judged(geo: FullTrainingRow, oracle: FullTrainingRow, worst: FullTrainingRow) -> str:
    """The three full-training bridges on the half of the held-out sequences that did not
    choose the oracle and the worst layer, or that the same sequences did both (fewer than 2
    held-out sequences: nothing to split)."""
    vals = [number(r.hybrid_nll_judge) for r in (geo, oracle, worst)]
    if any(v is None for v in vals):
        return (" The oracle and worst layer were chosen and judged on the same held-out "
                "sequences (too few to split): their standing is optimistic.")
    return (f" On the half of the held-out sequences that did not choose the oracle and the "
            f"worst layer, hybrid NLL is {vals[0]:.3f} at l*, {vals[1]:.3f} at the oracle and "
            f"{vals[2]:.3f} at the worst layer.")


def _by_loss_note(by: OracleBy) -> str:
    """What validation loss would have chosen for full training, where it disagrees."""
    loss = by.by.get("val_loss")
    if not loss or not (by.oracle_disagree or by.worst_disagree):
        return ""
    return (f" By the sweep's validation loss the oracle would be layer {loss.oracle} and the "
            f"worst {loss.worst}: the two measures disagree, and full training follows the "
            "hybrid NLL, the one closer to generation.")


def _spread_table(trained: list[FullTrainingRow]) -> list[dict]:
    """The measures' mean +- sd [min, max] over the seeds of each bridge trained under several."""
    return [{"role": row.role, "layer": row.layer, "seeds": row.n_seeds,
             **{f"{m} mean +- sd [min, max]": seed_cell(s)
                if (s := row.seed_spread.get(m)) and number(s.mean) is not None else "n/a"
                for m in SEED_MEASURES}}
            for row in trained if (row.n_seeds or 1) > 1 and "val_loss" in row.seed_spread]


def full_training_section(r: Document, x: ReportInputs) -> None:
    r.h2("4. Full training: geometry-selected vs oracle vs worst layer", FULL)
    r.p(_full_training_summary(x))
    trained = x.full_training.trained()
    r.p(full_training_seeds(trained))
    spread = _spread_table(trained)
    r.table([row.measures() for row in trained],
            ["role", "layer", "val_loss", "t1_loss", "recon_error", "hybrid_nll",
             *(["hybrid_nll_judge"] if any(row.hybrid_nll_judge is not None
                                           for row in trained) else []),
             "top1_agreement", "train_tokens", "train_seconds"], ".4g")
    if spread:
        r.table(spread, list(spread[0]))
    r.p(full_training_sampler(x.full_training.sampler) + " The control hybrids at l* are "
        "copied from the eval (from eval: not sampled again, under the eval's settings), with "
        "their paired ratio against DiHAL at l* there; a row at the chosen K has its ratio "
        "against the same bridge at the protocol's K. Where the eval sampled the bridge at l* "
        "with the same settings, l*'s rows are the eval's samples (marked), not drawn again.")
    pairs = role_pairs(trained)
    r.p(role_pairs_sentence(pairs))
    if pairs:
        r.table(pairs, list(pairs[0]))
    rows, lead, cells = full_training_generation_rows(x)
    extra = ["DiHAL / this [paired 95 %]", "train_tokens"]
    r.table(generation_table(rows, lead, cells),
            generation_columns(rows, extra, ["role", "layer", "sampler"]))


def full_training_seeds(trained: list[FullTrainingRow]) -> str:
    """How many training seeds the full-training bridges had, and with one, what a second
    would cost (their measured training seconds)."""
    if not trained:
        return ""
    n = max(int(row.n_seeds or 1) for row in trained)
    if n > 1:
        total = sum(row.train_seconds_all_seeds or 0.0 for row in trained)
        return (f"Each full-training bridge was trained under {n} seeds (the bridge stage's "
                f"`seeds`; {total:.0f} s of training in all): the first table shows the kept "
                "seed's measures, the second the mean +- sd [min, max] over the seeds of "
                "validation loss, the loss at t = 1 and hybrid NLL.")
    secs = [row.train_seconds for row in trained]
    cost = (f"; training took {sum(secs):.0f} s here ("
            + ", ".join(f"{row.role} {row.train_seconds:.0f} s" for row in trained)
            + "), so a second seed would cost about that again"
            if all(number(t) is not None for t in secs) else "")
    return ("Each full-training bridge was trained under one seed (the bridge stage's `seeds` "
            "= 1, the CPU default): these numbers carry no spread between training seeds"
            + cost + " (set `seeds` in the bridge config, as the gpu profile's 3, for the "
            "spread).")


def full_training_sampler(sampler: SamplerChoice) -> str:
    """Which sampler the full-training bridges were sampled with: the protocol's K and the
    (rule, K) chosen on validation at l*, or one of them where they are the same."""
    chosen, k0 = sampler.chosen, sampler.protocol_sampler_steps
    if not chosen:
        return "Each full-training bridge is sampled at the protocol's K only."
    which = (f"the {chosen.rule} rule with K = {chosen.sampler_steps} (held-out hybrid NLL "
             f"{chosen.hybrid_nll:.4f})")
    if sampler.chosen_is_protocol:
        return (f"The sampler-steps curve at l* chose {which}: the protocol's own K = {k0} and "
                "rule, so each bridge has one generation row (no duplicate).")
    return (f"Each full-training bridge is sampled twice: at the protocol's K = {k0} and at "
            f"{which}, chosen on validation at l*.")


def full_training_generation_rows(x: ReportInputs
                                  ) -> tuple[list[GenerationRow], list[dict], list[dict]]:
    """The full-training generation rows, each labelled by its role, layer and sampler, then
    the eval's control hybrids at l* (labelled "from eval"), each with its paired ratio where
    computed and its training tokens: (rows, their lead cells, the cells after the metrics;
    dihal.report.generation.generation_table)."""

    def ratio(row: GenerationRow) -> str:
        got = against_dihal(row)
        return "" if got is None else f"{got[0]:.3f} [{got[1]:.3f}, {got[2]:.3f}]"

    def sampler(row: FullTrainingRow) -> str:
        if or_none(row.sampler_steps) is None:
            return "protocol K"
        return (f"K={row.sampler_steps} {row.rule} ({row.sampler}"
                + (", the eval's samples)" if row.from_eval else ")"))

    trained = [(row.generation, {"role": row.role, "layer": row.layer},
                {"sampler": sampler(row), "DiHAL / this [paired 95 %]": ratio(row.generation),
                 "train_tokens": or_none(row.train_tokens)}) for row in x.full_training.rows]
    controls = [(row, {"model": row.model, "role": f"{row.model}, from eval",
                       "layer": or_none(row.layer)},
                 {"sampler": "from eval", "DiHAL / this [paired 95 %]": ratio(row),
                  "train_tokens": or_none(row.train_tokens)})
                for row in x.evaluate.rows if row.role == CONTROL]
    rows, lead, cells = zip(*trained, *controls, strict=True) if trained or controls else ((),) * 3
    return list(rows), list(lead), list(cells)


def role_pairs(trained: list[FullTrainingRow]) -> list[dict]:
    """One line per pair of roles the stage tested (dihal.compare.stage.paired_roles): the
    Gen.PPL ratio with its paired 95 % interval, the Holm-corrected p and the verdict."""
    by = {row.role: row for row in trained}
    out = []
    for first, second in ROLE_PAIRS:
        row = by.get(second)
        got = row.pairs.get(first) if row else None
        if got is None:
            continue
        out.append({"pair": f"{first} (layer {by[first].layer}) / {second} (layer "
                            f"{row.layer})",
                    "Gen.PPL ratio [paired 95 %]": f"{math.exp(got.log_ppl_diff):.3f} "
                    f"[{math.exp(got.log_ppl_diff_low):.3f}, "
                    f"{math.exp(got.log_ppl_diff_high):.3f}]",
                    "samples paired": got.pairs, "p (Holm)": f"{got.p_holm:.3g}",
                    "verdict": {"below": f"{first} lower", "above": f"{second} lower"}.get(
                        got.verdict, "not distinguishable")})
    return out


def role_pairs_sentence(pairs: list[dict]) -> str:
    if not pairs:
        return ("No paired generation test of l*, the oracle and the worst layer: fewer than "
                "2 samples a pair were scored.")
    told = [p["pair"] + ": " + p["verdict"] for p in pairs if p["verdict"] != "not distinguishable"]
    return ("The three bridges draw sample i with the same seed, so their samples pair by index: "
            "the token-weighted log Gen.PPL difference of each pair, with a paired bootstrap "
            f"interval, Holm-corrected over the {len(pairs)} pairs. "
            + (f"Told apart: {'; '.join(told)}." if told else "No pair is told apart."))
