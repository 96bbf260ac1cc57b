"""Dolma-format corpora (gzip JSON lines) and their tokenisation into fixed-length sequences.

A shard line is a JSON object with at least ``id`` and ``text`` (Dolma v1.7 also has
``source``, ``added``, ``created``, ``metadata``). Shards are read streaming, from local files
or from URLs (one per line in a URL list, as in Dolma's ``urls/v1_7.txt``); nothing is held in
memory beyond one document.

Or a text dataset of the Hugging Face Hub (an id, or a folder in the Hub's layout), streamed
through `datasets` by `dihal.locate.hub.HubSource`, with the same document counting, minimum length, held-out
split by document id, and a fingerprint by identity (id, revision, config, split and a digest
of the documents read).
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dihal.atomic import file_sha256
from dihal.config import CorpusConfig, SequenceConfig  # noqa: F401 (re-exported)
from dihal.errors import CorpusError, MalformedLineError, TokenizerError
from dihal.locate.documents import CorpusStats, Document, is_empty
from dihal.locate.hub import HUB_FIELDS, HubSource
from dihal.results import (
    CorpusResult,
    HubShard,
    LocalShard,
    RemoteShard,
    SequencesResult,
    Shard,
    shard_of,
)

EMBEDDED_SAMPLE = Path(__file__).resolve().parents[2] / "data" / "dolma_sample"  # <repo>/data


def fingerprint_config(cfg: CorpusConfig) -> dict[str, Any]:
    """The corpus config as its fingerprint and manifest hold it: a shard corpus without the
    Hugging Face dataset fields (so corpora made before those fields existed keep their
    fingerprint, and everything downstream stays reused)."""
    from dataclasses import asdict

    values = asdict(cfg)
    if not cfg.hf_dataset:
        for name in HUB_FIELDS:
            values.pop(name)
    return values


def resolve_shards(cfg: CorpusConfig) -> list[str]:
    """The shard list: sorted local files, or the URLs of a list, capped by max_shards."""
    if cfg.url_list:
        try:
            with _open_binary(cfg.url_list) as fh:
                text = fh.read().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CorpusError(
                f"the URL list {cfg.url_list!r} cannot be read ({exc}): check the path (a text "
                "file with one shard URL per line), or give the shards as corpus paths."
            ) from exc
        lines = (ln.strip() for ln in text.splitlines())
        shards = [ln for ln in lines if ln and not ln.startswith("#")]
        if not shards:
            raise CorpusError(f"the URL list {cfg.url_list!r} holds no URL: one shard URL a line.")
    else:
        patterns = cfg.paths or (str(EMBEDDED_SAMPLE / "*.json.gz"),)
        shards = []
        for pat in patterns:
            hits = _matches(pat)
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
    return shards


def _matches(pattern: str) -> list[str]:
    """The files a corpus path names: the path itself where it exists (any character in it is
    literal), else the glob's sorted matches, the glob's folder taken literally where it
    exists. A folder is refused with the glob that selects its shards."""
    path = Path(pattern).expanduser()
    if path.exists():
        hits = [str(path)]
    elif path.parent.is_dir():
        hits = sorted(glob.glob(str(Path(glob.escape(str(path.parent))) / path.name)))
    else:
        hits = sorted(glob.glob(str(path)))
    hits = [os.path.abspath(h) for h in hits]  # a relative path is recorded where it led
    for hit in hits:
        if Path(hit).is_dir():
            raise CorpusError(f"corpus path {hit} is a folder, not a shard: give its shards, "
                              f"e.g. {Path(hit) / '*.json.gz'}")
    return hits


URL_ATTEMPTS = 4  # a remote shard or URL list is opened up to this many times
URL_TIMEOUT_S = 60.0


def _open_binary(location: str, attempts: int = URL_ATTEMPTS, backoff_s: float = 1.0):
    """A local file, or a URL opened with a timeout and retried with exponential back-off on
    connection errors, timeouts and 5xx/429 answers (a 4xx is final)."""
    if "://" not in location:
        return open(location, "rb")
    import time
    import urllib.error
    import urllib.request

    for attempt in range(1, attempts + 1):
        try:
            return urllib.request.urlopen(location, timeout=URL_TIMEOUT_S)  # noqa: S310
        except urllib.error.HTTPError as exc:
            if exc.code < 500 and exc.code != 429 or attempt == attempts:
                raise
        except (urllib.error.URLError, TimeoutError, ConnectionError):
            if attempt == attempts:
                raise
        time.sleep(backoff_s * 2 ** (attempt - 1))
    raise AssertionError("unreachable")


# The longest shard line (one document's JSON) read: a longer line is never held whole, it is
# read past in bounded pieces and counted as malformed (or refused: on_malformed="error")
MAX_LINE_BYTES = 64 * 2**20


@dataclass(frozen=True)
class TooLong:
    """A shard line longer than MAX_LINE_BYTES (what _lines yields in its place)."""

    n_bytes: int


def _lines(location: str, max_bytes: int | None = None) -> Iterator[bytes | TooLong]:
    max_bytes = max_bytes or MAX_LINE_BYTES
    try:
        raw = _open_binary(location)
    except OSError as exc:
        raise CorpusError(
            f"shard {location} cannot be opened ({exc}): check that it exists and is readable, "
            "then re-materialise the corpus asset."
        ) from exc
    with raw:
        stream = gzip.GzipFile(fileobj=raw) if location.endswith(".gz") else raw
        try:
            while line := stream.readline(max_bytes + 1):
                if len(line) <= max_bytes:
                    yield line
                    continue
                n = len(line)
                while not line.endswith(b"\n") and (line := stream.readline(max_bytes + 1)):
                    n += len(line)
                yield TooLong(n)
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
            if not isinstance(line, TooLong) and not line.strip():
                continue
            try:
                if isinstance(line, TooLong):
                    raise ValueError(f"{line.n_bytes} bytes, over the limit of {MAX_LINE_BYTES} "
                                     "bytes on one document's line (dihal.locate.corpus.MAX_LINE_BYTES)")
                obj = json.loads(line)
                doc_id, text = obj["id"], obj["text"]
                if not isinstance(text, str):
                    raise TypeError(f"text is {type(text).__name__}, not a string")
            except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError, UnicodeDecodeError
                where = f"{shard}:{lineno}"
                if cfg.on_malformed == "error":
                    raise MalformedLineError(
                        f"malformed line {where}: {exc}. Fix or remove the line, or set "
                        "on_malformed='skip' to count and skip such lines."
                    ) from exc
                stats.malformed += 1
                stats.malformed_examples.append(f"{where}: {type(exc).__name__}: {exc}")
                continue
            if is_empty(text, cfg.min_chars):
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


def corpus_documents(cfg: CorpusConfig) -> Iterator[Document]:
    """The documents `cfg` selects, as the corpus stage reads them: a Hugging Face dataset's
    rows where hf_dataset is set (its fields checked before streaming), else the shards."""
    return HubSource(cfg).documents() if cfg.hf_dataset else iter_documents(resolve_shards(cfg),
                                                                            cfg)


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


def sequence_capacity(doc_lengths: Iterable[int], seq_len: int, cap: int | None) -> int:
    """Sequences of `seq_len` that documents of these token counts fill when packed as
    pack_sequences does (each truncated to `cap` tokens plus its EOS; the packing is
    continuous, so only the total counts)."""
    total = sum((n if cap is None else min(n, cap)) + 1 for n in doc_lengths)
    return total // (seq_len - 1)


def shortfall_message(doc_lengths: dict[str, list[int]], cfg: SequenceConfig) -> str | None:
    """None where the documents (token counts per split) fill n_train and n_val; else what is
    missing, with the numbers and the setting to change (the smallest max_tokens_per_doc that
    would fill both splits, where raising it can)."""
    want = {"train": cfg.n_train, "val": cfg.n_val}
    got = {s: sequence_capacity(doc_lengths.get(s, []), cfg.seq_len, cfg.max_tokens_per_doc)
           for s in want}
    short = [s for s in want if got[s] < want[s]]
    if not short:
        return None
    detail = ", ".join(f"{s}: {min(got[s], want[s])} of {want[s]}" for s in short)
    full = {s: sequence_capacity(doc_lengths.get(s, []), cfg.seq_len, None) for s in want}
    msg = (f"the corpus yields too few sequences of {cfg.seq_len} tokens ({detail}; "
           f"{sum(len(doc_lengths.get(s, [])) for s in want)} documents, at most "
           f"max_tokens_per_doc={cfg.max_tokens_per_doc} tokens each). ")
    if all(full[s] >= want[s] for s in want) and cfg.max_tokens_per_doc is not None:
        longest = max(n for s in want for n in doc_lengths.get(s, [0]) or [0])
        lo, hi = cfg.max_tokens_per_doc, max(longest, cfg.max_tokens_per_doc)
        while lo < hi:  # the smallest cap that fills both splits
            mid = (lo + hi) // 2
            if all(sequence_capacity(doc_lengths.get(s, []), cfg.seq_len, mid) >= want[s]
                   for s in want):
                hi = mid
            else:
                lo = mid + 1
        msg += (f"Raise sequences.max_tokens_per_doc to at least {lo} (or None: "
                + ", ".join(f"{s} {full[s]}" for s in want) + " sequences), or ")
    else:
        msg += ("Even whole documents give only " + ", ".join(f"{s} {full[s]}" for s in want)
                + " sequences: ")
    return msg + "lower n_train/n_val or seq_len, or add shards (corpus paths / max_docs)."


TOKEN_MARGIN = 64  # tokens past the limit a prefix must yield before it is trusted
# Documents are tokenised up to max(max_tokens_per_doc, this) tokens: enough to count how far
# a larger cap would fill the splits (shortfall_message), with memory bounded per document
LENGTH_PROBE_TOKENS = 4096


def document_tokens(tokenizer, text: str, limit: int | None) -> list[int]:
    """The first `limit` tokens of `text` (all where None), tokenising only a prefix: 8
    characters a token to start, doubled until the prefix yields TOKEN_MARGIN tokens past the
    limit (so the cut cannot change the tokens kept) or is the whole text. Memory per document
    is then bounded by the limit, not the document's length."""
    if limit is None:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    n = 8 * (limit + TOKEN_MARGIN)
    while True:
        ids = tokenizer(text[:n], add_special_tokens=False)["input_ids"]
        if n >= len(text) or len(ids) >= limit + TOKEN_MARGIN:
            return list(ids[:limit])
        n *= 2


