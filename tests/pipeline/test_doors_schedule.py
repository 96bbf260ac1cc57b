"""A door of its own: the nightly re-evaluation schedule's tick through the daemon's scheduler,
its run launched by `dg dev`'s daemon under the project's preset, then `dagster asset
materialize` reusing what it made (tests/pipeline/doors.py; a `dg dev` of its own, so that this
story runs beside the other doors' under `make test`)."""

import json
import subprocess
import sys

import pytest

from tests.pipeline.doors import (
    ROOT,
    beside_dg_dev,
    cli_reuses,
    driver,
    finished_run,
    preset_label,
)


@pytest.fixture(scope="module")
def beside(tmp_path_factory, tiny_llama_dir):
    with beside_dg_dev(tmp_path_factory.mktemp("doors-tick"), tiny_llama_dir,
                       ("tinytick",)) as served:
        yield served


# Two ticks of a schedule as the daemon's scheduler makes them (dagster._scheduler), in one
# process (the code location loaded once): the schedule started on the instance, the
# scheduler's loop run up to its next cron time (03:00 would be a long wait), its run request
# submitted to the instance's run queue, which `dg dev`'s daemon launches; once every run of
# that tick has finished, the next tick. Prints the schedule's ticks as JSON on a line of its
# own ("TICKS [...]").
TICKS = """
import datetime, json, logging, sys, time
import dagster as dg
import dagster._daemon  # first: it imports the scheduler
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import PyProjectFileTarget
from dagster._scheduler.scheduler import launch_scheduled_runs

with dg.DagsterInstance.get() as instance, WorkspaceProcessContext(
        instance, PyProjectFileTarget("pyproject.toml")) as ctx:
    (entry,) = ctx.create_request_context().get_code_location_entries().values()
    (repo,) = entry.code_location.get_repositories().values()
    schedule = repo.get_schedule(sys.argv[1])
    origin, selector = schedule.get_remote_origin_id(), schedule.selector_id

    def tick():
        now = datetime.datetime.now(datetime.timezone.utc).timestamp()
        after = max([now] + [t.timestamp for t in instance.get_ticks(origin, selector)])
        due = next(schedule.execution_time_iterator(after + 1))
        list(launch_scheduled_runs(ctx, logging.getLogger("tick"),
                                   due + datetime.timedelta(minutes=1), {}))
        return instance.get_ticks(origin, selector)[0]

    instance.start_schedule(schedule)
    deadline = time.monotonic() + float(sys.argv[2])
    for run_id in tick().run_ids:
        while not instance.get_run_by_id(run_id).is_finished and time.monotonic() < deadline:
            time.sleep(1)
    tick()
    instance.stop_schedule(origin, selector, schedule)
    print("TICKS", json.dumps([{"status": t.status.value, "runs": list(t.run_ids),
                       "skip": t.skip_reason, "error": t.error and t.error.to_string(),
                       "location": entry.origin.location_name}
                      for t in instance.get_ticks(origin, selector)]))
"""


def _two_ticks(env: dict, schedule: str, runs_within_s: float = 400) -> list[dict]:
    """The ticks of `schedule`, newest first, after two more through the daemon's scheduler,
    the second once the first one's runs have finished (or `runs_within_s` has passed)."""
    out = subprocess.run([sys.executable, "-c", TICKS, schedule, str(runs_within_s)], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("TICKS ")]
    ticks = json.loads(line.removeprefix("TICKS "))
    print(f"{schedule} ticks, newest first: {ticks}")
    return ticks


def test_a_schedule_tick_runs_under_the_project_preset_and_the_cli_reuses_it(beside):
    """The nightly re-evaluation of a backbone whose sweep the driver made: a tick (the
    daemon's scheduler, the run launched by `dg dev`'s daemon) finds bridgeability stale and
    makes it under the project's preset, and the next tick finds it up to date; `dagster asset
    materialize` then reuses it (one fingerprint)."""
    tmp, env, dev = beside
    # the sweep in one run (one process loading the model, not three: the tick is the story)
    driver(env, "tinytick", "--layers", "1,2,3", "--stop-after", "sweep",
           "--skip-bridgeability", "--workers", "1")
    again, tick = _two_ticks(env, "reevaluate_tinytick_nightly")
    assert (tick["status"], tick["location"]) == ("SUCCESS", "dihal"), tick
    (run_id,) = tick["runs"]
    run = finished_run(env, run_ids=[run_id], deadline_s=5)  # the ticks waited for it
    assert run.status.value == "SUCCESS", (run.status, dev.log_tail())
    assert run.tags["dagster/schedule_name"] == "reevaluate_tinytick_nightly"
    assert run.remote_job_origin.location_name == "dihal"
    assert run.tags["reason"] == "stale: bridgeability_tinytick"
    assert (again["status"], again["runs"]) == ("SKIPPED", []), again
    assert "bridgeability_tinytick and eval_tinytick are up to date" in again["skip"]
    manifest = tmp / "artifacts" / "tinytick" / "bridgeability" / "manifest.json"
    made = json.loads(manifest.read_text())
    assert made["info"]["preset"] == preset_label(tmp / "tiny.json")
    doors = cli_reuses(env, "bridgeability_tinytick", manifest, made)
    print("bridgeability_tinytick by door (schedule, CLI):",
          [(m["fingerprint"], m["cached"], m["preset"]) for m in doors])
    assert doors[0]["run_id"] == run_id
    label = preset_label(tmp / "tiny.json")
    assert [(m["cached"], m["preset"]) for m in doors] == [(False, label), (True, label)]
    assert {m["fingerprint"] for m in doors} == {made["fingerprint"][:16]}
