"""The writer's lock on the file systems clusters use: a clear refusal where flock fails or
holds on one node only (with steps on several hosts), and an absolute artifact root there."""

from __future__ import annotations

import errno
import fcntl
import os

import pytest

from dihal.errors import ArtifactLockedError
from storage import locks
from storage.locks import LockUnsupportedError, Mount, artifact_lock


def _table(tmp_path, fstype, options="rw"):
    """A mount table with the root file system and `tmp_path` mounted as `fstype`."""
    table = tmp_path / "mounts"
    table.write_text(f"/dev/sda1 / ext4 rw,relatime 0 0\nserver:/x {tmp_path} {fstype} "
                     f"{options} 0 0\n")
    return table


def _mounted_as(monkeypatch, tmp_path, fstype, options="rw"):
    table, real = _table(tmp_path, fstype, options), locks.mount_of
    monkeypatch.setattr(locks, "mount_of", lambda path: real(path, table))


@pytest.mark.parametrize("code,fstype,options,fix", [
    (errno.ENOSYS, "lustre", "rw", "-o flock"),
    (errno.ENOLCK, "nfs", "rw,vers=3", "lock service"),
    (errno.EOPNOTSUPP, "fuse.sshfs", "rw", "NFSv4, GPFS"),
])
def test_failing_flock_is_refused_naming_the_file_system_and_fix(tmp_path, monkeypatch, code,
                                                                 fstype, options, fix):
    _mounted_as(monkeypatch, tmp_path, fstype, options)

    def flock(fd, op):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(fcntl, "flock", flock)
    with pytest.raises(LockUnsupportedError) as info:
        with artifact_lock(tmp_path / "art", "the dump"):
            pytest.fail("the body ran without a lock")
    msg = str(info.value)
    assert f"{fstype} at {tmp_path}" in msg and fix in msg and "flock fails" in msg
    assert os.strerror(code) in msg


def test_other_flock_errors_are_not_disguised(tmp_path, monkeypatch):
    def flock(fd, op):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(fcntl, "flock", flock)
    with pytest.raises(OSError, match="I/O error") as info:
        with artifact_lock(tmp_path / "art", "the dump"):
            pass
    assert not isinstance(info.value, LockUnsupportedError)


def test_a_held_lock_still_names_its_holder(tmp_path):
    with artifact_lock(tmp_path / "art", "the dump"):
        with pytest.raises(ArtifactLockedError, match=f"pid {os.getpid()}"):
            with artifact_lock(tmp_path / "art", "the dump"):
                pass


@pytest.mark.parametrize("fstype,options,conf,local", [
    ("lustre", "rw,localflock", None, True),
    ("lustre", "rw,flock", None, False),
    ("beegfs", "rw", None, True),  # no client config: BeeGFS's default, per-node locks
    ("beegfs", "rw", "tuneUseGlobalFileLocks = false\n", True),
    ("beegfs", "rw", "tuneUseGlobalFileLocks = true # cluster-wide\n", False),
    ("nfs4", "rw,vers=4.2", None, False),
    ("nfs", "rw,nolock", None, True),
    ("ext4", "rw", None, False),
])
def test_node_local_locks_are_recognised(tmp_path, fstype, options, conf, local):
    beegfs_conf = tmp_path / "beegfs-client.conf"
    if conf is not None:
        beegfs_conf.write_text(conf)
    mount = locks.mount_of(tmp_path / "a" / "b", _table(tmp_path, fstype, options))
    assert mount.fstype == fstype and mount.point == str(tmp_path)
    assert locks.node_local_locks(mount, beegfs_conf) is local


def test_node_local_locks_are_refused_only_with_steps_on_several_hosts(tmp_path, monkeypatch):
    _mounted_as(monkeypatch, tmp_path, "lustre", "rw,localflock")
    monkeypatch.delenv("DIHAL_DASK_SCHEDULER", raising=False)
    with artifact_lock(tmp_path / "art", "the dump"):  # one host: a per-node lock is enough
        pass
    monkeypatch.setenv("DIHAL_DASK_SCHEDULER", "tcp://scheduler:8786")
    with pytest.raises(LockUnsupportedError, match=r"one node only.*-o flock"):
        with artifact_lock(tmp_path / "art2", "the dump"):
            pass
    assert not (tmp_path / "art2.lock").exists()


def test_mount_table_longest_prefix_and_escaped_spaces(tmp_path):
    table = tmp_path / "mounts"
    table.write_text("/dev/a / ext4 rw 0 0\n/dev/b /scratch lustre rw,flock 0 0\n"
                     "/dev/c /scratch/my\\040data beegfs rw 0 0\n")
    assert locks.mount_of("/scratch/x", table) == Mount("/scratch", "lustre", ("rw", "flock"))
    assert locks.mount_of("/scratch/my data/y", table).fstype == "beegfs"
    assert locks.mount_of("/scratchy", table).fstype == "ext4"
    assert locks.mount_of("/x", tmp_path / "missing") is None


def test_relative_artifact_root_is_refused_with_a_distributed_engine(monkeypatch):
    from resources import StorageResource

    monkeypatch.delenv("DIHAL_DASK_SCHEDULER", raising=False)
    StorageResource(root=".dihal/artifacts").layout()  # one host: relative is fine
    monkeypatch.setenv("DIHAL_DASK_SCHEDULER", "tcp://scheduler:8786")
    with pytest.raises(LockUnsupportedError, match=r"relative path.*DIHAL_ARTIFACTS to an absolute"):
        StorageResource(root=".dihal/artifacts").layout()
    StorageResource(root="/shared/dihal/artifacts").layout()


def test_a_dask_worker_counts_as_a_distributed_engine(monkeypatch):
    import sys
    from types import SimpleNamespace

    monkeypatch.delenv("DIHAL_DASK_SCHEDULER", raising=False)

    def no_worker():
        raise ValueError("No worker found")

    monkeypatch.setitem(sys.modules, "distributed", SimpleNamespace(get_worker=no_worker))
    assert not locks.distributed_engine()
    monkeypatch.setitem(sys.modules, "distributed", SimpleNamespace(get_worker=lambda: object()))
    assert locks.distributed_engine()


def test_device_slots_refuse_a_file_system_without_flock(tmp_path, monkeypatch):
    """The step's device lease (dihal.run.devices) flocks files under the artifact root before any
    artifact lock: the compute resource probes the folder first."""
    from resources import ComputeResource

    _mounted_as(monkeypatch, tmp_path, "lustre")

    def flock(fd, op):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    monkeypatch.setattr(fcntl, "flock", flock)
    with pytest.raises(LockUnsupportedError, match=r"lustre at .*-o flock"):
        with ComputeResource(device="cpu").lease(tmp_path / ".devices"):
            pytest.fail("the step ran without a device lock")
    monkeypatch.undo()
    with ComputeResource(device="cpu", workers=1).lease(tmp_path / ".devices") as slot:
        assert slot.device == "cpu"
