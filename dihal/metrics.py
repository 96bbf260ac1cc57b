"""Text metrics of generated samples (METHOD.md section 4), each a small function on strings.

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
    """Gen.PPL of `texts` under `judge` (a `dihal.judge.Judge`), both ways: token-weighted,
    exp(total NLL / total judge tokens), and the mean of the per-text perplexities.

    Each text is re-tokenised by the judge with its BOS, so the first real token is scored too.
    Empty (or whitespace-only) texts are skipped and counted in `n_empty`.
    """
    _check(texts)
    kept = [t for t in texts if t.strip()]
    each = [e for e in (judge.nll_each(kept) if kept else []) if e[1] > 0]
    nll, n_tokens = sum(e[0] for e in each), sum(e[1] for e in each)
    ppl = math.exp(nll / n_tokens) if n_tokens else math.nan
    mean = sum(math.exp(a / b) for a, b in each) / len(each) if each else math.nan
    return GenPPL(ppl, nll, n_tokens, len(kept), len(texts) - len(kept), mean, tuple(each))


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

    from dihal.uncertainty import bootstrap_interval, jackknife_interval

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
