"""The Brownian bridge process: endpoints, posterior step, and its moments."""

import pytest
import torch

from dihal.bridge.process import BrownianBridge


def _states(seed: int = 0, shape=(3, 5, 4)):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g) for _ in range(3)]


def test_marginal_returns_the_endpoints_exactly_even_with_noise():
    z0, z1, eps = _states()
    bridge = BrownianBridge(sigma=2.0)
    assert torch.equal(bridge.marginal(z0, z1, 0.0, eps), z0)
    assert torch.equal(bridge.marginal(z0, z1, 1.0, eps), z1)
    # one time per sequence, broadcast over (T, d)
    x = bridge.marginal(z0, z1, torch.tensor([0.0, 1.0, 0.5]), eps)
    assert torch.equal(x[0], z0[0]) and torch.equal(x[1], z1[1])
    expected = 0.5 * z0[2] + 0.5 * z1[2] + 2.0 * 0.5 * eps[2]
    torch.testing.assert_close(x[2], expected)


def test_posterior_step_at_zero_returns_the_prediction():
    z0_hat, x_t, eps = _states(1)
    bridge = BrownianBridge()
    assert torch.equal(bridge.posterior_step(z0_hat, x_t, 0.25, 0.0), z0_hat)
    assert torch.equal(bridge.posterior_step(z0_hat, x_t, 0.25, 0.0, eta=1.0, eps=eps), z0_hat)
    s = torch.zeros(3)
    assert torch.equal(
        bridge.posterior_step(z0_hat, x_t, torch.full((3,), 0.25), s, 1.0, eps), z0_hat
    )


def test_posterior_step_deterministic_formula_and_eta_needs_noise():
    z0_hat, x_t, _ = _states(2)
    bridge = BrownianBridge()
    x_s = bridge.posterior_step(z0_hat, x_t, 0.8, 0.2)
    torch.testing.assert_close(x_s, 0.75 * z0_hat + 0.25 * x_t)
    with pytest.raises(ValueError, match="eps"):
        bridge.posterior_step(z0_hat, x_t, 0.8, 0.2, eta=1.0)


def test_stochastic_posterior_step_keeps_the_bridge_marginal():
    """x_t on the bridge, then eta = 1 with the true z0: x_s must have the bridge marginal at s."""
    g = torch.Generator().manual_seed(3)
    n, sigma, t, s = 200_000, 1.5, 0.7, 0.3
    z0, z1 = torch.full((n, 1, 1), 2.0), torch.full((n, 1, 1), -1.0)
    bridge = BrownianBridge(sigma=sigma)
    x_t = bridge.marginal(z0, z1, t, torch.randn(n, 1, 1, generator=g))
    x_s = bridge.posterior_step(z0, x_t, t, s, eta=1.0, eps=torch.randn(n, 1, 1, generator=g))
    assert abs(x_s.mean().item() - ((1 - s) * 2.0 + s * -1.0)) < 0.01
    assert abs(x_s.var().item() - sigma**2 * s * (1 - s)) < 0.01


def test_sample_t_is_seeded_and_inside_the_open_interval():
    bridge = BrownianBridge(t_eps=1e-3)
    a = bridge.sample_t(1000, torch.Generator().manual_seed(0))
    b = bridge.sample_t(1000, torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.shape == (1000,) and a.dtype == torch.float32
    assert a.min() >= 1e-3 and a.max() <= 1 - 1e-3


def test_invalid_parameters_are_rejected():
    with pytest.raises(ValueError):
        BrownianBridge(sigma=-1.0)
    with pytest.raises(ValueError):
        BrownianBridge(t_eps=0.5)


def test_marginal_step_returns_the_prediction_at_zero_and_reuses_the_implied_noise():
    z0, z1, eps = _states(3)
    bridge = BrownianBridge(sigma=1.5)
    x_t = bridge.marginal(z0, z1, 0.6, eps)
    assert torch.equal(bridge.marginal_step(z0, x_t, z1, 0.6, 0.0), z0)
    torch.testing.assert_close(bridge.implied_noise(z0, x_t, z1, 0.6), eps)
    # with the true endpoint the step lands on the marginal at s with the same noise
    torch.testing.assert_close(bridge.marginal_step(z0, x_t, z1, 0.6, 0.3),
                               bridge.marginal(z0, z1, 0.3, eps))
    # an explicit eps replaces the implied one
    other = torch.ones_like(eps)
    torch.testing.assert_close(bridge.marginal_step(z0, x_t, z1, 0.6, 0.3, eps=other),
                               bridge.marginal(z0, z1, 0.3, other))


def test_marginal_step_from_t_one_needs_its_noise():
    z0, z1, eps = _states(4)
    bridge = BrownianBridge()
    with pytest.raises(ValueError, match="implied noise is undefined"):
        bridge.marginal_step(z0, z1, z1, 1.0, 0.5)
    torch.testing.assert_close(bridge.marginal_step(z0, z1, z1, 1.0, 0.5, eps=eps),
                               bridge.marginal(z0, z1, 0.5, eps))
    # sigma = 0: the marginal has no noise and none is needed
    flat = BrownianBridge(sigma=0.0)
    torch.testing.assert_close(flat.marginal_step(z0, z1, z1, 1.0, 0.25), 0.75 * z0 + 0.25 * z1)
