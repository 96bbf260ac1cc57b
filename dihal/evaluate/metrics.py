"""Text metrics of generated samples (docs/method.md §4), each a small function on strings.

Words are `\\w+|[^\\w\\s]` matches (runs of word characters, or single punctuation marks), as in
LD4LG's evaluation; case is kept. A metric that is undefined for the given texts (no n-grams at
all, every text empty) returns NaN rather than a made-up number; an empty list of texts is a
caller error and raises.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol

from dihal.uncertainty import bootstrap_interval, jackknife_interval, resample_indices

WORD_RE = re.compile(r"\w+|[^\w\s]")


def words(text: str) -> list[str]:
    """The words of `text`: `\\w+|[^\\w\\s]` matches, in order."""
    return WORD_RE.findall(text)


def ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    """All contiguous n-grams of `tokens` (none when there are fewer than n)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def _check(texts: Sequence[str]) -> None:
    if isinstance(texts, str):
        raise TypeError("pass a sequence of texts, not a single string")
    if len(texts) == 0:
        raise ValueError("no texts")


def diversity(texts: Sequence[str], ns: Sequence[int] = (2, 3, 4)) -> float:
    """Product over n in `ns` of (distinct n-grams / all n-grams), both pooled over all texts.

    1.0 when no n-gram occurs twice anywhere; lower when samples repeat themselves or each
    other. NaN when, for some n, the texts hold no n-gram at all.
    """
    _check(texts)
    return diversity_of([{n: ngrams(words(t), n) for n in ns} for t in texts], ns)


def repetition(texts: Sequence[str], n: int = 4) -> float:
    """The fraction of n-gram occurrences that repeat an n-gram seen earlier in the same text.

    Per text: (its n-grams - its distinct n-grams); summed over texts and divided by the total
    number of n-grams. Unlike `diversity`, two samples that share an n-gram do not count: this
    measures degenerate loops within a sample. 0.0 = no n-gram repeats within any text; NaN
    when no text has n words.
    """
    _check(texts)
    repeats = total = 0
    for text in texts:
        grams = ngrams(words(text), n)
        repeats += len(grams) - len(set(grams))
        total += len(grams)
    return repeats / total if total else math.nan


def mean_length(texts: Sequence[str]) -> float:
    """The mean number of words per text (empty texts count as 0)."""
    _check(texts)
    return sum(len(words(t)) for t in texts) / len(texts)


class Scorer(Protocol):
    def nll_each(self, texts: Sequence[str]) -> list[tuple[float, int]]: ...


@dataclass(frozen=True)
class GenPPL:
    """Generative perplexity and what it was computed from."""

    ppl: float  # token-weighted: exp(nll / n_tokens); NaN when nothing was scored
    nll: float  # total NLL in nats over the scored texts
    n_tokens: int  # judge tokens scored (BOS excluded)
    n_texts: int  # texts scored
    n_empty: int  # texts skipped because they were empty or whitespace only
    # the mean over scored texts of exp(nll_i / n_i): LD4LG's evaluation convention
    mean_ppl: float = math.nan
    per_text: tuple[tuple[float, int], ...] = field(default=(), repr=False)  # (nll_i, n_i)

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "per_text"}


