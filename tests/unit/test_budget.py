"""The budget study's compute (dihal.replace.budget): its rows round-trip; its config and its
estimate refuse nonsense; its training tokens extend the sweep's with fresh ones and never a
held-out one, and count repeats where the corpus runs short; its points are the same for the
same seed, the smallest budget is the sweep's bridge, and a resumed study skips what is done."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from dihal.bridge.denoiser import CausalDenoiser
from dihal.config import (
    MAX_TRAIN_STEPS,
    BridgeProtocol,
    BudgetConfig,
    BudgetGenerationConfig,
    CorpusConfig,
    ExtractConfig,
    SequenceConfig,
)
from dihal.errors import CorpusError, LayerIndexError
from dihal.locate.corpus import corpus_documents, pack_sequences
from dihal.replace import budget as B
from dihal.run import estimates as E
from dihal.run.preflight import PreflightError
from storage.states import StateReader
from tests.tiny import dump_states, make_docs, write_shard

SEQ = SequenceConfig(seq_len=16, n_train=8, n_val=6, val_fraction=0.3, max_tokens_per_doc=40)
PROTOCOL = BridgeProtocol(d_model=32, n_layers=1, n_heads=2, batch_size=2, eval_sequences=4,
                          sampler_steps=4, checkpoint_every=50, lr=1e-2)
EXTRACT = ExtractConfig(batch_size=4)
LAYER = 2


def _point(**kw):
    base = dict(layer=2, train_steps=128, tokens=65536, distinct_tokens=65536, model="bridge",
                val_loss=0.5, t1_loss=0.7, recon_error=0.9, hybrid_nll=5.9, seconds=12.5)
    return B.BudgetPoint(**{**base, **kw})


def test_a_point_round_trips_through_json_and_refuses_a_stranger():
    for p in (_point(), _point(model="backbone", train_steps=0, tokens=0, distinct_tokens=0,
                               val_loss=None, t1_loss=None, recon_error=None)):
        assert B.BudgetPoint.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    with pytest.raises(ValueError, match="one of"):
        B.BudgetPoint.from_dict({**_point().to_dict(), "model": "lstm"})
    with pytest.raises(ValueError, match="missing \\['seconds'\\]"):
        B.BudgetPoint.from_dict({k: v for k, v in _point().to_dict().items() if k != "seconds"})


def test_the_config_keeps_sorted_distinct_budgets_and_refuses_nonsense():
    cfg = B.BudgetStudyConfig(layers=[3, 1], budgets=[2048, 128, 512])  # a run config's lists
    assert cfg.layers == (1, 3) and cfg.budgets == (128, 512, 2048)
    assert cfg.trained == ("bridge", "network", "residual")
    assert B.BudgetStudyConfig(residual=False).trained == ("bridge", "network")
    for bad in ({"budgets": ()}, {"budgets": (0, 128)}, {"budgets": (128, 128)},
                {"budgets": (True,)}, {"budgets": (MAX_TRAIN_STEPS + 1,)}, {"layers": (0, 1)},
                {"layers": "1"}, {"residual": "yes"}):
        with pytest.raises(ValueError, match="BudgetStudyConfig"):
            B.BudgetStudyConfig(**bad)


def test_the_study_trains_the_sweep_bridges_protocol_measured_at_its_own_setting():
    swept = replace(PROTOCOL, seeds=2, seed_layers=(2,), eval_sequences=3, sampler_steps=2)
    stored = json.loads(json.dumps(swept.to_dict()))  # as a sweep manifest keeps it
    same = B.study_protocol(stored, BudgetConfig())
    assert same == replace(swept, seeds=1, seed_layers=())
    apart = B.study_protocol(stored, BudgetConfig(eval_sequences=6, sampler_steps=4))
    assert apart == replace(same, eval_sequences=6, sampler_steps=4)
    sampled = B.study_protocol(stored, BudgetGenerationConfig(sampler_steps=5))
    assert sampled == replace(same, sampler_steps=5)
    # nothing that is trained moves: the same denoiser, loop and order at every setting
    for p in (apart, sampled):
        assert B.budget_protocol(p, LAYER, B.plan_budget(8, 2, 16, 8)) == replace(
            B.budget_protocol(same, LAYER, B.plan_budget(8, 2, 16, 8)),
            eval_sequences=p.eval_sequences, sampler_steps=p.sampler_steps)


def test_a_plan_takes_fresh_sequences_where_there_are_and_counts_repeats_where_not():
    fresh = B.plan_budget(2048, 4, 128, available=20_000)
    assert (fresh.sequences, fresh.epochs, fresh.repeats) == (8192, 1.0, 1.0)
    assert fresh.tokens == fresh.distinct_tokens == 2048 * 4 * 128
    short = B.plan_budget(2048, 4, 128, available=3506)
    assert short.sequences == 3506 and short.tokens == 2048 * 4 * 128
    assert short.distinct_tokens == 3506 * 128
    assert math.isclose(short.repeats, 8192 / 3506)
    # the loop then takes exactly the budget's steps over those sequences
    assert B.budget_protocol(BridgeProtocol(), 1, short).epochs == 8192 / 3506


def test_the_estimate_follows_its_formula_and_refuses_what_does_not_fit():
    cfg = B.BudgetStudyConfig(layers=(1, 4), budgets=(10, 100), residual=False)
    est = E.estimate_study(cfg, PROTOCOL, n_layers=6, hidden=32, seq_len=16, available=150,
                           sweep_sequences=8, seconds_per_step=0.5,
                           seconds_per_token_block=0.001, seconds_per_measure=3.0)
    # budgets need 20 and 200 sequences; the corpus holds 150, so the larger one repeats
    assert [p.sequences for p in est.plans] == [20, 150]
    computed = 150 - 8  # the sweep's 8 are read from the dump
    train = 2 * (10 + 100) * 0.5  # bridge and network
    measure = 2 * 3 * 3.0  # 2 budgets x (2 trained + the ridge map)
    for layer in (1, 4):
        assert math.isclose(est.seconds_by_layer[layer],
                            computed * 16 * layer * 0.001 + train + measure)
    assert math.isclose(est.seconds, sum(est.seconds_by_layer.values()))
    assert est.memory_bytes == 2 * (150 + PROTOCOL.eval_sequences) * 16 * 32 * 4 + E.PROCESS_BYTES
    assert est.disk_bytes > 0 and est.notes == ("100 steps: 150 distinct sequences, each seen "
                                                "1.33 times",)
    assert est.refusals(max_seconds=est.seconds, disk_free=2 * est.disk_bytes,
                        host_available=2 * est.memory_bytes) == []
    checks = [r.check for r in est.refusals(max_seconds=est.seconds / 2, disk_free=est.disk_bytes // 2,
                                            host_available=est.memory_bytes // 2)]
    assert checks == ["time", "disk", "host memory"]
    with pytest.raises(PreflightError, match="host memory"):
        est.require(host_available=1)
    kw = dict(n_layers=6, hidden=32, seq_len=16, available=150, sweep_sequences=8)
    with pytest.raises(LayerIndexError, match="1..5"):
        E.estimate_study(replace(cfg, layers=(6,)), PROTOCOL, **kw)
    with pytest.raises(ValueError, match="seconds_per_step"):
        E.estimate_study(cfg, PROTOCOL, **kw | {"seconds_per_step": 0})
    with pytest.raises(ValueError, match="fewer than the sweep"):
        E.estimate_study(cfg, PROTOCOL, **kw | {"available": 4})
    with pytest.raises(ValueError, match="weights_bytes"):
        E.estimate_study(cfg, PROTOCOL, **kw | {"weights_bytes": -1})


def test_the_estimates_memory_counts_the_loaded_weights_and_says_when_it_cannot():
    cfg = B.BudgetStudyConfig(layers=(1,), budgets=(10,), residual=False)
    kw = dict(n_layers=6, hidden=32, seq_len=16, available=150, sweep_sequences=8)
    pairs = E.estimate_study(cfg, PROTOCOL, **kw)
    assert "the models' weights are counted once they are loaded" in pairs.summary()
    held = E.estimate_study(cfg, PROTOCOL, **kw, weights_bytes=3 * 2**30)
    assert held.memory_bytes == pairs.memory_bytes + 3 * 2**30 and held.info().weights_bytes == 3 * 2**30
    assert list(held.info().to_dict()) == ["seconds", "disk_bytes", "memory_bytes",
                                           "weights_bytes", "notes"]  # as the manifest keeps it
    assert "3.00 of weights, 1.50 of the process" in held.summary()
    assert "counted once" not in held.summary()
    assert held.refusals(host_available=pairs.memory_bytes + 2**30)[0].check == "host memory"
    gen = E.estimate_generation(BudgetGenerationConfig(budgets=(4, 16)), PROTOCOL, layer=2,
                                hidden=32, vocab=64, seq_len=16, available=None,
                                sweep_sequences=8, weights_bytes=2**20)
    assert gen.memory_bytes == E.estimate_generation(
        BudgetGenerationConfig(budgets=(4, 16)), PROTOCOL, layer=2, hidden=32, vocab=64,
        seq_len=16, available=None, sweep_sequences=8).memory_bytes + 2**20


def test_host_weight_bytes_counts_each_model_once_and_only_what_is_on_the_host():
    import torch

    a = torch.nn.Linear(4, 3)  # 12 weights + 3 biases, float32
    b = torch.nn.Embedding(5, 2).to(torch.float16)  # 10 halves
    b.register_buffer("kept", torch.zeros(4, dtype=torch.int64))
    on_meta = torch.nn.Linear(1000, 1000, device="meta")
    assert E.host_weight_bytes(a) == 15 * 4
    assert E.host_weight_bytes(a, b, a) == 15 * 4 + 10 * 2 + 4 * 8
    assert E.host_weight_bytes(on_meta) == 0


# ---------------------------------------------------------------- a tiny world


def _world(tmp, bb, n_docs):
    """A corpus of n_docs documents, the sweep's sequences of it (SEQ) and their dump."""
    shard = write_shard(tmp / "shard.json.gz", make_docs(n_docs, seed=3))
    corpus = CorpusConfig(paths=(str(shard),))
    packed = pack_sequences(corpus_documents(corpus), bb.tokenizer, SEQ, bos_id=bb.bos_id,
                            eos_id=bb.eos_id)
    seqs = {s: np.asarray(p.input_ids, dtype=np.int64) for s, p in packed.items()}
    reader = StateReader(dump_states(bb, seqs, tmp / "dump", batch=4))
    return corpus, seqs, reader


