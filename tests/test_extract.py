import json

import numpy as np
import pytest
import torch

from dihal.errors import StateValueError
from dihal.extract import ExtractConfig, check_states, extract_hidden_states
from storage.states import PROGRESS, StateReader, StateSpec, StateWriter


def _sequences(bb, n_train=6, n_val=3, T=10):
    g = torch.Generator().manual_seed(0)
    V = len(bb.tokenizer)
    return {"train": torch.randint(4, V, (n_train, T), generator=g).numpy(),
            "val": torch.randint(4, V, (n_val, T), generator=g).numpy()}


def _writer(path, bb, seqs, batch, fp="fp-1"):
    spec = StateSpec(n_layers=bb.n_layers, seq_len=seqs["train"].shape[1], hidden=bb.hidden_size,
                     n_seq={s: len(v) for s, v in seqs.items()}, batch_size=batch)
    return StateWriter(path, spec, fp, tokens=seqs, attrs=bb.info())


class Interrupt(Exception):
    pass


def test_dump_matches_forward_pass_and_records_tokens(tiny_backbone, tmp_path):
    seqs = _sequences(tiny_backbone)
    w = _writer(tmp_path / "work", tiny_backbone, seqs, batch=4)
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
    seqs = _sequences(tiny_backbone)
    cfg = ExtractConfig(batch_size=2)
    ref = _writer(tmp_path / "ref", tiny_backbone, seqs, 2)
    extract_hidden_states(tiny_backbone, seqs, ref, cfg)
    ref.finalize(tmp_path / "ref-final")

    calls = []

    def stop_after_two(msg):
        calls.append(msg)
        if len(calls) == 2:
            raise Interrupt

    w = _writer(tmp_path / "work", tiny_backbone, seqs, 2)
    with pytest.raises(Interrupt):
        extract_hidden_states(tiny_backbone, seqs, w, cfg, progress=stop_after_two)
    done = json.loads((tmp_path / "work" / PROGRESS).read_text())["done"]
    assert done == {"train": [0, 1], "val": []}  # both batches written before the stop are kept

    w2 = _writer(tmp_path / "work", tiny_backbone, seqs, 2)  # a new process resumes
    assert w2.n_done() == 2
    rep = extract_hidden_states(tiny_backbone, seqs, w2, cfg)
    assert rep.batches_skipped == 2 and rep.batches_written == 3
    w2.finalize(tmp_path / "final")
    a, b = StateReader(tmp_path / "final"), StateReader(tmp_path / "ref-final")
    for split in ("train", "val"):
        np.testing.assert_array_equal(a.array(split)[:], b.array(split)[:])


def test_other_fingerprint_starts_over(tiny_backbone, tmp_path):
    seqs = _sequences(tiny_backbone)
    w = _writer(tmp_path / "work", tiny_backbone, seqs, 2)
    w.write_batch("train", 0, np.ones((4, 2, 10, 32), np.float16))
    assert _writer(tmp_path / "work", tiny_backbone, seqs, 2, fp="fp-2").n_done() == 0


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
    seqs = _sequences(tiny_backbone)
    w = _writer(tmp_path / "work", tiny_backbone, seqs, 2)
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
