import gzip

import pytest

from dihal.corpus import (
    CorpusConfig,
    CorpusStats,
    SequenceConfig,
    iter_documents,
    pack_sequences,
    resolve_shards,
    split_of,
)
from dihal.errors import CorpusError, MalformedLineError
from tests.tiny import build_tokenizer, make_docs, write_shard


def _shard_with_bad_lines(path):
    with gzip.open(path, "wt") as fh:
        fh.write('{"id": "a", "text": "the man", "source": "wiki"}\n')
        fh.write('{"id": "b", "text": \n')  # truncated JSON
        fh.write('{"id": "c", "text": "   "}\n')  # empty document
        fh.write('{"text": "no id"}\n')  # missing field
        fh.write('{"id": "d", "text": 5}\n')  # wrong type
        fh.write("\n")
        fh.write('{"id": "e", "text": "the state"}\n')
    return path


def test_malformed_lines_are_skipped_and_counted(tmp_path):
    shard = _shard_with_bad_lines(tmp_path / "s.json.gz")
    stats = CorpusStats()
    docs = list(iter_documents([str(shard)], CorpusConfig(paths=(str(shard),)), stats))
    assert [d.id for d in docs] == ["a", "e"]
    assert (stats.malformed, stats.skipped_empty, stats.documents) == (3, 1, 2)
    assert any("s.json.gz:2" in e for e in stats.malformed_examples)
    assert docs[1].source == "unknown"


def test_malformed_line_is_an_error_when_asked(tmp_path):
    shard = _shard_with_bad_lines(tmp_path / "s.json.gz")
    cfg = CorpusConfig(paths=(str(shard),), on_malformed="error")
    with pytest.raises(MalformedLineError, match=r"s\.json\.gz:2.*on_malformed='skip'"):
        list(iter_documents([str(shard)], cfg))


def test_truncated_gzip_names_the_shard(tmp_path):
    good = write_shard(tmp_path / "g.json.gz", make_docs(50))
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(good.read_bytes()[:-200])
    with pytest.raises(CorpusError, match="bad.json.gz.*truncated"):
        list(iter_documents([str(bad)], CorpusConfig()))


def test_shards_from_globs_and_url_list(tmp_path):
    a = write_shard(tmp_path / "b.json.gz", make_docs(3, seed=1))
    b = write_shard(tmp_path / "a.json.gz", make_docs(3, seed=2))
    assert resolve_shards(CorpusConfig(paths=(str(tmp_path / "*.json.gz"),))) == [str(b), str(a)]
    urls = tmp_path / "urls.txt"
    urls.write_text(f"# dolma urls\nfile://{a}\nfile://{b}\n")
    cfg = CorpusConfig(url_list=str(urls), max_shards=1)
    shards = resolve_shards(cfg)
    assert shards == [f"file://{a}"]
    assert len(list(iter_documents(shards, cfg))) == 3
    with pytest.raises(CorpusError, match="no corpus shard matches"):
        resolve_shards(CorpusConfig(paths=(str(tmp_path / "missing*.gz"),)))


def test_embedded_sample_is_the_default():
    shards = resolve_shards(CorpusConfig())
    assert len(shards) >= 4 and all(s.endswith(".json.gz") for s in shards)
    stats = CorpusStats()
    docs = list(iter_documents(shards[:1], CorpusConfig(max_docs=50), stats))
    assert len(docs) == 50 and len(stats.by_source) >= 5


def test_split_is_document_level_stable_and_near_fraction():
    ids = [f"doc-{i}" for i in range(4000)]
    splits = [split_of(i, 0.1, seed=0) for i in ids]
    assert splits == [split_of(i, 0.1, seed=0) for i in ids]
    assert 0.08 < splits.count("val") / len(ids) < 0.12
    assert splits != [split_of(i, 0.1, seed=1) for i in ids]


def test_packing_is_deterministic_and_disjoint(tmp_path):
    tok = build_tokenizer(tmp_path)
    docs = list(iter_documents([str(write_shard(tmp_path / "s.json.gz", make_docs(200)))], CorpusConfig()))
    cfg = SequenceConfig(seq_len=16, n_train=20, n_val=5, val_fraction=0.2, max_tokens_per_doc=30)
    a = pack_sequences(docs, tok, cfg, bos_id=1, eos_id=2)
    b = pack_sequences(docs, tok, cfg, bos_id=1, eos_id=2)
    assert a["train"].input_ids == b["train"].input_ids
    for split, n in (("train", 20), ("val", 5)):
        assert len(a[split].input_ids) == n
        assert all(len(s) == 16 and s[0] == 1 for s in a[split].input_ids)
    train_docs = {d for ds in a["train"].doc_ids for d in ds}
    val_docs = {d for ds in a["val"].doc_ids for d in ds}
    assert train_docs and val_docs and not train_docs & val_docs
    # each document contributes at most max_tokens_per_doc tokens + its EOS
    assert max(sum(1 for ds in a["train"].doc_ids if d in ds) for d in train_docs) <= 3


def test_too_small_corpus_says_what_to_change(tmp_path):
    tok = build_tokenizer(tmp_path)
    docs = list(iter_documents([str(write_shard(tmp_path / "s.json.gz", make_docs(5)))], CorpusConfig()))
    with pytest.raises(CorpusError, match="too few sequences.*Lower n_train/n_val"):
        pack_sequences(docs, tok, SequenceConfig(seq_len=16, n_train=50, n_val=5), bos_id=1, eos_id=2)
