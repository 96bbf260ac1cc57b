"""Bad input: each case ends in a named error with the fix (or a counted skip), before any
compute is spent where that is possible, and without touching what was made before."""

import gzip
import json
import shutil
import warnings

import pytest
import torch

from dihal.config import BridgeProtocol, CorpusConfig
from dihal.errors import (
    BackboneNotFoundError,
    CorpusError,
    MalformedLineError,
    UnknownBackboneError,
)
from dihal.locate.corpus import (
    iter_documents,
    scan_corpus,
    shard_records,
    verified_shards,
)
from dihal.locate.documents import CorpusStats
from tests.tiny import make_docs, write_shard


def _shard_with(path, lines):
    with gzip.open(path, "wt") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


def test_malformed_line_is_counted_and_named_or_refused(tmp_path):
    good = json.dumps({"id": "a", "text": "some words here", "source": "wiki"})
    shard = _shard_with(tmp_path / "s.json.gz", [good, "{not json", good.replace('"a"', '"b"')])
    stats = CorpusStats()
    docs = list(iter_documents([str(shard)], CorpusConfig(paths=(str(shard),)), stats))
    assert [d.id for d in docs] == ["a", "b"] and stats.malformed == 1
    assert stats.malformed_examples[0].startswith(f"{shard}:2")
    with pytest.raises(MalformedLineError, match=f"malformed line {shard}:2"):
        list(iter_documents([str(shard)], CorpusConfig(paths=(str(shard),), on_malformed="error")))


def test_empty_documents_are_skipped_and_an_all_empty_corpus_refused(tmp_path):
    shard = _shard_with(tmp_path / "e.json.gz", [json.dumps({"id": str(i), "text": "  "})
                                                 for i in range(3)])
    cfg = CorpusConfig(paths=(str(shard),))
    with pytest.raises(CorpusError, match="holds no usable document"):
        scan_corpus(cfg, shard_records(cfg))


@pytest.mark.parametrize("text", ["\x00" * 100, " \x00\x01\x07\n\t\x1b ", "\u200b\ufeff\u200e"],
                         ids=["NULs", "C0 controls and whitespace", "format characters"])
def test_a_document_of_control_characters_counts_as_empty(tmp_path, text):
    """No printable character (only control or format characters, Unicode category C*, and
    whitespace): skipped and counted as empty; a corpus of nothing else is refused."""
    shard = _shard_with(tmp_path / "c.json.gz", [
        json.dumps({"id": "a", "text": "some words here"}), json.dumps({"id": "b", "text": text}),
        json.dumps({"id": "c", "text": "\x00 more words"})])  # printable beside a NUL: kept
    cfg = CorpusConfig(paths=(str(shard),))
    stats = CorpusStats()
    assert [d.id for d in iter_documents([str(shard)], cfg, stats)] == ["a", "c"]
    assert (stats.documents, stats.skipped_empty) == (2, 1)
    only = _shard_with(tmp_path / "only.json.gz", [json.dumps({"id": str(i), "text": text})
                                                   for i in range(3)])
    cfg = CorpusConfig(paths=(str(only),))
    with pytest.raises(CorpusError, match="holds no usable document.*'skipped_empty': 3"):
        scan_corpus(cfg, shard_records(cfg))


@pytest.mark.parametrize("case", ["missing", "directory", "url_list"])
def test_missing_or_wrong_paths_name_the_path(tmp_path, case):
    cfg = {"missing": CorpusConfig(paths=(str(tmp_path / "nope" / "*.json.gz"),)),
           "directory": CorpusConfig(paths=(str(tmp_path),)),
           "url_list": CorpusConfig(url_list=str(tmp_path / "urls.txt"))}[case]
    with pytest.raises(CorpusError, match=str(tmp_path)):
        shard_records(cfg)


def test_a_shard_edited_after_the_corpus_ran_is_refused(tmp_path):
    shard = write_shard(tmp_path / "s.json.gz", make_docs(10))
    cfg = CorpusConfig(paths=(str(shard),))
    recorded = shard_records(cfg)
    write_shard(shard, make_docs(10, seed=1))
    with pytest.raises(CorpusError, match="re-materialise the corpus asset"):
        verified_shards(cfg, recorded)


def test_unknown_backbone_and_missing_weights_name_the_fix(tmp_path):
    from dihal.backbones import load_backbone
    from dihal.registry import get_spec

    with pytest.raises(UnknownBackboneError, match="known backbones are"):
        get_spec("gpt5")
    with pytest.raises(BackboneNotFoundError, match="DIHAL_LLAMA_PATH"):
        load_backbone("llama", cache_dir=tmp_path, offline=True)


def test_layer_out_of_range_fails_before_training(world):
    from pipeline.definitions import build_definitions

    big = build_definitions(("llama",), n_layers={"llama": 8}, resources=world.defs.resources)
    world.defs = big
    res, err = world.materialize(["bridge_sweep_llama"], partition="6")
    assert not res.success and "layer 6 is not a candidate: this dump has layers 1..3" in err[0]
    assert not world.path("bridge_sweep", "layer_006.partial", "checkpoints").exists()


def test_bad_settings_fail_on_construction():
    with pytest.raises(ValueError, match="epochs"):
        BridgeProtocol(epochs=0)
    with pytest.raises(ValueError, match="max_docs"):
        CorpusConfig(max_docs=0)
    with pytest.raises(ValueError, match="max_shards"):
        CorpusConfig(max_shards=-1)


def test_a_damaged_checkpoint_falls_back_to_the_previous_one(tmp_path):
    from dihal.bridge import BrownianBridge, DenoiserConfig, build_denoiser
    from dihal.bridge.train import TrainConfig, train_bridge
    from dihal.checkpoint import list_checkpoints
    from tests.tiny import toy_data

    cfg_d = DenoiserConfig(d_in=4, d_model=16, n_layers=1, n_heads=2, max_len=8, time_embed_dim=8)
    train, val = toy_data(24, 1), toy_data(8, 2)
    cfg = TrainConfig(batch_size=4, checkpoint_every=2, keep_checkpoints=2, log_every=2)
    whole = build_denoiser(cfg_d, 0)
    train_bridge(whole, train, val, BrownianBridge(), cfg, tmp_path / "whole")

    model = build_denoiser(cfg_d, 0)
    train_bridge(model, train, val, BrownianBridge(), cfg, tmp_path / "cut", stop_after=5)
    newest = list_checkpoints(tmp_path / "cut")[-1]
    (newest / "model.safetensors").write_bytes(b"garbage")
    resumed = build_denoiser(cfg_d, 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train_bridge(resumed, train, val, BrownianBridge(), cfg, tmp_path / "cut")
    assert any(str(newest) in str(w.message) and "falling back" in str(w.message) for w in caught)
    for k, v in whole.state_dict().items():
        assert torch.equal(v, resumed.state_dict()[k]), k


def test_missing_upstream_names_the_command(world):
    shutil.rmtree(world.path("hidden_states"))
    res, err = world.materialize(["geometry_llama"])
    assert not res.success
    assert "Run: dagster asset materialize --select '*hidden_states_llama'" in err[0]


def test_the_default_corpus_is_the_embedded_sample_of_the_repository():
    """No corpus path given: the shards of <repository>/data/dolma_sample (the default run)."""
    from pathlib import Path

    from dihal.locate.corpus import resolve_shards

    sample = Path(__file__).resolve().parents[2] / "data" / "dolma_sample"
    shards = resolve_shards(CorpusConfig())
    assert shards and all(Path(s).parent == sample for s in shards)
