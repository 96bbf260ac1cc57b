"""Generation at the training budget's ends (dihal.compare.budget_generation) on the tiny llama:
DiHAL at l* is the budget study's own bridge point, sampled as the eval samples; CoDAR trains
at its budget (tokens, steps) and size; the same seed gives the same rows; a resume makes only
what was not kept; the estimate follows its formula and refuses what does not fit."""

import math
from dataclasses import replace

import numpy as np
import pytest

from dihal.compare import budget_generation as G
from dihal.config import (
    BridgeProtocol,
    BudgetGenerationConfig,
    CorpusConfig,
    ExtractConfig,
    SequenceConfig,
)
from dihal.locate.corpus import corpus_documents, pack_sequences
from dihal.replace import budget as B
from dihal.rows import BudgetGenerationRow
from dihal.run import estimates as E
from dihal.run.preflight import PreflightError
from storage.states import StateReader
from tests.tiny import dump_states, make_docs, write_shard

SEQ = SequenceConfig(seq_len=16, n_train=8, n_val=6, val_fraction=0.3, max_tokens_per_doc=40)
PROTOCOL = BridgeProtocol(d_model=32, n_layers=1, n_heads=2, batch_size=2, eval_sequences=4,
                          sampler_steps=4, checkpoint_every=50, lr=1e-2)
EXTRACT = ExtractConfig(batch_size=4)
LAYER = 2
CFG = BudgetGenerationConfig(budgets=(4, 8, 16), n_samples=3, length=6, batch_size=2)


@pytest.fixture(scope="module")
def world(tiny_backbone, tiny_llama_dir, tmp_path_factory):
    """The sweep's sequences of a 40-document corpus, their dump, the study's tokens up to
    16 steps, and the tiny llama as its own judge."""
    from dihal.evaluate.judge import load_judge

    tmp = tmp_path_factory.mktemp("budget-generation")
    bb = tiny_backbone
    corpus = CorpusConfig(paths=(str(write_shard(tmp / "shard.json.gz", make_docs(40, seed=3))),))
    packed = pack_sequences(corpus_documents(corpus), bb.tokenizer, SEQ, bos_id=bb.bos_id,
                            eos_id=bb.eos_id)
    seqs = {s: np.asarray(p.input_ids, dtype=np.int64) for s, p in packed.items()}
    reader = StateReader(dump_states(bb, seqs, tmp / "dump", batch=4))
    tokens = B.study_sequences(lambda: corpus_documents(corpus), bb.tokenizer, SEQ, seqs,
                               CFG.budgets, PROTOCOL.batch_size, bos_id=bb.bos_id,
                               eos_id=bb.eos_id)
    judge = load_judge(str(tiny_llama_dir), cache_dir=tmp / "judge")
    return reader, tokens, judge


def _run(bb, world, work, **kw):
    reader, tokens, judge = world
    return G.generate_at_budgets(bb, judge, reader, LAYER, PROTOCOL, tokens, EXTRACT, CFG, work,
                                 **kw)


def _values(rows):
    return [{k: v for k, v in r.to_dict().items() if k != "seconds"} for r in rows]


def test_the_config_generates_at_its_lowest_and_highest_budget_and_refuses_nonsense():
    assert CFG.ends == (4, 16) and BudgetGenerationConfig(budgets=[512, 128]).ends == (128, 512)
    assert BudgetGenerationConfig(budgets=(64,)).ends == (64,)
    with pytest.raises(ValueError, match="BudgetGenerationConfig.budgets must be"):
        BudgetGenerationConfig(budgets=(4, 4))
    with pytest.raises(ValueError, match="BudgetGenerationConfig.lr must be"):
        BudgetGenerationConfig(lr=0.0)
    with pytest.raises(ValueError, match="BudgetGenerationConfig.restrict_vocab"):
        BudgetGenerationConfig(restrict_vocab="yes")
    assert G.eval_config(CFG).frontier_temperatures == ()
    assert G.codar_config(CFG).n_samples == CFG.n_samples and G.codar_config(CFG).lr == CFG.lr


