"""The ridge-started denoiser (our variant, not the paper's): it starts at the ridge map exactly,
trains only f, decodes incrementally like the plain denoiser, and survives a state-dict round
trip."""

import pytest
import torch

from dihal.bridge.data import BridgeData
from dihal.bridge.denoiser import CausalDenoiser, build_denoiser
from dihal.bridge.measures import validation_loss
from dihal.bridge.process import BrownianBridge
from dihal.bridge.residual import (
    ResidualDenoiser,
    build_residual_denoiser,
    residual_denoiser_from_state,
    ridge_started_denoiser,
)
from dihal.bridge.sampler import IncrementalSampler, sample
from dihal.bridge.train import TrainConfig, train_bridge
from dihal.net_configs import DenoiserConfig
from dihal.replace.control_hybrids import fit_ridge

D, T = 4, 8
CFG = DenoiserConfig(d_in=D, d_model=32, n_layers=2, n_heads=2, max_len=T, time_embed_dim=16)
PROCESS = BrownianBridge()
A = torch.linalg.qr(torch.randn(D, D, generator=torch.Generator().manual_seed(123)))[0]


def context_data(n_seq: int, seed: int) -> BridgeData:
    """z0_i = c_i A + 0.8 c_{i-1}: a linear per-token part the ridge map fits and a part from the
    previous position that only a model of the context can add."""
    c = torch.randn(n_seq, T, D, generator=torch.Generator().manual_seed(seed))
    prev = torch.cat([torch.zeros(n_seq, 1, D), c[:, :-1]], dim=1)
    return BridgeData(c, c @ A + 0.8 * prev)


TRAIN, VAL = context_data(512, 1), context_data(64, 2)
RIDGE = fit_ridge(TRAIN, VAL)


def model(seed: int = 0) -> ResidualDenoiser:
    return build_residual_denoiser(CFG, seed, RIDGE.weight, RIDGE.bias)


def randomised(seed: int = 0) -> ResidualDenoiser:
    """Every weight of f random (a zero output would hide a wrong cache), ridge kept."""
    m = model(seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return m.eval()


@torch.no_grad()
def test_before_training_it_predicts_the_ridge_map_exactly():
    m = model()
    c, z0 = VAL.cond[:5], VAL.target[:5]
    x_t = PROCESS.marginal(z0, c, 0.4, torch.randn(c.shape, generator=torch.Generator().manual_seed(3)))
    for t in (1.0, 0.4, torch.tensor([0.1, 0.2, 0.5, 0.9, 1.0])):
        assert torch.equal(m(x_t, t, c), RIDGE(c))
    exact = RIDGE(c)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the ridge map is never rounded to bf16
        assert torch.equal(m(x_t, 0.4, c), exact)
    # its validation loss at any t is the ridge map's held-out error
    assert validation_loss(m, VAL, PROCESS) == pytest.approx(RIDGE.val_mse, rel=1e-5)


@pytest.mark.parametrize("rule,steps", [("ancestral", 1), ("ancestral", 4), ("marginal", 1),
                                        ("marginal", 4)])
@torch.no_grad()
def test_sampling_before_training_returns_the_ridge_endpoint(rule, steps):
    """The last step of either rule returns the prediction itself, and every prediction is R(c)."""
    m = model()
    c = VAL.cond[:3]
    assert torch.equal(sample(m, c, PROCESS, steps=steps, rule=rule, seed=5), RIDGE(c))
    inc = IncrementalSampler(m, PROCESS, steps=steps, rule=rule)
    state = inc.new_state(seed=5)
    out = torch.cat([inc.extend(state, c[:, :3]), inc.extend(state, c[:, 3:])], dim=1)
    assert torch.equal(out, RIDGE(c))


def test_f_starts_as_the_papers_denoiser_of_the_same_seed_and_leaves_the_rng_alone():
    torch.manual_seed(7)
    before = torch.random.get_rng_state()
    m = model(3)
    assert torch.equal(torch.random.get_rng_state(), before)
    plain = build_denoiser(CFG, 3).state_dict()
    state = m.state_dict()
    assert set(state) == set(plain) | {"ridge_weight", "ridge_bias"}
    assert all(torch.equal(state[k], v) for k, v in plain.items())
    # the budget study's factory, called under the bridge's seeded initialisation, is the same
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        made = ridge_started_denoiser(RIDGE, CFG).state_dict()
    assert set(made) == set(state) and all(torch.equal(made[k], v) for k, v in state.items())
    assert isinstance(m, CausalDenoiser) and m.cfg == CFG
    # the ridge is no parameter: param_count is f's alone, the plain denoiser's
    assert m.param_count() == build_denoiser(CFG, 3).param_count()
    assert {n for n, _ in m.named_parameters()} == {n for n, _ in build_denoiser(CFG, 3).named_parameters()}


@torch.no_grad()
def test_incremental_forward_and_sampler_match_the_full_pass():
    m = randomised()
    c = VAL.cond[:2]
    x = torch.randn(c.shape, generator=torch.Generator().manual_seed(4))
    t = torch.tensor([0.3, 0.7])
    full = m(x, t, c)
    assert not torch.allclose(full, RIDGE(c), atol=1e-3)  # f contributes: the check has teeth
    cache = m.new_cache()
    pieces = [m(x[:, :3], t, c[:, :3], cache=cache, start_pos=0)]
    for i in range(3, T):
        pieces.append(m(x[:, i : i + 1], t, c[:, i : i + 1], cache=cache, start_pos=i))
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=0, atol=1e-5)
    for rule in ("ancestral", "marginal"):
        whole = sample(m, c, PROCESS, steps=3, rule=rule, seed=9)
        inc = IncrementalSampler(m, PROCESS, steps=3, rule=rule)
        state = inc.new_state(seed=9)
        parts = [inc.extend(state, c[:, i : i + 1]) for i in range(T)]
        torch.testing.assert_close(torch.cat(parts, dim=1), whole, rtol=0, atol=1e-5)


