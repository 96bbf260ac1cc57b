"""Embedding-space baselines: the Gaussian schedules and DDIM step, Diffusion-LM and SED."""

import math
from functools import cache

import pytest
import torch

from dihal.bridge.denoiser import build_denoiser
from dihal.checkpoint import latest_checkpoint, list_checkpoints, load_into
from dihal.compare.baselines import build_baseline, common, sed
from dihal.compare.baselines import diffusion_lm as dlm
from dihal.compare.baselines.base import BudgetMismatchError, baseline_loss, check_budget
from dihal.compare.baselines.schedules import (
    CosineSchedule,
    SqrtSchedule,
    ddim_step,
    q_sample,
    time_grid,
    v_target,
    x0_from_v,
)
from dihal.errors import CheckpointMismatchError, TrainingError
from dihal.generation_rows import Budget
from dihal.net_configs import DenoiserConfig, TrainConfig
from dihal.training import sample_budget, train_model

V, D, T = 50, 16, 8
SCHEDULES = [SqrtSchedule(), CosineSchedule()]
# The DiHAL bridge denoiser at the toy size, and at SmolLM2's (d = 576).
TINY_TARGET = build_denoiser(DenoiserConfig(d_in=D, d_model=32, n_layers=2, n_heads=2), 0).param_count()
# Four repeated patterns: a corpus a tiny denoiser learns in ~100 steps.
PATTERNS = torch.tensor([
    [1, 2, 3, 4, 1, 2, 3, 4],
    [5, 6, 7, 8, 9, 10, 11, 12],
    [20, 21, 20, 21, 20, 21, 20, 21],
    [30, 31, 32, 33, 34, 35, 36, 37],
])


@cache
def smollm2_bridge_parameters() -> int:
    """The DiHAL bridge denoiser's size on SmolLM2 (d = 576): 4,881,216."""
    return build_denoiser(DenoiserConfig(d_in=576), 0).param_count()


def _embeddings() -> torch.Tensor:
    return torch.randn(V, D, generator=torch.Generator().manual_seed(0))


def _tiny(name: str, seed: int = 0):
    if name == "diffusion-lm":
        return dlm.build(_embeddings(), T, TINY_TARGET, seed,
                         config=dlm.DiffusionLMConfig(embed_dim=D))
    return sed.build(_embeddings(), T, TINY_TARGET, seed)


def _states(seed: int = 0, shape=(3, 5, 4)):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g) for _ in range(2)]


# --- schedules ------------------------------------------------------------------------------


def test_schedule_endpoints_and_monotonicity():
    t = torch.linspace(0, 1, 1001)
    sq, cos = SqrtSchedule(), CosineSchedule()
    assert sq.alpha_bar(0.0).item() == pytest.approx(1 - math.sqrt(1e-4))
    assert cos.alpha_bar(0.0).item() == pytest.approx(1.0, abs=1e-7)
    for sched in SCHEDULES:
        ab = sched.alpha_bar(t)
        assert sched.alpha_bar(1.0).item() == pytest.approx(sched.min_alpha_bar)
        assert (ab > 0).all() and (ab <= 1).all()
        assert (ab.diff() <= 0).all()
        assert (ab[:999].diff() < 0).all()  # strictly decreasing before the floor


def test_q_sample_at_zero_is_the_data_and_at_one_the_noise():
    x0, eps = _states()
    assert torch.equal(q_sample(x0, 0.0, eps, CosineSchedule()), x0)
    near = q_sample(x0, 0.0, eps, SqrtSchedule())  # Diffusion-LM's first level: 0.1 std noise
    torch.testing.assert_close(near, math.sqrt(0.99) * x0 + 0.1 * eps)
    for sched in SCHEDULES:
        torch.testing.assert_close(q_sample(x0, 1.0, eps, sched), eps, atol=1e-2, rtol=0)
        # one time per sequence
        x = q_sample(x0, torch.tensor([0.0, 0.5, 1.0]), eps, sched)
        torch.testing.assert_close(x[1], q_sample(x0[1], 0.5, eps[1], sched))


def test_ddim_step_with_the_oracle_x0_follows_the_forward_process():
    x0, eps = _states(1)
    for sched in SCHEDULES:
        x_t = q_sample(x0, 0.7, eps, sched)
        # eta = 0 keeps the same noise: x_s is q_sample at s with that eps
        torch.testing.assert_close(ddim_step(x0, x_t, 0.7, 0.3, sched), q_sample(x0, 0.3, eps, sched))
        # s = 0 returns the prediction exactly, with or without fresh noise
        assert torch.equal(ddim_step(x0, x_t, 0.7, 0.0, sched), x0)
        g = torch.Generator().manual_seed(0)
        assert torch.equal(ddim_step(x0, x_t, 0.7, 0.0, sched, eta=1.0, generator=g), x0)
        s = torch.tensor([0.0, 0.3, 0.0])
        x_s = ddim_step(x0, x_t, torch.full((3,), 0.7), s, sched)
        assert torch.equal(x_s[0], x0[0]) and not torch.equal(x_s[1], x0[1])


