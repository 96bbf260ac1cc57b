"""A Hugging Face text dataset as the corpus, streamed through `datasets`, offline: datasets
saved locally in the Hub's layout (parquet, or JSON lines, under data/) and loaded by path.
The same counting, minimum length, held-out split by document and fingerprint by identity as
the Dolma shards (corpus -> sequences -> Locate through Dagster: tests/pipeline/test_pipeline.py)."""

import shutil
from dataclasses import replace

import pytest

from dihal.config import CorpusConfig, SequenceConfig
from dihal.errors import CorpusError, MalformedLineError
from dihal.locate.corpus import (
    content_identity,
    make_sequences,
    recorded_shards,
    scan_corpus,
    shard_records,
    verified_documents,
    verified_shards,
)
from dihal.locate.hub import HubSource
from dihal.results import CorpusResult, LocalShard, shard_of
from tests.tiny import build_tokenizer, hub_folder, hub_rows


def cfg_of(folder, **kw) -> CorpusConfig:
    return CorpusConfig(**{"hf_dataset": str(folder), "hf_text_field": "body",
                           "hf_id_field": "doc", "max_docs": 1000, **kw})


def test_documents_are_streamed_counted_and_capped(tmp_path, monkeypatch):
    import datasets

    data = hub_rows(12)
    data[3]["body"] = ""  # empty: skipped and counted
    data[4]["body"] = "short"  # below min_chars
    data[5]["body"] = None  # not a string: malformed
    folder = hub_folder(tmp_path / "ds", {"train": data, "test": hub_rows(3, seed=9)})
    calls = []
    real = datasets.load_dataset
    monkeypatch.setattr(datasets, "load_dataset",
                        lambda *a, **kw: calls.append((a, kw)) or real(*a, **kw))

    result = scan_corpus(cfg_of(folder, min_chars=10), shard_records(cfg_of(folder, min_chars=10)))
    assert all(kw["streaming"] is True and kw["split"] == "train" for _, kw in calls)
    assert isinstance(real(str(folder), split="train", streaming=True), datasets.IterableDataset)
    s = result.stats
    assert (s.documents, s.skipped_empty, s.malformed) == (9, 2, 1)
    assert "ds[train][5]: TypeError: body is NoneType" in s.malformed_examples[0]
    assert sum(s.by_source.values()) == 9 and set(s.by_source) <= {"wiki", "books"}
    assert s.chars == sum(len(r["body"]) for r in data if r["body"] and len(r["body"]) >= 10)

    capped = list(HubSource(cfg_of(folder, max_docs=4)).documents())
    assert [d.id for d in capped] == [data[i]["doc"] for i in (0, 1, 2, 4)]  # 3 is empty
    test_split = list(HubSource(cfg_of(folder, hf_split="test")).documents())
    assert len(test_split) == 3


def test_ids_default_to_the_row_index_and_json_lines_work(tmp_path):
    folder = hub_folder(tmp_path / "js", {"train": [{"text": f"row number {i} here"}
                                                    for i in range(5)]}, fmt="json")
    docs = list(HubSource(CorpusConfig(hf_dataset=str(folder), max_docs=10)).documents())
    assert [d.id for d in docs] == [f"train:{i}" for i in range(5)]
    assert docs[2].text == "row number 2 here" and docs[0].source == "js"


def test_a_row_of_control_characters_counts_as_empty(tmp_path):
    rows = [{"text": t} for t in ("a row of words", "\x00" * 100, "\x01\x07 \t\u200b",
                                  "\x00 words")]
    folder = hub_folder(tmp_path / "cc", {"train": rows}, fmt="json")
    cfg = CorpusConfig(hf_dataset=str(folder), max_docs=10)
    s = scan_corpus(cfg, shard_records(cfg)).stats
    assert (s.documents, s.skipped_empty) == (2, 2)


