"""Scoring texts for the public API (dihal.api): the per-token negative log-likelihood and the
perplexity of each model on given texts, side by side.

A text is encoded as the pipeline's sequences are (the backbone's BOS, then its tokens), and
every token after the BOS is predicted from the ones before it (dihal.replace.hybrid
.next_token_nll, per token): the hybrid's NLL here is the one its bridgeability measures.
Each text is scored on its own, unpadded. Pure compute, no Dagster.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F


class Scorable(Protocol):
    """What scoring needs of a model (dihal.api.models.TextModel has it): its name, its
    tokenizer and encoding, its context check and its logits."""

    name: str
    tokenizer: object

    def encode(self, text: str) -> torch.Tensor: ...

    def check_positions(self, n: int, what: str, fix: str) -> None: ...

    def logits(self, ids: torch.Tensor) -> torch.Tensor: ...


@dataclass(frozen=True)
class TextScore:
    """One text: its token ids (BOS first), the predicted tokens (ids[1:]) as the tokenizer
    spells them, and each model's NLL of each of them (nats)."""

    text: str
    ids: list[int]
    tokens: list[str]
    nll: dict[str, list[float]]

    def mean_nll(self, model: str) -> float:
        return sum(self.nll[model]) / len(self.nll[model])

    def perplexity(self, model: str) -> float:
        return math.exp(self.mean_nll(model))


@dataclass(frozen=True)
class Scores:
    """The scores of some texts under some models (`models`, in the order given)."""

    models: list[str]
    texts: list[TextScore]

    def nll(self, model: str) -> float:
        """Mean NLL per token over every text (token-weighted), nats."""
        values = [v for t in self.texts for v in t.nll[model]]
        return sum(values) / len(values)

    def perplexity(self, model: str) -> float:
        """exp(nll): the perplexity over every token of every text."""
        return math.exp(self.nll(model))

    def rows(self) -> list[dict]:
        """One row per (text, model): text (its index), model, tokens, nll, ppl; then one per
        model over all texts (text "all")."""
        out = [{"text": i, "model": m, "tokens": len(t.tokens), "nll": t.mean_nll(m),
                "ppl": t.perplexity(m)} for i, t in enumerate(self.texts) for m in self.models]
        total = sum(len(t.tokens) for t in self.texts)
        return out + [{"text": "all", "model": m, "tokens": total, "nll": self.nll(m),
                       "ppl": self.perplexity(m)} for m in self.models]

    def table(self) -> str:
        """Markdown: a row per text and one for all of them, NLL and perplexity of each model."""
        head = ["text", "tokens"] + [f"{m} {k}" for m in self.models for k in ("NLL", "PPL")]
        lines = [_row(head), _row(["---"] * len(head))]
        for i, t in enumerate(self.texts):
            lines.append(_row([str(i), str(len(t.tokens))] + [
                f"{v:.3f}" if k == 0 else f"{v:.2f}" for m in self.models
                for k, v in enumerate((t.mean_nll(m), t.perplexity(m)))]))
        total = sum(len(t.tokens) for t in self.texts)
        lines.append(_row(["all", str(total)] + [
            f"{v:.3f}" if k == 0 else f"{v:.2f}" for m in self.models
            for k, v in enumerate((self.nll(m), self.perplexity(m)))]))
        return "\n".join(lines)

    def token_table(self, i: int = 0) -> str:
        """Markdown: text i token by token, each model's NLL of each token."""
        t = self.texts[i]
        head = ["position", "token"] + [f"{m} NLL" for m in self.models]
        lines = [_row(head), _row(["---"] * len(head))]
        for p, tok in enumerate(t.tokens, start=1):
            lines.append(_row([str(p), repr(tok)] + [f"{t.nll[m][p - 1]:.3f}"
                                                     for m in self.models]))
        return "\n".join(lines)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


@torch.no_grad()
def token_nll(logits: torch.Tensor, ids: torch.Tensor) -> list[float]:
    """The NLL (nats) of tokens 1..T-1 of `ids` (T,) under `logits` (1, T, V)."""
    lp = logits[0, :-1].float()
    return F.cross_entropy(lp, ids[1:].to(lp.device), reduction="none").tolist()


def score_texts(texts: Sequence[str], models: Sequence[Scorable], *,
                progress: Callable[[str], None] | None = None) -> Scores:
    """Every model's per-token NLL of every text (each a str, encoded with its BOS first). A
    text with no token to predict, or longer than a model takes, is refused by its index."""
    if isinstance(texts, str):
        texts = [texts]
    if not texts or not models:
        raise ValueError("score needs at least one text and one model")
    names = [m.name for m in models]
    if len(set(names)) != len(names):
        raise ValueError(f"two models share a name in {names}: give each its own")
    first = models[0]
    encoded = [first.encode(t) for t in texts]
    for i, ids in enumerate(encoded):
        if ids.numel() < 2:
            raise ValueError(f"text {i} ({texts[i]!r}) has no token after its BOS to score")
        for m in models:
            if not torch.equal(m.encode(texts[i]), ids):
                raise ValueError(f"{m.name} and {first.name} encode text {i} differently: "
                                 "score models of one backbone (one tokenizer) together")
            m.check_positions(ids.numel(), f"text {i} is {ids.numel()} tokens (BOS included)",
                              "shorten the text or split it")
    out = []
    for i, (text, ids) in enumerate(zip(texts, encoded, strict=True)):
        nll = {m.name: token_nll(m.logits(ids.unsqueeze(0)), ids) for m in models}
        tokens = first.tokenizer.convert_ids_to_tokens(ids[1:].tolist())
        out.append(TextScore(text, ids.tolist(), [str(t) for t in tokens], nll))
        if progress is not None and len(texts) > 1:
            progress(f"scored text {i + 1}/{len(texts)}")
    return Scores(names, out)