def test_it_trains_f_only_and_beats_the_ridge_map_on_context(tmp_path):
    m = model()
    ridge_before = {k: v.clone() for k, v in m.state_dict().items() if k.startswith("ridge_")}
    start = validation_loss(m, VAL, PROCESS)
    cfg = TrainConfig(lr=1e-2, batch_size=16, warmup_frac=0.1, log_every=4)
    result = train_bridge(m, TRAIN, VAL, PROCESS, cfg, tmp_path)
    assert result.completed and result.step == 32
    assert result.val_loss < 0.8 * start  # below the ridge map's error: f learnt the context
    for k, v in ridge_before.items():  # the ridge buffers were not trained
        assert torch.equal(m.state_dict()[k], v)
    assert not any(p is m.ridge_weight or p is m.ridge_bias for p in m.parameters())


@torch.no_grad()
def test_state_dict_round_trip():
    m = randomised(2)
    back = residual_denoiser_from_state(CFG, m.state_dict())
    c = VAL.cond[:2]
    x = torch.randn(c.shape, generator=torch.Generator().manual_seed(8))
    assert torch.equal(back(x, 0.5, c), m(x, 0.5, c))
    assert torch.equal(back.ridge_weight, RIDGE.weight) and torch.equal(back.ridge_bias, RIDGE.bias)
    # a plain bridge's state is refused by name, and a residual's does not load as a plain one
    with pytest.raises(ValueError, match="ridge_weight, ridge_bias"):
        residual_denoiser_from_state(CFG, build_denoiser(CFG, 0).state_dict())
    with pytest.raises(RuntimeError, match="ridge_weight"):
        CausalDenoiser(CFG).load_state_dict(m.state_dict())


def test_a_ridge_of_the_wrong_width_is_refused():
    with pytest.raises(ValueError, match=r"weight \(4, 4\) and bias \(4,\).*fit_ridge"):
        build_residual_denoiser(CFG, 0, torch.zeros(5, 4), torch.zeros(4))
    with pytest.raises(ValueError, match="NaN or inf"):
        build_residual_denoiser(CFG, 0, torch.full((4, 4), float("nan")), torch.zeros(4))


@torch.no_grad()
def test_in_the_hybrid_it_starts_as_the_ridge_hybrid_and_decodes_cached_as_uncached(tiny_backbone):
    from dihal.bridge.data import Standardizer
    from dihal.replace.control_hybrids import RidgeMap, ridge_hybrid
    from dihal.replace.hybrid import Hybrid

    bb, layer = tiny_backbone, 2
    d = bb.hidden_size
    g = torch.Generator().manual_seed(11)
    ridge = RidgeMap(0.3 * torch.randn(d, d, generator=g), 0.1 * torch.randn(d, generator=g), 1.0)
    cond_std = Standardizer(0.1 * torch.randn(d, generator=g), 1 + torch.rand(d, generator=g))
    target_std = Standardizer(0.1 * torch.randn(d, generator=g), 1 + torch.rand(d, generator=g))
    first = torch.randn(d, generator=g)
    cfg = DenoiserConfig(d_in=d, d_model=32, n_layers=2, n_heads=4, max_len=32, time_embed_dim=16)
    ids = torch.randint(4, len(bb.tokenizer), (2, 9), generator=g)
    fresh = build_residual_denoiser(cfg, 0, ridge.weight, ridge.bias)
    hybrid = Hybrid(bb, fresh, PROCESS, cond_std, target_std, layer, sampler_steps=4, first_state=first)
    control = ridge_hybrid(bb, layer, ridge, cond_std, target_std, first)
    torch.testing.assert_close(hybrid.logits(ids), control.logits(ids), rtol=1e-5, atol=1e-5)
    trained = Hybrid(bb, randomised_like(fresh), PROCESS, cond_std, target_std, layer, sampler_steps=4,
                     first_state=first)
    cached = trained.generate(3, 6, seed=2, cached=True)
    assert torch.equal(cached, trained.generate(3, 6, seed=2, cached=False))


def randomised_like(m: ResidualDenoiser) -> ResidualDenoiser:
    """A copy of `m` with every weight of f random (a stand-in for a trained residual)."""
    out = residual_denoiser_from_state(m.cfg, m.state_dict())
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in out.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return out.eval()