def _tokens(bb, corpus, wanted):
    return B.training_sequences(lambda: corpus_documents(corpus), bb.tokenizer, SEQ, wanted,
                                bos_id=bb.bos_id, eos_id=bb.eos_id)


@pytest.fixture(scope="module")
def world(tiny_backbone, tmp_path_factory):
    return _world(tmp_path_factory.mktemp("budget-world"), tiny_backbone, 40)


def test_training_tokens_extend_the_sweeps_with_fresh_ones_never_held_out(tiny_backbone, world):
    corpus, seqs, reader = world
    tokens = _tokens(tiny_backbone, corpus, 64)
    assert tokens.capacity >= 64 and tokens.ids.shape == (64, SEQ.seq_len)
    assert np.array_equal(tokens.ids[: SEQ.n_train], seqs["train"])  # the sweep's come first
    assert B.distinct_rows(tokens.ids) == 64  # every one fresh
    held = {tuple(r) for r in seqs["val"]}
    assert not any(tuple(r) in held for r in tokens.ids)
    assert not set().union(*map(set, tokens.doc_ids)) & tokens.held_out_docs
    assert tokens.held_out_docs  # the comparison above is not vacuous
    # a held-out sequence planted among them is refused
    planted = np.concatenate([tokens.ids, seqs["val"][:1]])
    with pytest.raises(CorpusError, match="equal held-out"):
        B.check_fresh(planted, seqs["val"])