def gen_ppl(judge: Scorer, texts: Sequence[str]) -> GenPPL:
    """Gen.PPL of `texts` under `judge` (a `dihal.evaluate.judge.Judge`), both ways: token-weighted,
    exp(total NLL / total judge tokens), and the mean of the per-text perplexities.

    Each text is re-tokenised by the judge with its BOS, so the first real token is scored too.
    An empty (or whitespace-only) text is a failed sample (the model ended it at once): it has
    no judge token, so the perplexity is over the non-empty texts, and `n_empty` counts the
    failures. A Gen.PPL is never read without them: every generation row carries the empty
    rate beside it (`empty_rate`), and the report's verdicts between models weigh it
    (dihal.report.generation).
    """
    _check(texts)
    kept = [t for t in texts if t.strip()]
    each = [e for e in (judge.nll_each(kept) if kept else []) if e[1] > 0]
    nll, n_tokens = sum(e[0] for e in each), sum(e[1] for e in each)
    ppl = math.exp(nll / n_tokens) if n_tokens else math.nan
    mean = sum(math.exp(a / b) for a, b in each) / len(each) if each else math.nan
    return GenPPL(ppl, nll, n_tokens, len(kept), len(texts) - len(kept), mean, tuple(each))


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval (95 % by default) of a proportion k / n; (nan, nan) for n = 0."""
    if n <= 0:
        return math.nan, math.nan
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def empty_rate(texts: Sequence[str]) -> dict:
    """How many samples failed by being empty (no text before their first EOS, or whitespace
    only): {"n_samples", "empty_samples", "empty_rate", "empty_rate_low", "empty_rate_high"}
    (the Wilson 95 % interval)."""
    _check(texts)
    k, n = sum(1 for t in texts if not t.strip()), len(texts)
    low, high = wilson(k, n)
    return {"n_samples": n, "empty_samples": k, "empty_rate": k / n, "empty_rate_low": low,
            "empty_rate_high": high}


def rate_difference(k1: int, n1: int, k2: int, n2: int) -> tuple[float, float, float]:
    """k1/n1 - k2/n2 with its 95 % interval (Newcombe's hybrid score interval from the two
    Wilson intervals; independent samples): (difference, low, high)."""
    p1, p2 = k1 / n1, k2 / n2
    (l1, u1), (l2, u2) = wilson(k1, n1), wilson(k2, n2)
    d = p1 - p2
    return (d, d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2),
            d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2))


def diversity_of(grams: Sequence[dict[int, list[tuple[str, ...]]]], ns: Sequence[int]) -> float:
    """`diversity` from each text's n-grams ({n: list}), so that resamples need not re-tokenise."""
    result = 1.0
    for n in ns:
        pooled = [g for per_text in grams for g in per_text[n]]
        if not pooled:
            return math.nan
        result *= len(set(pooled)) / len(pooled)
    return result


def metric_intervals(texts: Sequence[str], ppl: GenPPL, *, n_boot: int = 1000,
                     seed: int = 0, ns: Sequence[int] = (2, 3, 4)) -> dict[str, float]:
    """95 % intervals over samples: percentile bootstrap (seeded) of the token-weighted and the
    per-sample-mean Gen.PPL (over the scored texts); jackknife of diversity (over all texts:
    a bootstrap's repeated texts would repeat their n-grams and bias it down).
    {"gen_ppl_low", "gen_ppl_high", "gen_ppl_mean_low", ..., "diversity_high"}."""
    import numpy as np

    out = {}
    if ppl.per_text:
        nll = np.array([a for a, _ in ppl.per_text])
        cnt = np.array([b for _, b in ppl.per_text], dtype=np.float64)
        each = np.exp(nll / cnt)
        for key, stat in (("gen_ppl", lambda i: math.exp(nll[i].sum() / cnt[i].sum())),
                          ("gen_ppl_mean", lambda i: each[i].mean())):
            out[f"{key}_low"], out[f"{key}_high"] = bootstrap_interval(
                len(nll), stat, n_boot=n_boot, seed=seed)
    else:
        out.update(dict.fromkeys(("gen_ppl_low", "gen_ppl_high", "gen_ppl_mean_low",
                                  "gen_ppl_mean_high"), math.nan))
    grams = [{n: ngrams(words(t), n) for n in ns} for t in texts]
    out["diversity_low"], out["diversity_high"] = (
        jackknife_interval(len(grams), lambda i: diversity_of([grams[j] for j in i], ns))
        if len(grams) >= 2 else (math.nan, math.nan))
    return out


MAUVE_SCALING = 5.0  # mauve-text's defaults: the constant c and the curve's discretisation
MAUVE_CURVE_POINTS = 25


