"""`make ui`: the web UI and the daemon (`dagster dev`, serving pyproject's [tool.dagster]
code location, named `dihal` as the driver names it), started so that Ctrl-C (or SIGTERM)
leaves no process behind: `dagster dev` runs in a session of its own, a signal is passed on to
it, and whatever of its process tree is still there after a grace period (the web server, the
daemon, code servers still starting up on a loaded machine) is killed, by pid.

    python -m pipeline.ui [dagster dev options]     # e.g. -p 3001

Before anything starts it refuses (exit status 2) a port that something already listens on
(naming the process where /proc shows it; `dagster dev` itself would log the bind error and
then hang with its daemon and code servers running), and a read-only or full DAGSTER_HOME or
artifact root. The code servers' Unix sockets lie in a folder only this user can enter
(pipeline.private_tmp.private_tmpdir).
"""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import signal
import socket
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


DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 3000  # dagster dev's web server's


def served_address(argv: list[str]) -> tuple[str, int | None]:
    """The host and port `dagster dev` serves on, from its options (-h/--host, -p/--port);
    port None where none is given (the web server then takes DEFAULT_PORT, or a free port where
    that is taken)."""
    ap = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    ap.add_argument("-h", "--host", "--dagit-host", default=DEFAULT_HOST)
    ap.add_argument("-p", "--port", "--dagit-port", default=None)
    known, _ = ap.parse_known_args(argv)
    port = known.port  # not a number: dagster dev refuses it itself
    return known.host, int(port) if port and port.isdigit() else None


def port_taken(host: str, port: int) -> bool:
    """Something listens on host:port: a bind as the web server binds it (SO_REUSEADDR, as
    uvicorn) fails with EADDRINUSE. An unknown host is left to dagster dev to report."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port,
                                                             type=socket.SOCK_STREAM)[0]
    except OSError:
        return False
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def listener(port: int) -> tuple[int, str] | None:
    """(pid, command line) of a process listening on TCP `port`, from /proc (the sockets in
    LISTEN state of /proc/net/tcp and tcp6, then the process holding one); None where none is
    found (not Linux, or another user's process)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{f[9]}]")
    for proc in Path("/proc").glob("[0-9]*") if inodes else []:
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in inodes:
                    cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                        errors="replace").strip()
                    return int(proc.name), cmd
            except OSError:
                continue
    return None


def port_message(host: str, port: int, given: bool) -> str:
    """What to say of a taken port: who holds it, and the fix."""
    held = listener(port)
    who = f" by pid {held[0]} ({held[1][:120]})" if held else ""
    stop = f"stop that process (kill {held[0]})" if held else "stop what listens there"
    if given:
        return (f"port {port} on {host} is already in use{who}: {stop}, or give the web UI "
                f"another port (python -m pipeline.ui -p {port + 1}). Nothing was started.")
    return (f"port {port} on {host} is already in use{who}: the web UI is served on a free "
            f"port, named below (Serving dagster-webserver on ...); {stop} to have {port}, or "
            "choose one with -p PORT.")


def refusal(argv: list[str]) -> str | None:
    """Why `dagster dev` must not start (a port given that is taken, a read-only or full
    DAGSTER_HOME or artifact root); None where it may. Says so where the default port is
    taken (dagster dev then takes another)."""
    from dihal.run.preflight import PreflightError, require_folders
    from pipeline.daemon import project_location
    from pipeline.preflight import folders

    host, port = served_address(argv)
    if port_taken(host, port or DEFAULT_PORT):
        if port is not None:
            return port_message(host, port, given=True)
        print(f"[dihal] {port_message(host, DEFAULT_PORT, given=False)}", flush=True)
    try:
        require_folders(folders(project_location()[0]))
    except PreflightError as exc:
        return str(exc)
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    exe = shutil.which("dagster", path=str(Path(sys.executable).parent)) or "dagster"
    from pipeline.daemon import cli_env
    from pipeline.private_tmp import private_tmpdir

    if why := refusal(argv):
        print(f"REFUSED: {why}", file=sys.stderr, flush=True)
        return 2
    private_tmpdir()  # the code servers' Unix sockets where no other user can reach them

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
