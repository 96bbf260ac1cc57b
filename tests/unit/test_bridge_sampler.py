"""Samplers: exact with an oracle denoiser; incremental == full without recomputing the prefix."""

import pytest
import torch
from torch import nn

from dihal.bridge.denoiser import CausalDenoiser
from dihal.bridge.process import BrownianBridge
from dihal.bridge.sampler import IncrementalSampler, sample, time_grid
from dihal.net_configs import DenoiserConfig
from tests.tiny import randomised_denoiser

CFG = DenoiserConfig(d_in=6, d_model=32, n_layers=2, n_heads=4, max_len=16, time_embed_dim=16)


def randomised(seed: int = 0) -> CausalDenoiser:
    return randomised_denoiser(CFG, seed)


class Oracle(nn.Module):
    """Returns the true z0 whatever it is given."""

    def __init__(self, z0: torch.Tensor) -> None:
        super().__init__()
        self.z0 = z0

    def forward(self, x_t, t, c):
        return self.z0


class CountingDenoiser(nn.Module):
    """Wraps a denoiser and counts the positions it is asked to process."""

    def __init__(self, inner: CausalDenoiser) -> None:
        super().__init__()
        self.inner = inner
        self.positions = 0

    def new_cache(self):
        return self.inner.new_cache()

    def forward(self, x_t, t, c, **kwargs):
        self.positions += x_t.shape[1]
        return self.inner(x_t, t, c, **kwargs)


def test_time_grid_walks_from_one_to_zero():
    assert time_grid(4) == [(1.0, 0.75), (0.75, 0.5), (0.5, 0.25), (0.25, 0.0)]
    with pytest.raises(ValueError):
        time_grid(0)


@pytest.mark.parametrize("steps", [1, 3, 16])
@pytest.mark.parametrize("eta", [0.0, 1.0])
def test_oracle_denoiser_is_recovered_exactly(steps, eta):
    g = torch.Generator().manual_seed(0)
    z0, c = torch.randn(2, 5, 6, generator=g), torch.randn(2, 5, 6, generator=g)
    out = sample(Oracle(z0), c, BrownianBridge(), steps=steps, eta=eta, generator=g)
    assert torch.equal(out, z0)


def test_stochastic_sampler_is_reproducible_from_its_generator():
    model = randomised()
    c = torch.randn(2, 7, 6, generator=torch.Generator().manual_seed(1))

    def run(seed):
        return sample(
            model,
            c,
            BrownianBridge(),
            steps=4,
            eta=1.0,
            generator=torch.Generator().manual_seed(seed),
        )

    assert torch.equal(run(5), run(5))
    assert not torch.equal(run(5), run(6))
    assert torch.equal(
        sample(model, c, BrownianBridge(), steps=4), sample(model, c, BrownianBridge(), steps=4)
    )


def test_incremental_sampler_matches_full_sampler_without_recomputing():
    model = CountingDenoiser(randomised())
    process, steps, T = BrownianBridge(), 8, 9
    c = torch.randn(2, T, 6, generator=torch.Generator().manual_seed(2))
    full = sample(model.inner, c, process, steps=steps)

    sampler = IncrementalSampler(model, process, steps=steps)
    state = sampler.new_state()
    pieces = [sampler.extend(state, c[:, :3])]  # a prompt in one call
    for i in range(3, T):  # then one position at a time, as in generation
        pieces.append(sampler.extend(state, c[:, i : i + 1]))
    assert state.length == T and all(cache.length == T for cache in state.caches)
    assert model.positions == steps * T  # every position went through each step exactly once
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=0, atol=1e-5)


def test_incremental_sampler_with_noise_runs_reproducibly():
    model = randomised()
    c = torch.randn(1, 4, 6, generator=torch.Generator().manual_seed(3))
    sampler = IncrementalSampler(model, BrownianBridge(), steps=4, eta=1.0)

    def run():
        state = sampler.new_state(torch.Generator().manual_seed(0))
        return torch.cat([sampler.extend(state, c[:, i : i + 1]) for i in range(4)], dim=1)

    assert torch.equal(run(), run())
    assert not torch.allclose(run(), sample(model, c, BrownianBridge(), steps=4))


