"""Deterministic CUDA kernels for the steps that run on a GPU.

On the CPU, PyTorch's kernels give the same bits for the same inputs, thread count and CPU
capability (eval rows record both), which is what the byte-identical claims rest on. On CUDA
they do not by default: cuBLAS picks split-K reductions whose order varies with its workspace,
and some kernels accumulate with atomics (index_add, scatter_add, embedding backward). While a
step holds a GPU, `deterministic_cuda` asks for deterministic implementations where they are
cheap: torch.use_deterministic_algorithms(True, warn_only=True) (a kernel without one warns
instead of failing: memory-efficient attention's backward is one), cuDNN's deterministic
algorithms without autotuning, and cuBLAS's fixed workspace (CUBLAS_WORKSPACE_CONFIG=:4096:8,
read when the process first uses cuBLAS, so it is set before any model work). Not turned on:
torch's filling of every torch.empty with NaN under deterministic mode (a 4 GiB host buffer of
training pairs would be written twice; DiHAL never reads memory it did not write). Run to run on one
GPU and software stack this removes the variation it can; across GPU models, drivers or CUDA
versions, results still differ in the last bits.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

import torch
import torch.utils.deterministic

CUBLAS_WORKSPACE = ":4096:8"


def enable(device: str, *, on_cpu: bool = False) -> dict | None:
    """Deterministic kernels for `device` if it is a CUDA device; returns the previous settings
    (for `restore`), or None where nothing was changed (the CPU). `on_cpu`: the same settings
    on the CPU too, which the pipeline never asks for (its kernels are deterministic already):
    the device check's dry run, so that an op PyTorch flags as nondeterministic on the CPU
    warns there as it would on the GPU."""
    if not (str(device).startswith("cuda") or on_cpu):
        return None
    before = {
        "algorithms": torch.are_deterministic_algorithms_enabled(),
        "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "fill": torch.utils.deterministic.fill_uninitialized_memory,
    }
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.utils.deterministic.fill_uninitialized_memory = False
    return before


def restore(before: dict | None) -> None:
    if before is None:
        return
    torch.use_deterministic_algorithms(before["algorithms"], warn_only=before["warn_only"])
    torch.backends.cudnn.deterministic = before["cudnn_deterministic"]
    torch.backends.cudnn.benchmark = before["cudnn_benchmark"]
    torch.utils.deterministic.fill_uninitialized_memory = before["fill"]


@contextlib.contextmanager
def deterministic_cuda(device_lease, log: Callable[[str], None] | None = None) -> Iterator:
    """Enter `device_lease` (a context manager yielding a dihal.run.devices.Slot) and, while its
    slot is a CUDA device, run with deterministic kernels; yields the slot."""
    with device_lease as slot:
        before = enable(slot.device)
        if before is not None and log:
            log(f"deterministic CUDA kernels on {slot.device} (use_deterministic_algorithms, "
                f"warn_only; CUBLAS_WORKSPACE_CONFIG={os.environ['CUBLAS_WORKSPACE_CONFIG']})")
        try:
            yield slot
        finally:
            restore(before)
