"""The main job through a real Dagster instance and real processes: named jobs submitted to the
run queue, a daemon launching them, the sweep as one backfill whose partitions run at the same
time; then the same sweep with every step on a local Dask cluster (a scheduler and three
workers, started and stopped here). Both give the bridge weights of the in-process run."""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from tests.tiny import ROOT, tiny_profile

LAYERS = ["1", "2", "3"]
# Each step of a partition's run (the bridge, then its regression control) keeps its device
# after computing until every partition's run has computed a step (tests.tiny_location), at
# most this long, without training for longer: so the three runs are under way at once however
# far apart the daemon starts them (on a loaded machine 10-14 s apart), and wait no longer than
# that takes
HOLD_S = "30"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def reference(swept_world):
    """The session's in-process sweep (dg.materialize, one partition after another, the tiny
    protocol): its world and weight digests."""
    return swept_world, {ll: _digest(swept_world.path("bridge_sweep", f"layer_{int(ll):03d}",
                                                      "bridge.safetensors")) for ll in LAYERS}


def _setup(tmp_path: Path, model: Path, shard: Path) -> dict:
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")  # the project's instance config
    return {**os.environ, "DAGSTER_HOME": str(home), "DIHAL_TINY_MODEL": str(model),
            "DIHAL_ARTIFACTS": str(tmp_path / "artifacts"), "PYTHONUNBUFFERED": "1",
            "DIHAL_PROFILE": str(tiny_profile(tmp_path / "tiny.json", shard)),
            "DIHAL_TINY_HOLD_S": HOLD_S, "DIHAL_TINY_HOLD_RUNS": str(len(LAYERS)),
            "DIHAL_TINY_HOLD_DIR": str(tmp_path / "held"), "PYTHONPATH": str(ROOT)}


def _driver(env: dict, workers: int) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, "-m", "pipeline.main", "--backbone", "llama", "--module",
         "tests.tiny_location", "--layers", ",".join(LAYERS), "--workers", str(workers),
         "--stop-after", "sweep"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def _instance(env: dict, monkeypatch) -> dg.DagsterInstance:
    monkeypatch.setenv("DAGSTER_HOME", env["DAGSTER_HOME"])
    monkeypatch.setenv("DIHAL_WORKERS", "1")  # dagster.yaml reads it
    return dg.DagsterInstance.get()


def _sweep_runs(instance: dg.DagsterInstance):
    """The sweep's asset backfills (3 workers, 3 layers: one a layer) and their runs' records
    (the daemon made them, one run a backfill)."""
    from pipeline.launch import run_label

    backfills = instance.get_backfills()
    assert len(backfills) == 3, backfills
    for backfill in backfills:
        assert backfill.is_asset_backfill and backfill.partition_set_origin is None
        assert sorted(k.to_user_string() for k in backfill.asset_selection) == [
            "bridge_sweep_llama", "regression_sweep_llama"]
    records = [r for b in backfills for r in instance.get_run_records(
        filters=dg.RunsFilter(tags={"dagster/backfill": b.backfill_id}))]
    assert sorted(run_label(r.dagster_run) for r in records) == LAYERS
    assert all(r.dagster_run.status == dg.DagsterRunStatus.SUCCESS for r in records)
    return records


def _overlap(records) -> float:
    """Seconds during which every run of the backfill was running at once."""
    return min(r.end_time for r in records) - max(r.start_time for r in records)


def _most_at_once(records) -> int:
    """The most runs of the backfill running at one moment."""
    return max(sum(r.start_time <= t < r.end_time for r in records)
               for t in (r.start_time for r in records))


def _weights(env: dict) -> dict:
    root = Path(env["DIHAL_ARTIFACTS"]) / "llama" / "bridge_sweep"
    return {ll: _digest(root / f"layer_{int(ll):03d}" / "bridge.safetensors") for ll in LAYERS}


def _step_pids(instance: dg.DagsterInstance, records) -> set[int]:
    pids = set()
    for r in records:
        for e in instance.all_logs(r.dagster_run.run_id):
            if m := re.search(r"computing on cpu .*pid (\d+)\)", e.user_message or ""):
                pids.add(int(m.group(1)))
    return pids


