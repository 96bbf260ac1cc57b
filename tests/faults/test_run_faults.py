"""Faults of the run machinery: a daemon that is already running under another profile and
another worker count (the run config and the concurrency travel with each run, not through
the daemon's environment)."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from tests.tiny_location import PROTOCOL, TINY, tiny_profile

ROOT = Path(__file__).resolve().parents[2]
# about 8 s a step on one thread: the three partitions' runs overlap when they run at once
LONG_SWEEP = {**PROTOCOL, "epochs": 200.0, "checkpoint_every": 1000}


def _env(tmp_path: Path, model: Path, artifacts: Path) -> dict:
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    return {**os.environ, "DAGSTER_HOME": str(home), "DIHAL_TINY_MODEL": str(model),
            "DIHAL_ARTIFACTS": str(artifacts), "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}


def _instance(env: dict, monkeypatch) -> dg.DagsterInstance:
    monkeypatch.setenv("DAGSTER_HOME", env["DAGSTER_HOME"])
    return dg.DagsterInstance.get()


@pytest.fixture()
def foreign_daemon(tmp_path):
    """start(env): a Dagster daemon started here (as `dagster dev` or another driver would have
    left one), under env; stopped afterwards."""
    procs = []

    def start(env: dict, monkeypatch) -> subprocess.Popen:
        instance = _instance(env, monkeypatch)  # its storage made before the daemon opens it
        exe = str(Path(sys.executable).parent / "dagster-daemon")
        with open(tmp_path / "daemon.log", "w") as out:
            procs.append(subprocess.Popen([exe, "run", "-m", "tests.tiny_location"], cwd=ROOT,
                                          env=env, stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True))
        from pipeline.launch import daemon_alive

        deadline = time.monotonic() + 120
        while not daemon_alive(instance):
            assert procs[-1].poll() is None and time.monotonic() < deadline, (
                (tmp_path / "daemon.log").read_text()[-3000:])
            time.sleep(0.5)
        return procs[-1]

    yield start
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


def test_the_drivers_profile_and_workers_win_over_a_running_daemons(
        tmp_path, world, tiny_llama_dir, foreign_daemon, monkeypatch):
    from storage import Geometry, LayerScore, SweepBridge

    for layer in (1, 2, 3):  # the sweep runs again, under the driver's protocol
        shutil.rmtree(SweepBridge(world.root, "llama", layer).directory)
    env = _env(tmp_path, tiny_llama_dir, world.root)
    # the daemon: the tiny profile as the fault world made it, one run at a time
    daemon_profile = tiny_profile(tmp_path / "daemon.json", world.shard)
    foreign_daemon({**env, "DIHAL_PROFILE": str(daemon_profile), "DIHAL_WORKERS": "1"},
                   monkeypatch)
    # the driver: another geometry sample, the rms normalisation for l*, a longer sweep, 3 workers
    driver_profile = tiny_profile(
        tmp_path / "driver.json", world.shard, geometry={**TINY["geometry"], "n_tokens": 60},
        layer_score={"primary_norm": "rms"}, bridge_sweep=LONG_SWEEP)
    out = subprocess.run(
        [sys.executable, "-m", "pipeline.main", "--backbone", "llama", "--module",
         "tests.tiny_location", "--layers", "1,2,3", "--stop-after", "sweep", "--workers", "3",
         "--profile", str(driver_profile)], cwd=ROOT, env={**env, "DIHAL_PROFILE": "cpu"},
        capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "using the Dagster daemon that is already running" in out.stdout
    # the artifacts follow the driver's profile, not the daemon's
    assert Geometry(world.root, "llama").manifest().config["n_tokens"] == 60
    assert LayerScore(world.root, "llama").manifest().config["primary_norm"] == "rms"
    for layer in (1, 2, 3):
        assert SweepBridge(world.root, "llama", layer).manifest().config["epochs"] == 200.0
    # every run carries the whole config, and the sweep ran 3 at a time (the daemon's
    # DIHAL_WORKERS=1 decides nothing)
    instance = _instance(env, monkeypatch)
    runs = instance.get_run_records()
    assert {r.dagster_run.tags["dihal/profile"] for r in runs} == {str(driver_profile)}
    assert all(r.dagster_run.run_config["resources"]["compute"]["config"]["workers"] == 3
               for r in runs)
    sweep = [r for r in runs if r.dagster_run.job_name == "sweep_llama"]
    assert len(sweep) == 3 and len({r.dagster_run.tags["dihal/slot"] for r in sweep}) == 3
    assert min(r.end_time for r in sweep) > max(r.start_time for r in sweep), (
        [(r.start_time, r.end_time) for r in sweep])