BAD = {"budgets": [(), (0,), (4, 4), "16", (1.5,), (10**8,)], "n_samples": [0],
       "length": [0, 1.5], "temperature": [0.0, math.inf], "seed": [-1], "batch_size": [0],
       "eta": [-0.1], "lr": [0, math.nan], "restrict_vocab": ["yes", 1],
       "sampler_steps": [0, 1.5, False, 10**4]}


def test_every_field_of_the_config_refuses_a_bad_value_by_name():
    import dataclasses

    assert set(BAD) == {f.name for f in dataclasses.fields(BudgetGenerationConfig)}
    for name, values in BAD.items():
        for value in values:
            with pytest.raises(ValueError, match=rf"^BudgetGenerationConfig\.{name} must be"):
                BudgetGenerationConfig(**{name: value})


def test_a_row_round_trips_and_refuses_a_stranger():
    row = BudgetGenerationRow(2, "codar", 4, 128, 64, 27232, 4, 1.0, 30.0, 20.0, 45.0, 0.5, 0.4,
                              0.6, 3, 1, [5.0, 6.0], [4, 3], 1.5, 2, "AVX512")
    assert BudgetGenerationRow.from_dict(row.to_dict()) == row and row.repeats == 2.0
    with pytest.raises(ValueError, match="must be one of"):
        BudgetGenerationRow.from_dict({**row.to_dict(), "model": "sed"})
    with pytest.raises(ValueError, match="missing"):
        BudgetGenerationRow.from_dict({k: v for k, v in row.to_dict().items() if k != "train_steps"})


def test_dihal_is_the_studys_bridge_codar_its_budget_and_a_resume_makes_only_the_rest(
        tiny_backbone, world, tmp_path, monkeypatch):
    reader, tokens, _ = world
    said = []
    rows, samples = _run(tiny_backbone, world, tmp_path / "a", say=said.append)
    assert [(r.model, r.train_steps) for r in rows] == [("dihal", 4), ("codar", 4), ("dihal", 16),
                                                  ("codar", 16)]
    seq_len = tokens.ids.shape[1]
    for r in rows:
        assert r.layer == LAYER and r.tokens == r.train_steps * PROTOCOL.batch_size * seq_len
        assert 0 < r.distinct_tokens <= r.tokens and r.n_samples == CFG.n_samples
        assert r.gen_ppl_low <= r.gen_ppl <= r.gen_ppl_high and math.isfinite(r.gen_ppl)
        assert 0 <= r.diversity_low <= r.diversity <= r.diversity_high <= 1
        assert r.sampler_steps == PROTOCOL.sampler_steps and r.temperature == CFG.temperature
    by = {r.key: r for r in rows}
    # CoDAR at DiHAL's size (+-10 %), on the same tokens
    for steps in CFG.ends:
        d, c = by[("dihal", steps)], by[("codar", steps)]
        assert abs(c.denoiser_parameters - d.denoiser_parameters) <= 0.1 * d.denoiser_parameters
        assert (c.tokens, c.distinct_tokens) == (d.tokens, d.distinct_tokens)
    assert sorted({(s.model, s.train_steps) for s in samples}) == sorted(by)
    assert len(samples) == len(rows) * CFG.n_samples
    assert any("DiHAL (l=2) @ 16 steps: step" in m for m in said)  # the training's progress
    # DiHAL's bridge is the budget study's bridge point (same training): its held-out NLL
    study = B.study_layer(tiny_backbone, reader, LAYER,
                          B.BudgetStudyConfig(layers=(LAYER,), budgets=(4,), residual=False),
                          PROTOCOL, tokens, EXTRACT, tmp_path / "study")
    trained = {}
    real = G.train_layer_bridge

    def keep(data, proto, ckpt, **kw):
        trained["net"], result, init = real(data, proto, ckpt, **kw)
        trained["data"] = data
        return trained["net"], result, init

    monkeypatch.setattr(G, "train_layer_bridge", keep)
    again, _ = _run(tiny_backbone, world, tmp_path / "b",
                    finished=[(r, []) for r in rows if r.key != ("dihal", 4)])
    from dihal.replace.stage import measure_bridge

    point = next(p for p in study if (p.model, p.train_steps) == ("bridge", 4))
    measured = measure_bridge(tiny_backbone, trained["net"], trained["data"],
                              B.budget_protocol(PROTOCOL, LAYER, B.plan_budget(
                                  4, 2, seq_len, len(tokens.ids))))
    assert measured["hybrid_nll"] == point.hybrid_nll
    assert _values(again) == _values(rows)  # the same seed gives the same rows
    # a resume: only what was not kept is made, the kept rows as kept
    made = []
    monkeypatch.setattr(G, "baseline", lambda *a, **k: pytest.fail("CoDAR trained again"))
    resumed, _ = _run(tiny_backbone, world, tmp_path / "c", on_row=lambda r, s: made.append(r),
                      finished=[(r, []) for r in rows if r.key != ("dihal", 16)])
    assert [r.key for r in made] == [("dihal", 16)] and _values(resumed) == _values(rows)
    monkeypatch.setattr(B, "layer_pairs", lambda *a, **k: pytest.fail("pairs computed"))
    done, _ = _run(tiny_backbone, world, tmp_path / "d", finished=[(r, []) for r in rows])
    assert done == rows  # nothing made, not even the pairs


