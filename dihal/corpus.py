"""Dolma-format corpora (gzip JSON lines) and their tokenisation into fixed-length sequences.

A shard line is a JSON object with at least ``id`` and ``text`` (Dolma v1.7 also has
``source``, ``added``, ``created``, ``metadata``). Shards are read streaming, from local files
or from URLs (one per line in a URL list, as in Dolma's ``urls/v1_7.txt``); nothing is held in
memory beyond one document.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from dihal.config import CorpusConfig, SequenceConfig  # noqa: F401 (re-exported)
from dihal.errors import CorpusError, MalformedLineError
from dihal.results import CorpusResult, SequencesResult

EMBEDDED_SAMPLE = Path(__file__).resolve().parents[1] / "data" / "dolma_sample"


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


def resolve_shards(cfg: CorpusConfig) -> list[str]:
    """The shard list: sorted local files, or the URLs of a list, capped by max_shards."""
    if cfg.url_list:
        text = _open_binary(cfg.url_list).read().decode("utf-8")
        shards = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    else:
        patterns = cfg.paths or (str(EMBEDDED_SAMPLE / "*.json.gz"),)
        shards = []
        for pat in patterns:
            hits = sorted(glob.glob(str(Path(pat).expanduser())))
            if not hits:
                hint = (
                    "the embedded sample is missing: rebuild it with "
                    "`python scripts/build_sample_corpus.py`"
                    if not cfg.paths
                    else "check the path, or give a glob such as /data/dolma/*.json.gz"
                )
                raise CorpusError(f"no corpus shard matches {pat!r}: {hint}")
            shards.extend(hits)
    if cfg.max_shards is not None:
        shards = shards[: cfg.max_shards]
    if not shards:
        raise CorpusError("the corpus config selects no shards")
    return shards


def _open_binary(location: str):
    if "://" in location:
        import urllib.request

        return urllib.request.urlopen(location)  # noqa: S310 - user-given shard URLs
    return open(location, "rb")


def _lines(location: str) -> Iterator[bytes]:
    with _open_binary(location) as raw:
        stream = gzip.GzipFile(fileobj=raw) if location.endswith(".gz") else raw
        try:
            yield from stream
        except (OSError, EOFError) as exc:
            raise CorpusError(
                f"shard {location} cannot be read ({exc}): it is truncated or not gzip. "
                "Download it again or drop it from the corpus paths."
            ) from exc


def iter_documents(
    shards: Iterable[str], cfg: CorpusConfig, stats: CorpusStats | None = None
) -> Iterator[Document]:
    """Stream documents from shards, skipping (and counting) empty and malformed lines."""
    stats = stats if stats is not None else CorpusStats()
    for shard in shards:
        for lineno, line in enumerate(_lines(shard), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                doc_id, text = obj["id"], obj["text"]
                if not isinstance(text, str):
                    raise TypeError(f"text is {type(text).__name__}, not a string")
            except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as exc:
                where = f"{shard}:{lineno}"
                if cfg.on_malformed == "error":
                    raise MalformedLineError(
                        f"malformed line {where}: {exc}. Fix or remove the line, or set "
                        "on_malformed='skip' to count and skip such lines."
                    ) from exc
                stats.malformed += 1
                stats.malformed_examples.append(f"{where}: {type(exc).__name__}: {exc}")
                continue
            if len(text.strip()) < cfg.min_chars:
                stats.skipped_empty += 1
                continue
            source = str(obj.get("source") or "unknown")
            stats.documents += 1
            stats.by_source[source] += 1
            stats.chars += len(text)
            yield Document(str(doc_id), text, source)
            if cfg.max_docs is not None and stats.documents >= cfg.max_docs:
                return


# ---------------------------------------------------------------------------------------------
# Tokenisation into fixed-length sequences


def split_of(doc_id: str, val_fraction: float, seed: int) -> str:
    """Document-level split from a stable hash of (seed, id): no document is in both splits."""
    h = hashlib.sha256(f"{seed}:{doc_id}".encode()).digest()
    u = int.from_bytes(h[:8], "big") / 2**64
    return "val" if u < val_fraction else "train"


@dataclass
class PackedSplit:
    input_ids: list[list[int]] = field(default_factory=list)
    doc_ids: list[list[str]] = field(default_factory=list)
    sources: list[list[str]] = field(default_factory=list)


def pack_sequences(
    docs: Iterable[Document], tokenizer, cfg: SequenceConfig, *, bos_id: int, eos_id: int
) -> dict[str, PackedSplit]:
    """Pack documents into sequences [bos] + (seq_len - 1) tokens, documents separated by EOS.

    Each document is truncated to ``max_tokens_per_doc`` tokens before packing.
    Each split packs its own documents; packing stops once both splits are full. No padding:
    every position is a real token, and position 0 is always the BOS (attention-sink) token.
    """
    want = {"train": cfg.n_train, "val": cfg.n_val}
    out = {s: PackedSplit() for s in want}
    buf: dict[str, list[tuple[int, str, str]]] = {s: [] for s in want}
    body = cfg.seq_len - 1
    for doc in docs:
        split = split_of(doc.id, cfg.val_fraction, cfg.seed)
        if len(out[split].input_ids) >= want[split]:
            if all(len(out[s].input_ids) >= want[s] for s in want):
                break
            continue
        ids = tokenizer(doc.text, add_special_tokens=False)["input_ids"]
        ids = ids[: cfg.max_tokens_per_doc] + [eos_id]
        buf[split].extend((t, doc.id, doc.source) for t in ids)
        while len(buf[split]) >= body and len(out[split].input_ids) < want[split]:
            chunk, buf[split] = buf[split][:body], buf[split][body:]
            out[split].input_ids.append([bos_id] + [t for t, _, _ in chunk])
            out[split].doc_ids.append(sorted({d for _, d, _ in chunk}))
            out[split].sources.append(sorted({s for _, _, s in chunk}))
    short = {s: (len(out[s].input_ids), want[s]) for s in want if len(out[s].input_ids) < want[s]}
    if short:
        detail = ", ".join(f"{s}: {got} of {n}" for s, (got, n) in short.items())
        raise CorpusError(
            f"the corpus yields too few sequences of {cfg.seq_len} tokens ({detail}). Lower "
            "n_train/n_val or seq_len, or add shards (corpus paths / max_docs)."
        )
    return out


# ---------------------------------------------------------------------------------------------
# The stages


def shard_identities(cfg: CorpusConfig) -> list[str]:
    """The resolved shards with their identity: "path#sha256" for a local file (its content),
    the URL for a remote one."""
    from dihal.atomic import file_sha256

    return [s if "://" in s else f"{s}#{file_sha256(s)}" for s in resolve_shards(cfg)]


def shard_location(identity: str) -> str:
    """Where a shard of `shard_identities` is read from."""
    return identity if "://" in identity else identity.rsplit("#", 1)[0]


def scan_corpus(cfg: CorpusConfig, identity: list[str]) -> CorpusResult:
    """The corpus stage: read every document of the shards once, to validate and count. A
    corpus without a usable document is an error."""
    shards = [shard_location(s) for s in identity]
    stats = CorpusStats()
    for _ in iter_documents(shards, cfg, stats):
        pass
    if stats.documents == 0:
        raise CorpusError(f"the corpus ({len(shards)} shards) holds no usable document: "
                          f"{stats.to_dict()}. Check corpus paths, min_chars and on_malformed.")
    return CorpusResult(identity, stats.to_dict())


def make_sequences(shards: list[str], corpus_cfg: CorpusConfig, tokenizer, cfg: SequenceConfig,
                   *, bos_id: int, eos_id: int, revision: str) -> SequencesResult:
    """The sequences stage: pack the corpus's documents into train/val token sequences."""
    packed = pack_sequences(iter_documents(shards, corpus_cfg), tokenizer, cfg,
                            bos_id=bos_id, eos_id=eos_id)
    return SequencesResult(
        input_ids={s: p.input_ids for s, p in packed.items()},
        doc_ids={s: p.doc_ids for s, p in packed.items()},
        sources={s: p.sources for s, p in packed.items()},
        bos_id=bos_id, eos_id=eos_id, revision=revision)