def pack_sequences(
    docs: Iterable[Document], tokenizer, cfg: SequenceConfig, *, bos_id: int, eos_id: int
) -> dict[str, PackedSplit]:
    """Pack documents into sequences [bos] + (seq_len - 1) tokens, documents separated by EOS.

    Each document is truncated to ``max_tokens_per_doc`` tokens while it is tokenised
    (document_tokens: only a prefix of a long document is tokenised).
    Each split packs its own documents; packing stops once both splits are full. No padding:
    every position is a real token, and position 0 is always the BOS (attention-sink) token.
    A corpus too small for the splits is refused with shortfall_message's numbers.
    """
    want = {"train": cfg.n_train, "val": cfg.n_val}
    out = {s: PackedSplit() for s in want}
    buf: dict[str, list[tuple[int, str, str]]] = {s: [] for s in want}
    lengths: dict[str, list[int]] = {s: [] for s in want}  # every document's token count
    body = cfg.seq_len - 1
    for doc in docs:
        split = split_of(doc.id, cfg.val_fraction, cfg.seed)
        if len(out[split].input_ids) >= want[split]:
            if all(len(out[s].input_ids) >= want[s] for s in want):
                break
            continue
        ids = document_tokens(tokenizer, doc.text, _probe(cfg))
        lengths[split].append(len(ids))
        ids = ids[: cfg.max_tokens_per_doc] + [eos_id]
        buf[split].extend((t, doc.id, doc.source) for t in ids)
        while len(buf[split]) >= body and len(out[split].input_ids) < want[split]:
            chunk, buf[split] = buf[split][:body], buf[split][body:]
            out[split].input_ids.append([bos_id] + [t for t, _, _ in chunk])
            out[split].doc_ids.append(sorted({d for _, d, _ in chunk}))
            out[split].sources.append(sorted({s for _, _, s in chunk}))
    if any(len(out[s].input_ids) < want[s] for s in want):
        raise CorpusError(shortfall_message(lengths, cfg))
    return out


