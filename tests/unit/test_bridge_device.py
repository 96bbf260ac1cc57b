"""The bridge's GPU path, rehearsed on the CPU: the training pairs move to the step's device
where they fit (else stay, with the reason), and no training step waits for the device (the
host reads a step's loss and gradient norm only at its looks: log entries, validations,
checkpoints, the end), while a non-finite step is still named by its own number and no
checkpoint is written past it."""

from __future__ import annotations

import json

import pytest
import torch
from torch.overrides import TorchFunctionMode

from dihal.bridge.data import PAIRS_SHARE, place_pairs
from dihal.bridge.denoiser import build_denoiser
from dihal.bridge.process import BrownianBridge
from dihal.bridge.train import BridgeTrainingError, TrainConfig, bridge_training_loss, train_bridge
from dihal.checkpoint import latest_checkpoint
from dihal.training import Trainer, sample_order
from tests.tiny import toy_data, toy_denoiser_config

CFG = toy_denoiser_config()
PROCESS = BrownianBridge()

# what makes the host wait for a device: a tensor's value read into Python
HOST_READS = {"__float__", "__int__", "__bool__", "__index__", "item", "tolist", "numpy"}


class _HostReads(TorchFunctionMode):
    """Counts the host reads of tensors (outside `paused` sections)."""

    def __init__(self):
        super().__init__()
        self.count, self.paused = 0, False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if not self.paused and getattr(func, "__name__", "") in HOST_READS:
            self.count += 1
        return func(*args, **(kwargs or {}))


class _Optimizer:
    """The prepared optimizer, its step not counted: AdamW reads its step count, a host
    tensor even on a GPU (not capturable), which costs no wait."""

    def __init__(self, opt, reads: _HostReads):
        self.opt, self.reads = opt, reads

    def step(self):
        self.reads.paused = True
        try:
            self.opt.step()
        finally:
            self.reads.paused = False

    def zero_grad(self, **kw):
        self.opt.zero_grad(**kw)


def test_training_steps_read_nothing_from_the_device_between_the_hosts_looks(tmp_path):
    train, val = toy_data(64, 1, mask=True), toy_data(8, 2, mask=True)
    cfg = TrainConfig(lr=1e-2, batch_size=4, log_every=5, checkpoint_every=10_000)
    reads = _HostReads()
    starts = []

    class Counted(Trainer):
        def train_step(self, prepared, opt):
            starts.append(reads.count)
            return super().train_step(prepared, _Optimizer(opt, reads))

    model = build_denoiser(CFG, 0)
    trainer = Counted(model, bridge_training_loss(train, PROCESS), len(train), cfg, tmp_path,
                      device="cpu", check_every=cfg.log_every)
    with reads:
        result = trainer.run()
    assert result.step == 16 and len(starts) == 16
    per_step = [b - a for a, b in zip(starts, starts[1:] + [reads.count], strict=True)]
    # the host looks at steps 5, 10, 15 (log entries) and 16 (the last): nowhere else
    looks = [i + 1 for i, n in enumerate(per_step) if n]
    assert looks == [5, 10, 15, 16], per_step
    # and it logs what the run that looks at every step logs, with the same weights
    ref_model = build_denoiser(CFG, 0)
    ref = train_bridge(ref_model, train, val, PROCESS, cfg, tmp_path / "ref")
    assert [e.loss for e in result.curve] == [e.loss for e in ref.curve]
    assert [e.grad_norm for e in result.curve] == [e.grad_norm for e in ref.curve]
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                 ref_model.state_dict().values(), strict=True))


def test_a_deferred_look_names_the_non_finite_step_and_no_checkpoint_follows_it(tmp_path):
    """As on a GPU (the host looks every log_every = 4 steps): step 3's NaN is found at the
    look after step 4, named as step 3; the checkpoint of step 2 is the newest."""
    train = toy_data(48, 3)
    cfg = TrainConfig(lr=5e-3, batch_size=4, checkpoint_every=2, log_every=4)
    bad = sample_order(len(train), cfg)[2 * cfg.batch_size].item()
    target = train.target.clone()
    target[bad, 0, 0] = float("nan")
    poisoned = type(train)(train.cond, target)
    trainer = Trainer(build_denoiser(CFG, 0), bridge_training_loss(poisoned, PROCESS),
                      len(poisoned), cfg, tmp_path, device="cpu", check_every=cfg.log_every)
    with pytest.raises(BridgeTrainingError, match="non-finite training loss .* at step 3") as info:
        trainer.run()
    assert info.value.step == 3 and trainer.step == 4  # found at the look after step 4
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt.name == "step-00000002"
    assert json.loads((ckpt / "state.json").read_text())["step"] == 2


def test_the_pairs_move_to_the_device_where_they_fit_else_stay_with_the_reason():
    data = toy_data(16, 1, mask=True)
    assert data.nbytes == 2 * 16 * 8 * 4 * 4 + 16 * 8
    same, why = place_pairs(data, "cpu")
    assert same is data and why is None
    # "meta" stands for a GPU: it fits in PAIRS_SHARE of the free memory, or it does not
    moved, why = place_pairs(data, "meta", free_bytes=int(data.nbytes / PAIRS_SHARE) + 1)
    assert why is None and moved.device.type == "meta" and moved.mask.device.type == "meta"
    assert moved.to("meta") is moved
    kept, why = place_pairs(data, "meta", free_bytes=data.nbytes)
    assert kept is data and "stay on the cpu" in why and "each step copies its batch" in why
    kept, why = place_pairs(data, "meta")  # a device that does not report its free memory
    assert kept is data and "(unknown)" in why


def test_the_loss_gathers_from_the_placed_pairs_once_and_says_why_it_cannot(monkeypatch):
    import dihal.bridge.train as bt

    data = toy_data(16, 1, mask=True)
    calls, said = [], []

    def place(d, device):
        calls.append(device)
        return d, "they stay on the host"

    monkeypatch.setattr(bt, "place_pairs", place)
    loss = bridge_training_loss(data, PROCESS, warn=said.append)
    model = build_denoiser(CFG, 0)
    for step in range(3):
        gen = torch.Generator().manual_seed(step)
        total, count = loss(model, torch.arange(4), gen, torch.device("cpu"))
        assert torch.isfinite(total) and float(count) == float(data.mask[:4].sum()) * 4
    assert calls == [torch.device("cpu")] and said == ["they stay on the host"]