def _factory(ridge, cfg):
    """A ridge-started denoiser for the hook: ridge(c) plus a causal denoiser whose output
    starts at zero (drawn from the RNG the study seeds)."""
    class Started(CausalDenoiser):
        def __init__(self):
            super().__init__(cfg)
            self.register_buffer("w", ridge.weight.clone())
            self.register_buffer("b", ridge.bias.clone())

        def forward(self, x_t, t, c, cache=None, start_pos=0):
            return super().forward(x_t, t, c, cache, start_pos) + (c.float() @ self.w + self.b)
    return Started()


def _values(points):
    return [{k: v for k, v in p.to_dict().items() if k != "seconds"} for p in points]


def test_points_are_the_same_for_the_same_seed_and_a_resume_skips_what_is_done(
        tiny_backbone, world, tmp_path, monkeypatch):
    from dihal.replace.stage import train_layer

    corpus, seqs, reader = world
    cfg = B.BudgetStudyConfig(layers=(LAYER,), budgets=(4, 16))
    tokens = _tokens(tiny_backbone, corpus, 16 * PROTOCOL.batch_size)
    said, first_run = [], []
    run = [B.study_layer(tiny_backbone, reader, LAYER, cfg, PROTOCOL, tokens, EXTRACT,
                         tmp_path / f"work{i}", finished=(),
                         say=first_run.append if i == 0 else said.append,
                         residual_factory=_factory) for i in range(2)]
    assert [(p.model, p.train_steps) for p in run[0]] == [
        ("backbone", 0), ("bridge", 4), ("ridge", 4), ("network", 4), ("residual", 4),
        ("bridge", 16), ("ridge", 16), ("network", 16), ("residual", 16)]
    assert _values(run[0]) == _values(run[1])  # same seed, same numbers
    # each training says what the layer's other trainings take at its pace; the last none
    (first,) = [m for m in first_run if m.startswith(f"layer {LAYER} bridge @ 4 steps: hybrid")]
    assert "the layer's other trainings (56 steps) take about" in first  # 4 + 4 + 3 x 16
    (last,) = [m for m in first_run if m.startswith(f"layer {LAYER} residual @ 16 steps: hybrid")]
    assert "other trainings" not in last
    by = {(p.model, p.train_steps): p for p in run[0]}
    assert by[("bridge", 16)].tokens == by[("bridge", 16)].distinct_tokens == 16 * 2 * 16
    assert by[("ridge", 16)].val_loss is None and by[("network", 16)].t1_loss is None
    assert by[("residual", 16)].val_loss is not None
    # the smallest budget is one pass over the sweep's sequences: the sweep's own bridge
    swept = train_layer(tiny_backbone, reader, LAYER, PROTOCOL, tmp_path / "sweep",
                        train_ids=seqs["train"], extract=EXTRACT).metrics
    assert (by[("bridge", 4)].val_loss, by[("bridge", 4)].hybrid_nll) == (swept.val_loss,
                                                                          swept.hybrid_nll)
    # resumed with all but two points done: those two alone are made, with the same numbers
    missing = {("network", 16), ("ridge", 4)}
    done = [p for p in run[0] if (p.model, p.train_steps) not in missing]
    made = []
    again = B.study_layer(tiny_backbone, reader, LAYER, cfg, PROTOCOL, tokens, EXTRACT,
                          tmp_path / "work2", finished=done, say=said.append,
                          on_point=made.append, residual_factory=_factory)
    assert {(p.model, p.train_steps) for p in made} == missing
    assert _values(again) == _values(run[0])
    assert all(a is b for a, b in zip(again, run[0], strict=True)
               if (a.model, a.train_steps) not in missing)
    # everything done: nothing computed, not even the pairs
    monkeypatch.setattr(B, "layer_pairs", lambda *a, **k: pytest.fail("pairs computed"))
    monkeypatch.setattr(B, "load_layer_data", lambda *a, **k: pytest.fail("pairs loaded"))
    assert B.study_layer(tiny_backbone, reader, LAYER, cfg, PROTOCOL, tokens, EXTRACT,
                         tmp_path / "work3", finished=run[0], say=said.append,
                         residual_factory=_factory) == run[0]
    with pytest.raises(ValueError, match="residual_factory"):
        B.study_layer(tiny_backbone, reader, LAYER, cfg, PROTOCOL, tokens, EXTRACT, tmp_path,
                      say=said.append)