def test_stochastic_ddim_step_keeps_the_marginal_and_needs_a_generator():
    """x_t ~ q(x_t | x0), then eta = 1 with the true x0: x_s must have q(x_s | x0)'s moments."""
    g = torch.Generator().manual_seed(3)
    n, t, s = 200_000, 0.8, 0.4
    x0 = torch.full((n, 1, 1), 1.5)
    for sched in SCHEDULES:
        x_t = q_sample(x0, t, torch.randn(n, 1, 1, generator=g), sched)
        x_s = ddim_step(x0, x_t, t, s, sched, eta=1.0, generator=g)
        ab = sched.alpha_bar(s).item()
        assert abs(x_s.mean().item() - math.sqrt(ab) * 1.5) < 0.01
        assert abs(x_s.var().item() - (1 - ab)) < 0.01
        with pytest.raises(ValueError, match="Generator"):
            ddim_step(x0, x_t, t, s, sched, eta=1.0)
        a = ddim_step(x0[:9], x_t[:9], t, s, sched, 1.0, torch.Generator().manual_seed(5))
        b = ddim_step(x0[:9], x_t[:9], t, s, sched, 1.0, torch.Generator().manual_seed(5))
        assert torch.equal(a, b)


def test_time_grid_and_v_round_trip():
    grid = time_grid(4)
    assert grid.tolist() == [1.0, 0.75, 0.5, 0.25, 0.0]
    with pytest.raises(ValueError):
        time_grid(0)
    x0, eps = _states(2)
    sched = CosineSchedule()
    x_t = q_sample(x0, 0.6, eps, sched)
    torch.testing.assert_close(x0_from_v(v_target(x0, eps, 0.6, sched), x_t, 0.6, sched), x0)


# --- matched budget -------------------------------------------------------------------------


def test_fit_denoiser_config_predicts_the_built_size():
    cfg = common.fit_denoiser_config(D, TINY_TARGET, max_len=T)
    assert build_denoiser(cfg, 0).param_count() == TINY_TARGET  # the same shape exists
    assert cfg.d_model % cfg.n_heads == 0 and cfg.head_dim % 2 == 0 and not cfg.causal
    cfg = common.fit_denoiser_config(24, 3 * TINY_TARGET, max_len=T)
    n = build_denoiser(cfg, 0).param_count()
    assert abs(n - 3 * TINY_TARGET) <= 0.1 * 3 * TINY_TARGET
    with pytest.raises(ValueError, match="no denoiser"):
        common.fit_denoiser_config(D, 1000, max_len=T)


@pytest.mark.parametrize("name", ["diffusion-lm", "sed"])
def test_build_at_smollm2_size_matches_the_bridge_and_the_budget_check(name):
    target = smollm2_bridge_parameters()
    embeddings = torch.ones(49152, 576)  # the values do not matter for the size
    model = build_baseline(name, embeddings=embeddings, seq_len=128, target_params=target,
                           seed=0, bos_id=1, eos_id=2)
    n = model.denoiser_parameters()
    assert abs(n - target) <= 0.10 * target
    reference = Budget(target, train_tokens=65536, sampler_steps=16, seq_len=128)
    check_budget(reference, Budget(n, 65536, 16, 128), name)
    for bad in (Budget(n, 65535, 16, 128), Budget(n, 65536, 32, 128), Budget(2 * n, 65536, 16, 128),
                Budget(n, 65536, 16, 64)):
        with pytest.raises(BudgetMismatchError):
            check_budget(reference, bad, name)


# --- the two baselines ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["diffusion-lm", "sed"])
def test_loss_falls_on_repeated_patterns_and_training_resumes(name, tmp_path):
    ids = PATTERNS.repeat(4, 1)
    model = _tiny(name)

    def fixed_noise_loss(m) -> float:
        with torch.no_grad():
            return sum(float(m.loss(ids, torch.Generator().manual_seed(100 + i))) for i in range(4)) / 4

    before = fixed_noise_loss(model)
    cfg = TrainConfig(batch_size=8, epochs=50, lr=3e-3, checkpoint_every=1000)
    out = train_model(model, baseline_loss(ids), len(ids), cfg, tmp_path)
    assert out.step == 100 and sample_budget(len(ids), cfg) * T == 50 * ids.numel()
    after = fixed_noise_loss(model)
    assert after < before / 2, (before, after)
    # a fresh model resumes from the finished checkpoint (SED's frozen table is not in it)
    fresh = _tiny(name, seed=1)
    again = train_model(fresh, baseline_loss(ids), len(ids), cfg, tmp_path)
    assert again.resumed_from == 100
    assert fixed_noise_loss(fresh) == pytest.approx(after)


@pytest.mark.parametrize("name", ["diffusion-lm", "sed"])
def test_sample_is_seeded_valid_ids_in_exactly_steps_calls(name):
    model = _tiny(name)
    calls = []
    model.denoiser.register_forward_hook(lambda mod, args, out: calls.append((args, out)))
    a = model.sample(3, T - 2, 5, torch.Generator().manual_seed(7))
    assert len(calls) == 5
    assert a.shape == (3, T - 2) and a.dtype == torch.int64
    assert a.min() >= 0 and a.max() < V
    assert torch.equal(a, model.sample(3, T - 2, 5, torch.Generator().manual_seed(7)))
    with pytest.raises(ValueError, match="length"):
        model.sample(1, T + 1, 2, torch.Generator().manual_seed(0))


