"""One writer per artifact: an advisory lock file beside the artifact's folder.

The lock is an `flock` on ``<folder>.lock``, held while the artifact is made; the file names
its holder (pid, host, since, what). The kernel drops the flock when its process dies, so a lock
file left by a killed run is stale by construction and is simply taken over. A second writer
fails at once with an error naming the holder.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from dihal.errors import ArtifactLockedError


def lock_path(directory: Path) -> Path:
    return directory.with_name(directory.name + ".lock")


def holder(directory: Path) -> dict | None:
    """Who holds (or last held) the lock of `directory`, from its lock file."""
    try:
        return json.loads(lock_path(directory).read_text())
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None


@contextlib.contextmanager
def artifact_lock(directory: Path, what: str) -> Iterator[None]:
    """Hold the writer's lock of `directory` for the duration, or raise ArtifactLockedError."""
    path = lock_path(Path(directory))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            h = holder(Path(directory)) or {}
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(h.get("since", 0)))
            raise ArtifactLockedError(
                f"{what} is being made by another run (pid {h.get('pid', '?')} on "
                f"{h.get('host', '?')}, since {since}; lock {path}). Wait for it to finish, or "
                "stop that process; a lock left by a process that died is taken over "
                "automatically.") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.time(), "what": what}).encode())
        os.fsync(fd)
        yield
    finally:
        os.close(fd)  # releases the flock; the file stays as a record of the last holder
