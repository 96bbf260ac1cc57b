"""The budget section's generation sub-section (dihal.report.budget_generation): every sentence
it can print, each way it can come out, from hand-made rows."""

import math

import numpy as np
import pytest

from dihal.report import budget_generation as rg
from dihal.report.document import Document
from dihal.rows import BudgetGenerationRow

LO, HI = 128, 2048


def row(model: str, steps: int, rate: float | None, *, n: int = 40, seed: int = 0,
        interval: tuple[float, float, float] | None = None,
        diversity: tuple[float, float, float] = (0.5, 0.45, 0.55)) -> BudgetGenerationRow:
    """A row whose samples score `rate` nats a judge token (a little noise, seeded); with
    `interval` (Gen.PPL, low, high) and no rate, one scored sample only (too few to test)."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(20, 40, size=n if rate is not None else 1).tolist()
    nll = [t * (rate if rate is not None else 1.0) + float(rng.normal(0, 0.5)) for t in tokens]
    ppl = math.exp(sum(nll) / sum(tokens))
    g = interval or (ppl, ppl * 0.95, ppl * 1.05)
    return BudgetGenerationRow(layer=1, model=model, train_steps=steps, tokens=steps * 512,
                               distinct_tokens=min(steps * 512, 448768), denoiser_parameters=4_880_000,
                               sampler_steps=16, temperature=1.0, gen_ppl=g[0], gen_ppl_low=g[1],
                               gen_ppl_high=g[2], diversity=diversity[0],
                               diversity_low=diversity[1], diversity_high=diversity[2],
                               n_samples=n, empty_samples=0, sample_nll=nll,
                               sample_tokens=tokens, seconds=1.0, cpu_threads=2,
                               cpu_kernels="AVX512")


def versus(dihal_rate: float, codar_rate: float, seed: int = 0) -> str:
    index = rg.index_rows([row("dihal", LO, dihal_rate, seed=seed),
                           row("codar", LO, codar_rate, seed=seed)])
    return rg.versus_sentence(index, 1)


# ---------------------------------------------------------------- DiHAL against CoDAR


def test_dihal_lower_than_codar():
    s = versus(2.0, 3.0)
    assert "at 128 steps DiHAL's Gen.PPL is lower than CoDAR's (Gen.PPL ratio 0.37" in s
    assert "DiHAL at l* = 1 against CoDAR" in s and "Holm over the 1 budget tested" in s


def test_dihal_higher_than_codar():
    assert "DiHAL's Gen.PPL is higher than CoDAR's" in versus(3.0, 2.0)


def test_dihal_and_codar_not_told_apart():
    s = versus(2.5, 2.5)  # the same samples: no difference at all
    assert "DiHAL's Gen.PPL is not told apart from CoDAR's (Gen.PPL ratio 1.00" in s


def test_each_budget_has_its_own_verdict_and_holm_counts_the_budgets():
    index = rg.index_rows([row("dihal", LO, 2.0), row("codar", LO, 3.0),
                           row("dihal", HI, 2.5), row("codar", HI, 2.5)])
    s = rg.versus_sentence(index, 1)
    assert "at 128 steps DiHAL's Gen.PPL is lower than" in s
    assert "at 2,048 steps DiHAL's Gen.PPL is not told apart from" in s
    assert "Holm over the 2 budgets tested" in s
    assert [t.verdict for t in rg.versus_tests(index)] == ["lower", "not told apart"]


@pytest.mark.parametrize(("dihal", "codar", "word"), [
    ((10.0, 9.0, 11.0), (20.0, 18.0, 22.0), "lower than"),
    ((20.0, 18.0, 22.0), (10.0, 9.0, 11.0), "higher than"),
    ((10.0, 8.0, 12.0), (11.0, 9.0, 13.0), "not told apart from")])
def test_too_few_scored_samples_are_read_by_their_intervals(dihal, codar, word):
    index = rg.index_rows([row("dihal", LO, None, interval=dihal),
                           row("codar", LO, None, interval=codar)])
    s = rg.versus_sentence(index, 1)
    assert f"DiHAL's Gen.PPL is {word} CoDAR's" in s and "by their intervals" in s
    assert "Holm" not in s


def test_no_budget_with_both_models():
    index = rg.index_rows([row("dihal", LO, 2.0), row("codar", HI, 3.0)])
    assert rg.versus_sentence(index, 1).startswith("DiHAL and CoDAR were not both generated")


# ---------------------------------------------------------------- from the lowest to the highest budget


def over(dihal: tuple[float, float], codar: tuple[float, float], **div) -> str:
    lo_div, hi_div = div.get("lo", (0.5, 0.45, 0.55)), div.get("hi", (0.5, 0.45, 0.55))
    return rg.budget_sentence(rg.index_rows([
        row("dihal", LO, dihal[0], diversity=lo_div), row("dihal", HI, dihal[1], diversity=hi_div),
        row("codar", LO, codar[0]), row("codar", HI, codar[1])]))


def test_a_model_improves_worsens_or_is_not_told_apart_between_the_budgets():
    s = over((3.0, 2.0), (2.0, 3.0))
    assert s.startswith("From 128 to 2,048 steps: DiHAL improves (its Gen.PPL is lower)")
    assert "CoDAR worsens (its Gen.PPL is higher)" in s and "Holm over the models" in s
    s = over((2.5, 2.5), (2.5, 2.5))
    assert s.count("does not change beyond the noise (its Gen.PPL is not told apart)") == 2


@pytest.mark.parametrize(("lo", "hi", "word"), [
    ((0.4, 0.35, 0.45), (0.6, 0.55, 0.65), "rises"),
    ((0.6, 0.55, 0.65), (0.4, 0.35, 0.45), "falls"),
    ((0.5, 0.45, 0.55), (0.52, 0.47, 0.57), "is not told apart")])
def test_the_diversity_rises_falls_or_is_not_told_apart(lo, hi, word):
    s = over((2.0, 2.0), (2.0, 2.0), lo=lo, hi=hi)
    assert "DiHAL does not change beyond the noise (its Gen.PPL is not told apart), " \
           "Gen.PPL ratio 1.00" in s
    assert f"and its diversity {word};" in s


def test_one_budget_only_or_a_model_at_one_end_only():
    one = rg.index_rows([row("dihal", LO, 2.0), row("codar", LO, 3.0)])
    assert rg.budget_sentence(one) == ("One budget only (128 steps): how generation moves with "
                                       "the budget is not read.")
    partial = rg.index_rows([row("dihal", LO, 3.0), row("dihal", HI, 2.0), row("codar", LO, 2.0)])
    s = rg.budget_sentence(partial)
    assert "DiHAL improves" in s and s.endswith("CoDAR was not generated at both budgets.")
    none = rg.index_rows([row("dihal", LO, 3.0), row("codar", HI, 2.0)])
    assert rg.budget_sentence(none) == ("From 128 to 2,048 steps: DiHAL and CoDAR were not "
                                        "generated at both budgets.")


# ---------------------------------------------------------------- the section


def test_a_row_given_twice_is_refused():
    with pytest.raises(ValueError, match="two dihal rows at 128 steps"):
        rg.index_rows([row("dihal", LO, 2.0), row("dihal", LO, 2.1)])


def test_the_section_shows_the_table_and_both_sentences():
    r = Document("t")
    rg.budget_generation_section(r, [row("dihal", LO, 3.0), row("codar", LO, 3.0),
                                     row("dihal", HI, 2.0), row("codar", HI, 2.9)],
                                 backbone="smollm2")
    md = r.markdown()
    assert rg.TITLE in md and "| DiHAL (l* = 1) | 128 |" in md and "| CoDAR | 2048 |" in md
    assert "trained at 128 and 2,048 optimiser steps" in md and "40 samples" in md
    assert "DiHAL at l* = 1 against CoDAR at the same budget" in md
    assert "From 128 to 2,048 steps: DiHAL improves" in md
    assert "Every row was sampled with 2 CPU threads (AVX512)" in md
    assert "| sampled |" not in md  # no column where all are alike


def test_rows_sampled_under_other_threads_kernels_or_a_gpu_are_named():
    from dataclasses import replace

    rows = [row("dihal", LO, 3.0), row("codar", LO, 3.0), row("dihal", HI, 2.0),
            row("codar", HI, 2.9)]
    for other, text in (({"cpu_threads": 1}, "with 1 CPU thread (AVX512)"),
                        ({"cpu_kernels": "AVX2"}, "with 2 CPU threads (AVX2)"),
                        ({"cpu_threads": 0, "cpu_kernels": "n/a (GPU)"}, "on a GPU")):
        r = Document("t")
        rg.budget_generation_section(r, [*rows[:3], replace(rows[3], **other)],
                                     backbone="smollm2")
        md = r.markdown()
        assert "The rows were not all sampled alike" in md and "Every row" not in md
        assert "| sampled |" in md
        table = [ln for ln in md.splitlines() if ln.startswith("| CoDAR | 2048 |")]
        assert table and table[0].rstrip(" |").endswith(text), table
        assert [ln for ln in md.splitlines() if ln.startswith("| CoDAR | 128 |")][0].rstrip(
            " |").endswith("with 2 CPU threads (AVX512)")
    r = Document("t")
    rg.budget_generation_section(r, [replace(x, cpu_threads=0, cpu_kernels="n/a (GPU)")
                                     for x in rows], backbone="smollm2")
    assert "Every row was sampled on a GPU" in r.markdown()


def test_the_section_says_when_it_was_not_made_and_gives_the_command():
    r = Document("t")
    rg.budget_generation_section(r, [], backbone="smollm2")
    md = r.markdown()
    assert rg.TITLE in md and "were not trained and sampled" in md
    assert "`python -m pipeline.budget --backbone smollm2 --generation`" in md


def test_the_report_shows_it_inside_the_budget_section_made_or_not():
    from dataclasses import replace

    from dihal.report.build import build_report
    from tests.tiny import report_inputs

    def section(x) -> str:
        md = build_report(x).markdown
        out = md[md.index("## How the answers move with the training budget"):]
        return out[: out.index("\n## ", 1)]

    x = report_inputs()
    assert "`python -m pipeline.budget --backbone tiny --generation`" in section(x)
    made = section(replace(x, budget_generation=[row("dihal", LO, 3.0), row("codar", LO, 2.0)]))
    assert f"### {rg.TITLE}" in made and "DiHAL's Gen.PPL is higher than CoDAR's" in made
    assert "--generation" not in made
