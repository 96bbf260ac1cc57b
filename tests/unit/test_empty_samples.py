"""An empty sample is a failure: every generation row counts its empty samples with the
interval of their rate, "samples reaching L" is out of all the samples, MAUVE compares the
empty ones too, and the report's verdicts do not count a lower Gen.PPL that comes with more
failures."""

import math

import pytest
import torch

from dihal.evaluate.generation import text_metrics
from dihal.report.build import build_report
from dihal.report.generation import answer_generation
from tests.tiny import gen_row as _gen
from tests.tiny import report_inputs as inputs


class WordJudge:
    """A judge that scores every word at 2 nats, BOS first; features from the words."""

    def encode(self, text: str) -> list[int]:
        return [0] + [1 + len(w) for w in text.split()]

    def nll_of_ids_each(self, sequences):
        return [(2.0 * (len(s) - 1), len(s) - 1) for s in sequences]

    def nll_each(self, texts):
        return self.nll_of_ids_each([self.encode(t) for t in texts])

    def features(self, texts):
        return torch.tensor([[len(t), t.count(" "), 1.0] for t in texts])


TEXTS = ["", "a b c d", "  ", "e f g h i", "", "j k"]


def test_text_metrics_count_the_empty_samples_as_failures(monkeypatch):
    from scipy.stats import binomtest

    seen = {}

    def fake_mauve(p, q, seed):
        seen["p"], seen["q"] = len(p), len(q)
        return {"mauve": 0.5, "mauve_low": 0.4, "mauve_high": 0.6}

    monkeypatch.setattr("dihal.evaluate.generation.mauve_interval_seeds", fake_mauve)  # where it is called
    reference = torch.ones(10, 3)
    out = text_metrics(TEXTS, WordJudge(), reference=reference, ppl_length=3)
    assert (out["n_samples"], out["empty_samples"]) == (6, 3)
    assert out["empty_rate"] == 0.5
    wilson = binomtest(3, 6).proportion_ci(method="wilson")
    assert (out["empty_rate_low"], out["empty_rate_high"]) == pytest.approx((wilson.low,
                                                                            wilson.high))
    # Gen.PPL over the 3 non-empty samples (2 nats a word)
    assert out["gen_ppl"] == pytest.approx(math.exp(2.0))
    # samples reaching 3 judge tokens: 2 of 6 (one is short, three are empty)
    assert (out["ppl_length_scored"], out["ppl_length_short"], out["ppl_length_empty"]) == (2, 1, 3)
    # MAUVE compares every sample, the empty ones too, against as many held-out texts
    assert seen == {"p": 6, "q": 6}


def test_wilson_and_the_difference_of_two_rates():
    from scipy.stats import binomtest

    from dihal.evaluate.metrics import empty_rate, rate_difference, wilson

    for k in (0, 19, 30, 64):  # scipy's Wilson interval, independent code
        ci = binomtest(k, 64).proportion_ci(method="wilson")
        assert wilson(k, 64) == pytest.approx((ci.low, ci.high), abs=1e-12)
    assert wilson(0, 64)[0] == 0.0 and wilson(64, 64)[1] == 1.0
    d, lo, hi = rate_difference(19, 64, 2, 64)
    assert d == pytest.approx(17 / 64) and lo > 0 and hi < 1
    assert rate_difference(3, 64, 2, 64)[1] < 0  # one more failure is within the noise
    assert empty_rate(["", "x"])["empty_samples"] == 1


def _row(model, role, ppl, empty, n=64, **extra):
    return _gen(model, role, ppl, ppl * 0.9, ppl * 1.1, n_samples=n, empty_samples=empty,
                ppl_length_scored=n - empty - 2, ppl_length_short=2, ppl_length=32, **extra)


def test_a_lower_gen_ppl_with_more_failures_is_not_counted_as_better():
    budget = dict(denoiser_parameters=1, train_tokens=1, sampler_steps=1)
    rows = [_row("dihal", "dihal", 50.0, 30, **budget), _row("backbone", "backbone", 30.0, 0),
            _row("ld4lg", "baseline", 80.0, 0), _row("codar", "baseline", 90.0, 31)]
    x = inputs(comparison=rows)
    text, _ = answer_generation(x)
    # ld4lg's Gen.PPL is higher, but DiHAL fails on 30 of 64 samples against none; codar fails
    # as often as DiHAL: only codar counts as beaten
    assert "lower than 1 of 2 baselines' (codar)" in text
    assert text.endswith("; over 34 of 64 samples (30 empty; a lower Gen.PPL on more "
                         "failures does not count).")
    md = build_report(x).markdown
    assert ("empty samples, each a failure (Gen.PPL is over the rest): dihal 30 of 64 (47 %), "
            "backbone 0 of 64 (0 %), ld4lg 0 of 64 (0 %), codar 31 of 64 (48 %)") in md
    assert "DiHAL's lower Gen.PPL than ld4lg comes with more failures" in md
    # without failures the answer says nothing of them
    clean = [_row("dihal", "dihal", 50.0, 0, **budget), _row("backbone", "backbone", 30.0, 0),
             _row("ld4lg", "baseline", 80.0, 0)]
    assert "samples" not in answer_generation(inputs(comparison=clean))[0]
    assert "| dihal | not recorded | 30 of 64 (47 %) [35, 59 %] | 50.0 [45.0, 55.0] |" in md
    assert "| 32 of 64 |" in md  # samples reaching L, out of every sample
    assert "An empty sample (the model ends it at once) is a failure" in md
