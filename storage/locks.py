"""One writer per artifact: an advisory lock file beside the artifact's folder.

The lock is an `flock` on ``<folder>.lock``, held while the artifact is made; the file names
its holder (pid, host, since, what). The kernel drops the flock when its process dies, so a lock
file left by a killed run is stale by construction and is simply taken over. A second writer
fails at once with an error naming the holder. A lock file is opened without following a
symbolic link and without truncating on open (dihal.atomic.open_lock_file); one that is a link,
a hard link to a file elsewhere, or not a lock record is refused by name, never written; a link
between the artifact root and an artifact's folder, lock or work folder is refused likewise
(`check_no_links`): on a shared root, whoever can write the root cannot make a run write
another user's files.

On a cluster the artifact root is shared, and the lock must hold across hosts. NFSv4, GPFS,
Lustre mounted with `-o flock` and BeeGFS with global file locks give one flock for all hosts.
Where flock fails (Lustre mounted without a flock option: ENOSYS; NFS without its lock
service: ENOLCK; some FUSE file systems: EOPNOTSUPP) the lock is refused with
LockUnsupportedError naming the file system and the fix, never skipped. Where it succeeds but
holds on one node only (Lustre `-o localflock`; BeeGFS without tuneUseGlobalFileLocks) two
hosts could both write an artifact: with a distributed engine that too is refused
(`check_global_locks`); one host alone is safe.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dihal.atomic import link_message, open_lock_file, write_record
from dihal.environment import dask_scheduler
from dihal.errors import ArtifactLockedError, DihalError, UnsafePathError

# errno of flock on a file system that cannot lock (not: another holder, EWOULDBLOCK)
UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}
BEEGFS_CLIENT_CONF = Path("/etc/beegfs/beegfs-client.conf")
FIXES = {
    "lustre": "mount it with `-o flock` (cluster-wide locks; not `localflock`, which locks per "
              "node)",
    "beegfs": "set `tuneUseGlobalFileLocks = true` in /etc/beegfs/beegfs-client.conf and remount "
              "(BeeGFS locks per node by default)",
    "nfs": "run the NFS lock service (rpc.statd/lockd for NFSv3, or mount NFSv4) and do not "
           "mount with `nolock`/`local_lock=all`",
    "nfs4": "do not mount with `local_lock=all`",
}
GENERIC_FIX = ("put DIHAL_ARTIFACTS on a file system whose flock works across hosts (NFSv4, "
               "GPFS, Lustre with -o flock, BeeGFS with global file locks)")


class LockUnsupportedError(DihalError):
    """The file system under the artifact root cannot give one writer per artifact."""


@dataclass(frozen=True)
class Mount:
    point: str
    fstype: str
    options: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.fstype} at {self.point} ({','.join(self.options)})"


def mount_of(path: Path, mounts: Path = Path("/proc/self/mounts")) -> Mount | None:
    """The mount holding `path` (the longest mount point above it), from the mount table."""
    try:
        lines = mounts.read_text().splitlines()
    except OSError:
        return None
    target, best = os.path.realpath(path), None
    for line in lines:
        fields = line.split()
        if len(fields) < 4:
            continue
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) > len(best.point)):
            best = Mount(point, fields[2], tuple(fields[3].split(",")))
    return best


def distributed_engine() -> bool:
    """Whether steps run on several hosts: a Dask scheduler is named, or this process is a
    Dask worker."""
    if dask_scheduler():
        return True
    if "distributed" not in sys.modules:
        return False
    try:
        sys.modules["distributed"].get_worker()
    except (ValueError, AttributeError):
        return False
    return True


def check_shared_root(root: Path) -> None:
    """With a distributed engine, the artifact root must be an absolute path (one shared folder
    for every host): a relative one resolves against each worker's own working directory."""
    if distributed_engine() and not Path(root).is_absolute():
        raise LockUnsupportedError(
            f"the artifact root {str(root)!r} is a relative path, but steps run on a Dask "
            "cluster, where each worker would resolve it against its own working directory. "
            "Set DIHAL_ARTIFACTS to an absolute path on a file system every host mounts at the "
            "same place (e.g. /shared/dihal/artifacts), for the driver and every worker.")