def document_lengths(docs: Iterable[Document], tokenizer, cfg: SequenceConfig) -> dict[str, list[int]]:
    """Token count of each document, per split, read until both splits could be filled (the
    pre-flight's corpus check: pack_sequences's arithmetic without building the sequences)."""
    lengths: dict[str, list[int]] = {"train": [], "val": []}
    want = {"train": cfg.n_train, "val": cfg.n_val}
    for doc in docs:
        split = split_of(doc.id, cfg.val_fraction, cfg.seed)
        if sequence_capacity(lengths[split], cfg.seq_len, cfg.max_tokens_per_doc) >= want[split]:
            if all(sequence_capacity(lengths[s], cfg.seq_len, cfg.max_tokens_per_doc) >= want[s]
                   for s in want):
                break
            continue
        lengths[split].append(len(document_tokens(tokenizer, doc.text, _probe(cfg))))
    return lengths


def _probe(cfg: SequenceConfig) -> int | None:
    """How many tokens of a document are read: the cap, or LENGTH_PROBE_TOKENS where that is
    more (a document's count is exact up to it), all where the cap is None."""
    cap = cfg.max_tokens_per_doc
    return None if cap is None else max(cap, LENGTH_PROBE_TOKENS)


# ---------------------------------------------------------------------------------------------
# The stages


