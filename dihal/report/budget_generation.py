"""The report's sub-section of the budget section: generation at the budget's ends, DiHAL at l*
against CoDAR (dihal.compare.budget_generation made the rows).

Pure functions over the rows (dihal.rows.BudgetGenerationRow: one model trained at one budget,
then sampled and scored as the eval samples): a table of model x budget with Gen.PPL and
diversity and their intervals, and two computed sentences:
- at each budget, is DiHAL's Gen.PPL lower than CoDAR's, higher, or not told apart: the
  difference of log Gen.PPL (token-weighted) with each side's samples resampled on its own (two
  models' samples), Holm-corrected over the budgets, its verdict by dihal.uncertainty's
  paired_verdict; where a row kept fewer than 2 scored samples, by whether the two Gen.PPL
  intervals overlap (compare_intervals);
- does each model improve from the lowest to the highest budget: the same test of its highest
  budget against its lowest, Holm over the models, and whether its diversity interval moves.
Each way each sentence can come out has a test (tests/unit/test_report_budget_generation.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dihal.evaluate.ppl_difference import log_ppl_difference
from dihal.report.document import Document
from dihal.rows import ABOVE, BELOW, GENERATION_MODELS, BudgetGenerationRow
from dihal.uncertainty import LEVEL, compare_intervals, holm, paired_verdict

DIHAL, CODAR = GENERATION_MODELS
NAMES = {DIHAL: "DiHAL", CODAR: "CoDAR"}
LOWER, HIGHER, NOT_APART = "lower", "higher", "not told apart"
GENERATION_COMMAND = "python -m pipeline.budget --backbone {backbone} --generation"
TITLE = "Generation at the budget's ends: DiHAL at l* against CoDAR"

Index = dict[tuple[str, int], BudgetGenerationRow]  # (model, steps) -> row


def index_rows(rows: Sequence[BudgetGenerationRow]) -> Index:
    """(model, steps) -> row; a clear error on a row given twice."""
    out: Index = {}
    for r in rows:
        if r.key in out:
            raise ValueError(f"two {r.model} rows at {r.train_steps} steps: keep one row per (model, "
                             "budget)")
        out[r.key] = r
    return out


def budgets_of(index: Index) -> list[int]:
    return sorted({steps for _, steps in index})


def per_text(row: BudgetGenerationRow) -> list[tuple[float, int]] | None:
    """(judge NLL, judge tokens) of each scored sample, None where fewer than 2 were scored."""
    pairs = [(float(a), int(b)) for a, b in zip(row.sample_nll, row.sample_tokens, strict=True)
             if b > 0 and math.isfinite(a)]
    return pairs if len(pairs) >= 2 else None


@dataclass(frozen=True)
class GenPplTest:
    """`first`'s Gen.PPL against `second`'s: the ratio with its 95 % interval and p-value
    (Holm over the family tested with it), and the verdict "lower" / "higher" / "not told
    apart"; `by`: "samples" (the log Gen.PPL difference) or "intervals" (their overlap, where a
    row kept fewer than 2 scored samples; no ratio interval nor p then)."""

    first: BudgetGenerationRow
    second: BudgetGenerationRow
    verdict: str
    by: str
    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    p_holm: float | None = None

    def text(self) -> str:
        if self.by == "intervals":
            return (f"{self.first.gen_ppl:.4g} [{self.first.gen_ppl_low:.4g}, "
                    f"{self.first.gen_ppl_high:.4g}] against {self.second.gen_ppl:.4g} "
                    f"[{self.second.gen_ppl_low:.4g}, {self.second.gen_ppl_high:.4g}], by their "
                    "intervals (too few scored samples for the test)")
        return (f"Gen.PPL ratio {self.ratio:.2f} [{self.low:.2f}, {self.high:.2f}], p (Holm) "
                f"{self.p_holm:.3g}")


def gen_ppl_tests(pairs: Sequence[tuple[BudgetGenerationRow, BudgetGenerationRow]], *,
                  seed: int = 0, level: float = LEVEL) -> list[GenPplTest]:
    """The test of each (first, second) pair, in order: the log Gen.PPL difference with each
    side's samples resampled independently, Holm over the pairs tested so; a pair where either
    row kept fewer than 2 scored samples by its intervals."""
    side = {ABOVE: HIGHER, BELOW: LOWER}
    measured = []
    for a, b in pairs:
        ta, tb = per_text(a), per_text(b)
        measured.append(None if ta is None or tb is None else
                        log_ppl_difference(ta, tb, n_boot=1000, seed=seed, level=level))
    adjusted = iter(holm([d["p"] for d in measured if d is not None]))
    out = []
    for (a, b), d in zip(pairs, measured, strict=True):
        if d is None:
            verdict = compare_intervals((a.gen_ppl_low, a.gen_ppl_high),
                                        (b.gen_ppl_low, b.gen_ppl_high))
            out.append(GenPplTest(a, b, side.get(verdict, NOT_APART), "intervals"))
            continue
        p = next(adjusted)
        out.append(GenPplTest(a, b, side.get(paired_verdict(d["diff"], p, level), NOT_APART),
                              "samples", d["ratio"], math.exp(d["low"]), math.exp(d["high"]), p))
    return out


def versus_tests(index: Index) -> list[GenPplTest]:
    """DiHAL's Gen.PPL against CoDAR's at each budget where both were generated."""
    return gen_ppl_tests([(index[(DIHAL, s)], index[(CODAR, s)]) for s in budgets_of(index)
                          if (DIHAL, s) in index and (CODAR, s) in index])


def versus_sentence(index: Index, l_star: int) -> str:
    """At each budget: DiHAL's Gen.PPL lower than CoDAR's, higher, or not told apart."""
    tests = versus_tests(index)
    if not tests:
        return ("DiHAL and CoDAR were not both generated at any budget: their Gen.PPL is not "
                "compared.")
    how = {LOWER: "lower than", HIGHER: "higher than", NOT_APART: "not told apart from"}
    clauses = [f"at {t.first.train_steps:,} steps DiHAL's Gen.PPL is {how[t.verdict]} CoDAR's "
               f"({t.text()})" for t in tests]
    family = sum(t.by == "samples" for t in tests)
    test = (f" (the difference of log Gen.PPL, each side's samples resampled, Holm over the "
            f"{family} budget{'s' if family != 1 else ''} tested; 95 %)" if family else "")
    return (f"DiHAL at l* = {l_star} against CoDAR at the same budget: " + "; ".join(clauses)
            + test + ".")


def budget_tests(index: Index) -> list[GenPplTest]:
    """Each model's Gen.PPL at the highest budget against its own at the lowest."""
    budgets = budgets_of(index)
    if len(budgets) < 2:
        return []
    lo, hi = budgets[0], budgets[-1]
    return gen_ppl_tests([(index[(m, hi)], index[(m, lo)]) for m in GENERATION_MODELS
                          if (m, lo) in index and (m, hi) in index])


