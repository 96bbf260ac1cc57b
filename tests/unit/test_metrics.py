"""Text metrics on hand-written strings with answers computed by hand."""

import math

import pytest

from dihal.evaluate.metrics import (
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

    from dihal.evaluate.metrics import _mauve_of_histograms

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


def test_the_bootstraps_mauve_of_histograms_is_mauve_texts_to_the_bit():
    """The bootstrap's MAUVE of two histograms (every mixture weight at once, the trapezoidal
    rule without scikit-learn's per-call checks) equals mauve-text's divergence curve and
    scikit-learn's auc over it bit for bit: histograms of 2 to 500 clusters, with empty ones
    on either side, from bootstrap-sized counts."""
    import numpy as np
    from mauve.compute_mauve import get_divergence_curve_for_multinomials
    from sklearn.metrics import auc

    from dihal.evaluate.metrics import (
        MAUVE_CURVE_POINTS,
        MAUVE_SCALING,
        _divergence_curve,
        _mauve_of_histograms,
    )

    def theirs(p, q) -> float:
        weights = np.linspace(1e-6, 1 - 1e-6, MAUVE_CURVE_POINTS)
        x, y = get_divergence_curve_for_multinomials(p, q, weights, MAUVE_SCALING).T
        i, j = np.argsort(x), np.argsort(y)
        return float(0.5 * (auc(x[i], y[i]) + auc(y[j], x[j])))

    rng = np.random.default_rng(7)
    for case in range(400):
        k = int(rng.integers(2, 500))
        n = int(rng.integers(k // 4 + 2, 4 * k + 8))  # samples a side: clusters left empty
        p, q = (np.bincount(rng.integers(0, k, n), minlength=k).astype(np.float64)
                for _ in range(2))
        if case % 5 == 0:
            q[: k // 2] = 0.0  # a side without half the clusters
        p, q = p / p.sum(), q / q.sum()
        weights = np.linspace(1e-6, 1 - 1e-6, MAUVE_CURVE_POINTS)
        want = get_divergence_curve_for_multinomials(p, q, weights, MAUVE_SCALING)
        assert np.array_equal(_divergence_curve(p, q), want), case
        assert _mauve_of_histograms(p, q) == theirs(p, q), case


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


# ---------------------------------------------------------------- LD4LG's words,
# length control, MAUVE's k-means seeds

def test_spacy_words_and_diversity():
    from dihal.evaluate.metrics import diversity_spacy, spacy_words

    # spaCy splits contractions and keeps numbers whole, unlike our regex
    assert spacy_words("It's 3.5 don't") == ["It", "'s", "3.5", "do", "n't"]
    assert words("It's 3.5 don't") == ["It", "'", "s", "3", ".", "5", "don", "'", "t"]
    # by hand: spaCy tokens "It 's 3.5" and "It 's 4": bigrams 3 distinct of 4, trigrams 2 of 2
    assert diversity_spacy(["It's 3.5", "It's 4"], ns=(2, 3)) == pytest.approx(3 / 4 * 2 / 2)
    # the regex's words of the same texts: It ' s 3 . 5 / It ' s 4 -> bigrams 6 distinct of 8
    assert diversity(["It's 3.5", "It's 4"], ns=(2,)) == pytest.approx(6 / 8)
    assert math.isnan(diversity_spacy(["one"]))
    with pytest.raises(ValueError):
        diversity_spacy([])


class IdJudge:
    """One judge id per word plus a BOS (id 0); a token's NLL is its position's index (1 for
    the first scored token, 2 for the second ...): early tokens cost less here, so the
    tests can tell which tokens were scored."""

    def encode(self, text):
        return [0, *range(1, len(words(text)) + 1)]

    def nll_of_ids_each(self, sequences):
        return [(float(sum(range(1, len(s)))), len(s) - 1) for s in sequences]


def test_gen_ppl_first_tokens_scores_equal_lengths_and_counts_short_samples():
    from dihal.evaluate.metrics import gen_ppl_first_tokens, judge_lengths

    texts = ["a b c d e", "a b c", "a", "", "a b c d"]
    assert judge_lengths(IdJudge(), texts) == [5, 3, 1, 0, 4]
    res = gen_ppl_first_tokens(IdJudge(), texts, length=3)
    # the three samples with >= 3 tokens, each scored on tokens 1..3: NLL 6 over 3 tokens
    assert (res.gen.n_texts, res.n_short, res.gen.n_empty, res.gen.n_tokens) == (3, 1, 1, 9)
    assert res.gen.ppl == pytest.approx(math.exp(2.0))
    assert res.gen.mean_ppl == pytest.approx(math.exp(2.0))
    assert res.to_dict()["ppl_at_length"] == res.gen.ppl and res.to_dict()["length"] == 3
    # unrestricted, the longer samples pay for their later tokens: a different number
    assert gen_ppl(FixedJudgeById(), texts).ppl != res.gen.ppl
    assert math.isnan(gen_ppl_first_tokens(IdJudge(), texts, length=9).gen.ppl)
    # the intervals work on it as on gen_ppl's
    assert "gen_ppl_low" in metric_intervals(texts, res.gen, n_boot=20)
    with pytest.raises(ValueError, match="length"):
        gen_ppl_first_tokens(IdJudge(), texts, length=0)


class FixedJudgeById(IdJudge):
    def nll_each(self, texts):
        return self.nll_of_ids_each([self.encode(t) for t in texts])


def test_shared_length_by_hand():
    from dihal.evaluate.metrics import shared_length

    # row A: 75 % of 4 = 3 samples must be kept -> the 3rd longest, 5; row B: 2nd longest of 2
    assert shared_length([[10, 2, 5, 8], [6, 7]], keep=0.75) == 5
    assert shared_length([[10, 2, 5, 8], [6, 7]], keep=1.0) == 2
    assert shared_length([[10, 2, 5, 8], []]) == 0
    with pytest.raises(ValueError, match="keep"):
        shared_length([[1]], keep=0)


def test_mauve_interval_seeds_widens_the_interval_and_flags_small_samples():
    import numpy as np

    from dihal.evaluate.metrics import mauve_interval_seeds

    rng = np.random.default_rng(5)
    q = rng.normal(size=(100, 16))
    p = rng.normal(size=(100, 16)) + 0.4
    one = mauve_interval(p, q, seed=3, n_boot=300)
    many = mauve_interval_seeds(p, q, seed=3, n_seeds=5, n_boot=300)
    assert many["mauve"] == one["mauve"] and many["mauve_buckets"] == one["mauve_buckets"]
    assert many["mauve_kmeans_seeds"] == 5
    # the fits disagree at this size: the seeds' spread is real and inside the interval
    assert many["mauve_seed_min"] < many["mauve_seed_max"]
    assert many["mauve_low"] <= many["mauve_seed_min"] and many["mauve_seed_max"] <= many["mauve_high"]
    assert many["mauve_high"] - many["mauve_low"] >= one["mauve_high"] - one["mauve_low"]
    assert many["mauve_diagnostic"] is True  # 100 a side < 512
    assert mauve_interval_seeds(p, q, seed=3, n_seeds=5, n_boot=300) == many  # seeded
    # 512 a side and equal counts: a result; unequal counts: a diagnostic again
    big_p, big_q = rng.normal(size=(512, 4)), rng.normal(size=(512, 4))
    assert not mauve_interval_seeds(big_p, big_q, n_seeds=2, n_boot=20)["mauve_diagnostic"]
    assert mauve_interval_seeds(big_p, big_q[:-1], n_seeds=2, n_boot=20, min_samples=10)[
        "mauve_diagnostic"]
    with pytest.raises(ValueError, match="n_seeds"):
        mauve_interval_seeds(p, q, n_seeds=0)