def _divergence_curve(p_hist, q_hist):
    """mauve-text's divergence curve of two histograms (get_divergence_curve_for_multinomials
    at MAUVE_CURVE_POINTS weights and MAUVE_SCALING), every weight at once, to the bit: its
    kl_multinomial(a, r) sums a * log(a / r) over the support of a, which every mixture r
    with a weight strictly inside (0, 1) shares, so each weight's terms are the same
    elementwise arithmetic, summed as the same contiguous 1-d array. Where a mixture vanishes on that
    support (underflow), mauve-text's own function answers."""
    import numpy as np
    from mauve.compute_mauve import get_divergence_curve_for_multinomials

    weights = np.linspace(1e-6, 1 - 1e-6, MAUVE_CURVE_POINTS)
    w = np.sort(weights)[:, None]
    r = w * p_hist + (1 - w) * q_hist
    sp, sq = p_hist != 0, q_hist != 0
    if not (r[:, sp].all() and r[:, sq].all()):
        return get_divergence_curve_for_multinomials(p_hist, q_hist, weights, MAUVE_SCALING)
    a, b = q_hist[sq], p_hist[sp]
    curve = np.empty((MAUVE_CURVE_POINTS + 2, 2))
    curve[0], curve[-1] = (0.0, np.inf), (np.inf, 0.0)
    # each row summed alone, as a 1-d array (a 2-d sum along rows adds in another order)
    curve[1:-1, 0] = [row.sum() for row in a * np.log(a / r[:, sq])]
    curve[1:-1, 1] = [row.sum() for row in b * np.log(b / r[:, sp])]
    return np.exp(-MAUVE_SCALING * curve)


def _mauve_of_histograms(p_hist, q_hist) -> float:
    """MAUVE of two histograms over the same clusters, as mauve-text computes it (the area
    under the divergence curve both ways, by the trapezoidal rule scikit-learn's auc applies
    to an increasing x), without its per-call checks: the bootstrap calls this a thousand
    times an interval."""
    import numpy as np
    from scipy.integrate import trapezoid

    x, y = _divergence_curve(p_hist, q_hist).T
    i, j = np.argsort(x), np.argsort(y)
    return float(0.5 * (float(trapezoid(y[i], x[i])) + float(trapezoid(x[j], y[j]))))


def _mauve_labels(p, q, num_clusters: int, seed: int):
    """The cluster of every p and q feature under mauve-text's quantisation (l2-normalised,
    PCA to 90 % of the variance, faiss k-means), with its seeds: (p_labels, q_labels)."""
    import faiss
    import numpy as np
    from sklearn.decomposition import PCA
    from sklearn.preprocessing import normalize

    data = normalize(np.vstack([q, p]), norm="l2", axis=1)
    pca = PCA(n_components=None, whiten=False, random_state=seed + 1).fit(data)
    keep = int(np.argmax(np.cumsum(pca.explained_variance_ratio_) >= 0.9)) + 1
    data = pca.transform(data)[:, :keep].astype(np.float32)
    kmeans = faiss.Kmeans(data.shape[1], num_clusters, niter=500, verbose=False, nredo=5,
                          update_index=True, seed=seed + 2)
    kmeans.train(data)
    labels = kmeans.index.search(data, 1)[1].reshape(-1)
    return labels[len(q):], labels[: len(q)]


def mauve_interval(p_features, q_features, *, seed: int = 0, n_boot: int = 1000,
                   level: float = 0.95) -> dict[str, float]:
    """MAUVE (mauve-text, its defaults) of generated texts P against reference texts Q from
    their features, with a percentile interval over samples: P's and Q's samples are resampled
    (seeded) under the quantisation fitted on all of them, and MAUVE recomputed from the
    resampled histograms. {"mauve", "mauve_low", "mauve_high", "mauve_buckets"}."""
    import numpy as np

    p, q = np.asarray(p_features, dtype=np.float64), np.asarray(q_features, dtype=np.float64)
    point, k, p_lab, q_lab = _mauve_fit(p, q, seed)
    ip = resample_indices(len(p_lab), n_boot, seed)
    iq = resample_indices(len(q_lab), n_boot, seed + 1)
    boot = np.array([_mauve_of_histograms(_hist(p_lab[a], k), _hist(q_lab[b], k))
                     for a, b in zip(ip, iq, strict=True)])
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(boot, [tail, 100 - tail])
    return {"mauve": point, "mauve_low": float(lo), "mauve_high": float(hi),
            "mauve_buckets": k}


def _hist(labels, k: int):
    import numpy as np

    counts = np.bincount(labels, minlength=k).astype(np.float64)
    return counts / counts.sum()


