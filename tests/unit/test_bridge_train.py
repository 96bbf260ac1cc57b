"""Training under the fixed protocol: loss falls, resume is exact, NaN stops cleanly."""

import json
import math

import pytest
import torch

from dihal.bridge.data import BridgeData, Standardizer
from dihal.bridge.denoiser import CausalDenoiser, build_denoiser
from dihal.bridge.loss import squared_error
from dihal.bridge.measures import reconstruction_error, validation_loss
from dihal.bridge.process import BrownianBridge
from dihal.bridge.train import (
    BridgeTrainingError,
    TrainConfig,
    lr_at,
    sample_order,
    total_steps,
    train_bridge,
)
from dihal.checkpoint import latest_checkpoint, list_checkpoints, load_into, read_state
from dihal.net_configs import DenoiserConfig
from dihal.rows import ValidationPoint
from tests.tiny import TOY_D, TOY_T, toy_data, toy_denoiser_config

D, T = TOY_D, TOY_T
CFG = toy_denoiser_config()
PROCESS = BrownianBridge()


def params(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def reload(path) -> CausalDenoiser:
    """The denoiser of checkpoint `path`, rebuilt from the config it records."""
    model = CausalDenoiser(DenoiserConfig.from_dict(read_state(path)["denoiser_config"]))
    load_into(path, model)
    return model


def test_loss_falls_on_a_toy_problem(tmp_path):
    train, val = toy_data(512, 1, mask=True), toy_data(64, 2, mask=True)
    model = build_denoiser(CFG, 0)
    before = validation_loss(model, val, PROCESS)
    cfg = TrainConfig(lr=1e-2, batch_size=16, warmup_frac=0.1, log_every=4)
    seen = []
    result = train_bridge(model, train, val, PROCESS, cfg, tmp_path, progress=seen.append)
    assert result.completed and result.step == result.total_steps == 32
    assert result.val_loss < before / 5
    assert result.curve[-1].loss < result.curve[0].loss / 4
    assert result.val_curve[-1] == ValidationPoint(32, result.val_loss)
    assert seen[-1]["val_loss"] == result.val_loss and seen[0]["total_steps"] == 32
    # the sampler reconstructs much better than the zero prediction (relative error 1)
    assert reconstruction_error(model, val, PROCESS, steps=4) < 0.5
    # the checkpoint is the trained model
    assert result.checkpoint == latest_checkpoint(tmp_path)
    reloaded = reload(result.checkpoint)
    for k, v in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[k], v)
    assert read_state(result.checkpoint)["done"] is True


def test_regression_control_learns_the_map_in_one_step(tmp_path):
    """EndpointRegression: trained only at t = 1 (x_1 = c, no noise), validated there; the
    one-step sampler returns f(c, 1, c), its prediction of z0."""
    from dihal.bridge.process import REGRESSION_T_GRID, EndpointRegression
    from dihal.bridge.sampler import sample

    process = EndpointRegression()
    assert torch.equal(process.sample_t(5, torch.Generator().manual_seed(0)), torch.ones(5))
    train, val = toy_data(512, 1, mask=True), toy_data(64, 2, mask=True)
    model = build_denoiser(CFG, 0)
    before = validation_loss(model, val, process, REGRESSION_T_GRID)
    cfg = TrainConfig(lr=1e-2, batch_size=16, warmup_frac=0.1, val_t_grid=REGRESSION_T_GRID)
    result = train_bridge(model, train, val, process, cfg, tmp_path)
    assert result.val_loss < before / 5
    c, z0, m = val.batch(slice(0, 64), torch.device("cpu"))
    with torch.no_grad():
        direct = model(c, torch.ones(c.shape[0]), c)
    torch.testing.assert_close(sample(model, c, process, steps=1), direct)
    assert squared_error(direct, z0, m)[0] / squared_error(torch.zeros_like(z0), z0, m)[0] < 0.2


def _small_run_setup():
    cfg = TrainConfig(lr=5e-3, batch_size=4, checkpoint_every=4, log_every=2, eval_every=4)
    return toy_data(48, 3), toy_data(8, 4), cfg


def test_resume_after_stop_equals_uninterrupted_run(tmp_path):
    train, val, cfg = _small_run_setup()
    reference = build_denoiser(CFG, 0)
    ref = train_bridge(reference, train, val, PROCESS, cfg, tmp_path / "ref")

    model = build_denoiser(CFG, 0)
    first = train_bridge(model, train, val, PROCESS, cfg, tmp_path / "run", stop_after=6)
    assert not first.completed and first.step == 6 and first.val_loss is None
    assert [p.name for p in list_checkpoints(tmp_path / "run")] == ["step-00000006"]

    resumed = build_denoiser(CFG, 99)  # a fresh process would start from other weights
    second = train_bridge(resumed, train, val, PROCESS, cfg, tmp_path / "run")
    assert second.resumed_from == 6 and second.completed
    for k, v in params(reference).items():
        assert torch.equal(resumed.state_dict()[k], v), k
    assert second.curve == ref.curve and second.val_curve == ref.val_curve
    assert second.val_loss == ref.val_loss and len(ref.val_curve) == 3  # steps 4, 8 and 12

    # a finished run called again is a no-op returning the same result
    again = train_bridge(build_denoiser(CFG, 5), train, val, PROCESS, cfg, tmp_path / "run")
    assert again.step == ref.step and again.val_loss == ref.val_loss and again.curve == ref.curve


