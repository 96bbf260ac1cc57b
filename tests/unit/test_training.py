"""The shared training loop: the bridge's wrapper adds nothing to it, the protocol's validation
seed is the evaluation's, checkpoints are swapped in safely, and the errors share one root."""

import os
import pickle
import socket
import subprocess
import sys
from dataclasses import asdict

import pytest
import torch

from dihal.bridge.denoiser import build_denoiser, denoiser_config_of
from dihal.bridge.measures import validation_loss
from dihal.bridge.process import BrownianBridge
from dihal.bridge.train import (
    BridgeTrainingError,
    bridge_training_loss,
    loop_config,
    train_bridge,
)
from dihal.checkpoint import latest_checkpoint, list_checkpoints, save_checkpoint
from dihal.config import BridgeProtocol
from dihal.errors import CheckpointMismatchError, DihalError, TrainingError
from dihal.net_configs import DenoiserConfig, TrainConfig
from dihal.training import train_model
from tests.tiny import toy_data, toy_denoiser_config

CFG = toy_denoiser_config()
PROCESS = BrownianBridge()


def test_train_bridge_is_the_shared_loop_with_the_bridge_loss(tmp_path):
    train, val = toy_data(24, 3, mask=True), toy_data(8, 4, mask=True)
    cfg = TrainConfig(lr=5e-3, batch_size=4, epochs=1.5, log_every=2, eval_every=4)
    wrapped = build_denoiser(CFG, 0)
    a = train_bridge(wrapped, train, val, PROCESS, cfg, tmp_path / "a")

    direct = build_denoiser(CFG, 0)
    b = train_model(
        direct,
        bridge_training_loss(train, PROCESS),
        len(train),
        cfg,
        tmp_path / "b",
        protocol={"denoiser_config": direct.cfg.to_dict(), "process": asdict(PROCESS)},
        validate=lambda: validation_loss(direct, val, PROCESS, cfg.val_t_grid, cfg.val_seed),
    )
    for k, v in wrapped.state_dict().items():
        assert torch.equal(direct.state_dict()[k], v), k
    assert a.step == b.step == 9 and a.curve == b.curve
    assert a.val_loss == b.val_loss and a.val_curve == b.val_curve


def test_a_training_on_the_cpu_forces_no_garbage_collection(tmp_path, monkeypatch):
    """After training, accelerate's release of memory empties a GPU's cache; on the CPU it is
    only a full garbage collection (a third of a second in a process with a large heap, for
    every model trained), which the loop leaves out."""
    import gc

    collected = []
    monkeypatch.setattr(gc, "collect", lambda *a: collected.append(a) or 0)
    train, val = toy_data(16, 5, mask=True), toy_data(8, 6, mask=True)
    cfg = TrainConfig(lr=5e-3, batch_size=4, epochs=1.0)
    result = train_bridge(build_denoiser(CFG, 0), train, val, PROCESS, cfg, tmp_path)
    assert result.completed and collected == []


def test_the_protocols_final_validation_loss_is_the_evaluations(tmp_path):
    """measure_bridge reports validation_loss(denoiser, val, process, seed=protocol.seed)."""
    protocol = BridgeProtocol(d_model=32, n_layers=1, n_heads=2, batch_size=4, seed=3)
    train, val = toy_data(16, 5, mask=True), toy_data(8, 6, mask=True)
    cfg = loop_config(protocol, "cpu")
    assert cfg.val_seed == protocol.seed and cfg.mixed_precision == "no"
    model = build_denoiser(denoiser_config_of(protocol, train.dim, train.seq_len), 0)
    result = train_bridge(model, train, val, PROCESS, cfg, tmp_path)
    assert result.val_loss == validation_loss(model, val, PROCESS, seed=protocol.seed)
    assert result.val_loss != validation_loss(model, val, PROCESS, seed=0)  # the seed matters


def test_learning_rate_defaults_agree():
    from dihal.config import BaselineRunConfig

    assert TrainConfig().lr == BridgeProtocol().lr == BaselineRunConfig().lr


def test_resume_with_another_model_config_names_it(tmp_path):
    train, val = toy_data(16, 3), toy_data(4, 4)
    cfg = TrainConfig(lr=5e-3, batch_size=4)
    train_bridge(build_denoiser(CFG, 0), train, val, PROCESS, cfg, tmp_path, stop_after=2)
    wider = DenoiserConfig(**{**CFG.to_dict(), "d_model": 64})
    with pytest.raises(CheckpointMismatchError, match="denoiser_config"):  # not a shape error
        train_bridge(build_denoiser(wider, 0), train, val, PROCESS, cfg, tmp_path)
    with pytest.raises(CheckpointMismatchError, match="total_steps"):  # another training set
        train_bridge(build_denoiser(CFG, 0), toy_data(32, 3), val, PROCESS, cfg, tmp_path)


def test_errors_share_one_root_and_keep_their_step():
    assert BridgeTrainingError is TrainingError and issubclass(TrainingError, DihalError)
    assert issubclass(CheckpointMismatchError, DihalError)
    assert issubclass(CheckpointMismatchError, ValueError)
    err = pickle.loads(pickle.dumps(TrainingError("non-finite loss at step 3", 3)))
    assert err.step == 3 and str(err) == "non-finite loss at step 3"


