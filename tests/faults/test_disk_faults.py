"""A full disk while a training checkpoint is written: an error naming the disk, the space and
the fix (not torch's `[enforce fail at inline_container.cc]`), and no half-written
`.tmp-step-*` folder left behind."""

import errno
import os
import re

import pytest
import torch

import dihal.checkpoint
from dihal.checkpoint import list_checkpoints, save_checkpoint
from dihal.errors import DiskFullError

# what torch.save raises when the disk fills under it
TORCH_FULL = ("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing "
              "file data/0: file write failed")


def _torch_full(*args, **kwargs):
    raise RuntimeError(TORCH_FULL)


def _os_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(args[1]))


@pytest.mark.parametrize("writer,fails", [("torch", _torch_full), ("safetensors", _os_full)])
def test_a_full_disk_while_a_checkpoint_is_written_names_the_disk(tmp_path, monkeypatch,
                                                                   writer, fails):
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(2, 64)).sum().backward()
    optimizer.step()
    ckpt = tmp_path / "checkpoints"
    save_checkpoint(ckpt, 2, model, optimizer, {"curve": []})
    if writer == "torch":  # the optimizer state
        monkeypatch.setattr(torch, "save", fails)
    else:  # the weights
        monkeypatch.setattr(dihal.checkpoint, "save_file", fails)
    with pytest.raises(DiskFullError) as caught:
        save_checkpoint(ckpt, 4, model, optimizer, {"curve": []})
    said = str(caught.value)
    assert f"the disk holding {ckpt} is full" in said
    assert re.search(r"free \d+ MB or move the artifact root", said)
    assert "inline_container" not in said.split("(")[0]
    print(said)
    assert [p.name for p in list_checkpoints(ckpt)] == ["step-00000002"]  # the last good one kept
    assert not list(ckpt.glob(".tmp-step-*"))


def test_a_full_disk_in_a_sweep_names_the_disk_and_resumes(world, monkeypatch):
    weights = world.path("bridge_sweep", "layer_002", "bridge.safetensors")
    weights.unlink()  # the bridge at layer 2 is trained again
    monkeypatch.setattr(torch, "save", _torch_full)
    res, err = world.materialize(["bridge_sweep_llama"], partition="2")
    assert not res.success
    assert "the disk holding" in err[0] and "is full" in err[0]
    assert "or move the artifact root" in err[0]
    print("error:", err[0].splitlines()[0])
    assert not list(world.root.rglob(".tmp-step-*"))
    monkeypatch.undo()
    res, err = world.materialize(["bridge_sweep_llama"], partition="2")
    assert res.success, err