def _mauve_fit(p, q, seed: int):
    """mauve-text's MAUVE of features p against q at `seed`, its number of clusters, and the
    cluster labels of p and q (dihal's copy of its quantisation, checked to match it)."""
    import faiss
    import mauve
    import numpy as np

    # one OpenMP thread for faiss's k-means (deterministic, and fast on a shared CPU); the
    # setting is the process's OpenMP one, which torch shares: put it back, or every torch op
    # after the first MAUVE (the backbone's sampling in eval, the sampler curve) runs on one
    # thread, slower and with other float sums (other samples)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        out = mauve.compute_mauve(p_features=p, q_features=q, seed=seed, verbose=False)
        k = int(out.num_buckets)
        p_lab, q_lab = _mauve_labels(p, q, k, seed)
    finally:
        faiss.omp_set_num_threads(threads)

    if not (np.allclose(_hist(p_lab, k), out.p_hist) and np.allclose(_hist(q_lab, k), out.q_hist)):
        raise RuntimeError("mauve-text's quantisation no longer matches dihal's copy of it "
                           "(dihal/evaluate/metrics.py _mauve_labels): pin mauve-text==0.4.0")
    return float(out.mauve), k, p_lab, q_lab


MAUVE_RESULT_SAMPLES = 512  # fewer samples a side than this: MAUVE is a diagnostic, not a result


def _kmeans_labels(p, q, k: int, seed: int):
    """_mauve_labels with faiss held to one OpenMP thread (and the count put back)."""
    import faiss

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        return _mauve_labels(p, q, k, seed)
    finally:
        faiss.omp_set_num_threads(threads)


def mauve_interval_seeds(p_features, q_features, *, seed: int = 0, n_seeds: int = 5,
                         n_boot: int = 1000, level: float = 0.95,
                         min_samples: int = MAUVE_RESULT_SAMPLES) -> dict:
    """MAUVE with the k-means fit inside its interval: the quantisation (PCA and faiss
    k-means, mauve-text's) is refitted under `n_seeds` seeds (seed, seed + 1000, ...; the
    first is mauve-text's own at `seed`), and each fit contributes n_boot / n_seeds resamples
    of P's and Q's samples; the percentile interval is over all of them, so it covers the
    variance of the clustering (the larger part at a few hundred samples) as well as that of
    the samples. The point value is mauve-text's at `seed`; mauve_seed_min / _max are the
    full-sample MAUVE of the least and most favourable fits. `mauve_diagnostic` is True when
    either side has fewer than `min_samples` (512) samples or the sides differ in count: the
    report shows such a MAUVE as a diagnostic, not a result. Covered by
    tests/unit/test_metrics.py test_mauve_interval_seeds_*."""
    import numpy as np

    if n_seeds < 1 or n_boot < n_seeds:
        raise ValueError(f"need n_seeds >= 1 and n_boot >= n_seeds, got {n_seeds}, {n_boot}")
    p, q = np.asarray(p_features, dtype=np.float64), np.asarray(q_features, dtype=np.float64)
    point, k, p_lab, q_lab = _mauve_fit(p, q, seed)
    per_seed, boot = [], []
    for j in range(n_seeds):
        if j:
            p_lab, q_lab = _kmeans_labels(p, q, k, seed + 1000 * j)
        per_seed.append(_mauve_of_histograms(_hist(p_lab, k), _hist(q_lab, k)))
        m = n_boot // n_seeds
        ip = resample_indices(len(p_lab), m, seed + 1000 * j)
        iq = resample_indices(len(q_lab), m, seed + 1000 * j + 1)
        boot += [_mauve_of_histograms(_hist(p_lab[a], k), _hist(q_lab[b], k))
                 for a, b in zip(ip, iq, strict=True)]
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(boot, [tail, 100 - tail])
    return {"mauve": point, "mauve_low": float(lo), "mauve_high": float(hi),
            "mauve_buckets": k, "mauve_kmeans_seeds": n_seeds,
            "mauve_seed_min": float(min(per_seed)), "mauve_seed_max": float(max(per_seed)),
            "mauve_n_p": int(len(p)), "mauve_n_q": int(len(q)),
            "mauve_diagnostic": bool(min(len(p), len(q)) < min_samples or len(p) != len(q))}


# ------------------------------------------------------------------ spaCy words (LD4LG's)

_SPACY_TOKENIZER = None


def spacy_words(text: str) -> list[str]:
    """The tokens of `text` under spaCy's English tokenizer (spacy.blank("en"): the rule-based
    tokenizer that en_core_web_sm, which LD4LG's evaluation loads, is built with; no model
    download). Covered by test_spacy_words_and_diversity."""
    global _SPACY_TOKENIZER
    if _SPACY_TOKENIZER is None:
        import spacy

        _SPACY_TOKENIZER = spacy.blank("en").tokenizer
    return [t.text for t in _SPACY_TOKENIZER(text)]