def diversity_move(high: BudgetGenerationRow, low: BudgetGenerationRow) -> str:
    """Whether the diversity interval at the highest budget lies above the lowest's ("rises"),
    below it ("falls"), or the two overlap ("is not told apart")."""
    side = compare_intervals((high.diversity_low, high.diversity_high),
                             (low.diversity_low, low.diversity_high))
    return {ABOVE: "rises", BELOW: "falls"}.get(side, "is not told apart")


def budget_sentence(index: Index) -> str:
    """Does each model improve from the lowest to the highest budget: its Gen.PPL lower there
    ("improves"), higher ("worsens") or not told apart; and its diversity."""
    budgets = budgets_of(index)
    if len(budgets) < 2:
        return (f"One budget only ({budgets[0]:,} steps): how generation moves with the budget "
                "is not read." if budgets else "No budget was generated.")
    how = {LOWER: "improves (its Gen.PPL is lower)", HIGHER: "worsens (its Gen.PPL is higher)",
           NOT_APART: "does not change beyond the noise (its Gen.PPL is not told apart)"}
    tests = budget_tests(index)
    clauses = [f"{NAMES[t.first.model]} {how[t.verdict]}, {t.text()}, and its diversity "
               f"{diversity_move(t.first, t.second)}" for t in tests]
    missing = [NAMES[m] for m in GENERATION_MODELS if m not in {t.first.model for t in tests}]
    tail = (f" {' and '.join(missing)} {'was' if len(missing) == 1 else 'were'} not generated "
            "at both budgets." if missing else "")
    if not clauses:
        return f"From {budgets[0]:,} to {budgets[-1]:,} steps:{tail}"
    return (f"From {budgets[0]:,} to {budgets[-1]:,} steps: " + "; ".join(clauses)
            + " (the highest budget's Gen.PPL against the lowest's, Holm over the models "
            "tested; diversity by its 95 % intervals)." + tail)


