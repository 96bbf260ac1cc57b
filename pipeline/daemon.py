"""The Dagster instance and its daemon as the driver reaches them: the code location's name and
load target (pyproject's [tool.dagster], as `dagster dev` and `dg dev` name it), the instance
opened one process at a time, whether a daemon beats, and the daemon the drivers of an
instance share (DaemonLease: started by the first, stopped by the last to leave, replaced when
killed; a watchdog leaves it for a driver killed without a chance to).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg

from dihal.environment import env_int

QUEUE_DAEMON = "QUEUED_RUN_COORDINATOR"
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def project_location() -> tuple[str, str]:
    """(module, code location name) of pyproject.toml's [tool.dagster]: the location `dagster
    dev`, `dg dev` and `make ui` serve, which the driver's runs must name too (a daemon finds a
    run's code by its location's name)."""
    table = tomllib.loads(PYPROJECT.read_text())["tool"]["dagster"]
    return table["module_name"], table["code_location_name"]


def location_name(module: str) -> str:
    """The code location name of `module`: pyproject's name for the project's module (as the
    web UI and `dg` name it), the module itself for another (a test's tiny location)."""
    project_module, name = project_location()
    return name if module == project_module else module


# The variables by which the dagster CLIs pick their code themselves: a `dagster-daemon run -w`
# or `dagster dev` started with one set (env.sh exports DAGSTER_MODULE_NAME for the `dagster`
# commands) refuses its arguments ("Invalid set of CLI arguments") or serves nothing
CLI_TARGET_ENV = ("DAGSTER_MODULE_NAME", "DAGSTER_PACKAGE_NAME", "DAGSTER_PYTHON_FILE",
                  "DAGSTER_ATTRIBUTE", "DAGSTER_WORKING_DIRECTORY")


# How long a code server may take to answer a gRPC call, "start this run" included: Dagster
# reads it when its gRPC client is imported. Its own 60 s failed 2 of 2 runs on a loaded 2-core
# host (the code server may take minutes to start a run there); every daemon and `dagster dev`
# the driver or `make ui` starts gets GRPC_TIMEOUT_S unless the environment sets it (env.sh
# exports it for the dagster commands too)
GRPC_TIMEOUT_ENV = "DAGSTER_GRPC_TIMEOUT_SECONDS"
GRPC_TIMEOUT_S = 300
GRPC_TIMEOUT_MAX_S = 86400  # a day


def grpc_timeout_s() -> int:
    """$DAGSTER_GRPC_TIMEOUT_SECONDS (whole seconds, 1 to a day), else GRPC_TIMEOUT_S; any other
    value is refused by name (dihal.environment)."""
    return env_int(GRPC_TIMEOUT_ENV, GRPC_TIMEOUT_S, lo=1, hi=GRPC_TIMEOUT_MAX_S)


def cli_env() -> dict[str, str]:
    """This process's environment without CLI_TARGET_ENV, for a dagster CLI given its code
    another way (a workspace file, pyproject's [tool.dagster]), with the gRPC deadline a
    loaded host needs (grpc_timeout_s)."""
    return {**{k: v for k, v in os.environ.items() if k not in CLI_TARGET_ENV},
            GRPC_TIMEOUT_ENV: str(grpc_timeout_s())}


def daemon_command(workspace: Path) -> list[str]:
    """The command of the daemon a driver starts: Dagster's `dagster-daemon run` over
    `workspace`, with the backfill daemon's interval of pipeline.dagster_daemon."""
    return [sys.executable, "-m", "pipeline.dagster_daemon", "run", "-w", str(workspace)]


def workspace_file(instance: dg.DagsterInstance, module: str) -> Path:
    """A workspace.yaml under DAGSTER_HOME loading `module` under its location name, for the
    daemon a driver starts (`dagster-daemon run -m` would name the location after the module);
    written atomically (another driver may write the same file at the same time)."""
    name = location_name(module)
    path = Path(instance.root_directory) / f"dihal-workspace-{name}.yaml"
    text = ("load_from:\n  - python_module:\n"
            f"      module_name: {json.dumps(module)}\n"
            f"      location_name: {json.dumps(name)}\n"
            f"      working_directory: {json.dumps(os.getcwd())}\n")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def daemon_alive(instance: dg.DagsterInstance, within_s: float = 70.0) -> bool:
    """A daemon's run-queue loop has sent a heartbeat lately (they come every 30 s)."""
    beat = instance.get_daemon_heartbeats().get(QUEUE_DAEMON)
    return beat is not None and time.time() - beat.timestamp < within_s


def open_instance() -> dg.DagsterInstance:
    """DagsterInstance.get(), its storage created by one process at a time: two drivers started
    together on a fresh DAGSTER_HOME otherwise both create the SQLite tables, and one fails
    (`table alembic_version already exists`). An exclusive flock on DAGSTER_HOME/
    .dihal-instance.lock (opened without following a symlink and without truncating) is held
    while the instance opens its run, event log and schedule storage."""
    import fcntl

    home = Path(os.environ["DAGSTER_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    fd = os.open(home / ".dihal-instance.lock", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        instance = dg.DagsterInstance.get()
        instance.get_run_records(limit=1)  # each storage made (or migrated) now, under the lock
        instance.get_daemon_heartbeats()
        instance.all_instigator_state()
        instance.get_latest_materialization_event(dg.AssetKey("dihal_probe"))
    finally:
        os.close(fd)
    return instance


def driver_tag() -> str:
    """This driver's id (the dihal/driver tag of its runs): host, pid, start time."""
    return f"{socket.gethostname()}-{os.getpid()}-{time.time():.0f}"


class DaemonLease:
    """The Dagster daemon this driver's runs need, shared by every driver on the instance: the
    running one (`dagster dev`, `dg dev`, or one a driver started), else one started here. Its
    lifetime is tied to every driver using it: each driver is a user (a file under
    DAGSTER_HOME/dihal-daemon.users naming its pid), and a daemon a driver started is stopped by
    the last user to leave (or by the watchdog of a killed one), never while another driver's
    runs depend on it. A daemon started outside (dagster dev) is never stopped."""

    def __init__(self, instance: dg.DagsterInstance, module: str, say: Callable[[str], None],
                 tag: str):
        self.instance, self.module, self.say, self.tag = instance, module, say, tag
        self.home = Path(instance.root_directory)
        self.users = self.home / "dihal-daemon.users"
        self.record = self.home / "dihal-daemon.json"  # {"pid"} of the daemon drivers share

    @contextmanager
    def _locked(self) -> Iterator[None]:
        import fcntl

        fd = os.open(self.home / "dihal-daemon.lock", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW,
                     0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def shared_pid(self) -> int | None:
        """The pid of the daemon a driver started, while that process lives."""
        from pipeline.run_launcher import process_alive

        try:
            pid = int(json.loads(self.record.read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return pid if process_alive(pid) else None

    def live_users(self) -> list[str]:
        from pipeline.run_launcher import process_alive

        out = []
        for f in self.users.glob("*") if self.users.is_dir() else []:
            try:
                if process_alive(int(f.read_text())):
                    out.append(f.name)
            except (OSError, ValueError):
                continue
        return out

    def join(self, pid: int | None = None) -> None:
        """Use the daemon that runs (its heartbeat, or the shared one's process), else start
        one; count this driver (`pid`, default this process) among its users."""
        with self._locked():
            self.users.mkdir(exist_ok=True)
            (self.users / self.tag).write_text(str(pid or os.getpid()))
            self._ensure()

    def _ensure(self) -> None:
        if (pid := self.shared_pid()) is not None:
            self.say(f"using the Dagster daemon that is already running (pid {pid}, shared by "
                     "the drivers of this instance)")
            return
        if self.record.exists() and daemon_alive(self.instance):
            # the shared daemon died (killed) seconds ago: its last heartbeat is still fresh.
            # Forget it, and count only a heartbeat written from now on (dagster dev's)
            self.say("the Dagster daemon the drivers shared is gone; waiting up to 40 s for "
                     "another daemon's heartbeat")
            self.record.unlink(missing_ok=True)
            self.instance.wipe_daemon_heartbeats()
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline and not daemon_alive(self.instance):
                time.sleep(1.0)
        if daemon_alive(self.instance):
            self.say("using the Dagster daemon that is already running")
        else:
            self._start()

    def _start(self) -> None:
        log = self.home / "dihal-daemon.log"
        self.instance.wipe_daemon_heartbeats()  # a dead daemon's last beat must not count
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                daemon_command(workspace_file(self.instance, self.module)),
                env=cli_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        tmp = self.record.with_name(f".{self.record.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"pid": proc.pid, "started_by": self.tag}))
        os.replace(tmp, self.record)
        self.say(f"started a Dagster daemon (pid {proc.pid}, log {log})")

    def revive(self) -> bool:
        """The daemon in use stopped beating (killed): start one now (True), unless another
        driver did meanwhile."""
        with self._locked():
            if self.shared_pid() is not None and daemon_alive(self.instance, within_s=45.0):
                return False
            if self.instance.get_daemon_heartbeats().get(QUEUE_DAEMON) is None:
                # the daemon started last never beat: starting it again would fail the same way
                raise QueueStuck(self._never_beat())
            self.say("the Dagster daemon stopped (no heartbeat): starting one, the queued runs "
                     "go on")
            if (pid := self.shared_pid()) is not None:
                from pipeline.run_launcher import stop_process

                stop_process(pid, grace_s=10.0)
            self._start()
            return True

    def _never_beat(self) -> str:
        log = self.home / "dihal-daemon.log"
        try:
            tail = log.read_text(errors="replace").splitlines()[-12:]
        except OSError:
            tail = ["(no log)"]
        return ("the Dagster daemon started for this instance never sent a heartbeat and is "
                f"not running; the end of its log ({log}):\n" + "\n".join(f"  {t}" for t in tail)
                + "\nfix what it names and run the same command again (finished artifacts are "
                "kept)")

    def leave(self, tag: str | None = None) -> int | None:
        """Stop counting driver `tag` (default this one); the last user stops the shared
        daemon. The stopped daemon's pid, or None."""
        from pipeline.run_launcher import stop_process

        with self._locked():
            (self.users / (tag or self.tag)).unlink(missing_ok=True)
            if self.live_users() or (pid := self.shared_pid()) is None:
                return None
            stop_process(pid, grace_s=30.0)  # the daemon, and its code servers
            self.record.unlink(missing_ok=True)
            self.instance.wipe_daemon_heartbeats()  # so that the next command does not count on it
            return pid


@contextmanager
def daemon(instance: dg.DagsterInstance, module: str, say: Callable[[str], None],
           tag: str | None = None) -> Iterator[DaemonLease]:
    """The shared daemon (DaemonLease) for the duration. A watchdog in a session of its own
    (pipeline.watchdog) ends this driver's runs (tag `tag`) and leaves the lease for it if the
    driver is killed without a chance to (SIGKILL, the OOM killer)."""
    tag = tag or driver_tag()
    lease = DaemonLease(instance, module, say, tag)
    lease.join()
    log = Path(instance.root_directory) / "dihal-daemon.log"
    with open(log, "ab") as out:
        watchdog = subprocess.Popen(
            [sys.executable, "-m", "pipeline.watchdog", str(os.getpid()), tag, module],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield lease
    finally:
        watchdog.terminate()  # this driver ends what it started itself
        watchdog.wait()
        lease.leave()


class QueueStuck(RuntimeError):
    """Runs wait in the queue and nothing launches them."""
