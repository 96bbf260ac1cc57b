"""The instance's run launcher (dagster.yaml): Dagster's default launcher, plus a health check
of each run's worker process, so that the daemon's run monitoring marks a run whose worker
died (SIGKILL, the OOM killer, a crash) failed within a minute and frees its queue slot,
instead of leaving it STARTED for good; and a launch deadline that fits a loaded host (the
code server's answer to "start this run" may take minutes on a busy 2-core machine), with a
message that says so when it is exceeded. Imported by every process that opens the instance:
it imports nothing but Dagster (and the standard-library reader of the environment)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from dagster._core.events import DagsterEventType
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus
from dagster._core.launcher.default_run_launcher import DefaultRunLauncher

from dihal.environment import env_int

STARTED = "Started process for run (pid: "  # the run worker's first engine event (Dagster's)
LAUNCH_TIMEOUT_ENV = "DIHAL_LAUNCH_TIMEOUT_S"
LAUNCH_TIMEOUT_S = 300  # Dagster's own deadline is 60 s: 2 of 2 runs failed on a loaded host
LAUNCH_TIMEOUT_MAX_S = 86400  # a day


def launch_timeout_s() -> int:
    """How long the code server may take to start a run: $DIHAL_LAUNCH_TIMEOUT_S (whole seconds,
    1 to a day), else 300 s; any other value is refused by name (dihal.environment)."""
    return env_int(LAUNCH_TIMEOUT_ENV, LAUNCH_TIMEOUT_S, lo=1, hi=LAUNCH_TIMEOUT_MAX_S)


def launch_timeout_message(timeout_s: int) -> str:
    """What a run whose launch ran past its deadline says: the host's load and the fix."""
    try:
        load = f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    except OSError:
        load = f"{os.cpu_count()} cores"
    return (f"the code server did not start this run within {timeout_s} s ({load}): the host is "
            f"too busy. Run the same command again when it is quieter (finished artifacts are "
            f"kept), lower --workers, or give launches longer: {LAUNCH_TIMEOUT_ENV}=<seconds> "
            "in the environment of the daemon (`dagster dev`, or the driver that starts one).")


class _PatientClient:
    """A code server's gRPC client whose StartRun call waits launch_timeout_s()."""

    def __init__(self, client, timeout_s: int):
        self._client, self._timeout_s = client, timeout_s

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    def start_run(self, execute_run_args) -> str:
        from dagster._grpc.__generated__ import dagster_api_pb2
        from dagster._serdes import serialize_value

        res = self._client._query(
            "StartRun", dagster_api_pb2.StartRunRequest, timeout=self._timeout_s,
            custom_timeout_message=launch_timeout_message(self._timeout_s),
            serialized_execute_run_args=serialize_value(execute_run_args))
        return res.serialized_start_run_result


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

    def launch_run(self, context) -> None:
        """DefaultRunLauncher.launch_run, the code server given launch_timeout_s() to answer."""
        workspace = context.workspace
        if workspace is None:
            return super().launch_run(context)
        run = context.dagster_run
        origin = run.remote_job_origin.repository_origin.code_location_origin
        location = workspace.get_code_location(origin.location_name)
        client = getattr(location, "client", None)
        if client is None:  # not a gRPC location: Dagster's own refusal
            return super().launch_run(context)
        DefaultRunLauncher.launch_run_from_grpc_client(
            self._instance, run, _PatientClient(client, launch_timeout_s()))
        self._run_ids.add(run.run_id)

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
