"""The code servers' gRPC Unix sockets: Dagster binds each to a temporary file name, in /tmp by
default, with the mode the umask leaves (under umask 000, srwxrwxrwx in a world-writable folder:
any local user could connect and have the code server launch runs). The driver and
`python -m pipeline.ui` point TMPDIR at `dihal-<uid>`, a folder only this user can enter
(pipeline.private_tmp.private_tmpdir), so the sockets of every code server they start (the driver's
own, its daemon's, dagster dev's) lie where no other user reaches them, whatever their mode."""

import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pipeline.daemon import cli_env
from pipeline.private_tmp import private_tmpdir
from tests.tiny import ROOT


@pytest.fixture()
def temp_base(tmp_path, monkeypatch):
    """A system temp folder of the test's own (restored afterwards, with TMPDIR)."""
    base = tmp_path / "tmp"
    base.mkdir()
    base.chmod(0o1777)  # as /tmp
    monkeypatch.setenv("TMPDIR", str(base))
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    return base


def _private(folder: Path) -> bool:
    st = os.lstat(folder)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and \
        stat.S_IMODE(st.st_mode) == 0o700


def test_dagsters_socket_path_lies_in_a_folder_only_this_user_enters(temp_base):
    from dagster._utils import safe_tempfile_path_unmanaged

    assert Path(safe_tempfile_path_unmanaged()).parent == temp_base  # what Dagster does
    folder = private_tmpdir()
    assert folder == temp_base / f"dihal-{os.getuid()}" and _private(folder)
    assert Path(safe_tempfile_path_unmanaged()).parent == folder
    assert cli_env()["TMPDIR"] == str(folder)  # the daemon and dagster dev inherit it
    assert private_tmpdir() == folder  # again, or in a process that inherited it: the same
    folder.chmod(0o755)  # ours, opened up: made private again
    assert private_tmpdir() == folder and _private(folder)


def test_a_dihal_folder_that_is_a_link_is_never_used(temp_base, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o777)
    (temp_base / f"dihal-{os.getuid()}").symlink_to(elsewhere)
    folder = private_tmpdir()
    assert folder.parent == temp_base and folder.name.startswith(f"dihal-{os.getuid()}-")
    assert _private(folder)
    assert list(elsewhere.iterdir()) == []


def test_the_driver_makes_its_temporary_folder_private_before_opening_the_instance(
        temp_base, monkeypatch):
    import pipeline.daemon
    import pipeline.launch
    import pipeline.main as driver

    seen = []

    def opened():
        seen.append(tempfile.gettempdir())
        raise SystemExit(0)

    monkeypatch.setattr(driver, "_checked", lambda ap, argv: (None, [], [], {}))
    monkeypatch.setattr(pipeline.daemon, "open_instance", opened)
    with pytest.raises(SystemExit):
        driver.main([])
    assert seen == [str(temp_base / f"dihal-{os.getuid()}")]


def _sockets(pid: int) -> list[Path]:
    """The --socket paths of the processes below `pid` (the code servers)."""
    from pipeline.ui import descendants

    out = []
    for child in descendants(pid):
        try:
            args = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        out += [Path(args[i + 1].decode()) for i, a in enumerate(args[:-1]) if a == b"--socket"]
    return out


def test_dagster_devs_code_server_sockets_are_out_of_other_users_reach(tmp_path):
    """Under umask 000 (the socket files srwxrwxrwx), `python -m pipeline.ui`'s code servers
    bind their sockets in this user's 0700 folder, not in /tmp."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "dagster.yaml").read_text())
    (tmp_path / "dihal.toml").write_text("[backbones]\n")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(ROOT),
           "DIHAL_CONFIG": str(tmp_path / "dihal.toml"), "DIHAL_ARTIFACTS": str(tmp_path / "a"),
           "TMPDIR": "/tmp"}
    with open(tmp_path / "ui.log", "wb") as log:
        ui = subprocess.Popen([sys.executable, "-m", "pipeline.ui", "-p", str(port)], cwd=ROOT,
                              env=env, stdout=log, stderr=subprocess.STDOUT, umask=0,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 300  # the code servers start on a loaded machine
        while not (found := [s for s in _sockets(ui.pid) if s.exists()]):
            assert ui.poll() is None and time.monotonic() < deadline, \
                (tmp_path / "ui.log").read_text()[-3000:]
            time.sleep(1.0)
        for path in found:
            mode = stat.S_IMODE(os.stat(path).st_mode)
            print(f"{path}: socket {oct(mode)}, folder {oct(stat.S_IMODE(path.parent.stat().st_mode))}")
            assert stat.S_ISSOCK(os.stat(path).st_mode)
            assert path.parent == Path(f"/tmp/dihal-{os.getuid()}"), path
            assert _private(path.parent), oct(path.parent.stat().st_mode)
    finally:
        ui.send_signal(signal.SIGINT)  # pipeline.ui stops dagster dev and its processes
        try:
            ui.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)
            ui.wait()
