"""The web UI's port already taken: `python -m pipeline.ui -p PORT` refuses at once, naming the
port, the process that listens on it and the fix, exit status 2, no traceback, and nothing
started (`dagster dev` itself logs the bind error, then hangs with its daemon and code servers
running). Where no port is given and 3000 is taken, Dagster's web server takes a free port,
and the UI says so first."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.tiny import ROOT


def _commands_naming(text: str) -> list[str]:
    """Command lines of this host's processes that hold `text`, but for this one."""
    out = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd and int(proc.name) != os.getpid():
            out.append(cmd)
    return out


def test_a_taken_port_is_refused_at_once_naming_the_process_and_the_fix(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "DAGSTER_HOME": str(home), "DIHAL_ARTIFACTS": str(tmp_path / "a")}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        t0 = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "pipeline.ui", "-p", str(port)], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=120)
        took = time.monotonic() - t0
    print(f"exit {out.returncode} after {took:.1f} s: {out.stderr.strip()}")
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"REFUSED: port {port} on 127.0.0.1 is already in use by pid "
                           f"{os.getpid()} (")
    assert f"stop that process (kill {os.getpid()}), or give the web UI another port " \
           f"(python -m pipeline.ui -p {port + 1})" in last
    assert took < 60  # at once: no code location loaded, no server started
    assert _commands_naming(f"-p {port}") == [] and _commands_naming(f"--port {port}") == []
    assert list(home.iterdir()) == []  # no instance opened


def test_the_default_port_taken_is_said_before_dagster_dev_takes_another(tmp_path, monkeypatch,
                                                                           capsys):
    import pipeline.ui as ui

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DIHAL_ARTIFACTS", str(tmp_path / "a"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(ui, "DEFAULT_PORT", port)
        assert ui.refusal([]) is None  # served on a free port, not refused
        said = capsys.readouterr().out
        assert f"port {port} on 127.0.0.1 is already in use by pid {os.getpid()}" in said
        assert "the web UI is served on a free port, named below" in said
        assert ui.refusal(["--port", str(port)]).startswith(f"port {port} on 127.0.0.1 is "
                                                             "already in use")
    assert ui.served_address(["-h", "0.0.0.0", f"--port={port}"]) == ("0.0.0.0", port)
    assert ui.served_address(["-p3001"]) == ("127.0.0.1", 3001)
    assert ui.refusal(["-p", str(port)]) is None  # free again
