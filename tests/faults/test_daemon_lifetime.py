"""The daemon drivers share lives as long as any driver uses it: the driver that started it
leaving does not stop it under another driver's runs; the last one to leave does. A shared
daemon killed seconds before a driver starts is replaced by that driver at once (one command),
not trusted for its still-fresh heartbeat."""

import os
import shutil
import signal
import time
from pathlib import Path

import dagster as dg
import pytest

from pipeline.daemon import DaemonLease, QueueStuck, daemon_alive
from pipeline.run_launcher import process_alive

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def instance(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    # as `make test`, `make run` and env.sh users have it: a daemon started with it set and
    # given -w refused its arguments and never beat
    monkeypatch.setenv("DAGSTER_MODULE_NAME", "pipeline.definitions")
    monkeypatch.chdir(ROOT)
    with dg.DagsterInstance.get() as inst:
        yield inst
    record = home / "dihal-daemon.json"
    if record.exists():  # a daemon left by a failed assertion
        pid = int(__import__("json").loads(record.read_text())["pid"])
        if process_alive(pid):
            os.killpg(pid, signal.SIGKILL)


def _beating(instance, lease, within_s=240.0) -> None:
    deadline = time.monotonic() + within_s
    log = Path(instance.root_directory) / "dihal-daemon.log"
    while not daemon_alive(instance):
        pid = lease.shared_pid()
        assert pid is not None and process_alive(pid), f"the daemon exited: {log.read_text()}"
        assert time.monotonic() < deadline, "the daemon never sent a heartbeat"
        time.sleep(1.0)


def test_the_daemon_lives_until_the_last_driver_using_it_leaves(instance):
    said = []
    first = DaemonLease(instance, "pipeline.definitions", said.append, "driver-a")
    second = DaemonLease(instance, "pipeline.definitions", said.append, "driver-b")
    first.join()
    pid = first.shared_pid()
    assert pid is not None and said[-1].startswith(f"started a Dagster daemon (pid {pid}")
    second.join()  # at once, before any heartbeat: the same daemon, not a second one
    assert said[-1] == (f"using the Dagster daemon that is already running (pid {pid}, shared "
                        "by the drivers of this instance)")
    assert first.leave() is None  # the driver that started it leaves: driver-b still uses it
    time.sleep(1.0)
    assert process_alive(pid) and second.shared_pid() == pid
    assert second.leave() == pid  # the last one stops it
    assert not process_alive(pid) and second.shared_pid() is None


def test_a_user_killed_without_leaving_does_not_keep_the_daemon(instance):
    lease = DaemonLease(instance, "pipeline.definitions", lambda m: None, "driver-a")
    lease.join()
    pid = lease.shared_pid()
    gone = DaemonLease(instance, "pipeline.definitions", lambda m: None, "killed")
    gone.join(pid=2**22 + 12345)  # a driver pid that does not run (SIGKILLed)
    assert lease.leave() == pid and not process_alive(pid)


def test_a_shared_daemon_killed_just_before_a_driver_starts_is_replaced_at_once(instance):
    said = []
    first = DaemonLease(instance, "pipeline.definitions", said.append, "driver-a")
    first.join()
    old = first.shared_pid()
    _beating(instance, first)
    os.killpg(old, signal.SIGKILL)  # the daemon and its code servers
    time.sleep(1.0)
    assert daemon_alive(instance)  # its last heartbeat is still fresh
    t0 = time.monotonic()
    second = DaemonLease(instance, "pipeline.definitions", said.append, "driver-b")
    second.join()
    new = second.shared_pid()
    assert new is not None and new != old and said[-1].startswith(f"started a Dagster daemon "
                                                                  f"(pid {new}")
    assert "the Dagster daemon the drivers shared is gone" in said[-2]
    assert time.monotonic() - t0 < 60
    _beating(instance, second)
    first.leave(), second.leave()
    assert not process_alive(new)


def test_a_daemon_that_never_starts_is_reported_with_its_log_not_restarted_for_ever(
        instance, tmp_path, monkeypatch):
    broken = tmp_path / "dagster-daemon"
    broken.write_text("#!/bin/sh\necho 'Error: the daemon cannot load its code' >&2\nexit 2\n")
    broken.chmod(0o755)
    monkeypatch.setattr("pipeline.daemon.daemon_command", lambda ws: [str(broken), "run"])
    lease = DaemonLease(instance, "pipeline.definitions", lambda m: None, "driver-a")
    lease.join()
    deadline = time.monotonic() + 30
    while lease.shared_pid() is not None:  # it exits at once
        assert time.monotonic() < deadline
        time.sleep(0.2)
    with pytest.raises(QueueStuck, match="never sent a heartbeat") as err:
        lease.revive()
    assert "the daemon cannot load its code" in str(err.value)
    assert lease.leave() is None
