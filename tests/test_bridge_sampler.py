"""Samplers: exact with an oracle denoiser; incremental == full without recomputing the prefix."""

import pytest
import torch
from torch import nn

from dihal.bridge.denoiser import CausalDenoiser, DenoiserConfig
from dihal.bridge.process import BrownianBridge
from dihal.bridge.sampler import IncrementalSampler, sample, time_grid
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
