"""`make ui`: the web UI and the daemon (`dagster dev`, serving pyproject's [tool.dagster]
code location, named `dihal` as the driver names it), started so that Ctrl-C (or SIGTERM)
leaves no process behind: `dagster dev` runs in a session of its own, a signal is passed on to
it, and whatever of its process tree is still there after a grace period (the web server, the
daemon, code servers still starting up on a loaded machine) is killed, by pid.

    python -m pipeline.ui [dagster dev options]     # e.g. -p 3001
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

GRACE_S = 20.0


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, their children, ...), from /proc; [] elsewhere."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(proc.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def stop_tree(proc: subprocess.Popen, grace_s: float = GRACE_S) -> None:
    """SIGTERM to `proc`'s process group; after `grace_s`, SIGKILL to the group and to every
    process of its tree still alive (a code server in a session of its own included)."""
    from pipeline.run_launcher import process_alive

    tree = descendants(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and (proc.poll() is None or any(
            process_alive(p) for p in tree)):
        time.sleep(0.5)
        tree += [p for p in descendants(proc.pid) if p not in tree]
    for pid in [proc.pid, *tree]:
        if process_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    proc.wait()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    exe = shutil.which("dagster", path=str(Path(sys.executable).parent)) or "dagster"
    from pipeline.launch import cli_env

    # dagster dev reads [tool.dagster] itself: it never serves while DAGSTER_MODULE_NAME is set
    proc = subprocess.Popen([exe, "dev", *argv], env=cli_env(), start_new_session=True)
    stopping = []

    def on_signal(signum, _frame):
        stopping.append(signum)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while proc.poll() is None and not stopping:
        time.sleep(0.5)
    if stopping:
        print(f"\n[dihal] stopping dagster dev (pid {proc.pid}) and its processes", flush=True)
    stop_tree(proc)
    return 0 if stopping else proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
