"""Cost per generated token: FLOPs counted while decoding (attention included on the CPU), the
FLOP model's prediction of every hybrid equal to a direct count, and the break-even."""

import functools
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from dihal.bridge.data import Standardizer
from dihal.bridge.process import BrownianBridge
from dihal.evaluate.cost import (
    CostSubject,
    FlopModel,
    backbone_flop_model,
    break_even,
    cost_rows,
    count_flops,
    ridge_map_flops,
    with_bridge,
)
from dihal.net_configs import DenoiserConfig
from dihal.replace.control_hybrids import RidgeMap, layer_drop_hybrid, ridge_hybrid
from dihal.replace.hybrid import Hybrid, decode_backbone
from tests.tiny import randomised_denoiser

LAYER, LENGTH = 2, 12


def test_attention_on_the_cpu_is_counted():
    q, k = torch.randn(2, 4, 3, 8), torch.randn(2, 4, 10, 8)
    total, _ = count_flops(lambda: F.scaled_dot_product_attention(q, k, k))
    assert total == 2 * (2 * 2 * 4 * 3 * 10 * 8)  # q k^T and the weighted sum of v
    lin = torch.nn.Linear(8, 16)
    assert count_flops(lambda: lin(torch.randn(5, 8)))[0] == 2 * 5 * 8 * 16


@pytest.fixture(scope="module")
def parts(tiny_backbone):
    bb = tiny_backbone
    cfg = DenoiserConfig(d_in=bb.hidden_size, d_model=32, n_layers=2, n_heads=4, max_len=32,
                         time_embed_dim=16)
    den = randomised_denoiser(cfg, seed=1)
    ids = torch.randint(4, len(bb.tokenizer), (2, 8), generator=torch.Generator().manual_seed(0))
    hs = bb.hidden_states(ids)
    stds = Standardizer.fit(hs[0]), Standardizer.fit(hs[LAYER])
    return with_bridge(backbone_flop_model(bb, LENGTH), den, LENGTH), den, stds


def per_token(fn):
    """FLOPs per generated token of a decode, without its timing warm-up."""
    from dihal.replace.hybrid import no_warmup

    with no_warmup():
        return count_flops(fn)[0] / LENGTH


def test_flop_model_of_the_backbone_adds_up(tiny_backbone, parts):
    bb = tiny_backbone
    model = parts[0]
    assert model.n_layers == bb.n_layers and all(f > 0 for f in model.block_flops)
    assert model.head_flops == 2 * bb.hidden_size * bb.model.config.vocab_size
    assert model.other_flops == pytest.approx(0.0, abs=1e-9)
    assert model.backbone() == pytest.approx(per_token(lambda: decode_backbone(bb, 1, LENGTH,
                                                                               seed=3)))


@pytest.mark.parametrize("steps", [1, 3])
def test_flop_model_predicts_the_counted_hybrids(tiny_backbone, parts, steps):
    bb = tiny_backbone
    model, den, stds = parts
    hybrid = Hybrid(bb, den, BrownianBridge(), *stds, layer=LAYER, sampler_steps=steps)
    counted = per_token(lambda: hybrid.decode(1, LENGTH, seed=5))
    assert counted == pytest.approx(model.hybrid(LAYER, steps), rel=1e-12)
    marginal = Hybrid(bb, den, BrownianBridge(), *stds, layer=LAYER, sampler_steps=steps, rule="marginal")
    assert per_token(lambda: marginal.decode(1, LENGTH, seed=5)) == pytest.approx(counted)
    drop = per_token(lambda: layer_drop_hybrid(bb, LAYER).decode(1, LENGTH, seed=5))
    assert drop == pytest.approx(model.hybrid(LAYER, 0), rel=1e-12)
    d = bb.hidden_size
    ridge = RidgeMap(torch.eye(d), torch.zeros(d), lam=1.0)
    counted_ridge = per_token(lambda: ridge_hybrid(bb, LAYER, ridge, *stds).decode(1, LENGTH,
                                                                                   seed=5))
    assert counted_ridge == pytest.approx(model.hybrid(LAYER, 0, ridge_map_flops(d, d)))


def test_break_even_by_hand():
    model = FlopModel(block_flops=(10.0,) * 4, head_flops=5.0, denoiser_step_flops=4.0)
    assert model.backbone() == 45.0 and model.hybrid(2, 3) == 37.0
    rows = {(r["layer"], r["steps"]): r for r in break_even(model, [0, 2, 3], [1, 4, 5])}
    assert rows[(2, 4)]["cheaper"] and not rows[(2, 5)]["cheaper"]  # 41 < 45; 45 is not
    assert rows[(2, 1)]["max_cheaper_steps"] == 4
    assert rows[(3, 5)]["cheaper"] and rows[(3, 1)]["max_cheaper_steps"] == 7  # 4K + 15 < 45
    assert not rows[(0, 1)]["cheaper"] and rows[(0, 1)]["max_cheaper_steps"] == 0
    assert rows[(2, 4)]["flops_vs_backbone"] == pytest.approx(41 / 45)
    with pytest.raises(ValueError, match="out of range"):
        model.hybrid(4, 1)
    with pytest.raises(ValueError, match="no bridge"):
        FlopModel((1.0,), 1.0).hybrid(0, 2)


def test_cost_rows_measure_every_model(tiny_backbone, parts):
    bb = tiny_backbone
    model, den, stds = parts
    subjects = [
        CostSubject("backbone", functools.partial(decode_backbone, bb)),
        CostSubject("layer-drop", layer_drop_hybrid(bb, LAYER).decode, layer=LAYER),
        CostSubject("DiHAL K=2", Hybrid(bb, den, BrownianBridge(), *stds, layer=LAYER,
                                        sampler_steps=2).decode, sampler_steps=2, layer=LAYER),
    ]
    rows = cost_rows(subjects, n=2, length=LENGTH, repeats=1)
    assert {r["flops_from"] for r in rows} == {"counted"}
    # priced by the FLOP model (no count), as the eval prices the backbone and DiHAL: the same
    priced = [replace(subjects[0], price=lambda m: m.backbone()),
              replace(subjects[2], price=lambda m: m.hybrid(LAYER, 2))]
    again = cost_rows(priced, n=2, length=LENGTH, repeats=1, model=model)
    assert [r["flops_from"] for r in again] == ["flop model"] * 2
    assert [r["flops_per_token"] for r in again] == pytest.approx(
        [rows[0]["flops_per_token"], rows[2]["flops_per_token"]], rel=1e-12)
    assert [r["model"] for r in rows] == ["backbone", "layer-drop", "DiHAL K=2"]
    assert rows[0]["flops_vs_backbone"] == 1.0 and rows[0]["ms_vs_backbone"] == 1.0
    assert rows[1]["flops_per_token"] == pytest.approx(model.hybrid(LAYER, 0))
    assert rows[2]["flops_per_token"] == pytest.approx(model.hybrid(LAYER, 2))
    assert all(r["ms_per_token"] > 0 and r["time_over_flops"] > 0 for r in rows)
    with pytest.raises(ValueError, match="at least one"):
        cost_rows([])