def test_sed_self_conditions_on_the_previous_estimate_and_freezes_normalised_embeddings():
    model = _tiny("sed")
    assert torch.allclose(model.table.norm(dim=-1), torch.full((V,), math.sqrt(D)))
    assert "table" not in model.state_dict()
    assert all(p is not model.table for p in model.parameters())
    with torch.no_grad():  # a non-zero output, so that the estimate fed back is visible
        model.denoiser.out_proj.weight.normal_(generator=torch.Generator().manual_seed(0))
    calls = []
    model.denoiser.register_forward_hook(lambda mod, args, out: calls.append((args, out)))
    model.sample(2, T, 3, torch.Generator().manual_seed(0))
    assert not calls[0][0][2].any()  # c = 0 at the first step
    for prev, cur in zip(calls, calls[1:], strict=False):
        assert torch.equal(cur[0][2], prev[1])


def test_diffusion_lm_rounds_to_its_own_learned_embeddings():
    model = _tiny("diffusion-lm")
    table = model.embedding
    assert table.requires_grad and table.shape == (V, D)
    ids = torch.tensor([[3, 0, 49, 7]])
    assert torch.equal(common.round_to_vocab(table[ids] + 0.01, table.detach()), ids)
    ids = PATTERNS[:2]
    model.loss(ids, torch.Generator().manual_seed(0)).backward()
    assert table.grad is not None and table.grad[ids.flatten()].abs().sum() > 0


# --- the shared training loop on the baselines' path ------------------------------------------


def test_non_finite_gradient_stops_with_the_step_and_keeps_the_last_good_checkpoint(tmp_path):
    ids = PATTERNS.repeat(2, 1)
    model = _tiny("sed")
    weight = model.denoiser.out_proj.weight
    backwards = []

    def poison_third(grad):  # the loss stays finite; only the gradient of step 3 is not
        backwards.append(1)
        return grad * float("nan") if len(backwards) == 3 else grad

    weight.register_hook(poison_third)
    cfg = TrainConfig(lr=3e-3, batch_size=2, checkpoint_every=2, log_every=1)
    with pytest.raises(TrainingError, match="gradient norm .* at step 3") as info:
        train_model(model, baseline_loss(ids), len(ids), cfg, tmp_path)
    assert info.value.step == 3
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000002"]
    # the update that met the NaN was not applied
    assert all(torch.isfinite(p).all() for p in model.parameters())
    reloaded = _tiny("sed", seed=1)
    load_into(latest_checkpoint(tmp_path), reloaded)
    assert all(torch.isfinite(p).all() for p in reloaded.parameters())


def test_resume_under_another_learning_rate_is_refused(tmp_path):
    ids = PATTERNS.repeat(2, 1)
    cfg = TrainConfig(lr=3e-3, batch_size=2, log_every=1)
    train_model(_tiny("diffusion-lm"), baseline_loss(ids), len(ids), cfg, tmp_path,
                protocol={"baseline": "diffusion-lm"}, stop_after=2)
    with pytest.raises(CheckpointMismatchError, match=r"different protocol: lr: 0.003 -> 0.001"):
        train_model(_tiny("diffusion-lm"), baseline_loss(ids), len(ids),
                    TrainConfig(lr=1e-3, batch_size=2, log_every=1), tmp_path,
                    protocol={"baseline": "diffusion-lm"})
    with pytest.raises(CheckpointMismatchError, match="baseline"):  # another model's checkpoint
        train_model(_tiny("sed"), baseline_loss(ids), len(ids), cfg, tmp_path,
                    protocol={"baseline": "sed"})
    # only what is written how often may change
    again = train_model(_tiny("diffusion-lm"), baseline_loss(ids), len(ids),
                        TrainConfig(lr=3e-3, batch_size=2, log_every=1, checkpoint_every=3),
                        tmp_path, protocol={"baseline": "diffusion-lm"})
    assert again.resumed_from == 2 and again.completed


def test_bf16_autocast_runs_on_cpu(tmp_path):
    ids = PATTERNS.repeat(2, 1)
    model = _tiny("diffusion-lm")
    autocast_seen = []
    loss = model.loss

    def recording_loss(batch, generator):
        autocast_seen.append(torch.is_autocast_enabled("cpu"))
        return loss(batch, generator)

    model.loss = recording_loss
    cfg = TrainConfig(lr=3e-3, batch_size=4, mixed_precision="bf16", log_every=1)
    result = train_model(model, baseline_loss(ids), len(ids), cfg, tmp_path)
    assert result.completed and autocast_seen == [True, True]
    assert all(math.isfinite(e.loss) and math.isfinite(e.grad_norm) for e in result.curve)
    assert all(p.dtype == torch.float32 for p in model.parameters())
