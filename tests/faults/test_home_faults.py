"""A read-only or full DAGSTER_HOME or artifact root (DIHAL_ARTIFACTS): the driver, and
`python -m pipeline.ui`, refuse at once, before anything is loaded or written, naming the
folder, why (a read-only file system; a full disk, with its free space) and the fix, exit
status 2 and no traceback; the files already there are kept. Each faulty folder is a small
tmpfs of its own, remounted read-only or filled with a file: the tests that need one skip
where this host does not let them mount."""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from dihal.run.preflight import Folder, check_folder
from tests.tiny import ROOT

DRIVER = [sys.executable, "-m", "pipeline.main", "--backbone", "llama", "--module",
          "tests.tiny_location", "--layers", "1", "--stop-after", "sweep"]
VARIABLES = {"DAGSTER_HOME": "home", "DIHAL_ARTIFACTS": "artifacts"}


@contextmanager
def tmpfs(path: Path, size: str = "512k"):
    """A tmpfs of `size` mounted at `path` for the block (unmounted however it ends)."""
    path.mkdir(parents=True)
    if not shutil.which("mount"):
        pytest.skip("no mount command on this host: a read-only or full folder needs a tmpfs")
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                         capture_output=True, text=True)
    if out.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({out.stderr.strip()}): a read-only or full "
                    "folder needs one (root, in a host that permits mount)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(folder: Path) -> None:
    """Write into `folder` until its disk is full."""
    with open(folder / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


@contextmanager
def world(tmp_path: Path, variable: str, fault: str):
    """A DAGSTER_HOME (its dagster.yaml) and an artifact root (an artifact already made), the
    one named by `variable` on a tmpfs that is read-only or full. Yields (home, root)."""
    home, root = tmp_path / "home", tmp_path / "artifacts"
    faulty = home if variable == "DAGSTER_HOME" else root
    with tmpfs(faulty):
        for folder in (home, root):
            folder.mkdir(exist_ok=True)
        shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
        (root / "llama" / "layer_score").mkdir(parents=True)
        (root / "llama" / "layer_score" / "manifest.json").write_text('{"l_star": 2}\n')
        if fault == "full":
            fill(faulty)
        else:
            subprocess.run(["mount", "-o", "remount,ro", str(faulty)], check=True)
        yield home, root


def said(err: str, variable: str, folder: Path, fault: str) -> None:
    """The refusal names the variable, the folder, why and the fix; no traceback."""
    assert "Traceback" not in err, err[-3000:]
    lines = err.strip().splitlines()
    assert lines[-2] == "REFUSED: pre-flight refused this run (1 problem(s)):", lines[-3:]
    line = lines[-1]
    if fault == "read-only":
        assert f"  - {variable}: {folder} is on a read-only file system" in line, line
        assert "remount it read-write" in line
    else:
        assert re.search(rf"  - {variable}: the disk holding {re.escape(str(folder))} is full: "
                         r"0\.\d MiB free, a run needs at least 100\.0 MiB", line), line
        assert "Free space on it" in line
    assert f"point {variable} at a folder on another disk" in line
    assert "Nothing was run or changed" in line


@pytest.mark.parametrize("fault", ["read-only", "full"])
@pytest.mark.parametrize("variable", list(VARIABLES))
def test_a_read_only_or_full_home_or_root_is_refused_by_the_driver_at_once(
        tmp_path, tiny_llama_dir, variable, fault):
    with world(tmp_path, variable, fault) as (home, root):
        before = {"home": files(home), "artifacts": files(root)}
        env = {**os.environ, "DAGSTER_HOME": str(home), "DIHAL_ARTIFACTS": str(root),
               "DIHAL_TINY_MODEL": str(tiny_llama_dir), "DIHAL_PROFILE": "tiny",
               "PYTHONUNBUFFERED": "1"}
        t0 = time.monotonic()
        out = subprocess.run(DRIVER, cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=180)
        took = time.monotonic() - t0
        print(f"{variable} {fault}: exit {out.returncode} after {took:.1f} s:\n"
              + out.stderr.strip().splitlines()[-1])
        assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-3000:]
        said(out.stderr, variable, home if variable == "DAGSTER_HOME" else root, fault)
        assert "pre-flight:" not in out.stdout  # refused before the model was loaded
        assert took < 60
        # nothing was run: no instance was opened (Dagster's storage under a writable home),
        # no daemon started, and what was there is kept
        assert {"home": files(home), "artifacts": files(root)} == before
        assert "started a Dagster daemon" not in out.stdout


def test_a_read_only_home_is_refused_by_the_web_ui_before_dagster_dev_starts(tmp_path):
    with world(tmp_path, "DAGSTER_HOME", "read-only") as (home, root):
        env = {**os.environ, "DAGSTER_HOME": str(home), "DIHAL_ARTIFACTS": str(root)}
        with socket.socket() as sock:  # a free port: the port is not what is refused here
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "pipeline.ui", "-p", str(port)], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-3000:]
        said(out.stderr, "DAGSTER_HOME", home, "read-only")
        assert "dagster" not in out.stdout.lower()  # dagster dev never started


def test_each_way_a_folder_can_be_unusable_is_named_with_its_fix():
    ok = Folder(Path("/data/home"), "DAGSTER_HOME", "runs", read_only=False, writable=True,
                free=2**30)
    assert check_folder(ok) == []
    ro = check_folder(Folder(**{**ok.__dict__, "read_only": True}))
    assert "/data/home is on a read-only file system" in str(ro[0])
    locked = check_folder(Folder(**{**ok.__dict__, "writable": False}))
    assert f"/data/home is not writable by this user (uid {os.getuid()})" in str(locked[0])
    full = check_folder(Folder(**{**ok.__dict__, "free": 3 * 2**20}))
    assert "the disk holding /data/home is full: 3.0 MiB free" in str(full[0])
    for refusal in (ro, locked, full):
        assert refusal[0].check == "DAGSTER_HOME"
        assert "point DAGSTER_HOME at a folder on another disk" in str(refusal[0])
