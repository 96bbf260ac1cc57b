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
from dataclasses import asdict, dataclass
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
    tokenised = [words(t) for t in texts]
    result = 1.0
    for n in ns:
        grams = [g for toks in tokenised for g in ngrams(toks, n)]
        if not grams:
            return math.nan
        result *= len(set(grams)) / len(grams)
    return result


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
    def nll(self, texts: Sequence[str]) -> tuple[float, int]: ...


@dataclass(frozen=True)
class GenPPL:
    """Generative perplexity and what it was computed from."""

    ppl: float  # exp(nll / n_tokens); NaN when nothing was scored
    nll: float  # total NLL in nats over the scored texts
    n_tokens: int  # judge tokens scored (BOS excluded)
    n_texts: int  # texts scored
    n_empty: int  # texts skipped because they were empty or whitespace only

    def to_dict(self) -> dict:
        return asdict(self)


def gen_ppl(judge: Scorer, texts: Sequence[str]) -> GenPPL:
    """exp(total NLL / total judge tokens) of `texts` under `judge` (a `dihal.judge.Judge`).

    Each text is re-tokenised by the judge with its BOS, so the first real token is scored too.
    Empty (or whitespace-only) texts are skipped and counted in `n_empty`.
    """
    _check(texts)
    kept = [t for t in texts if t.strip()]
    nll, n_tokens = judge.nll(kept) if kept else (0.0, 0)
    ppl = math.exp(nll / n_tokens) if n_tokens else math.nan
    return GenPPL(ppl, nll, n_tokens, len(kept), len(texts) - len(kept))
