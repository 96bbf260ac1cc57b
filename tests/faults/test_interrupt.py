"""Interrupting the driver (Ctrl-C) stops the running step, marks its run failed, releases the
artifact's lock and says how to resume."""

import os
import shutil
import signal
import subprocess
import sys
import time

import dagster as dg


def test_ctrl_c_stops_the_step_and_marks_the_run_failed(world, tmp_path, tiny_llama_dir):
    from storage import SweepBridge
    from storage.locks import artifact_lock

    art = SweepBridge(world.root, "llama", 1)
    shutil.rmtree(art.directory)
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.faults.interrupt_run", str(tmp_path), str(tiny_llama_dir),
         str(world.root)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (art.workdir / "FINGERPRINT").exists():  # training has started
            assert child.poll() is None and time.monotonic() < deadline, child.communicate()
            time.sleep(0.2)
        time.sleep(1.0)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 130, err[-2000:]
    assert "INTERRUPTED key:bridge_sweep_llama [partition 1]" in err
    assert "run the same command again to resume" in err.strip().splitlines()[-1]
    os.environ["DAGSTER_HOME"], saved = str(home), os.environ.get("DAGSTER_HOME")
    try:
        runs = dg.DagsterInstance.get().get_runs(limit=1)
    finally:
        os.environ.pop("DAGSTER_HOME") if saved is None else os.environ.update(DAGSTER_HOME=saved)
    assert runs[0].status == dg.DagsterRunStatus.FAILURE
    with artifact_lock(art.directory, art.name):  # the lock was released
        pass
    assert not art.directory.exists() and art.workdir.exists()  # nothing half-made in place