def test_a_short_corpus_repeats_its_sequences_and_counts_them(tiny_backbone, tmp_path):
    corpus, seqs, reader = _world(tmp_path, tiny_backbone, 12)
    wanted = 16 * PROTOCOL.batch_size
    tokens = _tokens(tiny_backbone, corpus, wanted)
    n = len(tokens.ids)
    assert SEQ.n_train <= n == tokens.capacity < wanted  # all it holds, fewer than wanted
    cfg = B.BudgetStudyConfig(layers=(1,), budgets=(16,), residual=False)
    points = B.run_study(tiny_backbone, reader, cfg, PROTOCOL, tokens, EXTRACT, tmp_path / "w",
                         say=lambda _: None)
    by = {p.model: p for p in points}
    assert by["bridge"].tokens == 16 * 2 * SEQ.seq_len
    assert by["bridge"].distinct_tokens == by["network"].distinct_tokens == n * SEQ.seq_len
    assert by["ridge"].tokens == by["ridge"].distinct_tokens == n * SEQ.seq_len
    assert all(math.isfinite(p.hybrid_nll) for p in points)


@pytest.mark.parametrize(("l_star", "n_layers", "layers"), [
    (1, 30, (1, 2, 15, 29)), (3, 30, (1, 3, 15, 29)), (15, 30, (1, 15, 29)), (1, 4, (1, 2, 3)),
    (2, 3, (1, 2))])
def test_the_default_layers_are_l_star_a_shallow_one_the_middle_and_the_last(l_star, n_layers,
                                                                               layers):
    from dihal.replace.budget import default_study_layers

    assert default_study_layers(l_star, n_layers) == layers


def test_a_default_layer_outside_the_candidates_is_refused():
    from dihal.errors import LayerIndexError
    from dihal.replace.budget import default_study_layers

    with pytest.raises(LayerIndexError, match="1..29"):
        default_study_layers(30, 30)
