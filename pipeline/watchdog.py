"""The driver's watchdog: started by `python -m pipeline.main` in a session of its own, it
outlives a driver killed with SIGKILL (or the OOM killer) and, within seconds, ends what that
driver left: its runs still queued or in flight are canceled through the instance (a worker
that does not stop is killed, by its own pid, and its run marked canceled), and the driver
leaves the shared daemon (pipeline.daemon.DaemonLease: stopped only if no other driver uses
it). Nothing of another driver's is touched: runs are picked by the dihal/driver tag. A driver
that ends normally stops it first.

    python -m pipeline.watchdog DRIVER_PID DRIVER_TAG [MODULE]
"""

from __future__ import annotations

import os
import sys
import time

import dagster as dg

from pipeline.run_launcher import process_alive


def _alive(pid: int) -> bool:
    return process_alive(pid)


def end_runs(instance: dg.DagsterInstance, driver_tag: str, reason: str,
             wait_s: float = 20.0) -> list[str]:
    """Cancel the unfinished runs tagged dihal/driver=driver_tag; a worker still alive after
    `wait_s` is killed and its run marked canceled. The run ids."""
    import signal

    from pipeline.run_launcher import worker_pid

    def unfinished() -> list[dg.DagsterRun]:
        return [r.dagster_run for r in instance.get_run_records(
            filters=dg.RunsFilter(tags={"dihal/driver": driver_tag}))
            if not r.dagster_run.is_finished]

    runs = unfinished()
    for run in runs:
        try:
            instance.run_coordinator.cancel_run(run.run_id)
        except Exception as exc:  # the code server that launched it may be gone
            print(f"watchdog: cancel {run.run_id}: {exc}", file=sys.stderr, flush=True)
    deadline = time.monotonic() + wait_s
    while unfinished() and time.monotonic() < deadline:
        time.sleep(0.5)
    for run in unfinished():
        pid = worker_pid(instance, run.run_id)
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)
        instance.report_run_canceled(run, reason)
    return [r.run_id for r in runs]


def main(argv: list[str]) -> None:
    from pipeline.daemon import DaemonLease

    driver, tag = int(argv[0]), argv[1]
    module = argv[2] if len(argv) > 2 else "pipeline.definitions"
    while _alive(driver):
        time.sleep(1.0)
    instance = dg.DagsterInstance.get()
    ended = end_runs(instance, tag, f"the driver (pid {driver}) that launched this run was killed")
    # the daemon stops only if no other driver still uses it
    daemon = DaemonLease(instance, module, lambda msg: None, tag).leave()
    print(f"watchdog: driver {driver} is gone; ended runs {ended}"
          + (f", stopped daemon {daemon}" if daemon else ""), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
