"""A temporary folder only this user can enter, for the processes the driver and the web UI
start (their code servers bind gRPC Unix sockets in it). Standard library only."""

from __future__ import annotations

import os
from pathlib import Path


def private_tmpdir() -> Path:
    """Point this process's temporary folder (TMPDIR, so every process it starts inherits it)
    at `dihal-<uid>` in the system's one, a folder only this user can enter (0700). Dagster
    binds each code server's gRPC server to a Unix socket at a temporary file name
    (dagster._utils.safe_tempfile_path_unmanaged): in /tmp, under a umask that leaves the socket
    writable to others (000: srwxrwxrwx), any local user could connect to it and have it load
    code and launch runs as this user. In a private folder nobody else reaches the socket,
    whatever its mode. A `dihal-<uid>` that is not this user's own directory (another user's, a
    symbolic link) is never used: a fresh private folder is made instead (tempfile.mkdtemp)."""
    import stat
    import tempfile

    uid = os.getuid()
    base = Path(tempfile.gettempdir())
    folder = base if base.name == f"dihal-{uid}" else base / f"dihal-{uid}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            st = os.fstat(fd)
            if st.st_uid != uid or not stat.S_ISDIR(st.st_mode):
                raise PermissionError(f"{folder} is not this user's")
            if stat.S_IMODE(st.st_mode) != 0o700:
                os.fchmod(fd, 0o700)
        finally:
            os.close(fd)
    except OSError:  # not ours, a link, or a file: a private folder of its own
        folder = Path(tempfile.mkdtemp(prefix=f"dihal-{uid}-"))
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = str(folder)
    return folder