def test_malformed_rows_are_an_error_when_asked_and_a_wrong_field_names_the_fields(tmp_path):
    data = hub_rows(4)
    data[1]["body"] = None
    folder = hub_folder(tmp_path / "ds", {"train": data})
    with pytest.raises(MalformedLineError, match=r"malformed row .*ds\[train\]\[1\]"):
        list(HubSource(cfg_of(folder, on_malformed="error")).documents())
    stats = scan_corpus(cfg_of(folder), shard_records(cfg_of(folder))).stats
    assert stats.malformed == 1 and stats.documents == 3


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
@pytest.mark.parametrize(("field", "says"), [
    ({"hf_text_field": "content"}, "has no field 'content' (hf_text_field); its fields are "
                                   "body, doc, n, source. Set hf_text_field to one of them"),
    ({"hf_id_field": "uid"}, "has no field 'uid' (hf_id_field); its fields are body, doc, n, "
                             "source. Set hf_id_field to one of them"),
    ({"hf_text_field": "n"}, "text field 'n' holds int64"),
])
def test_a_wrong_field_is_refused_from_the_features_before_any_row_is_streamed(
        tmp_path, monkeypatch, fmt, field, says):
    """The corpus stage (and the driver's pre-flight, which reads it the same way) names the
    dataset's fields before streaming: not one row is read."""
    import datasets

    folder = hub_folder(tmp_path / "ds", {"train": [{**r, "n": i} for i, r in
                                                    enumerate(hub_rows(6))]}, fmt)
    streamed = []
    real = datasets.IterableDataset.__iter__
    monkeypatch.setattr(datasets.IterableDataset, "__iter__",
                        lambda self: streamed.append(1) or real(self))
    wrong = cfg_of(folder, **field)
    with pytest.raises(CorpusError) as exc:
        scan_corpus(wrong, shard_records(wrong))
    assert says in str(exc.value) and "nothing was streamed" in str(exc.value)
    assert streamed == []
    assert len(list(HubSource(cfg_of(folder)).documents())) == 6 and streamed == [1]


def test_missing_dataset_or_split_is_a_corpus_error_naming_it(tmp_path):
    folder = hub_folder(tmp_path / "ds", {"train": hub_rows(3)})
    with pytest.raises(CorpusError, match=r"'.*ds' \(config default, split validation.*cannot "
                                          r"be opened.*hf_split"):
        list(HubSource(cfg_of(folder, hf_split="validation")).documents())
    with pytest.raises(CorpusError, match="cannot be opened"):
        list(HubSource(cfg_of(tmp_path / "nowhere")).documents())


def test_fingerprint_is_the_identity_and_the_documents_read(tmp_path):
    folder = hub_folder(tmp_path / "a" / "ds", {"train": hub_rows(10), "test": hub_rows(10, seed=3)})
    ident = content_identity(shard_records(cfg_of(folder)))
    (rec,) = shard_records(cfg_of(folder))
    assert rec.documents == 10 and rec.local and rec.split == "train"
    assert shard_of(rec.to_dict()) == rec  # stored and read back
    assert ident[0].startswith("hf:local@default/default/train/body/doc:10:")
    moved = tmp_path / "b" / "elsewhere"
    shutil.copytree(folder, moved)
    assert content_identity(shard_records(cfg_of(moved))) == ident  # not where it lies
    assert content_identity(shard_records(cfg_of(folder, hf_split="test"))) != ident
    assert content_identity(shard_records(cfg_of(folder, max_docs=5))) != ident
    assert content_identity(shard_records(cfg_of(folder, hf_text_field="doc"))) != ident
    assert replace(rec, local=False, dataset="org/text",
                   revision="abc123").identity().startswith("hf:org/text@abc123/")
    edited = hub_rows(10)
    edited[7]["body"] += " extra"
    shutil.rmtree(moved)
    hub_folder(moved, {"train": edited})
    assert content_identity(shard_records(cfg_of(moved))) != ident  # one text changed


