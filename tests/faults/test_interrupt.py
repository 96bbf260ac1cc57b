"""Interrupting the driver (Ctrl-C) cancels the runs in flight: the training step stops, its run
is marked canceled, the artifact's lock is released, and the driver says how to resume."""

import os
import shutil
import signal
import subprocess
import sys
import time

import dagster as dg

from tests.tiny import PROTOCOL, ROOT, tiny_profile


def test_ctrl_c_cancels_the_runs_and_frees_the_artifact(world, tmp_path, tiny_llama_dir):
    from storage import SweepBridge
    from storage.locks import artifact_lock

    art = SweepBridge(world.root, "llama", 1)
    shutil.rmtree(art.directory)
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    long_sweep = {**PROTOCOL, "epochs": 5000.0, "checkpoint_every": 1000}  # minutes: interrupted
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONUNBUFFERED": "1",
           "DIHAL_TINY_MODEL": str(tiny_llama_dir), "DIHAL_ARTIFACTS": str(world.root),
           "DIHAL_PROFILE": str(tiny_profile(tmp_path / "tiny.json", world.shard,
                                             bridge_sweep=long_sweep))}
    child = subprocess.Popen(
        [sys.executable, "-m", "pipeline.main", "--backbone", "llama", "--module",
         "tests.tiny_location", "--layers", "1", "--stop-after", "sweep"], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not (art.workdir / "FINGERPRINT").exists():  # training has started
            assert child.poll() is None and time.monotonic() < deadline, child.communicate()
            time.sleep(0.2)
        time.sleep(1.0)
        child.send_signal(signal.SIGINT)
        # the driver waits up to 60 s for the canceled run to stop (then ends its worker) and up
        # to 30 s for its daemon; a loaded machine adds process start-up on top (CI once took
        # over 120 s)
        out, err = child.communicate(timeout=240)
    finally:
        child.kill()
    assert child.returncode == 130, err[-3000:]
    assert "run the same command again to resume" in err.strip().splitlines()[-1]
    os.environ["DAGSTER_HOME"], saved = str(home), os.environ.get("DAGSTER_HOME")
    os.environ.setdefault("DIHAL_WORKERS", "1")
    try:
        runs = dg.DagsterInstance.get().get_runs(limit=1)
    finally:
        os.environ.pop("DAGSTER_HOME") if saved is None else os.environ.update(DAGSTER_HOME=saved)
    assert "dagster/backfill" in runs[0].tags  # the sweep's run, which the daemon made
    # canceled, by its worker or (a cancel that did not stop it within the driver's wait) by
    # the driver, after ending its worker
    assert runs[0].status == dg.DagsterRunStatus.CANCELED, (runs[0].status, out[-2000:], err[-2000:])
    with artifact_lock(art.directory, art.name):  # the lock was released
        pass
    assert not art.directory.exists() and art.workdir.exists()  # nothing half-made in place
