"""Drivers started together on a fresh DAGSTER_HOME: the instance's storage is created by one
of them at a time (pipeline.daemon.open_instance), so none fails with `table alembic_version
already exists` (without the lock, 8 of 16 such processes failed on a 2-core machine)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OPEN = ("from pipeline.daemon import open_instance; i = open_instance(); "
        "print(len(i.get_runs()), sorted(i.get_daemon_heartbeats()))")


def test_four_drivers_opening_a_fresh_instance_at_once_all_succeed(tmp_path):
    for trial in range(2):
        home = tmp_path / f"home{trial}"
        home.mkdir()
        shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
        env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(ROOT)}
        procs = [subprocess.Popen([sys.executable, "-c", OPEN], env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(4)]
        outs = [(p.wait(300), *p.communicate()) for p in procs]
        failed = [err.strip().splitlines()[-3:] for rc, _, err in outs if rc != 0]
        assert failed == [], failed
        assert [out.strip() for _, out, _ in outs] == ["0 []"] * 4