def shard_records(cfg: CorpusConfig) -> list[Shard]:
    """The resolved shards and what they hold: a local file by its content, a remote one by its
    URL (read as a stream, never downloaded whole), a Hub dataset by the documents read."""

    if cfg.hf_dataset:
        return [HubSource(cfg).record()]
    return [RemoteShard(s) if "://" in s else LocalShard(s, file_sha256(s), os.path.getsize(s))
            for s in resolve_shards(cfg)]


def content_identity(records: list[Shard]) -> list[str]:
    """What the corpus fingerprint hashes: each shard's identity, in order (a local shard's
    sha256, not its path: a copied or moved checkout keeps its artifacts)."""
    return [r.identity() for r in records]


FIX_CORPUS = "re-materialise the corpus asset (`dagster asset materialize --select corpus`)"


def recorded_shards(info: dict[str, Any]) -> list[Shard]:
    """The shards a corpus manifest's info records, typed; a CorpusError naming the fix where
    one is no shard record."""
    try:
        return [shard_of(r) for r in info["shards"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise CorpusError(f"the corpus manifest does not record its shards as this version "
                          f"does ({exc}): {FIX_CORPUS}.") from exc


def verified_shards(cfg: CorpusConfig, recorded: list[Shard]) -> list[str]:
    """The shards `cfg` selects now, each checked (size, then sha256) against what the corpus
    stage recorded: a shard edited, added or removed since is refused, not read under the old
    fingerprint. Remote shards are taken as recorded (their URL is their identity)."""

    if any(isinstance(r, HubShard) for r in recorded):
        raise CorpusError(f"the corpus asset recorded a Hugging Face dataset, and the corpus "
                          f"config now selects shards: {FIX_CORPUS}.")
    current = resolve_shards(cfg)
    if len(current) != len(recorded):
        raise CorpusError(f"the corpus config now selects {len(current)} shards where the corpus "
                          f"asset recorded {len(recorded)}: {FIX_CORPUS}.")
    for now, rec in zip(current, recorded, strict=True):
        if isinstance(rec, RemoteShard):
            if now != rec.url:
                raise CorpusError(f"shard {now} is not the recorded {rec.url}: {FIX_CORPUS}.")
            continue
        size = os.path.getsize(now)
        if size != rec.bytes or file_sha256(now) != rec.sha256:
            raise CorpusError(
                f"shard {now} changed since the corpus asset recorded it ({rec.bytes} bytes, "
                f"sha256 {rec.sha256[:12]}; now {size} bytes): {FIX_CORPUS}, then this asset.")
    return current


def verified_documents(cfg: CorpusConfig, recorded: list[Shard]) -> Iterator[Document]:
    """The corpus's documents, from what the corpus stage recorded (its shards, or its Hub
    dataset), each checked against its content first."""
    if cfg.hf_dataset:
        return HubSource(cfg).verified_documents(recorded)
    return iter_documents(verified_shards(cfg, recorded), cfg)


def scan_corpus(cfg: CorpusConfig, shards: list[Shard]) -> CorpusResult:
    """The corpus stage: read every document of the shards (`shard_records`) once, to validate
    and count. A corpus without a usable document is an error."""
    stats = CorpusStats()
    docs = (HubSource(cfg).documents(stats) if cfg.hf_dataset else
            iter_documents([r.path if isinstance(r, LocalShard) else r.url for r in shards], cfg,
                           stats))
    for _ in docs:
        pass
    if stats.documents == 0:
        raise CorpusError(f"the corpus ({len(shards)} shards) holds no usable document: "
                          f"{stats.to_dict()} (skipped_empty: shorter than min_chars, or without a "
                          "printable character). Check corpus paths, min_chars and on_malformed.")
    return CorpusResult(shards, stats.counts())


def separator_ids(tokenizer, folder) -> tuple[int, int]:
    """(bos_id, eos_id) the sequences are packed with: BOS (EOS where there is none) starts
    each sequence, EOS ends each document. A tokenizer without an EOS is refused, naming the
    model folder it came from and the fix, before a document is tokenised."""
    eos = tokenizer.eos_token_id
    if not isinstance(eos, int):
        pad = "" if tokenizer.pad_token_id is not None else " and no pad token"
        raise TokenizerError(
            f"the tokenizer of {folder} has no EOS token{pad}: no id can end a document where "
            "documents are packed into sequences. Give it one: set eos_token in its "
            "tokenizer_config.json to a token of its vocabulary (or tokenizer.eos_token = "
            "'...'; tokenizer.save_pretrained(folder)), then make the sequences again.")
    bos = tokenizer.bos_token_id
    return (int(bos) if isinstance(bos, int) else int(eos)), int(eos)


def make_sequences(recorded: list[Shard], corpus_cfg: CorpusConfig, tokenizer,
                   cfg: SequenceConfig, *, bos_id: int, eos_id: int,
                   revision: str) -> SequencesResult:
    """The sequences stage: pack the corpus's documents into train/val token sequences, from
    the shards the corpus stage recorded (checked against their content first)."""
    packed = pack_sequences(verified_documents(corpus_cfg, recorded), tokenizer, cfg,
                            bos_id=bos_id, eos_id=eos_id)
    return SequencesResult(
        input_ids={s: p.input_ids for s, p in packed.items()},
        doc_ids={s: p.doc_ids for s, p in packed.items()},
        sources={s: p.sources for s, p in packed.items()},
        bos_id=bos_id, eos_id=eos_id, revision=revision, vocab_size=len(tokenizer))