def test_codar_is_refused_off_dihals_budget(tiny_backbone, world, tmp_path):
    from dihal.compare.baselines.base import BudgetMismatchError

    _, tokens, judge = world
    plan = B.plan_budget(4, PROTOCOL.batch_size, tokens.ids.shape[1], len(tokens.ids))
    with pytest.raises((BudgetMismatchError, ValueError), match="parameters"):
        G.codar_at_budget(tiny_backbone, judge, tokens.ids[: plan.sequences], PROTOCOL, LAYER,
                          plan, CFG, 100, tmp_path)


def test_the_estimate_follows_its_formula_and_refuses_what_does_not_fit():
    kw = dict(layer=3, hidden=32, vocab=200, seq_len=16, available=None, sweep_sequences=8)
    est = E.estimate_generation(CFG, PROTOCOL, **kw)
    assert [p.train_steps for p in est.plans] == [4, 16] and est.notes == ()
    n = 16 * PROTOCOL.batch_size  # the highest budget's fresh sequences
    assert est.parts["pairs"] == pytest.approx((n - 8) * 16 * 3 * E.SECONDS_PER_TOKEN_BLOCK)
    assert est.parts["DiHAL training"] == pytest.approx(20 * E.SECONDS_PER_STEP)
    assert est.parts["CoDAR training"] == pytest.approx(
        20 * E.SECONDS_PER_STEP * E.CODAR_STEP_RATIO)
    tokens = CFG.n_samples * CFG.length
    assert est.parts["sampling and scoring"] == pytest.approx(2 * tokens * (
        E.SECONDS_PER_HYBRID_TOKEN + 3 * E.SECONDS_PER_JUDGED_TOKEN))
    assert est.seconds == pytest.approx(sum(est.parts.values()))
    assert est.memory_bytes == 2 * (n + PROTOCOL.eval_sequences) * 16 * 32 * 4 + E.PROCESS_BYTES
    assert est.disk_bytes > 0 and "generation at 4, 16 steps needs about" in est.summary()
    assert est.info().parts.keys() == est.parts.keys()
    assert list(est.info().to_dict())[-1] == "parts"  # generation's record keeps its parts
    short = E.estimate_generation(CFG, PROTOCOL, **{**kw, "available": 10})
    assert short.notes and "each seen 3.20 times" in short.notes[-1]  # 32 wanted of 10
    assert E.estimate_generation(CFG, PROTOCOL, **{**kw, "stored": False}).parts["pairs"] > \
        est.parts["pairs"]
    with pytest.raises(PreflightError, match="disk: .* GiB is free"):
        est.require(disk_free=1)
    with pytest.raises(PreflightError, match="host memory"):
        est.require(host_available=1)
    with pytest.raises(PreflightError, match="time"):
        est.require(max_seconds=1e-9)
    est.require(disk_free=2**40, host_available=2**40, max_seconds=1e9)
    with pytest.raises(ValueError, match="codar_step_ratio must be"):
        E.estimate_generation(CFG, PROTOCOL, **kw, codar_step_ratio=0)
    with pytest.raises(ValueError, match="fewer than the sweep's"):
        E.estimate_generation(replace(CFG), PROTOCOL, **{**kw, "available": 4})
