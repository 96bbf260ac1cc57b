import json

import numpy as np
import pytest
import torch

from dihal.errors import StateValueError
from dihal.locate.extract import ExtractConfig, check_states, extract_hidden_states
from storage.states import PROGRESS, StateReader
from tests.tiny import dump_states, random_sequences, state_writer


class Interrupt(Exception):
    pass


def test_dump_matches_forward_pass_and_records_tokens(tiny_backbone, tmp_path):
    seqs = random_sequences(tiny_backbone)
    w = state_writer(tmp_path / "work", tiny_backbone, seqs, batch=4)
    report = extract_hidden_states(tiny_backbone, seqs, w, ExtractConfig(batch_size=4))
    assert report.batches_written == 3 and report.tokens == 9 * 10
    w.finalize(tmp_path / "final")
    r = StateReader(tmp_path / "final")
    want = tiny_backbone.hidden_states(torch.as_tensor(seqs["val"])).half().numpy()
    np.testing.assert_array_equal(np.stack([r.layer("val", i) for i in range(4)]), want)
    np.testing.assert_array_equal(r.input_ids("train"), seqs["train"])
    assert r.attrs["n_layers"] == 4 and r.shape("train") == (4, 6, 10, 32)
    assert not (tmp_path / "work").exists()


def test_interrupted_dump_resumes_to_identical_arrays(tiny_backbone, tmp_path):
    seqs = random_sequences(tiny_backbone)
    cfg = ExtractConfig(batch_size=2)
    ref = state_writer(tmp_path / "ref", tiny_backbone, seqs, 2)
    extract_hidden_states(tiny_backbone, seqs, ref, cfg)
    ref.finalize(tmp_path / "ref-final")

    calls = []

    def stop_after_two(msg):
        calls.append(msg)
        if len(calls) == 2:
            raise Interrupt

    w = state_writer(tmp_path / "work", tiny_backbone, seqs, 2)
    with pytest.raises(Interrupt):
        extract_hidden_states(tiny_backbone, seqs, w, cfg, progress=stop_after_two)
    done = json.loads((tmp_path / "work" / PROGRESS).read_text())["done"]
    assert done == {"train": [0, 1], "val": []}  # both batches written before the stop are kept

    w2 = state_writer(tmp_path / "work", tiny_backbone, seqs, 2)  # a new process resumes
    assert w2.n_done() == 2
    rep = extract_hidden_states(tiny_backbone, seqs, w2, cfg)
    assert rep.batches_skipped == 2 and rep.batches_written == 3
    w2.finalize(tmp_path / "final")
    a, b = StateReader(tmp_path / "final"), StateReader(tmp_path / "ref-final")
    for split in ("train", "val"):
        np.testing.assert_array_equal(a.array(split)[:], b.array(split)[:])


def test_other_fingerprint_starts_over(tiny_backbone, tmp_path):
    seqs = random_sequences(tiny_backbone)
    w = state_writer(tmp_path / "work", tiny_backbone, seqs, 2)
    w.write_batch("train", 0, np.ones((4, 2, 10, 32), np.float16))
    assert state_writer(tmp_path / "work", tiny_backbone, seqs, 2, fp="fp-2").n_done() == 0


def test_nan_states_are_refused_naming_layer_and_sequence():
    hs = torch.zeros(3, 2, 5, 4)
    hs[1, 1, 3, 0] = float("nan")
    with pytest.raises(StateValueError, match="layer 1, val sequence 11, position 3"):
        check_states(hs, "float16", split="val", first_seq=10)


def test_fp16_overflow_is_refused_with_the_fix():
    hs = torch.zeros(3, 2, 5, 4)
    hs[2, 0, 1, 1] = 70000.0
    with pytest.raises(StateValueError, match=r"layer 2.*overflows float16.*dtype='float32'"):
        check_states(hs, "float16", split="train", first_seq=0)
    assert check_states(hs, "float32", split="train", first_seq=0) == 70000.0


def test_nan_backbone_stops_the_dump_and_keeps_earlier_batches(tiny_backbone, tmp_path, monkeypatch):
    seqs = random_sequences(tiny_backbone)
    w = state_writer(tmp_path / "work", tiny_backbone, seqs, 2)
    real = tiny_backbone.hidden_states
    calls = {"n": 0}

    def poisoned(ids):
        calls["n"] += 1
        hs = real(ids)
        if calls["n"] == 3:
            hs[2, 0, 4, 0] = float("inf")
        return hs

    monkeypatch.setattr(tiny_backbone, "hidden_states", poisoned)
    with pytest.raises(StateValueError, match="layer 2, train sequence 4"):
        extract_hidden_states(tiny_backbone, seqs, w, ExtractConfig(batch_size=2))
    assert sorted(w._done["train"]) == [0, 1]


