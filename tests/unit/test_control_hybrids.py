"""Control hybrids: layer-drop is the upper blocks on the embeddings; the ridge map
recovers a linear target and picks its penalty on held-out pairs; every control decodes the
same cached and uncached; hybrids of saved bridges (the regression control in one step)."""

import copy
from dataclasses import replace

import pytest
import torch

from dihal.bridge.data import BridgeData, Standardizer
from dihal.generation_rows import GenerationRow
from dihal.replace.control_hybrids import (
    BuiltBridge,
    bridge_hybrid,
    fit_ridge,
    held_out_nll,
    layer_drop_hybrid,
    regression_hybrid,
    ridge_hybrid,
)
from dihal.replace.hybrid import next_token_nll
from tests.tiny import trained_bridge

LAYER = 2


def _ids(bb, shape, seed):
    ids = torch.randint(4, len(bb.tokenizer), shape, generator=torch.Generator().manual_seed(seed))
    ids[:, 0] = bb.bos_id
    return ids


def test_layer_drop_equals_the_upper_blocks_run_on_the_embeddings(tiny_backbone):
    """Checked against an independent model: a copy of the backbone that keeps only its blocks
    LAYER..N-1, fed the embeddings through Hugging Face's own forward."""
    bb = tiny_backbone
    upper = copy.deepcopy(bb.model)
    upper.model.layers = upper.model.layers[LAYER:]
    upper.config.num_hidden_layers = bb.n_layers - LAYER
    ids = _ids(bb, (2, 9), 1)
    expected = upper(inputs_embeds=bb.embed(ids), use_cache=False).logits
    drop = layer_drop_hybrid(bb, LAYER)
    torch.testing.assert_close(drop.logits(ids), expected, rtol=0, atol=1e-4)
    # dropping nothing is the backbone itself
    torch.testing.assert_close(layer_drop_hybrid(bb, 0).logits(ids), bb.model(ids).logits,
                               rtol=0, atol=1e-4)
    # and dropping layers changes the model (the comparison above is not vacuous)
    assert not torch.allclose(drop.logits(ids), bb.model(ids).logits, atol=1e-3)


def _linear_pairs(n, T, d_in, d_out, noise, seed):
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(d_in, d_out, generator=g), torch.randn(d_out, generator=g)
    x = torch.randn(n, T, d_in, generator=g)
    y = x @ a + b + noise * torch.randn(n, T, d_out, generator=g)
    mask = torch.ones(n, T, dtype=torch.bool)
    mask[:, 0] = False
    y[:, 0] = 1e3  # masked out: must not enter the fit
    return BridgeData(x, y, mask), a, b


def test_ridge_with_vanishing_penalty_recovers_a_linear_map():
    data, a, b = _linear_pairs(20, 10, 6, 6, 0.0, 0)
    ridge = fit_ridge(data, lambdas=(1e-10,))
    torch.testing.assert_close(ridge.weight, a, rtol=0, atol=1e-4)
    torch.testing.assert_close(ridge.bias, b, rtol=0, atol=1e-4)
    assert ridge.val_mse is None
    # a large penalty shrinks the weights towards 0
    assert float(fit_ridge(data, lambdas=(1e3,)).weight.abs().max()) < 0.05


def test_ridge_chooses_its_penalty_by_held_out_error():
    """Few noisy pairs in many dimensions: some shrinkage beats none on held-out pairs; the
    held-out error from the moments equals the direct one."""
    train, a, b = _linear_pairs(3, 8, 16, 16, 3.0, 1)
    g = torch.Generator().manual_seed(2)
    xv = torch.randn(30, 8, 16, generator=g)
    val = BridgeData(xv, xv @ a + b + 3.0 * torch.randn(30, 8, 16, generator=g))
    ridge = fit_ridge(train, val, lambdas=(1e-6, 1e-2, 1.0, 100.0))
    assert ridge.lam == min(zip(ridge.val_mses, ridge.lambdas, strict=True))[1]
    assert ridge.lam > 1e-6 and ridge.val_mse < ridge.val_mses[0]
    direct = float((ridge(val.cond) - val.target).pow(2).mean())
    assert ridge.val_mse == pytest.approx(direct, rel=1e-5)
    with pytest.raises(ValueError, match="needs held-out pairs"):
        fit_ridge(train, lambdas=(1.0, 2.0))
    with pytest.raises(ValueError, match="lambdas"):
        fit_ridge(train, val, lambdas=(-1.0,))
    empty = BridgeData(train.cond, train.target, torch.zeros(3, 8, dtype=torch.bool))
    with pytest.raises(ValueError, match="no pairs"):
        fit_ridge(empty, lambdas=(1.0,))