def test_sequences_split_by_document_and_refuse_a_changed_dataset(tmp_path):
    folder = hub_folder(tmp_path / "ds", {"train": hub_rows(120)})
    tok = build_tokenizer(tmp_path / "tok")
    cfg = cfg_of(folder)
    recorded = shard_records(cfg)
    seq_cfg = SequenceConfig(seq_len=16, n_train=8, n_val=6, val_fraction=0.3,
                             max_tokens_per_doc=40)
    out = make_sequences(recorded, cfg, tok, seq_cfg, bos_id=tok.bos_token_id,
                         eos_id=tok.eos_token_id, revision="r")
    train = {d for ids in out.doc_ids["train"] for d in ids}
    val = {d for ids in out.doc_ids["val"] for d in ids}
    assert train and val and not train & val
    assert all(d.startswith("doc-") for d in train | val)  # the id field's values
    assert all(row[0] == tok.bos_token_id and len(row) == 16 for row in out.input_ids["train"])
    again = make_sequences(recorded, cfg, tok, seq_cfg, bos_id=tok.bos_token_id,
                           eos_id=tok.eos_token_id, revision="r")
    assert again.input_ids == out.input_ids

    changed = hub_rows(120)
    changed[0]["body"] = "a different first document of the dataset."
    shutil.rmtree(folder)
    hub_folder(folder, {"train": changed})
    with pytest.raises(CorpusError, match="now reads 120 documents .* where the corpus asset "
                                          "recorded 120 .*re-materialise the corpus asset"):
        make_sequences(recorded, cfg, tok, seq_cfg, bos_id=tok.bos_token_id,
                       eos_id=tok.eos_token_id, revision="r")
    with pytest.raises(CorpusError, match="recorded shards, not the Hugging Face dataset"):
        make_sequences([LocalShard("x", "y", 1)], cfg, tok, seq_cfg,
                       bos_id=tok.bos_token_id, eos_id=tok.eos_token_id, revision="r")


def test_a_shard_corpus_keeps_the_fingerprint_it_had_before_the_hub_fields():
    """The corpus asset fingerprints `fingerprint_config`: for shards, exactly the fields a
    corpus had before the Hugging Face ones, so existing artifacts stay reused."""
    from dihal.locate.corpus import fingerprint_config
    from storage import fingerprint

    cfg = CorpusConfig(paths=("corpus/*.json.gz",), max_docs=50)
    before = {"paths": ["corpus/*.json.gz"], "url_list": None, "max_shards": None,
              "max_docs": 50, "on_malformed": "skip", "min_chars": 1}
    assert fingerprint("corpus", "1", fingerprint_config(cfg)) == fingerprint("corpus", "1", before)
    hub = fingerprint_config(CorpusConfig(hf_dataset="org/text", max_docs=50))
    assert hub["hf_dataset"] == "org/text" and hub["hf_split"] == "train"
    assert CorpusConfig(**fingerprint_config(cfg)) == cfg  # the manifest's config rebuilds it


def test_every_reader_of_the_corpus_takes_a_hub_dataset_as_the_sequences_stage_does(tmp_path):
    """One entry for what the corpus stage recorded (shards or a Hub dataset): the budget
    study packs its extra sequences through it too, so a Hub corpus is read as a Hub corpus,
    not as the shards of the default paths."""
    folder = hub_folder(tmp_path / "ds", {"train": hub_rows(12)})
    cfg = cfg_of(folder)
    recorded = recorded_shards(CorpusResult(shard_records(cfg),
                                            scan_corpus(cfg, shard_records(cfg)).stats).info())
    got = [(d.id, d.text) for d in verified_documents(cfg, recorded)]
    assert got == [(d.id, d.text) for d in HubSource(cfg).documents()] and len(got) == 12
    with pytest.raises(CorpusError, match="recorded a Hugging Face dataset.*re-materialise"):
        verified_shards(CorpusConfig(), recorded)  # shards asked of a Hub corpus: refused
