"""Text metrics on hand-written strings with answers computed by hand."""

import math

import pytest

from dihal.metrics import (
    diversity,
    gen_ppl,
    mauve_interval,
    mean_length,
    metric_intervals,
    ngrams,
    repetition,
    words,
)


def test_words_split_runs_of_word_characters_and_single_punctuation():
    assert words("Hello, world!! It's 3.5") == ["Hello", ",", "world", "!", "!", "It", "'", "s",
                                               "3", ".", "5"]
    assert words("  \n") == []
    assert ngrams(["a", "b", "c"], 2) == [("a", "b"), ("b", "c")]
    assert ngrams(["a"], 2) == []


def test_diversity_by_hand():
    # "a b c d" and "a b c e": bigrams ab bc cd / ab bc ce -> 4 distinct of 6;
    # trigrams abc bcd / abc bce -> 3 of 4; 4-grams abcd / abce -> 2 of 2.
    assert diversity(["a b c d", "a b c e"]) == pytest.approx(4 / 6 * 3 / 4 * 2 / 2)
    assert diversity(["one two three four five"]) == 1.0
    # "x x x x x": 4 bigrams (1 distinct), 3 trigrams (1), 2 4-grams (1)
    assert diversity(["x x x x x"]) == pytest.approx(1 / 4 * 1 / 3 * 1 / 2)
    # punctuation counts as words: "a , b" has bigrams (a ,) (, b)
    assert diversity(["a, b", "a, b"], ns=(2,)) == pytest.approx(2 / 4)
    assert math.isnan(diversity(["a b c", "d"]))  # no 4-gram anywhere
    with pytest.raises(ValueError):
        diversity([])
    with pytest.raises(TypeError):
        diversity("a b c d")


def test_repetition_counts_repeats_within_a_text_only():
    # "a b a b a b", n = 2: ab ba ab ba ab -> 5 bigrams, 2 distinct, 3 repeats
    assert repetition(["a b a b a b"], n=2) == pytest.approx(3 / 5)
    # the same text twice: still 6 repeats of 10 (sharing across texts is not repetition)
    assert repetition(["a b a b a b"] * 2, n=2) == pytest.approx(6 / 10)
    assert repetition(["a b c d e f g"], n=4) == 0.0
    assert repetition(["x x x x x x", "p q r s t"], n=4) == pytest.approx(2 / 5)
    assert math.isnan(repetition(["a b"], n=4))


def test_mean_length_in_words():
    assert mean_length(["a b c", "", "Hi!"]) == pytest.approx((3 + 0 + 2) / 3)


class FixedJudge:
    """Every judge token costs 2 nats; a text has one judge token per word."""

    def __init__(self):
        self.seen = []

    def nll_each(self, texts):
        self.seen.extend(texts)
        return [(2.0 * len(words(t)), len(words(t))) for t in texts]


class WordCostJudge:
    """A word costs its length in nats: texts of different words have different perplexities."""

    def nll_each(self, texts):
        return [(float(sum(len(w) for w in words(t))), len(words(t))) for t in texts]


def test_gen_ppl_pools_tokens_and_skips_empty_texts():
    judge = FixedJudge()
    res = gen_ppl(judge, ["a b c", "", "d", "\n "])
    assert judge.seen == ["a b c", "d"]
    assert (res.n_texts, res.n_empty, res.n_tokens, res.nll) == (2, 2, 4, 8.0)
    assert res.ppl == pytest.approx(math.exp(2.0))
    assert res.mean_ppl == pytest.approx(math.exp(2.0))
    assert math.isnan(gen_ppl(FixedJudge(), [""]).ppl)
    assert "per_text" not in res.to_dict()


def test_gen_ppl_token_weighted_and_mean_of_per_sample_differ_as_defined():
    res = gen_ppl(WordCostJudge(), ["a a a", "bbb"])  # per-token nll 1 (3 tokens) and 3 (1 token)
    assert res.ppl == pytest.approx(math.exp(6.0 / 4))
    assert res.mean_ppl == pytest.approx((math.exp(1.0) + math.exp(3.0)) / 2)


def test_metric_intervals_cover_the_point_estimates_and_are_seeded():
    texts = [" ".join(["ab", "c", "ddd", "e"][: 1 + i % 4] * (1 + i % 3)) + f" w{i}"
             for i in range(40)]
    res = gen_ppl(WordCostJudge(), texts)
    iv = metric_intervals(texts, res, n_boot=300, seed=1)
    assert iv["gen_ppl_low"] <= res.ppl <= iv["gen_ppl_high"]
    assert iv["gen_ppl_mean_low"] <= res.mean_ppl <= iv["gen_ppl_mean_high"]
    assert iv["diversity_low"] <= diversity(texts) <= iv["diversity_high"]
    assert iv["gen_ppl_high"] > iv["gen_ppl_low"]
    assert metric_intervals(texts, res, n_boot=300, seed=1) == iv


def test_mauve_interval_matches_mauve_text_and_separates_distributions():
    import mauve
    import numpy as np

    from dihal.metrics import _mauve_of_histograms

    rng = np.random.default_rng(0)
    q = rng.normal(size=(80, 16))
    same = mauve_interval(rng.normal(size=(80, 16)), q, seed=3, n_boot=200)
    shifted_p = rng.normal(size=(80, 16)) + 1.5
    shifted = mauve_interval(shifted_p, q, seed=3, n_boot=200)
    assert same["mauve"] > 0.8 and shifted["mauve"] < 0.3
    for r in (same, shifted):
        assert r["mauve_low"] <= r["mauve"] <= r["mauve_high"]
    assert shifted["mauve_high"] < same["mauve_low"]
    # the point value is mauve-text's own, and our histogram MAUVE reproduces it
    ref = mauve.compute_mauve(p_features=shifted_p, q_features=q, seed=3, verbose=False)
    assert shifted["mauve"] == ref.mauve
    assert _mauve_of_histograms(ref.p_hist, ref.q_hist) == pytest.approx(ref.mauve, abs=1e-12)
    assert mauve_interval(shifted_p, q, seed=3, n_boot=200) == shifted  # seeded


def test_mauve_leaves_torch_thread_count_as_it_was():
    """faiss sets the process's OpenMP thread count, which torch shares: MAUVE must put it
    back, or everything after it (the backbone's samples in eval) runs on one thread."""
    import numpy as np
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        rng = np.random.default_rng(1)
        mauve_interval(rng.normal(size=(40, 8)), rng.normal(size=(40, 8)), seed=0, n_boot=20)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