def test_the_dump_keeps_the_backbones_own_next_token_reference(tiny_backbone, tmp_path):
    """argmax/val and nll/val are the backbone's full forward's top-1 tokens and next-token
    NLL (what a bridge's measurement compares against); the training split keeps none."""
    import torch.nn.functional as F

    seqs = random_sequences(tiny_backbone)
    r = StateReader(dump_states(tiny_backbone, seqs, tmp_path))
    ids = torch.as_tensor(seqs["val"])
    with torch.no_grad():
        logits = tiny_backbone.model(ids).logits.float()
    want_nll = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten(), reduction="none")
    top, nll = r.reference("val")
    np.testing.assert_array_equal(top, logits.argmax(-1).numpy())
    np.testing.assert_allclose(nll, want_nll.view(3, 9).numpy(), rtol=1e-5, atol=1e-6)
    top2, nll2 = r.reference("val", 2)
    assert top2.shape == (2, 10) and nll2.shape == (2, 9) and top.dtype == np.int32
    assert r.reference("train") is None and not r.has_reference("train")


def test_a_missing_or_changed_reference_chunk_is_damage_not_data(tiny_backbone, tmp_path):
    from dihal.errors import CorruptArtifactError
    from storage.manifest import digest_files
    from storage.states import reference_chunk_key

    seqs = random_sequences(tiny_backbone)
    final = dump_states(tiny_backbone, seqs, tmp_path)
    files = digest_files(final)
    chunk = final / reference_chunk_key("nll", "val", 1)
    data = bytearray(chunk.read_bytes())
    data[0] ^= 0xFF
    chunk.write_bytes(bytes(data))
    reader = StateReader(final, files)  # same size: opening passes, reading does not
    with pytest.raises(CorruptArtifactError, match="nll/val/c/1/0: content changed"):
        reader.reference("val")
    chunk.unlink()
    with pytest.raises(CorruptArtifactError, match="nll/val/c/1/0: missing"):
        StateReader(final)


def test_measuring_against_the_dumps_reference_gives_the_backbones_own_numbers(tiny_backbone, tmp_path):
    """measure_bridge with the dump's reference (no backbone forward) reports what it reports
    when it runs the backbone itself."""
    from dataclasses import replace

    from dihal.config import BridgeProtocol
    from dihal.replace.stage import (
        load_layer_data,
        measure_bridge,
        stored_pairs,
        train_layer_bridge,
    )

    seqs = random_sequences(tiny_backbone, n_train=8, n_val=6)
    r = StateReader(dump_states(tiny_backbone, seqs, tmp_path))
    protocol = BridgeProtocol(d_model=32, n_layers=1, n_heads=2, batch_size=4, sampler_steps=2,
                              eval_sequences=5, pin_first=False, epochs=30.0, lr=1e-2)
    data = load_layer_data(r, 2, protocol, stored_pairs(r, "train", 2))  # random tokens: no BOS pin
    assert data.reference is not None and data.reference[0].shape == (5, 10)
    denoiser = train_layer_bridge(data, protocol, tmp_path / "ckpt")[0]
    kept = measure_bridge(tiny_backbone, denoiser, data, protocol, batch_size=2)
    ran = measure_bridge(tiny_backbone, denoiser, replace(data, reference=None), protocol,
                         batch_size=2)
    assert kept.keys() == ran.keys()
    for key, value in ran.items():
        assert kept[key] == pytest.approx(value, rel=1e-5), key
    assert 0 < kept["top1_agreement"] < 1, kept  # trained a little: agrees somewhere, not everywhere
    # the hybrid NLL on each half of the 5 held-out sequences (2 choose, 3 judge): together
    # the NLL on all of them
    assert (2 * kept["hybrid_nll_select"] + 3 * kept["hybrid_nll_judge"]) / 5 == pytest.approx(
        kept["hybrid_nll"], rel=1e-5)
    assert kept["hybrid_nll_select"] != kept["hybrid_nll_judge"]
