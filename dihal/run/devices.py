"""One device per step: parallel steps on one machine (or one Dask worker host) never share a
GPU, and CPU-only steps divide the cores between them.

A lease is an exclusive `flock` on a file named after the host and the device (a GPU's UUID, so
that workers which see different GPUs through CUDA_VISIBLE_DEVICES do not block each other). The
kernel drops the lock when its holder dies, so a killed step never leaves a device taken.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dihal.atomic import link_message, open_lock_file, write_record
from dihal.errors import UnsafePathError


@dataclass(frozen=True)
class Slot:
    device: str  # what torch is given: "cuda:1", "cpu"
    key: str  # what the lock file is named after: unique per host and physical device
    threads: int  # torch CPU threads while the slot is held (0: leave as is)


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def slots(device: str, workers: int, threads: int = 0) -> list[Slot]:
    """The slots steps on this host take turns on. `device` "auto": every visible GPU, else the
    CPU; "cuda:i" or "cpu": that device only. On the CPU there are `workers` slots, each with
    `threads` torch threads (0: the cores divided between the workers)."""
    import torch

    host = socket.gethostname()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {device!r} was asked for but torch sees no GPU "
                               "(torch.cuda.is_available() is False): use device 'auto' or 'cpu'")
        ids = range(torch.cuda.device_count()) if device == "cuda" else [int(device.split(":")[1])]
        return [Slot(f"cuda:{i}", f"{host}-gpu-{torch.cuda.get_device_properties(i).uuid}", threads)
                for i in ids]
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    per_step = threads or max(1, cpu_cores() // workers)
    return [Slot("cpu", f"{host}-cpu-{i}", per_step) for i in range(workers)]


def _try_lock(path: Path) -> int | None:
    """The descriptor of the slot's lock file, locked; None where another step holds it. A
    symbolic link or a foreign file at its name is refused, never followed or truncated."""
    fd = open_lock_file(path, what="device lease file")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    try:
        write_record(fd, path, f"pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n"
                     .encode(), what="device lease file")
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def lease(lock_dir: Path, candidates: list[Slot], *, poll_s: float = 1.0,
          log: Callable[[str], None] | None = None) -> Iterator[Slot]:
    """Hold the first free slot until the block ends, waiting while all are taken (and saying
    so every 30 s). Sets torch's CPU threads, and the current CUDA device, while held."""
    import torch

    if lock_dir.is_symlink():  # the lease files would be written wherever it points
        raise UnsafePathError(link_message(lock_dir, "device lease folder"))
    lock_dir.mkdir(parents=True, exist_ok=True)
    waited, said = 0.0, -30.0
    while True:
        for slot in candidates:
            fd = _try_lock(lock_dir / f"{slot.key}.lock")
            if fd is not None:
                break
        else:
            if log and waited - said >= 30.0:
                said = waited
                log(f"waiting for a free device: all of {[s.device for s in candidates]} are "
                    f"held by other steps (locks under {lock_dir}), {waited:.0f} s so far")
            time.sleep(poll_s)
            waited += poll_s
            continue
        break
    threads_before = torch.get_num_threads()
    try:
        if slot.threads:
            torch.set_num_threads(slot.threads)
        if slot.device.startswith("cuda"):
            torch.cuda.set_device(slot.device)
        yield slot
    finally:
        torch.set_num_threads(threads_before)
        os.close(fd)