def table_rows(index: Index) -> list[dict]:
    """One row per (budget, model), the budget's figures beside the metrics, and what it was
    sampled with where the rows differ in it."""
    out = []
    differ = len({(x.cpu_threads, x.cpu_kernels) for x in index.values()}) > 1
    for (model, steps), r in sorted(index.items(), key=lambda kv: (
            kv[0][1], GENERATION_MODELS.index(kv[0][0]))):
        out.append({"model": NAMES[model] + (f" (l* = {r.layer})" if model == DIHAL else ""),
                    "steps": steps, "tokens": r.tokens, "repeats": f"{r.repeats:.2f}",
                    "denoiser parameters": r.denoiser_parameters,
                    "Gen.PPL [95 %]": f"{r.gen_ppl:.4g} [{r.gen_ppl_low:.4g}, "
                                      f"{r.gen_ppl_high:.4g}]",
                    "diversity [95 %]": f"{r.diversity:.3f} [{r.diversity_low:.3f}, "
                                        f"{r.diversity_high:.3f}]",
                    "samples": r.n_samples, "empty": r.empty_samples})
        if differ:
            out[-1]["sampled"] = setting_text(r.cpu_threads, r.cpu_kernels)
    return out


def setting_text(threads: int, kernels: str) -> str:
    return ("on a GPU" if threads == 0
            else f"with {threads} CPU thread{'s' * (threads != 1)} ({kernels})")


def sampling_sentence(index: Index) -> str:
    """What the rows were sampled with: on the CPU the thread count and the kernels decide
    DiHAL's samples bit for bit, so rows sampled under other ones are not the same draw."""
    settings = sorted({(x.cpu_threads, x.cpu_kernels) for x in index.values()})
    if len(settings) == 1:
        return (f"Every row was sampled {setting_text(*settings[0])}; the same config "
                "sampled with other CPU threads or kernels draws other samples.")
    return ("The rows were not all sampled alike (column \"sampled\"): on the CPU the "
            "thread count and the kernels decide the samples, so rows sampled under other ones "
            "are other draws, and their differences include that.")


def budget_generation_section(r: Document, rows: Sequence[BudgetGenerationRow], *,
                              backbone: str) -> None:
    """The sub-section: the table and both sentences where the rows exist, else that it was
    not made and the command that makes it."""
    r.h3(TITLE)
    if not rows:
        r.p("DiHAL at l* and CoDAR were not trained and sampled at the budget study's lowest "
            "and highest budget on these hidden states, so this report does not say how their "
            "generation moves with the budget. "
            f"`{GENERATION_COMMAND.format(backbone=backbone)}` makes them (it states its time "
            "and disk before it starts); the report made after it shows them here.")
        return
    index = index_rows(rows)
    layer = next(iter(index.values())).layer
    first = next(iter(index.values()))
    r.p(f"DiHAL's bridge at l* = {layer} and CoDAR, the strongest baseline, each trained at "
        f"{' and '.join(f'{s:,}' for s in budgets_of(index))} optimiser steps on the budget "
        "study's training sequences (CoDAR at DiHAL's denoiser size, the same tokens and steps), "
        f"then sampled as the eval samples ({first.n_samples} samples at temperature "
        f"{first.temperature:g}) and scored by the same judge.")
    rows_ = table_rows(index)
    r.table(rows_, list(rows_[0]))
    r.p(sampling_sentence(index))
    r.p(versus_sentence(index, layer))
    r.p(budget_sentence(index))
