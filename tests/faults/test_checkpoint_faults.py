"""Damaged training checkpoints: a same-size change, a truncation, a missing digest list, every
checkpoint damaged, and a checkpoint written on a GPU read on a CPU host. Each is found before
anything in it is used; training falls back to the previous good checkpoint (or starts again),
tells the caller's `warn` why, and ends with the weights of an uninterrupted run."""

from __future__ import annotations

import struct

import pytest
import torch

from dihal.bridge import BrownianBridge, DenoiserConfig, build_denoiser
from dihal.bridge.train import TrainConfig, train_bridge
from dihal.checkpoint import (
    DIGESTS_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
    STATE_FILE,
    list_checkpoints,
    load_into,
    read_state,
)
from dihal.errors import CheckpointDamagedError
from tests.tiny import toy_data

DENOISER = DenoiserConfig(d_in=4, d_model=16, n_layers=1, n_heads=2, max_len=8, time_embed_dim=8)
# 6 steps; checkpoints every 2, the newest two kept: a run cut after 5 leaves steps 4 and 5
CFG = TrainConfig(batch_size=4, checkpoint_every=2, keep_checkpoints=2, log_every=2)
TRAIN, VAL = toy_data(24, 1), toy_data(8, 2)


def train(ckpt_dir, stop_after=None, warn=None):
    model = build_denoiser(DENOISER, 0)
    result = train_bridge(model, TRAIN, VAL, BrownianBridge(), CFG, ckpt_dir,
                          stop_after=stop_after, warn=warn)
    return model, result


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """The weights of an uninterrupted run."""
    model, result = train(tmp_path_factory.mktemp("whole"))
    assert result.completed and result.resumed_from == 0
    return model.state_dict()


def cut(tmp_path):
    """A run stopped after 5 steps: checkpoints of steps 4 and 5."""
    train(tmp_path / "run", stop_after=5)
    ckpts = list_checkpoints(tmp_path / "run")
    assert [p.name for p in ckpts] == ["step-00000004", "step-00000005"]
    return ckpts


def resume(tmp_path, whole):
    """Resume the cut run, collecting the reasons given to `warn`; check the final weights."""
    reasons = []
    model, result = train(tmp_path / "run", warn=reasons.append)
    assert result.completed
    for k, v in whole.items():
        assert torch.equal(v, model.state_dict()[k]), k
    return result, reasons


def nan_in_place(path):
    """Overwrite the first float of the first tensor in a safetensors file with NaN: the same
    size, a valid file, and a model that would produce NaN if it were loaded."""
    data = bytearray(path.read_bytes())
    header = 8 + struct.unpack("<Q", data[:8])[0]
    data[header:header + 4] = struct.pack("<f", float("nan"))
    path.write_bytes(bytes(data))


def test_a_same_size_change_in_the_newest_falls_back_to_the_previous(tmp_path, whole):
    _, newest = cut(tmp_path)
    size = (newest / MODEL_FILE).stat().st_size
    nan_in_place(newest / MODEL_FILE)
    assert (newest / MODEL_FILE).stat().st_size == size
    result, reasons = resume(tmp_path, whole)  # no TrainingError: the NaN is never loaded
    assert result.resumed_from == 4
    assert len(reasons) == 1
    assert str(newest / MODEL_FILE) in reasons[0] and "sha256" in reasons[0]
    assert "falling back to the previous checkpoint" in reasons[0]


def test_a_truncated_optimizer_state_falls_back(tmp_path, whole):
    _, newest = cut(tmp_path)
    opt = newest / OPTIMIZER_FILE
    opt.write_bytes(opt.read_bytes()[: opt.stat().st_size // 2])
    result, reasons = resume(tmp_path, whole)
    assert result.resumed_from == 4
    assert len(reasons) == 1 and str(opt) in reasons[0] and "bytes" in reasons[0]


def test_a_checkpoint_without_digests_is_not_resumed(tmp_path, whole):
    _, newest = cut(tmp_path)
    (newest / DIGESTS_FILE).unlink()  # as a checkpoint of the format before digests
    result, reasons = resume(tmp_path, whole)
    assert result.resumed_from == 4
    assert len(reasons) == 1 and "cannot be verified" in reasons[0]


def test_every_checkpoint_damaged_starts_again(tmp_path, whole):
    older, newest = cut(tmp_path)
    state = (older / STATE_FILE).read_text()
    assert '"step": 4' in state
    (older / STATE_FILE).write_text(state.replace('"step": 4', '"step": 2', 1))  # same size
    nan_in_place(newest / MODEL_FILE)
    result, reasons = resume(tmp_path, whole)
    assert result.resumed_from == 0 and result.step == 6
    assert len(reasons) == 3
    assert str(newest / MODEL_FILE) in reasons[0] and str(older / STATE_FILE) in reasons[1]
    assert "no usable checkpoint" in reasons[2] and "step 0" in reasons[2]
    # the damaged checkpoints are gone: the restarted run's checkpoints replaced them
    assert [p.name for p in list_checkpoints(tmp_path / "run")] == ["step-00000004",
                                                                      "step-00000006"]
    assert read_state(tmp_path / "run" / "step-00000006")["done"] is True


def test_the_default_warn_is_a_runtime_warning(tmp_path):
    _, newest = cut(tmp_path)
    nan_in_place(newest / MODEL_FILE)
    with pytest.warns(RuntimeWarning, match="falling back to the previous checkpoint"):
        train(tmp_path / "run")


def test_loading_a_damaged_checkpoint_directly_is_refused(tmp_path):
    _, newest = cut(tmp_path)
    model = build_denoiser(DENOISER, 0)
    load_into(newest, model)  # sound: loads
    nan_in_place(newest / MODEL_FILE)
    with pytest.raises(CheckpointDamagedError, match="sha256"):
        load_into(newest, model)
    assert read_state(newest)["step"] == 5  # the state file itself is sound
    (newest / STATE_FILE).write_text((newest / STATE_FILE).read_text().replace('"step": 5',
                                                                               '"step": 7'))
    with pytest.raises(CheckpointDamagedError, match="state.json"):
        read_state(newest)


def test_a_checkpoint_written_on_a_gpu_resumes_on_a_cpu_host(tmp_path, whole, monkeypatch):
    """The optimizer state of a GPU run is pickled with storages tagged "cuda:0"; this host
    reads it onto the CPU (map_location), so it resumes rather than counting it as damaged."""
    monkeypatch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
    _, newest = cut(tmp_path)
    monkeypatch.undo()
    if not torch.cuda.is_available():  # what a load without map_location does on this host
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(newest / OPTIMIZER_FILE, weights_only=True)
    result, reasons = resume(tmp_path, whole)
    assert reasons == [] and result.resumed_from == 5
