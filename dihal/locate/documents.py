"""A corpus document and the counts kept while reading one (documents, skipped, malformed, by
source), shared by the Dolma shard reader (dihal.locate.corpus) and the Hub dataset reader
(dihal.locate.hub). Standard library only."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    source: str


@dataclass
class CorpusStats:
    documents: int = 0
    skipped_empty: int = 0
    malformed: int = 0
    malformed_examples: list[str] = field(default_factory=list)
    by_source: Counter = field(default_factory=Counter)
    chars: int = 0

    def to_dict(self) -> dict:
        return {
            "documents": self.documents,
            "skipped_empty": self.skipped_empty,
            "malformed": self.malformed,
            "malformed_examples": self.malformed_examples[:10],
            "by_source": dict(sorted(self.by_source.items())),
            "chars": self.chars,
        }
