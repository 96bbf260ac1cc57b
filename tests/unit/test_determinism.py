"""Deterministic CUDA kernels while a step holds a GPU; the CPU's settings are left alone. The
settings are process-wide flags, so a test double of the device lease gives a "cuda:0" slot on
this CPU machine (nothing here touches a GPU)."""

from __future__ import annotations

import contextlib
import os

import pytest
import torch
import torch.utils.deterministic

from dihal.run.determinism import deterministic_cuda
from dihal.run.devices import Slot


def _flags():
    return (torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
            torch.utils.deterministic.fill_uninitialized_memory)


@contextlib.contextmanager
def _lease(device):
    yield Slot(device=device, key=device, threads=0)


@pytest.fixture()
def clean(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = _flags()
    yield before
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])
    (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
     torch.utils.deterministic.fill_uninitialized_memory) = before[2:]


def test_a_gpu_step_runs_with_deterministic_kernels_and_restores_after(clean):
    said = []
    with deterministic_cuda(_lease("cuda:0"), log=said.append) as slot:
        assert slot.device == "cuda:0"
        assert _flags() == (True, True, True, False, False)
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert _flags() == clean
    assert len(said) == 1 and "deterministic CUDA kernels on cuda:0" in said[0]


def test_a_cpu_step_changes_nothing(clean):
    said = []
    with deterministic_cuda(_lease("cpu"), log=said.append):
        assert _flags() == clean
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ and not said


def test_the_compute_resource_lease_applies_it(clean, monkeypatch, tmp_path):
    import dihal.run.devices
    from resources import ComputeResource

    monkeypatch.setattr(dihal.run.devices, "lease", lambda lock_dir, slots, log=None: _lease("cuda:1"))
    monkeypatch.setattr(dihal.run.devices, "slots", lambda *a: [])
    with ComputeResource(device="cuda").lease(tmp_path) as slot:
        assert slot.device == "cuda:1" and torch.are_deterministic_algorithms_enabled()
    assert _flags() == clean


def test_the_device_checks_cpu_rehearsal_turns_the_settings_on_and_back():
    """enable on the CPU changes nothing unless asked (the pipeline's steps); with on_cpu (the
    device check's dry run) it turns deterministic mode on, warn-only, and restore undoes it."""
    import torch

    from dihal.run import determinism

    assert determinism.enable("cpu") is None
    before = determinism.enable("cpu", on_cpu=True)
    try:
        assert before is not None and torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        determinism.restore(before)
    assert torch.are_deterministic_algorithms_enabled() == before["algorithms"]