def diversity_spacy(texts: Sequence[str], ns: Sequence[int] = (2, 3, 4)) -> float:
    """`diversity` with spaCy's English tokens instead of our regex words, as LD4LG computes
    it (product over n of distinct / all n-grams pooled over texts); report it labelled
    "diversity (spaCy, as LD4LG)" beside ours. NaN where some n has no n-gram. Covered by
    test_spacy_words_and_diversity."""
    _check(texts)
    return diversity_of([{n: ngrams(spacy_words(t), n) for n in ns} for t in texts], ns)


# ------------------------------------------------------------------ length-controlled Gen.PPL

class IdScorer(Protocol):
    def encode(self, text: str) -> list[int]: ...
    def nll_of_ids_each(self, sequences: Sequence[Sequence[int]]) -> list[tuple[float, int]]: ...


def judge_lengths(judge: IdScorer, texts: Sequence[str]) -> list[int]:
    """Judge tokens scored in each text (every id after the first, which is the judge's BOS
    where it has one: the count gen_ppl scores), the length every metric should be reported
    beside. Covered by test_gen_ppl_first_tokens_*."""
    _check(texts)
    return [max(0, len(judge.encode(t)) - 1) for t in texts]


def shared_length(lengths: Sequence[Sequence[int]], keep: float = 0.75) -> int:
    """The largest judge length L at which every row (one list of sample lengths per model)
    keeps at least `keep` of its samples (those with >= L tokens): the common length for
    gen_ppl_first_tokens. 0 when a row is empty. Covered by test_shared_length_by_hand."""
    import numpy as np

    if not 0 < keep <= 1:
        raise ValueError(f"keep must lie in (0, 1], got {keep}")
    best = None
    for row in lengths:
        a = np.sort(np.asarray(list(row), dtype=np.int64))[::-1]
        if a.size == 0:
            return 0
        # the ceil(keep * n)-th longest sample: that many samples have at least its length
        cap = int(a[max(1, math.ceil(keep * a.size)) - 1])
        best = cap if best is None else min(best, cap)
    return int(best or 0)


@dataclass(frozen=True)
class FirstTokensPPL:
    """Gen.PPL on the first `length` judge tokens of every sample (length-controlled)."""

    gen: GenPPL  # over the samples long enough, each scored on its first `length` tokens
    length: int
    n_short: int  # non-empty samples with fewer than `length` judge tokens, left out

    @property
    def n_samples(self) -> int:
        """Every sample: those reaching the length, the shorter ones and the empty ones."""
        return self.gen.n_texts + self.n_short + self.gen.n_empty

    def to_dict(self) -> dict:
        return {**{f"{k}_at_length": v for k, v in self.gen.to_dict().items()},
                "length": self.length, "n_short": self.n_short}


def gen_ppl_first_tokens(judge: IdScorer, texts: Sequence[str], length: int) -> FirstTokensPPL:
    """Gen.PPL (both conventions, as gen_ppl) scoring only the first `length` judge tokens of
    every sample (after the judge's BOS, which is the first token's context), so that models
    whose samples differ in length are compared on equal ground: the judge's first tokens of
    a text cost more than later ones, and shorter samples would otherwise look worse. Samples
    with fewer than `length` judge tokens are left out and counted in n_short (empty ones in
    gen.n_empty: failures, which reach no length). gen.per_text feeds metric_intervals.
    Covered by test_gen_ppl_first_tokens_*."""
    _check(texts)
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ValueError(f"length must be an int >= 1 judge tokens, got {length!r}")
    kept = [t for t in texts if t.strip()]
    ids = [judge.encode(t) for t in kept]
    long_enough = [s[: 1 + length] for s in ids if len(s) - 1 >= length]
    each = [e for e in (judge.nll_of_ids_each(long_enough) if long_enough else []) if e[1] > 0]
    nll, n_tok = sum(e[0] for e in each), sum(e[1] for e in each)
    gen = GenPPL(math.exp(nll / n_tok) if n_tok else math.nan, nll, n_tok, len(each),
                 len(texts) - len(kept),
                 sum(math.exp(a / b) for a, b in each) / len(each) if each else math.nan,
                 tuple(each))
    return FirstTokensPPL(gen, length, len(kept) - len(long_enough))