@pytest.fixture(scope="module")
def layer_pairs(tiny_backbone):
    """Standardised (hs[0], hs[LAYER]) pairs of the tiny backbone, BOS masked out and pinned."""
    bb = tiny_backbone
    ids = _ids(bb, (24, 16), 3)
    hs = bb.hidden_states(ids)
    mask = torch.ones(ids.shape, dtype=torch.bool)
    mask[:, 0] = False
    cond_std, target_std = Standardizer.fit(hs[0], mask), Standardizer.fit(hs[LAYER], mask)
    data = BridgeData(cond_std.apply(hs[0]), target_std.apply(hs[LAYER]), mask)
    return data, cond_std, target_std, hs[LAYER][0, 0].clone()


def test_ridge_hybrid_beats_layer_drop_on_held_out_sequences(tiny_backbone, layer_pairs):
    bb = tiny_backbone
    data, cond_std, target_std, first = layer_pairs
    ridge = fit_ridge(replace(data, cond=data.cond[:16], target=data.target[:16],
                              mask=data.mask[:16]),
                      replace(data, cond=data.cond[16:], target=data.target[16:],
                              mask=data.mask[16:]))
    hyb = ridge_hybrid(bb, LAYER, ridge, cond_std, target_std, first_state=first)
    val_ids = _ids(bb, (4, 16), 9)
    h = hyb.hidden(val_ids)
    assert torch.equal(h[:, 0], first.expand(4, -1))
    ridge_nll = held_out_nll(hyb, val_ids)
    drop_nll = held_out_nll(layer_drop_hybrid(bb, LAYER, first_state=first), val_ids)
    assert ridge_nll["backbone_nll"] == pytest.approx(
        next_token_nll(lambda x: bb.model(x).logits, val_ids), abs=1e-5)
    assert ridge_nll["backbone_nll"] == drop_nll["backbone_nll"]
    # a linear map fitted to h_l is closer to it, and to the backbone's logits, than no map
    true_h = bb.hidden_states(val_ids)[LAYER]
    drop = layer_drop_hybrid(bb, LAYER, first_state=first)
    assert (h - true_h).norm() < (drop.hidden(val_ids) - true_h).norm()
    full = bb.model(val_ids).logits
    assert (hyb.logits(val_ids) - full).abs().mean() < (drop.logits(val_ids) - full).abs().mean()


def _trained(bb, objective=None, steps=4):
    return trained_bridge(bb, LAYER, objective, steps)


@pytest.mark.parametrize("make", ["layer_drop", "ridge", "regression", "dihal_marginal"])
def test_every_control_decodes_the_same_cached_and_uncached(tiny_backbone, layer_pairs, make):
    bb = tiny_backbone
    data, cond_std, target_std, first = layer_pairs
    model = {
        "layer_drop": lambda: layer_drop_hybrid(bb, LAYER),
        "ridge": lambda: ridge_hybrid(bb, LAYER, fit_ridge(data, lambdas=(0.1,)), cond_std,
                                      target_std, first_state=first),
        "regression": lambda: regression_hybrid(bb, _trained(bb, "regression", steps=1)),
        "dihal_marginal": lambda: bridge_hybrid(bb, _trained(bb), rule="marginal"),
    }[make]()
    kw = dict(temperature=1.0, seed=4, batch_size=2)
    cached = model.decode(3, 10, cached=True, **kw)
    assert cached.tokens.shape == (3, 11)
    assert torch.equal(cached.tokens, model.decode(3, 10, cached=False, **kw).tokens)
    assert len(set(cached.tokens[:, 1:].flatten().tolist())) > 3