def test_the_driver_runs_named_jobs_and_the_sweep_as_one_concurrent_backfill(
        tmp_path, tiny_llama_dir, reference, monkeypatch):
    world, want = reference
    env = _setup(tmp_path, tiny_llama_dir, world.shard)
    out = _driver(env, workers=3)
    assert "started a Dagster daemon" in out.stdout
    assert re.search(r"sweep_llama: 3 partitions \(1, 2, 3\) as 3 backfill\(s\) of consecutive "
                     r"partitions \(\S+, \S+, \S+\), at most 3 runs at a time", out.stdout)
    instance = _instance(env, monkeypatch)
    # the sweep's runs are the daemon's, of the assets (Dagster's implicit asset job)
    assert {r.job_name for r in instance.get_runs()} == {"locate_llama", "__ASSET_JOB"}
    records = _sweep_runs(instance)
    assert _overlap(records) > 0, [(r.start_time, r.end_time) for r in records]
    assert len(_step_pids(instance, records)) == 3  # each partition's run in its own process
    assert _weights(env) == want  # bit-identical to the in-process sweep
    # a second run reuses everything: no partition is trained again (in one run: the
    # concurrency is the first run's story)
    again = _driver(env, workers=1)
    assert "done sweep_llama" in again.stdout
    assert "(reused: bridge_sweep_llama, regression_sweep_llama)" in again.stdout


@pytest.fixture()
def dask_cluster(tmp_path):
    """A Dask scheduler and three single-threaded workers, each offering one "device", in their
    own processes; stopped afterwards. Yields (address, worker pids, the workers' env)."""
    dask = str(Path(sys.executable).parent / "dask")
    sched_file = tmp_path / "scheduler.json"
    procs = []

    def start(args: list[str], log: str, env_: dict | None = None):
        with open(tmp_path / log, "w") as out:
            procs.append(subprocess.Popen([dask, *args], cwd=ROOT, env=env_, stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True))

    start(["scheduler", "--scheduler-file", str(sched_file), "--host", "127.0.0.1", "--port", "0",
           "--no-dashboard"], "scheduler.log")

    def workers(worker_env: dict) -> tuple[str, set[int]]:
        deadline = time.monotonic() + 60
        while not sched_file.exists():
            assert time.monotonic() < deadline, (tmp_path / "scheduler.log").read_text()
            time.sleep(0.2)
        address = json.loads(sched_file.read_text())["address"]
        for i in range(3):
            start(["worker", address, "--nworkers", "1", "--nthreads", "1", "--resources",
                   "device=1", "--name", f"w{i}", "--no-dashboard"], f"worker{i}.log", worker_env)
        from distributed import Client

        with Client(address, timeout=60) as client:
            client.wait_for_workers(3, timeout=120)
            pids = set(client.run(os.getpid).values())
        return address, pids

    try:
        yield workers
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def test_the_sweep_runs_on_a_dask_cluster_concurrently_with_the_same_weights(
        tmp_path, tiny_llama_dir, reference, dask_cluster, monkeypatch):
    world, want = reference
    env = _setup(tmp_path, tiny_llama_dir, world.shard)
    address, worker_pids = dask_cluster(env)  # the workers load the same code location
    env["DIHAL_DASK_SCHEDULER"] = address
    _driver(env, workers=3)
    instance = _instance(env, monkeypatch)
    records = _sweep_runs(instance)
    # runs at once (all three where the daemon starts them together; on a loaded machine it
    # may start the third after the first two have held their worker for HOLD_S)
    assert _most_at_once(records) >= 2, [(r.start_time, r.end_time) for r in records]
    pids = _step_pids(instance, records)
    assert pids and pids <= worker_pids, (pids, worker_pids)  # computed on the Dask workers
    # steps of the runs at once on different workers (the daemon makes the three runs a few
    # seconds apart, so a worker freed by one run's first step may take another's)
    assert len(pids) >= 2, pids
    assert _weights(env) == want
