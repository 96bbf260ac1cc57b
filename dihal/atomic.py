"""Files: atomic writes (a reader sees the old file or the new one, never a half-written one),
atomic directory swaps, and content digests. Standard library only: `dihal` and `storage` share it."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dihal.errors import UnsafePathError


def atomic_write_bytes(path: Path | str, data: bytes) -> Path:
    """Write ``data`` to a temporary file beside ``path``, fsync it, then rename over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: Path | str, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path | str, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


@contextlib.contextmanager
def atomic_dir(final: Path | str) -> Iterator[Path]:
    """Build a directory under a temporary name and swap it into place on success.

    On an exception the temporary directory is removed and ``final`` (if it existed) is left
    untouched. The swap renames the old directory aside first, so ``final`` is never a mix of
    old and new files.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp"))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_dir(tmp, final)


def replace_dir(src: Path, final: Path) -> None:
    """Rename ``src`` to ``final``, replacing an existing directory; a symbolic link at
    ``final`` is refused (UnsafePathError naming it), never renamed aside or followed."""
    final = Path(final)
    if final.is_symlink():
        raise UnsafePathError(
            f"{final} is a symbolic link (to {os.readlink(final)}): a folder made here is never "
            f"swapped in through a link. Remove the link (rm {final}) and run again.")
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old")
        _remove(old)
        os.replace(final, old)
    os.replace(src, final)
    if old is not None:
        _remove(old)


def _remove(path: Path) -> None:
    """Remove a folder left aside (or a link or file in its place)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def file_sha256(path: Path | str, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def open_lock_file(path: Path, *, what: str) -> int:
    """A descriptor of the lock file `path`, opened without following a symbolic link and
    without truncating anything: created if missing; an existing file is used only if it is a
    regular file with no other name (no hard link to a file elsewhere). Anything else at that
    name is refused with an error naming it."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW on a symbolic link
            raise UnsafePathError(link_message(path, what)) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        kind = "not a regular file" if not stat.S_ISREG(st.st_mode) else \
            f"a file with {st.st_nlink} names (a hard link to a file elsewhere)"
        raise UnsafePathError(
            f"the {what} {path} is {kind}: dihal writes its lock record there and will not "
            f"write into another file. Remove it (rm {path}) and run again.")
    return fd


def write_record(fd: int, path: Path, record: bytes, *, what: str) -> None:
    """Replace the content of the locked file `fd` with `record`, where it holds nothing or a
    lock record (text of at most 4 KiB); anything else is refused, never truncated."""
    old = os.pread(fd, 4097, 0)
    if len(old) > 4096 or b"\0" in old:
        raise UnsafePathError(
            f"the {what} {path} holds {os.fstat(fd).st_size} bytes that are not a lock record: "
            f"dihal will not overwrite it. Move it away (it is not dihal's) and run again.")
    os.ftruncate(fd, 0)
    os.pwrite(fd, record, 0)
    os.fsync(fd)


@contextlib.contextmanager
def one_at_a_time(path: Path, *, what: str) -> Iterator[None]:
    """Hold an exclusive flock on the file `path` (opened as open_lock_file does) for the
    block, waiting for another process that holds it: for work that every process would
    otherwise do at once on first use and then trip over each other's files (e.g. dequantising
    a model into a shared cache). The kernel drops the lock when its holder dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_lock_file(path, what=what)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def link_message(path: Path, what: str) -> str:
    """Why a symbolic link inside the artifact root is refused, and what to do."""
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return (f"the {what} {path} is a symbolic link{target}: dihal does not follow links inside "
            "the artifact root, where one could make a run write into a file outside it. Remove "
            f"the link (rm {path}) and run again; to keep artifacts on another disk, point "
            "DIHAL_ARTIFACTS itself there.")