def test_hybrids_of_saved_bridges(tiny_backbone):
    bb = tiny_backbone
    dihal = bridge_hybrid(bb, _trained(bb))
    assert (dihal.sampler_steps, dihal.rule, dihal.layer) == (4, "ancestral", LAYER)
    assert bridge_hybrid(bb, _trained(bb), sampler_steps=2, rule="marginal").sampler_steps == 2
    reg = regression_hybrid(bb, _trained(bb, "regression", steps=1))
    assert reg.sampler_steps == 1 and type(reg.process).__name__ == "EndpointRegression"
    with pytest.raises(ValueError, match="needs a regression control"):
        regression_hybrid(bb, _trained(bb))


def test_controls_are_sampled_and_scored_by_the_eval_code(tiny_backbone, tiny_llama_dir, tmp_path):
    """sample_and_score: every control's samples go through the same judge and metric code as
    DiHAL's row, with the same sample count and timing fields."""
    from dihal.config import EvalConfig
    from dihal.evaluate.generation import sample_and_score
    from dihal.evaluate.judge import load_judge

    bb = tiny_backbone
    judge = load_judge(str(tiny_llama_dir), cache_dir=tmp_path / "judge")
    cfg = EvalConfig(n_samples=3, length=6, batch_size=2)
    kw = dict(temperature=cfg.temperature, seed=cfg.seed, batch_size=cfg.batch_size)
    models = [("DiHAL", "dihal", lambda: bridge_hybrid(bb, _trained(bb)).decode(3, 6, **kw)),
              ("layer-drop", "control", lambda: layer_drop_hybrid(bb, LAYER).decode(3, 6, **kw))]
    made, samples = sample_and_score(bb, models, judge, cfg)
    rows = [r.to_dict() for r in made]
    assert all(list(GenerationRow.from_dict(d).to_dict().items()) == list(d.items())
               for d in rows)  # read back as written
    assert [r["model"] for r in rows] == ["DiHAL", "layer-drop"]
    assert rows[0].keys() == rows[1].keys() and all(r["n_samples"] == 3 for r in rows)
    assert all(r["gen_ppl"] > 0 and r["ms_per_token"] > 0 for r in rows)
    assert len(samples) == 6 and {s.model for s in samples} == {"DiHAL", "layer-drop"}


def test_a_built_bridge_is_restored_once_and_sampled_at_any_k_as_a_fresh_restore(
        tiny_backbone, monkeypatch):
    """BuiltBridge: one restore, then DiHAL's hybrid at each (K, rule) shares its modules and
    decodes exactly as the hybrid of a bridge restored for that (K, rule) alone."""
    import dihal.replace.control_hybrids as ch

    bb, trained = tiny_backbone, _trained(tiny_backbone)
    restores = []
    monkeypatch.setattr(ch, "restore_bridge",
                        lambda *a, **k: restores.append(1) or _restore(*a, **k))
    built = BuiltBridge.of(bb, trained)
    kw = dict(temperature=1.0, seed=3, batch_size=2, cached=True)
    for steps, rule in ((None, None), (1, None), (2, "marginal"), (4, "ancestral")):
        hybrid = built.hybrid(sampler_steps=steps, rule=rule)
        assert hybrid.denoiser is built.modules["denoiser"]
        alone = bridge_hybrid(bb, trained, sampler_steps=steps, rule=rule)
        assert (hybrid.sampler_steps, hybrid.rule) == (alone.sampler_steps, alone.rule)
        assert torch.equal(hybrid.decode(3, 6, **kw).tokens, alone.decode(3, 6, **kw).tokens)
    assert len(restores) == 1 + 4  # the built bridge once, each lone hybrid once
    assert (built.layer, built.protocol_sampler_steps) == (LAYER, 4)


def _restore(*a, **k):
    from dihal.replace.stage import restore_bridge

    return restore_bridge(*a, **k)