@pytest.mark.parametrize("first", ["dihal.training", "dihal.bridge", "dihal.checkpoint"])
def test_the_loop_and_the_bridge_import_in_either_order(first):
    """The bridge package re-exports dihal.bridge.train, built on dihal.training, which builds
    on dihal.checkpoint and never on the bridge."""
    code = (f"import {first}; from dihal.bridge import train_bridge; import dihal.training; "
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_save_swaps_in_a_checkpoint_and_removes_only_dead_writers_temporaries(tmp_path):
    model = torch.nn.Linear(2, 2)
    host = socket.gethostname()
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    temporaries = {
        "mine": f".tmp-step-00000009-{host}-{os.getpid()}",
        "ended": f".tmp-step-00000009-{host}-{ended.pid}",
        "running": f".tmp-step-00000009-{host}-{os.getppid()}",
        "other host": f".tmp-step-00000009-{host}x-{ended.pid}",
    }
    for name in temporaries.values():
        (tmp_path / name).mkdir()
    first = save_checkpoint(tmp_path, 1, model, None, {"n": 1})
    again = save_checkpoint(tmp_path, 1, model, None, {"n": 2})  # a stale copy of step 1
    assert first == again == latest_checkpoint(tmp_path)
    assert '"n": 2' in (again / "state.json").read_text()
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {"step-00000001", temporaries["running"], temporaries["other host"]}
    save_checkpoint(tmp_path, 2, model, None, {}, keep=1)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000002"]


def current(kind: str) -> int:
    """A test double for the current device of each kind (no GPU needed)."""
    return {"cuda": 0, "xpu": 1}[kind]


def test_device_strings_that_name_one_device_compare_equal():
    from dihal.training import normalise_device, same_device

    assert torch.device("cuda") != torch.device("cuda:0")  # why the loop needs the helper
    assert normalise_device("cuda", current) == torch.device("cuda", 0)
    assert same_device(torch.device("cuda"), "cuda:0", current)
    assert same_device("cuda:0", torch.device("cuda"), current)
    assert not same_device("cuda", "cuda:1", current)
    assert same_device("xpu", "xpu:1", current) and not same_device("xpu", "xpu:0", current)
    assert same_device("cpu", "cpu:0", current) and same_device(torch.device("cpu"), "cpu")
    assert not same_device("cpu", "cuda:0", current)


def test_the_loop_trains_on_cuda_0_when_accelerate_says_cuda(monkeypatch):
    """compare.baseline passes "cuda:0"; a one-GPU accelerate picks torch.device("cuda")."""
    import accelerate

    from dihal.training import _accelerator

    class OneGpuAccelerator:  # what accelerate chooses on a one-GPU host, without the GPU
        mixed_precision = "no"

        def __init__(self, mixed_precision: str, cpu: bool = False) -> None:
            self.device = torch.device("cpu" if cpu else "cuda")

    monkeypatch.setattr(accelerate, "Accelerator", OneGpuAccelerator)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert _accelerator(None, "cuda:0").device == torch.device("cuda")
    assert _accelerator(None, "cuda").device == torch.device("cuda")
    with pytest.raises(ValueError, match="asked to train on cuda:1 but accelerate chose cuda"):
        _accelerator(None, "cuda:1")
    with pytest.raises(ValueError, match="not both"):
        _accelerator(OneGpuAccelerator("no"), "cuda:0")


def test_a_training_budget_over_the_cap_is_refused_before_its_sample_order(tmp_path, monkeypatch):
    """One loop for the bridge and the baselines: epochs over the cap are refused when the
    config is built, and a budget whose steps (epochs x sequences / batch) pass the cap is
    refused by the loop before it builds the order of every sequence it would consume."""
    import dihal.training as training
    from dihal.config import MAX_TRAIN_STEPS, SequenceConfig
    from dihal.errors import TrainingBudgetError
    from dihal.run.preflight import check_training_budget

    with pytest.raises(ValueError, match=r"TrainConfig.epochs must be at most 10,000,000 .*"
                       r"got 1000000000000.0"):
        TrainConfig(epochs=1e12)
    monkeypatch.setattr(training, "sample_order", lambda *a: pytest.fail("order built"))
    cfg = TrainConfig(epochs=float(MAX_TRAIN_STEPS), batch_size=2)
    with pytest.raises(TrainingBudgetError, match=r"a training of 40,000,000 optimiser steps \(epochs "
                       r"1e\+07 x 8 sequences / batch_size 2\) is over the limit of 10,000,000"):
        train_model(torch.nn.Linear(2, 2), lambda *a: None, 8, cfg, tmp_path)
    # the pre-flight (the driver's, and a bridge step's own) counts the same steps first
    (r,) = check_training_budget(SequenceConfig(n_train=8192), BridgeProtocol(epochs=1e5))
    assert r.check == "training budget" and "204,800,000 optimiser steps" in r.message
    assert check_training_budget(SequenceConfig(), BridgeProtocol(epochs=2.0)) == []
