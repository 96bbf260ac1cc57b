"""A corpus document and the counts kept while reading one (documents, skipped, malformed, by
source), shared by the Dolma shard reader (dihal.locate.corpus) and the Hub dataset reader
(dihal.locate.hub). Standard library and the typed results only."""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass, field

from dihal.results import CorpusCounts


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    source: str


def is_empty(text: str, min_chars: int) -> bool:
    """A document to skip and count as empty: shorter than min_chars once stripped of
    whitespace, or without a single printable character (only control, format, surrogate,
    private-use or unassigned characters, Unicode category C*, and whitespace: 100 NULs
    tokenise to junk, not to text)."""
    if len(text.strip()) < min_chars:
        return True
    return not any(not c.isspace() and not unicodedata.category(c).startswith("C")
                   for c in text)


@dataclass
class CorpusStats:
    documents: int = 0
    skipped_empty: int = 0
    malformed: int = 0
    malformed_examples: list[str] = field(default_factory=list)
    by_source: Counter = field(default_factory=Counter)
    chars: int = 0

    def counts(self) -> CorpusCounts:
        """What the corpus stage records of these counts (the first 10 malformed lines)."""
        return CorpusCounts(self.documents, self.skipped_empty, self.malformed,
                            self.malformed_examples[:10], dict(sorted(self.by_source.items())),
                            self.chars)

    def to_dict(self) -> dict:
        return self.counts().to_dict()