def test_resume_after_crash_equals_uninterrupted_run(tmp_path):
    train, val, cfg = _small_run_setup()
    reference = build_denoiser(CFG, 0)
    ref = train_bridge(reference, train, val, PROCESS, cfg, tmp_path / "ref")

    def crash_at_step_6(entry):
        if entry.get("step") == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_bridge(
            build_denoiser(CFG, 0), train, val, PROCESS, cfg, tmp_path / "run", crash_at_step_6
        )
    assert latest_checkpoint(tmp_path / "run").name == "step-00000004"

    resumed = build_denoiser(CFG, 0)
    result = train_bridge(resumed, train, val, PROCESS, cfg, tmp_path / "run")
    assert result.resumed_from == 4 and result.curve == ref.curve
    for k, v in params(reference).items():
        assert torch.equal(resumed.state_dict()[k], v), k


def test_resume_with_another_protocol_is_refused(tmp_path):
    train, val, cfg = _small_run_setup()
    train_bridge(build_denoiser(CFG, 0), train, val, PROCESS, cfg, tmp_path, stop_after=4)
    with pytest.raises(ValueError, match="lr"):
        train_bridge(
            build_denoiser(CFG, 0),
            train,
            val,
            PROCESS,
            TrainConfig(lr=1e-3, batch_size=4),
            tmp_path,
        )


def test_nan_loss_stops_with_the_step_and_keeps_the_last_good_checkpoint(tmp_path):
    train, val, cfg = _small_run_setup()
    # poison the first sequence of the 3rd batch (step 3); a checkpoint is written every 2 steps
    cfg = TrainConfig(lr=5e-3, batch_size=4, checkpoint_every=2, log_every=1)
    bad = sample_order(len(train), cfg)[2 * cfg.batch_size].item()
    target = train.target.clone()
    target[bad, 0, 0] = float("nan")
    poisoned = BridgeData(train.cond, target)

    model = build_denoiser(CFG, 0)
    with pytest.raises(BridgeTrainingError, match="step 3") as info:
        train_bridge(model, poisoned, val, PROCESS, cfg, tmp_path)
    assert info.value.step == 3
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt.name == "step-00000002"
    state = json.loads((ckpt / "state.json").read_text())
    assert state["step"] == 2 and len(state["curve"]) == 2
    reloaded = reload(ckpt)
    assert all(torch.isfinite(p).all() for p in reloaded.parameters())
    # the update that met the NaN was not applied
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_validation_loss_is_deterministic():
    val = toy_data(10, 5, mask=True)
    model = build_denoiser(CFG, 0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(0)))
    torch.manual_seed(1)
    a = validation_loss(model, val, PROCESS, batch_size=4)
    torch.manual_seed(2)
    b = validation_loss(model, val, PROCESS, batch_size=4)
    assert a == b and math.isfinite(a)
    assert validation_loss(model, val, PROCESS, batch_size=4, seed=1) != a
    # a fresh model predicts zero: the loss is the mean square of the real target tokens
    zero = build_denoiser(CFG, 0)
    expected = squared_error(torch.zeros_like(val.target), val.target, val.mask)
    assert validation_loss(zero, val, PROCESS) == pytest.approx(
        float(expected[0] / expected[1]), rel=1e-5
    )
    assert reconstruction_error(zero, val, PROCESS, steps=2) == pytest.approx(1.0)


def test_bf16_autocast_runs(tmp_path):
    train, val = toy_data(16, 6), toy_data(4, 7)
    cfg = TrainConfig(lr=3e-4, batch_size=4, mixed_precision="bf16", log_every=1)
    model = build_denoiser(CFG, 0)
    result = train_bridge(model, train, val, PROCESS, cfg, tmp_path)
    assert result.completed and all(math.isfinite(e.loss) for e in result.curve)
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_protocol_pieces():
    cfg = TrainConfig(lr=1.0, batch_size=4, warmup_frac=0.1, min_lr_frac=0.1, epochs=1.5)
    order = sample_order(10, cfg)
    assert len(order) == 15 and sorted(order[:10].tolist()) == list(range(10))
    assert torch.equal(order, sample_order(10, cfg))
    assert total_steps(10, cfg) == 4
    n = 100
    assert lr_at(0, n, cfg) == pytest.approx(0.1) and lr_at(9, n, cfg) == pytest.approx(1.0)
    assert lr_at(n - 1, n, cfg) == pytest.approx(0.1, abs=1e-3)
    with pytest.raises(ValueError, match="batch_size"):
        TrainConfig(batch_size=0)
    assert TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


def test_standardizer_round_trip():
    x = 3.0 + 2.0 * torch.randn(20, T, D, generator=torch.Generator().manual_seed(0))
    mask = torch.ones(20, T, dtype=torch.bool)
    mask[:, -2:] = False
    x[:, -2:] = 1e6  # padding must not move the statistics
    st = Standardizer.fit(x, mask, chunk=7)
    z = st.apply(x)[mask]
    assert z.mean(0).abs().max() < 1e-5 and (z.std(0) - 1).abs().max() < 1e-5
    torch.testing.assert_close(st.invert(st.apply(x[:, :-2])), x[:, :-2])


def test_data_is_validated():
    with pytest.raises(ValueError, match="float32"):
        BridgeData(
            torch.zeros(2, 3, 4, dtype=torch.float64), torch.zeros(2, 3, 4, dtype=torch.float64)
        )
    with pytest.raises(ValueError, match="mask"):
        BridgeData(torch.zeros(2, 3, 4), torch.zeros(2, 3, 4), torch.ones(2, 3))