class RecordingOracle(Oracle):
    """Returns the true z0 and keeps every (t, x_t) it was shown."""

    def __init__(self, z0):
        super().__init__(z0)
        self.seen = []

    def forward(self, x_t, t, c):
        self.seen.append((t, x_t.clone()))
        return self.z0


@pytest.mark.parametrize("steps", [1, 4])
def test_marginal_rule_returns_the_prediction_at_zero(steps):
    g = torch.Generator().manual_seed(4)
    z0, c = torch.randn(2, 5, 6, generator=g), torch.randn(2, 5, 6, generator=g)
    assert torch.equal(sample(Oracle(z0), c, BrownianBridge(), steps=steps, rule="marginal"), z0)


@pytest.mark.parametrize("rule", ["marginal", "ancestral"])
def test_with_a_perfect_denoiser_only_the_marginal_rule_keeps_the_training_marginals(rule):
    """x_t shown to the denoiser at each t of the grid: mean (1 - t) z0 + t z1 and std
    sigma sqrt(t (1 - t)) over 64 x 200 x 4 samples under the marginal rule; noise-free
    under the ancestral rule with eta = 0 (its known flaw)."""
    g = torch.Generator().manual_seed(5)
    sigma = 1.5
    z0, c = torch.randn(64, 200, 4, generator=g), torch.randn(64, 200, 4, generator=g)
    oracle = RecordingOracle(z0)
    sample(oracle, c, BrownianBridge(sigma=sigma), steps=8, rule=rule, seed=3)
    assert [t for t, _ in oracle.seen] == [k / 8 for k in range(8, 0, -1)]
    for t, x_t in oracle.seen[1:]:
        resid = x_t - (1 - t) * z0 - t * c
        std = sigma * (t * (1 - t)) ** 0.5
        if rule == "marginal":
            assert abs(float(resid.mean())) < 0.02 * std
            assert float(resid.std()) == pytest.approx(std, rel=0.02)
            # one noise vector for the whole path: eps at t equals eps at the first step
            torch.testing.assert_close(resid / std, (oracle.seen[1][1] - (1 - 7 / 8) * z0
                                                     - 7 / 8 * c) / (sigma * (7 / 64) ** 0.5),
                                       rtol=0, atol=1e-4)
        else:
            assert float(resid.abs().max()) < 1e-5


def test_marginal_rule_noise_is_seeded_per_position():
    """A position's sample is the same whether the sequence ends there or goes on."""
    model = randomised()
    c = torch.randn(2, 9, 6, generator=torch.Generator().manual_seed(6))
    full = sample(model, c, BrownianBridge(), steps=4, rule="marginal", seed=11)
    for i in (0, 3, 7):
        short = sample(model, c[:, : i + 1], BrownianBridge(), steps=4, rule="marginal", seed=11)
        torch.testing.assert_close(short, full[:, : i + 1], rtol=0, atol=1e-5)
    other = sample(model, c, BrownianBridge(), steps=4, rule="marginal", seed=12)
    assert not torch.allclose(other, full)
    assert not torch.allclose(full, sample(model, c, BrownianBridge(), steps=4))


def test_incremental_marginal_sampler_matches_the_full_one():
    model = CountingDenoiser(randomised())
    process, steps, T = BrownianBridge(), 6, 8
    c = torch.randn(2, T, 6, generator=torch.Generator().manual_seed(7))
    full = sample(model.inner, c, process, steps=steps, rule="marginal", seed=2)
    sampler = IncrementalSampler(model, process, steps=steps, rule="marginal")
    state = sampler.new_state(seed=2)
    pieces = [sampler.extend(state, c[:, :3])] + [sampler.extend(state, c[:, i : i + 1])
                                                 for i in range(3, T)]
    assert model.positions == steps * T
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=0, atol=1e-5)


def test_unknown_rule_and_stochastic_marginal_rule_are_rejected():
    c = torch.zeros(1, 2, 6)
    with pytest.raises(ValueError, match="sampler rule must be one of"):
        sample(randomised(), c, BrownianBridge(), rule="ddim")
    with pytest.raises(ValueError, match="ancestral rule only"):
        IncrementalSampler(randomised(), BrownianBridge(), eta=1.0, rule="marginal")
