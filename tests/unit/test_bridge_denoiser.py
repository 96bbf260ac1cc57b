"""The causal denoiser: zero output at init, causality, incremental decoding."""

import pytest
import torch

from dihal.bridge.denoiser import CausalDenoiser, build_denoiser
from dihal.net_configs import DenoiserConfig
from tests.tiny import randomised_denoiser

CFG = DenoiserConfig(d_in=6, d_model=32, n_layers=2, n_heads=4, max_len=16, time_embed_dim=16)


def randomised(seed: int = 0) -> CausalDenoiser:
    return randomised_denoiser(CFG, seed)


def inputs(B=2, T=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, CFG.d_in, generator=g), torch.randn(B, T, CFG.d_in, generator=g)


def test_fresh_model_outputs_zeros():
    x, c = inputs()
    out = build_denoiser(CFG, 0)(x, 0.3, c)
    assert out.shape == x.shape
    assert torch.equal(out, torch.zeros_like(out))


def test_build_is_seeded_and_leaves_global_rng_alone():
    state = torch.random.get_rng_state()
    a, b = build_denoiser(CFG, 7), build_denoiser(CFG, 7)
    assert torch.equal(torch.random.get_rng_state(), state)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert a.param_count() == sum(p.numel() for p in a.parameters()) > 0


@torch.no_grad()
def test_output_at_i_ignores_positions_after_i():
    model = randomised()
    x, c = inputs()
    i = 4
    x2, c2 = x.clone(), c.clone()
    x2[:, i + 1 :] += 5.0
    c2[:, i + 1 :] -= 5.0
    out, out2 = model(x, 0.6, c), model(x2, 0.6, c2)
    torch.testing.assert_close(out[:, : i + 1], out2[:, : i + 1], rtol=0, atol=1e-6)
    assert not torch.allclose(out[:, i + 1 :], out2[:, i + 1 :])
    # and position i does see itself and its past
    c3 = c.clone()
    c3[:, i] += 1.0
    assert not torch.allclose(model(x, 0.6, c3)[:, i], out[:, i])


@torch.no_grad()
def test_time_changes_the_output_per_sequence():
    model = randomised()
    x, c = inputs()
    both = model(x, torch.tensor([0.2, 0.9]), c)
    torch.testing.assert_close(both[0], model(x[:1], 0.2, c[:1])[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(both[1], model(x[1:], 0.9, c[1:])[0], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(both[0], model(x[:1], 0.9, c[:1])[0])


@torch.no_grad()
def test_incremental_forward_matches_full_forward():
    model = randomised()
    x, c = inputs(T=10)
    t = torch.tensor([0.3, 0.7])
    full = model(x, t, c)
    cache = model.new_cache()
    pieces = [model(x[:, :3], t, c[:, :3], cache=cache, start_pos=0)]  # a prefix in one go
    pieces.append(model(x[:, 3:5], t, c[:, 3:5], cache=cache, start_pos=3))  # a chunk after it
    for i in range(5, 10):  # then one position at a time
        pieces.append(model(x[:, i : i + 1], t, c[:, i : i + 1], cache=cache, start_pos=i))
    assert cache.length == 10
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=0, atol=1e-5)


@torch.no_grad()
def test_cache_misuse_is_an_error():
    model = randomised()
    x, c = inputs(T=3)
    cache = model.new_cache()
    model(x, 0.5, c, cache=cache, start_pos=0)
    with pytest.raises(ValueError, match="cache holds 3"):
        model(x, 0.5, c, cache=cache, start_pos=0)
    with pytest.raises(ValueError, match="max_len"):
        x_long, c_long = inputs(T=CFG.max_len + 1)
        model(x_long, 0.5, c_long)
    with pytest.raises(ValueError, match=r"\(B, T, 6\)"):
        model(x, 0.5, c[..., :5])


def test_config_is_validated():
    with pytest.raises(ValueError, match="divisible"):
        DenoiserConfig(d_in=4, d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="d_in"):
        DenoiserConfig(d_in=0)
    assert DenoiserConfig.from_dict(CFG.to_dict()) == CFG


def test_bidirectional_denoiser_sees_later_positions():
    import dataclasses

    cfg = DenoiserConfig(d_in=8, d_model=16, n_layers=1, n_heads=2, max_len=16, causal=False)
    model = build_denoiser(cfg, seed=0)
    torch.nn.init.normal_(model.out_proj.weight)
    g = torch.Generator().manual_seed(0)
    x, c = torch.randn(1, 6, 8, generator=g), torch.randn(1, 6, 8, generator=g)
    y = model(x, 0.5, c)
    x2 = x.clone()
    x2[:, 5] += 1.0
    assert not torch.allclose(model(x2, 0.5, c)[:, 0], y[:, 0])  # position 0 sees position 5
    causal = build_denoiser(dataclasses.replace(cfg, causal=True), seed=0)
    causal.load_state_dict(model.state_dict())
    torch.testing.assert_close(causal(x2, 0.5, c)[:, 0], causal(x, 0.5, c)[:, 0])
    with pytest.raises(ValueError, match="bidirectional"):
        model(x, 0.5, c, cache=model.new_cache())