def _fix_for(mount: Mount | None) -> str:
    return FIXES.get(mount.fstype if mount else "", GENERIC_FIX)


def node_local_locks(mount: Mount | None, beegfs_conf: Path = BEEGFS_CLIENT_CONF) -> bool:
    """Whether flock on `mount` succeeds but holds on this node only."""
    if mount is None:
        return False
    if mount.fstype == "lustre":
        return "localflock" in mount.options  # without flock/localflock, flock fails
    if mount.fstype == "beegfs":
        try:
            conf = beegfs_conf.read_text()
        except OSError:
            return True  # the default: per-node locks
        for line in conf.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "tuneUseGlobalFileLocks":
                return value.split("#")[0].strip().lower() not in ("true", "1", "yes")
        return True
    if mount.fstype in ("nfs", "nfs4"):
        return any(o in ("nolock", "local_lock=all", "local_lock=flock") for o in mount.options)
    return False


def check_global_locks(directory: Path) -> None:
    """With a distributed engine, refuse an artifact root whose locks hold per node only."""
    if not distributed_engine():
        return
    mount = mount_of(Path(directory))
    if node_local_locks(mount):
        raise LockUnsupportedError(
            f"{directory} is on {mount}, whose flock holds on one node only: steps on two hosts "
            f"could both write the same artifact. Fix: {_fix_for(mount)}; or run on one host "
            "(unset DIHAL_DASK_SCHEDULER).")


def lock_path(directory: Path) -> Path:
    return directory.with_name(directory.name + ".lock")


def holder(directory: Path) -> dict | None:
    """Who holds (or last held) the lock of `directory`, from its lock file."""
    try:
        fd = os.open(lock_path(directory), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        found = json.loads(os.read(fd, 4096))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)
    return found if isinstance(found, dict) else None


def _unsupported(path: Path, exc: OSError) -> LockUnsupportedError:
    mount = mount_of(path)
    return LockUnsupportedError(
        f"cannot lock {path}: flock fails on this file system ({mount or 'unknown'}: "
        f"{os.strerror(exc.errno)}), so one writer per artifact (and one step per device) cannot "
        f"be ensured. Fix: {_fix_for(mount)}; or set DIHAL_ARTIFACTS to a local disk when one "
        "host does the work.")


def check_flock(directory: Path) -> None:
    """Refuse, with LockUnsupportedError, a folder whose file system cannot flock: the device
    slots (dihal.run.devices) lock files there before any artifact lock is taken."""
    directory = Path(directory)
    if directory.is_symlink():  # its lock files would be made wherever it points
        raise UnsafePathError(link_message(directory, "lock folder"))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / ".flock-probe"
    fd = open_lock_file(path, what="lock probe")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pass  # another process probes at this moment: flock works
    except OSError as exc:
        if exc.errno not in UNSUPPORTED:
            raise
        raise _unsupported(path, exc) from exc
    finally:
        os.close(fd)


def check_no_links(root: Path, *paths: Path) -> None:
    """Refuse, with UnsafePathError naming it, a symbolic link at any of `paths` or at any
    folder between the artifact `root` and them (the root itself may be a link)."""
    root = Path(root)
    for path in paths:
        path = Path(path)
        try:
            parts = path.relative_to(root).parts
        except ValueError:
            raise UnsafePathError(f"{path} is outside the artifact root {root}") from None
        here = root
        for part in parts:
            here = here / part
            if here.is_symlink():
                kind = "lock file" if here.name.endswith(".lock") else "folder"
                raise UnsafePathError(link_message(here, kind))


@contextlib.contextmanager
def artifact_lock(directory: Path, what: str) -> Iterator[None]:
    """Hold the writer's lock of `directory` for the duration, or raise ArtifactLockedError."""
    path = lock_path(Path(directory))
    path.parent.mkdir(parents=True, exist_ok=True)
    check_global_locks(path.parent)
    fd = open_lock_file(path, what="lock file")
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
        except OSError as exc:
            if exc.errno not in UNSUPPORTED:
                raise
            raise _unsupported(path, exc) from exc
        write_record(fd, path, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                           "since": time.time(), "what": what}).encode(),
                     what="lock file")
        yield
    finally:
        os.close(fd)  # releases the flock; the file stays as a record of the last holder
