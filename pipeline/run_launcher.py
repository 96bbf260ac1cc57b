"""The instance's run launcher (dagster.yaml): Dagster's default launcher, plus a health check
of each run's worker process, so that the daemon's run monitoring marks a run whose worker
died (SIGKILL, the OOM killer, a crash) failed within a minute and frees its slot of the pool,
instead of leaving it STARTED for good. (How long a code server may take to start a run is
Dagster's own DAGSTER_GRPC_TIMEOUT_SECONDS, which the driver and env.sh give every daemon:
pipeline.daemon.cli_env.) Imported by every process that opens the instance: it imports
nothing but Dagster."""

from __future__ import annotations

import os
import time
from pathlib import Path

from dagster import DagsterEventType
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus
from dagster._core.launcher.default_run_launcher import DefaultRunLauncher

STARTED = "Started process for run (pid: "  # the run worker's first engine event (Dagster's)


def worker_pid(instance, run_id: str) -> int | None:
    """The pid of a run's worker process (the last one started), or None before it starts."""
    pid = None
    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        if (entry.message or "").startswith(STARTED):
            meta = entry.dagster_event.event_specific_data.metadata
            if "pid" in meta:
                pid = int(meta["pid"].value)
    return pid


def process_alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (a zombie, killed but not yet reaped, does not)."""
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (OSError, IndexError):
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class MonitoredRunLauncher(DefaultRunLauncher):
    """DefaultRunLauncher (runs in processes of the code server, on the daemon's host) whose
    run workers the daemon's run monitoring checks by pid."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run) -> CheckRunHealthResult:
        pid = worker_pid(self._instance, run.run_id)
        if pid is None:  # not started yet: run_monitoring.start_timeout_seconds covers that
            return CheckRunHealthResult(WorkerStatus.RUNNING, "the run worker has not started")
        if process_alive(pid):
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"run worker pid {pid}")
        return CheckRunHealthResult(
            WorkerStatus.FAILED, f"the run worker (pid {pid}) is gone without ending the run: "
            "killed (SIGKILL, the out-of-memory killer) or crashed. Run the same command again "
            "to resume (finished artifacts and checkpoints are kept)")


def stop_process(pid: int, grace_s: float = 20.0) -> None:
    """SIGTERM to `pid` alone (not its process group: runs launched through a daemon may be
    another driver's), then SIGKILL to it and its code-server children if it is still there."""
    import signal

    children = code_servers(pid)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    for p in ([pid] if process_alive(pid) else []) + [c for c in children if process_alive(c)]:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def code_servers(pid: int) -> list[int]:
    """The Dagster code servers that process `pid` started (its children running `dagster api
    grpc` / `code-server`), on Linux; [] elsewhere."""
    from pathlib import Path

    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and ("grpc" in cmd or "code-server" in cmd):
            found.append(int(proc.name))
    return found
