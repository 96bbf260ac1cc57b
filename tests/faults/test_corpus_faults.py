"""Very long documents: truncated while they are tokenised (memory bounded by the token limit,
not the document's length), and a line over the stated limit is never held whole."""

import gzip
import json
import tracemalloc

import pytest

from dihal.config import CorpusConfig, SequenceConfig
from dihal.errors import MalformedLineError
from dihal.locate import corpus
from dihal.locate.corpus import document_tokens, iter_documents, pack_sequences
from dihal.locate.documents import CorpusStats
from tests.tiny import WORDS, build_tokenizer, make_docs


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return build_tokenizer(tmp_path_factory.mktemp("tok"))


class Recording:
    """A tokenizer that records the longest text it was given."""

    def __init__(self, tok):
        self.tok, self.longest = tok, 0

    def __call__(self, text, **kw):
        self.longest = max(self.longest, len(text))
        return self.tok(text, **kw)


def test_a_long_document_is_truncated_while_it_is_tokenised(tokenizer):
    text = " ".join(WORDS[i % len(WORDS)] for i in range(1_000_000))  # 5 MB, 1M tokens
    rec = Recording(tokenizer)
    ids = document_tokens(rec, text, 256)
    full = tokenizer(text[:200_000], add_special_tokens=False)["input_ids"][:256]
    assert ids == full and len(ids) == 256
    assert rec.longest <= 8 * (256 + corpus.TOKEN_MARGIN) * 2  # a prefix, never the 5 MB
    # packing goes the same way: the long document contributes its first 256 tokens
    docs = [corpus.Document("long", text, "web")] + [
        corpus.Document(d["id"], d["text"], d["source"]) for d in make_docs(40)]
    rec = Recording(tokenizer)
    packed = pack_sequences(docs, rec, SequenceConfig(seq_len=16, n_train=4, n_val=1,
                                                      val_fraction=0.3, max_tokens_per_doc=256),
                            bos_id=1, eos_id=2)
    # a prefix long enough to count the document up to the length probe, never the 5 MB
    assert rec.longest <= 8 * (corpus.LENGTH_PROBE_TOKENS + corpus.TOKEN_MARGIN) * 2 < len(text) / 50
    if corpus.split_of("long", 0.3, 0) == "train":  # its 256 tokens open the training split
        assert packed["train"].input_ids[0][1:] == ids[:15]


@pytest.mark.parametrize("limit", [1, 5, 37, 256, None])
def test_truncating_while_tokenising_keeps_the_same_tokens(tokenizer, limit):
    for d in make_docs(30, words=400) + [{"text": "a"}, {"text": ""}]:
        whole = tokenizer(d["text"], add_special_tokens=False)["input_ids"]
        assert document_tokens(tokenizer, d["text"], limit) == whole[:limit]


def _shard(path, lines: list[str]):
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


def test_a_line_over_the_limit_is_counted_and_named_or_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "MAX_LINE_BYTES", 10_000)
    good = json.dumps({"id": "a", "text": "some words here", "source": "wiki"})
    huge = json.dumps({"id": "big", "text": "word " * 200_000})  # 1 MB: 100x the limit
    shard = str(_shard(tmp_path / "s.json.gz", [good, huge, good.replace('"a"', '"b"')]))
    stats = CorpusStats()
    tracemalloc.start()
    docs = list(iter_documents([shard], CorpusConfig(paths=(shard,)), stats))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [d.id for d in docs] == ["a", "b"] and stats.malformed == 1
    assert stats.malformed_examples[0] == (
        f"{shard}:2: ValueError: {len(huge) + 1} bytes, over the limit of 10000 bytes on one "
        "document's line (dihal.locate.corpus.MAX_LINE_BYTES)")
    assert peak < 300_000  # the 1 MB line was never held whole (pieces of the limit)
    with pytest.raises(MalformedLineError, match=f"malformed line {shard}:2: {len(huge) + 1} bytes, over "
                                                 "the limit of 10000 bytes"):
        list(iter_documents([shard], CorpusConfig(paths=(shard,), on_malformed="error")))
