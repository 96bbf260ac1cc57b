"""Faults of the run machinery: a daemon that is already running under another profile and
another worker count (the run config and the concurrency travel with each run, not through
the daemon's environment)."""

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

from tests.tiny import PROTOCOL, ROOT, TINY, tiny_profile

# the driver's sweep protocol: not the daemon's (the tiny profile trains one epoch)
DRIVER_SWEEP = {**PROTOCOL, "epochs": 2.0}


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
        # the daemon another driver would have left (`dagster-daemon` with the backfill
        # interval of the drivers' daemons)
        exe = [sys.executable, "-m", "pipeline.dagster_daemon"]
        with open(tmp_path / "daemon.log", "w") as out:
            procs.append(subprocess.Popen([*exe, "run", "-m", "tests.tiny_location"], cwd=ROOT,
                                          env=env, stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True))
        from pipeline.daemon import daemon_alive

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
    # each sweep step keeps its device until the three partitions' runs have each computed a
    # step, at most 30 s (tests.tiny_location): the runs overlap when they run at once, though
    # a loaded daemon makes the backfills' runs 10-30 s apart
    env = {**_env(tmp_path, tiny_llama_dir, world.root), "DIHAL_TINY_HOLD_S": "30",
           "DIHAL_TINY_HOLD_RUNS": "3", "DIHAL_TINY_HOLD_DIR": str(tmp_path / "held")}
    # the daemon: the tiny profile as the fault world made it, one run at a time
    daemon_profile = tiny_profile(tmp_path / "daemon.json", world.shard)
    foreign_daemon({**env, "DIHAL_PROFILE": str(daemon_profile), "DIHAL_WORKERS": "1"},
                   monkeypatch)
    # the driver: another geometry sample, the rms normalisation for l*, two epochs, 3 workers
    driver_profile = tiny_profile(
        tmp_path / "driver.json", world.shard, geometry={**TINY["geometry"], "n_tokens": 60},
        layer_score={"primary_norm": "rms"}, bridge_sweep=DRIVER_SWEEP)
    out = subprocess.run(
        [sys.executable, "-m", "pipeline.main", "--backbone", "llama", "--module",
         "tests.tiny_location", "--layers", "1,2,3", "--stop-after", "sweep", "--workers", "3",
         "--profile", str(driver_profile)], cwd=ROOT, env={**env, "DIHAL_PROFILE": "cpu"},
        capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "using the Dagster daemon that is already running" in out.stdout
    print(out.stdout)  # shown with -s: what the user reads
    # the artifacts follow the driver's profile, not the daemon's
    assert Geometry(world.root, "llama").manifest().config["n_tokens"] == 60
    assert LayerScore(world.root, "llama").manifest().config["primary_norm"] == "rms"
    for layer in (1, 2, 3):
        assert (SweepBridge(world.root, "llama", layer).manifest().config["epochs"]
                == DRIVER_SWEEP["epochs"])
    # every run carries the whole config, and the sweep ran 3 at a time, one backfill and run
    # a layer, each of its steps with a third of the cores (the daemon's DIHAL_WORKERS=1, by
    # which its code location would cut a backfill of the three layers into one run, decides
    # nothing); locate, the lone run, had every core
    instance = _instance(env, monkeypatch)
    runs = instance.get_run_records()
    assert {r.dagster_run.tags["dihal/profile"] for r in runs} == {str(driver_profile)}
    sweep = [r for r in runs if "dagster/backfill" in r.dagster_run.tags]
    workers = {("sweep" if r in sweep else r.dagster_run.job_name):
               r.dagster_run.run_config["resources"]["compute"]["config"]["workers"] for r in runs}
    assert workers == {"locate_llama": 1, "sweep": 3}, workers
    assert len(sweep) == 3 and len({r.dagster_run.tags["dagster/backfill"] for r in sweep}) == 3
    assert min(r.end_time for r in sweep) > max(r.start_time for r in sweep), (
        [(r.start_time, r.end_time) for r in sweep])
    print(f"geometry n_tokens {Geometry(world.root, 'llama').manifest().config['n_tokens']}, "
          f"layer score {LayerScore(world.root, 'llama').manifest().config}, sweep runs at once "
          f"for {min(r.end_time for r in sweep) - max(r.start_time for r in sweep):.1f} s")


def _long_driver(tmp_path, world, tiny_llama_dir, **popen) -> tuple[subprocess.Popen, dict]:
    """A driver sweeping layer 1 for minutes, through a daemon it starts itself: the layer's
    run trains its tiny bridge, then its step keeps its device (tests.tiny_location) for 10
    minutes before writing it, in flight without using a core (these stories end its processes;
    the Ctrl-C story, tests/faults/test_interrupt.py, interrupts a training that lasts)."""
    from storage import SweepBridge

    shutil.rmtree(SweepBridge(world.root, "llama", 1).directory)
    env = {**_env(tmp_path, tiny_llama_dir, world.root), "DIHAL_TINY_HOLD_S": "600"}
    env["DIHAL_PROFILE"] = str(tiny_profile(tmp_path / "long.json", world.shard))
    child = subprocess.Popen(
        [sys.executable, "-m", "pipeline.main", "--backbone", "llama", "--module",
         "tests.tiny_location", "--layers", "1", "--stop-after", "sweep"], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    return child, env


def _training(instance, child, deadline_s: float = 240.0):
    """The sweep run, once its step computes: (run, its worker's pid)."""
    deadline = time.monotonic() + deadline_s
    while not (runs := [r for r in instance.get_runs() if "dagster/backfill" in r.tags]):
        assert child.poll() is None and time.monotonic() < deadline, child.communicate()
        time.sleep(0.5)
    return runs[0], _computing(instance, runs[0].run_id, child, deadline - time.monotonic())


def _computing(instance, run_id: str, child, deadline_s: float = 240.0) -> int:
    """The pid of the worker of run `run_id`, once its step computes."""
    from pipeline.run_launcher import worker_pid

    deadline = time.monotonic() + deadline_s
    while not any("computing on cpu" in (e.user_message or "") for e in instance.all_logs(run_id)):
        assert child.poll() is None and time.monotonic() < deadline, child.communicate()
        time.sleep(0.5)
    return worker_pid(instance, run_id)


def _gone(pids, within_s: float) -> float:
    from pipeline.run_launcher import process_alive

    t0 = time.monotonic()
    while any(process_alive(p) for p in pids):
        assert time.monotonic() - t0 < within_s, [p for p in pids if process_alive(p)]
        time.sleep(0.5)
    return time.monotonic() - t0


def test_a_run_whose_worker_was_killed_is_failed_within_a_minute_and_retried_once(
        tmp_path, world, tiny_llama_dir, monkeypatch):
    """The sweep's run loses its worker (as to the OOM killer): run monitoring fails it within a
    minute, Dagster retries it (dagster.yaml: run_retries) and the driver follows the retry; the
    retry loses its worker and its code server too: it is failed alike and not retried again
    (one retry), and the driver exits 1 naming the dead worker."""
    from pipeline.run_launcher import code_servers

    child, env = _long_driver(tmp_path, world, tiny_llama_dir)
    try:
        instance = _instance(env, monkeypatch)
        run, pid = _training(instance, child)
        # read before the kill: the lines read past the daemon's (a pipe is read ahead) are
        # lost to communicate() below
        daemon = _daemon_pid(child)
        os.kill(pid, signal.SIGKILL)
        _failed_within(instance, run.run_id, 60)
        t0 = time.monotonic()
        while not (retry := instance.get_run_by_id(run.run_id).tags.get("dagster/auto_retry_run_id")):
            assert time.monotonic() - t0 < 120, _no_retry(instance, run.run_id, env)
            time.sleep(0.5)
        retry_pid = _computing(instance, retry, child)
        for p in [retry_pid, *code_servers(daemon)]:
            os.kill(p, signal.SIGKILL)
        _failed_within(instance, retry, 60)
        out, err = child.communicate(timeout=180)
    finally:
        child.kill()
    assert child.returncode == 1
    again = instance.get_run_by_id(retry)
    assert again.tags["dagster/parent_run_id"] == run.run_id
    assert again.tags.get("dagster/will_retry") == "false"  # one retry: used up
    assert f"Dagster retries it as run {retry[:8]}" in out, out[-3000:]
    # run monitoring (pipeline/run_launcher.py) names the dead worker
    says = f"the run worker (pid {retry_pid}) is gone without ending the run"
    assert says in err, err[-3000:] + "\n".join(
        f"{e.dagster_event.event_type_value if e.dagster_event else 'LOG'}: {e.message}"
        for e in instance.all_logs(retry)[-6:])


def _no_retry(instance, run_id: str, env: dict) -> str:
    """Why a failed run has no retry, as far as the instance tells: its tags, its backfill's
    status, its last events and what the daemon's log says of retries and backfills."""
    log = Path(env["DAGSTER_HOME"]) / "dihal-daemon.log"
    said = [line for line in (log.read_text(errors="replace") if log.exists() else "").splitlines()
            if re.search(r"retr|[Bb]ackfill|EVENT_LOG", line)][-15:]
    run = instance.get_run_by_id(run_id)
    backfill = instance.get_backfill(run.tags.get("dagster/backfill", ""))
    events = "\n".join(
        f"{e.dagster_event.event_type_value if e.dagster_event else 'LOG'}: {e.message}"
        for e in instance.all_logs(run_id)[-6:])
    return (f"no retry of the failed run {run_id}; its tags {dict(run.tags)}; its backfill "
            f"{backfill.status if backfill else None}; its last events:\n{events}\nthe daemon's log:\n"
            + "\n".join(said))


def _failed_within(instance, run_id: str, within_s: float) -> None:
    t0 = time.monotonic()
    while not instance.get_run_by_id(run_id).is_finished:
        assert time.monotonic() - t0 < within_s, f"run {run_id} is still marked in progress"
        time.sleep(0.5)
    assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE


def _daemon_pid(child) -> int:
    for line in child.stdout:
        if m := re.search(r"started a Dagster daemon \(pid (\d+)", line):
            return int(m.group(1))
    raise AssertionError("the driver started no daemon")


def test_a_driver_killed_with_sigkill_leaves_nothing_behind(
        tmp_path, world, tiny_llama_dir, monkeypatch):
    from pipeline.run_launcher import code_servers

    child, env = _long_driver(tmp_path, world, tiny_llama_dir, start_new_session=True)
    try:
        instance = _instance(env, monkeypatch)
        run, worker = _training(instance, child)
        daemon = _daemon_pid(child)
        left = [daemon, worker, *code_servers(daemon)]
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        took = _gone(left, within_s=60)
    finally:
        child.kill()
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.CANCELED
    print(f"the daemon, its code server(s) and the run worker {left} ended {took:.0f} s after "
          "the driver was killed")


def test_the_queue_stuck_message_names_the_run_that_holds_the_slot(tmp_path, monkeypatch):
    from dagster._daemon.types import DaemonHeartbeat

    from pipeline.daemon import QUEUE_DAEMON
    from pipeline.launch import queue_stuck_message

    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    instance = dg.DagsterInstance.get()
    assert "no Dagster daemon is launching runs" in queue_stuck_message(instance, 180)
    instance.add_daemon_heartbeat(DaemonHeartbeat(time.time(), QUEUE_DAEMON, None, None))
    instance.add_run(dg.DagsterRun(job_name="sweep_llama", run_id="a" * 36,
                                   status=dg.DagsterRunStatus.STARTED,
                                   tags={"dagster/partition": "7", "dihal/driver": "h-1"}))
    msg = queue_stuck_message(instance, 180)
    assert msg.startswith("no run left the queue in 180 s: the pool of runs is held by run "
                          f"{'a' * 36} (sweep_llama, partition 7, STARTED"), msg
    assert "driver h-1)" in msg and "cancel them" in msg
