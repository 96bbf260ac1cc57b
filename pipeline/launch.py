"""Launching named jobs through the Dagster instance, as the web UI and `dagster job launch` do:
runs are created from the code location, submitted to the instance's run queue, and launched by
the daemon (each in its own process). A partitioned job's assets go as asset backfills, as the
UI's "Materialize selected" submits them, one for each of --workers runs of consecutive
partitions: the daemon makes their runs and queues them, at most --workers at once (their
pool). The driver (pipeline.main) follows the runs from the instance's event log. The instance
and its daemon: pipeline.daemon.
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from pipeline.daemon import QueueStuck, daemon_alive, driver_tag
from pipeline.location import (
    full_run_config,
    location_target,
    merged,
    only_location,
    stale_defaults,
)


@dataclass
class Followed:
    """What became of one run."""

    run_id: str
    label: str
    status: dg.DagsterRunStatus | None = None
    cached: list[str] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)
    started: float | None = None
    ended: float | None = None
    failed_checks: list[str] = field(default_factory=list)
    retried_as: str | None = None  # the run Dagster made to retry this failed one (run_retries)

    @property
    def failed(self) -> bool:
        """Ended otherwise than in success, and not retried."""
        return self.status != dg.DagsterRunStatus.SUCCESS and self.retried_as is None


def check_failure(check) -> str:
    """One line for a failing asset check: its name, its asset and why (its description, else
    its metadata)."""
    why = check.description or ", ".join(
        f"{k} {getattr(v, 'value', v)}" for k, v in check.metadata.items()) or "no reason given"
    return (f"check {check.check_name} of {check.asset_key.to_user_string()} failed: "
            f"{why.removeprefix('failed: ')}")


BACKFILL_TAG = "dagster/backfill"  # Dagster's tag of a backfill's runs
# dagster.yaml's run_retries: a run that failed otherwise than by a step's failure (its worker
# died, it never started) is tagged WILL_RETRY "true", and the daemon then makes its retry and
# names it on the failed run (AUTO_RETRY)
WILL_RETRY, AUTO_RETRY = "dagster/will_retry", "dagster/auto_retry_run_id"
RETRY_WAIT_S = 120.0  # how long the driver waits for the daemon to make a retry it announced
# the statuses (by name) of a backfill whose daemon may still make runs for it
BACKFILL_GOING = ("REQUESTED", "CANCELING", "FAILING")
RANGE_TAGS = ("dagster/asset_partition_range_start", "dagster/asset_partition_range_end")

LAUNCH_RUN = """
mutation($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConflict { message }
    ... on UnauthorizedError { message }
    ... on InvalidSubsetError { message }
    ... on PipelineNotFoundError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""
LAUNCH_BACKFILL = """
mutation($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
    ... on PartitionKeysNotFoundError { message }
    ... on UnauthorizedError { message }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""
CANCEL_BACKFILL = """
mutation($id: String!) {
  cancelPartitionBackfill(backfillId: $id) { __typename ... on PythonError { message } }
}
"""


@functools.cache
def _schema():
    """Dagster's GraphQL schema, built once a process (about 0.2 s each time)."""
    from dagster_graphql.schema import create_schema

    return create_schema()


def graphql(process, query: str, variables: dict) -> dict:
    """A GraphQL query of Dagster's web UI, answered in this process against the workspace
    `process` (as dagster_graphql's execute_query, what the `dagster-graphql` CLI runs, does,
    with the schema built once): the data, or a RuntimeError with its errors."""
    import asyncio

    answer = asyncio.run(_schema().execute_async(
        query, context_value=process.create_request_context(), variable_values=variables))
    if answer.errors:
        raise RuntimeError("Dagster's GraphQL refused the request: "
                           + "; ".join(getattr(e, "message", None) or str(e)
                                       for e in answer.errors))
    return answer.data


def even_chunks(keys: list[str], n: int) -> list[list[str]]:
    """`keys` cut, in their order, into n runs of consecutive keys whose sizes differ by one at
    most (the larger first); fewer where there are fewer keys."""
    size, extra = divmod(len(keys), n)
    chunks, at = [], 0
    for i in range(n):
        step = size + (1 if i < extra else 0)
        if step:
            chunks.append(keys[at:at + step])
        at += step
    return chunks


def chunk_label(keys: list[str]) -> str:
    """'3' or '1-9' (first-last) for a chunk of partition keys."""
    return keys[0] if len(keys) == 1 else f"{keys[0]}-{keys[-1]}"


def run_label(run) -> str:
    """A run's partitions as the driver names it: its partition, or first-last of its range."""
    tags = run.tags
    if (start := tags.get(RANGE_TAGS[0])) is not None:
        end = tags.get(RANGE_TAGS[1])
        return start if end in (None, start) else f"{start}-{end}"
    return tags.get("dagster/partition") or run.run_id[:8]


class Launcher:
    """Named jobs of one code location, submitted to the instance's run queue, each run with its
    full run config (full_run_config: the driver's profile, its artifact root and its
    `workers`) and tags naming the driver and the profile. Every stage's run holds a slot of
    the pool assets._stage.POOL, whose limit the driver sets to its `workers`: at most that
    many runs of stages at a time, the driver's and any other's (web UI, schedules), whatever
    the daemon's environment."""

    def __init__(self, instance: dg.DagsterInstance, workspace, *, workers: int = 1,
                 tags: dict[str, str] | None = None, ops: dict[str, dict] | None = None,
                 process=None):
        self.instance, self.workspace, self.process = instance, workspace, process
        self.location = only_location(workspace)
        (self.repo,) = self.location.get_repositories().values()  # one Definitions object
        self.workers, self.tags = workers, dict(tags or {})
        self.ops = dict(ops or {})  # op -> run config merged over the defaults (driver flags)
        self.revive: Callable[[], bool] | None = None  # starts a daemon where the used one died
        self.tags.setdefault("dihal/driver", driver_tag())

    def _job(self, name: str):
        jobs = {job.name: job for job in self.repo.get_all_jobs()}
        if name not in jobs:
            raise RuntimeError(f"code location {self.location.name} has no job {name!r}; its "
                               f"jobs: {', '.join(sorted(jobs))}")
        return jobs[name]

    def run_config(self, job, workers: int | None = None) -> dict:
        """The run config every run of `job` is submitted with (full_run_config), with
        `workers` (default: this driver's) for the compute resource: its steps divide the CPU
        cores by it."""
        config = full_run_config(job)
        if "compute" in config.get("resources", {}):
            config["resources"]["compute"]["config"]["workers"] = workers or self.workers
        if over := {op: v for op, v in self.ops.items() if op in config.get("ops", {})}:
            config = merged(config, {"ops": over})
        return config

    def _limit_pool(self) -> None:
        """The stages' pool holds this driver's `workers` runs at once (as `dagster instance
        concurrency set dihal N` does; the last driver's N holds for the instance)."""
        from assets._stage import POOL

        self.instance.event_log_storage.set_concurrency_slots(POOL, self.workers)

    def launch(self, job_name: str, tags: dict[str, str] | None = None) -> str:
        """Submit one run of a job; its run id. The driver follows it to its end before it
        submits anything else, so nothing of this driver runs beside it: its steps are given
        every CPU core (compute workers 1), not a 1/`workers` share while the other shares
        would sit idle."""
        job = self._job(job_name)
        self._limit_pool()
        answer = graphql(self.process, LAUNCH_RUN, {"params": {
            "selector": {"repositoryLocationName": self.location.name,
                         "repositoryName": self.repo.name, "jobName": job.name},
            "runConfigData": self.run_config(job, workers=1),
            "executionMetadata": {"tags": [{"key": k, "value": v}
                                           for k, v in {**self.tags, **(tags or {})}.items()]}}})
        answer = answer["launchRun"]
        if answer["__typename"] != "LaunchRunSuccess":
            why = answer.get("message") or "; ".join(
                e["message"] for e in answer.get("errors") or []) or answer["__typename"]
            raise RuntimeError(f"the run of {job_name} was refused: {why}")
        return answer["run"]["runId"]

    def backfill(self, job_name: str, partitions: list[str]) -> list[str]:
        """Submit the assets of the partitioned job `job_name` over `partitions` as asset
        backfills, REQUESTED, as the web UI's "Materialize selected" over partitions does
        (GraphQL launchPartitionBackfill, run in process against this driver's code location):
        one backfill for each of min(workers, partitions) runs of consecutive partitions
        (even_chunks), so that `workers` runs share the work whatever the daemon's own
        environment. The daemon's BackfillDaemon makes the runs (one for each backfill where its
        code location's backfill policy takes the chunk whole, assets._stage.partition_policy,
        as the location this driver starts does) and queues them; the pool assets._stage.POOL
        lets `workers` runs of stages run at once. Every run carries the job's full run config
        (full_run_config), this driver's tags and the tag dagster/backfill=<id>
        (backfill_runs). The backfills' ids; where one is refused, those already submitted are
        canceled."""
        job = self._job(job_name)
        keys = self._assets_of(job_name)
        order = {k: i for i, k in enumerate(
            self.repo.asset_graph.get(keys[0]).partitions_def.get_partition_keys())}
        ordered = sorted(partitions, key=lambda k: order.get(k, len(order)))
        chunks = even_chunks(ordered, min(self.workers, len(ordered)))
        runs = sum(self.planned_runs(keys[0], chunk) for chunk in chunks)
        # the cores are divided by the runs that can be at once: at most `workers`, and no more
        # than the runs the backfills are cut into
        config = self.run_config(job, workers=min(self.workers, runs))
        self._limit_pool()
        ids: list[str] = []
        try:
            for i, chunk in enumerate(chunks, 1):
                ids.append(self._launch_backfill(job_name, keys, chunk, config,
                                                 f"{job_name} {chunk_label(chunk)} "
                                                 f"({i} of {len(chunks)})"))
        except BaseException:
            for backfill_id in ids:
                self.cancel_backfill(backfill_id)
            raise
        return ids

    def _launch_backfill(self, job_name: str, keys: list[dg.AssetKey], partitions: list[str],
                         config: dict, title: str) -> str:
        """One REQUESTED asset backfill of `keys` over `partitions`: its id."""
        answer = graphql(self.process, LAUNCH_BACKFILL, {"params": {
            "assetSelection": [{"path": key.path} for key in keys],
            "partitionNames": partitions, "runConfigData": config,
            "tags": [{"key": k, "value": v} for k, v in self.tags.items()],
            "title": title}})["launchPartitionBackfill"]
        if answer["__typename"] != "LaunchBackfillSuccess":
            raise RuntimeError(f"the backfill of {job_name} over {', '.join(partitions)} was "
                               f"refused: {answer.get('message') or answer}")
        return answer["backfillId"]

    def _assets_of(self, job_name: str) -> list[dg.AssetKey]:
        """The assets the job `job_name` materialises, in topological order."""
        graph = self.repo.asset_graph
        return [k for k in graph.toposorted_asset_keys
                if job_name in graph.get(k).job_names and graph.get(k).is_materializable]

    def planned_runs(self, key: dg.AssetKey, partitions: list[str]) -> int:
        """How many runs a backfill of `partitions` of asset `key` is cut into, by its backfill
        policy in this driver's code location: each range of consecutive partitions (in the
        partitions definition's order) cut into runs of at most max_partitions_per_run (the
        daemon does the same, assets._stage.partition_policy)."""
        node = self.repo.asset_graph.get(key)
        policy, keys = node.backfill_policy, node.partitions_def.get_partition_keys()
        per_run = (policy.max_partitions_per_run if policy is not None else 1) or len(keys)
        wanted, runs, span = set(partitions), 0, 0
        for k in keys + [None]:
            if k in wanted:
                span += 1
            elif span:
                runs, span = runs + -(-span // per_run), 0
        return max(runs, 1)

    def backfill_runs(self, backfill_id: str) -> dict[str, str]:
        """{label: run id} of the runs the daemon has created for a backfill so far (the label:
        the run's partition, or its first-last partition range)."""
        out = {}
        for r in self.instance.get_run_records(filters=dg.RunsFilter(
                tags={BACKFILL_TAG: backfill_id}), ascending=True):
            out[run_label(r.dagster_run)] = r.dagster_run.run_id
        return out

    def cancel_backfill(self, backfill_id: str) -> None:
        """Cancel a backfill (GraphQL cancelPartitionBackfill, as the web UI does): the daemon
        creates no more of its runs and cancels those in flight."""
        graphql(self.process, CANCEL_BACKFILL, {"id": backfill_id})

    def follow(self, runs: dict[str, str], say: Callable[[str], None],
               poll_s: float = 1.0, stuck_s: float = 180.0,
               backfills: Sequence[str] = ()) -> list[Followed]:
        """Wait for the runs {label: run id} (and for every run the daemon creates for each of
        `backfills` until they end), saying when each starts and ends and passing on the
        steps' own log lines. Ctrl-C (KeyboardInterrupt) cancels the backfills and the runs not
        finished, waits for them to stop, and is raised again."""
        todo = {rid: Followed(rid, label) for label, rid in runs.items()}
        cursors: dict[str, str | None] = dict.fromkeys(todo)
        done: list[Followed] = []
        seen = set(todo)
        active = time.monotonic()  # last time a run was not waiting in the queue
        try:
            while todo or not all(self._backfill_over(b) for b in backfills):
                for backfill_id in backfills:  # the runs the daemon created since
                    for label, rid in self.backfill_runs(backfill_id).items():
                        if rid not in seen:
                            seen.add(rid)
                            todo[rid], cursors[rid] = Followed(rid, label), None
                            say(f"  {label}: queued (run {rid[:8]})")
                if not self._all_queued(todo):
                    active = time.monotonic()
                elif (time.monotonic() - active > 75 and not daemon_alive(self.instance)
                      and self.revive is not None and self.revive()):
                    active = time.monotonic()  # a daemon started anew: the queue moves again
                elif time.monotonic() - active > stuck_s or (  # a daemon that stopped beating
                        time.monotonic() - active > 75 and not daemon_alive(self.instance)):
                    raise QueueStuck(self._stuck_message(time.monotonic() - active))
                for rid, f in list(todo.items()):
                    conn = self.instance.get_records_for_run(rid, cursor=cursors[rid], limit=500)
                    cursors[rid] = conn.cursor
                    for rec in conn.records:
                        entry = rec.event_log_entry
                        event = entry.dagster_event
                        if event is None:
                            if entry.user_message:
                                say(f"  {f.label}: {entry.user_message}")
                        elif event.event_type == dg.DagsterEventType.RUN_START:
                            f.started = entry.timestamp
                            say(f"  {f.label}: started (run {rid[:8]})")
                        elif event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION:
                            check = event.event_specific_data
                            if not check.passed:  # the science checks do not stop the chain
                                f.failed_checks.append(check_failure(check))
                                say(f"  {f.label}: {f.failed_checks[-1]}")
                        elif event.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION:
                            meta = event.step_materialization_data.materialization.metadata
                            if meta.get("cached") is not None and meta["cached"].value:
                                f.cached.append(event.asset_key.to_user_string())
                    run = self.instance.get_run_by_id(rid)
                    if run is not None and run.is_finished and not conn.has_more:
                        if f.status is None:
                            f.status, f.ended = run.status, time.time()
                            if run.status != dg.DagsterRunStatus.SUCCESS:
                                f.causes = self._causes(rid)
                        if (retry := self._retry_of(run, f, say)) is False:
                            continue  # the daemon has yet to make the retry it announced
                        if retry:
                            f.retried_as = retry
                            if retry not in seen:  # a backfill's retry is found by its tag too
                                seen.add(retry)
                                todo[retry], cursors[retry] = Followed(retry, f.label), None
                        done.append(todo.pop(rid))
                if todo or backfills:
                    time.sleep(poll_s)
        except (KeyboardInterrupt, QueueStuck):  # a stuck queue: its runs are dropped too
            for backfill_id in backfills:
                self.cancel_backfill(backfill_id)
            for rid, why in self.cancel(list(todo)).items():
                say(f"  {todo[rid].label}: run {rid[:8]} canceled by force: {why}")
            raise
        for backfill_id in backfills:
            if error := self._backfill_error(backfill_id):
                done.append(Followed("", f"backfill {backfill_id}", dg.DagsterRunStatus.FAILURE,
                                     causes=[error]))
        return done

    def _retry_of(self, run: dg.DagsterRun, f: Followed, say: Callable[[str], None]
                  ) -> str | None | bool:
        """The id of the run Dagster made to retry `run` (failed), once made; None where it
        makes none (it succeeded, failed by a step's failure, or used up its retries); False
        while the daemon has yet to make the retry it announced, or to decide whether it will
        (the instance tags a failed run WILL_RETRY just after it stores the failure). A retry
        not made within RETRY_WAIT_S is given up (said, and added to the run's causes)."""
        if run.status != dg.DagsterRunStatus.FAILURE or not self.instance.run_retries_enabled:
            return None
        if (will := run.tags.get(WILL_RETRY)) is None:
            return False if time.time() - (f.ended or 0.0) < RETRY_WAIT_S else None
        if will != "true":
            return None
        if retry := run.tags.get(AUTO_RETRY):
            say(f"  {f.label}: run {run.run_id[:8]} failed ({'; '.join(f.causes) or 'no cause'})"
                f"; Dagster retries it as run {retry[:8]}")
            return retry
        if f.ended is not None and time.time() - f.ended < RETRY_WAIT_S:
            return False
        f.causes.append(f"Dagster announced a retry of run {run.run_id} but made none in "
                        f"{RETRY_WAIT_S:.0f} s (is the daemon running?)")
        return None

    def _backfill_over(self, backfill_id: str) -> bool:
        """The daemon creates no more runs for this backfill (it completed, failed or was
        canceled)."""
        backfill = self.instance.get_backfill(backfill_id)
        return backfill is None or backfill.status.value not in BACKFILL_GOING

    def _backfill_error(self, backfill_id: str) -> str | None:
        """Why the daemon gave up a backfill outside its runs (a run it could not create)."""
        backfill = self.instance.get_backfill(backfill_id)
        if backfill is None or backfill.error is None:
            return None
        return f"backfill {backfill_id}: {root_cause(backfill.error)}"

    def _stuck_message(self, stuck_s: float) -> str:
        return queue_stuck_message(self.instance, stuck_s)

    def _all_queued(self, todo: dict[str, Followed]) -> bool:
        queued = (dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED)
        return all((r := self.instance.get_run_by_id(rid)) is not None and r.status in queued
                   for rid in todo)

    def _causes(self, run_id: str) -> list[str]:
        events = [e.dagster_event for e in self.instance.all_logs(run_id)
                  if e.dagster_event is not None]
        return failure_causes(events)

    def cancel(self, run_ids: list[str], wait_s: float = 60.0, again_s: float = 5.0
               ) -> dict[str, str]:
        """Cancel runs (queued: dropped; started: the step is interrupted, the run marked
        canceled) and wait for them to stop, so that their locks are free. The queued ones go
        first: canceling a running one frees its slot of the pool, and the daemon would launch a
        queued one into it before its own cancel. A run that started meanwhile (a cancel that
        reached it while its worker was starting is lost) is canceled again every `again_s`
        while waiting. A run still not stopped after `wait_s` is stopped by force
        (`force_canceled`): {run id: what was done} for those."""
        cancel_in_order(self.instance, run_ids)
        deadline = again = time.monotonic()
        deadline += wait_s
        while True:
            live = [r for rid in run_ids
                    if (r := self.instance.get_run_by_id(rid)) is not None and not r.is_finished]
            if not live:
                return {}
            if time.monotonic() >= deadline:
                return {r.run_id: force_canceled(self.instance, r, wait_s) for r in live}
            if time.monotonic() - again >= again_s:
                for r in live:
                    if r.status in (dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED):
                        self.instance.run_coordinator.cancel_run(r.run_id)
                again = time.monotonic()
            time.sleep(0.5)


def force_canceled(instance: dg.DagsterInstance, run: dg.DagsterRun, waited_s: float) -> str:
    """Stop a run that a cancel did not stop within `waited_s`: its worker process is ended
    (SIGTERM, then SIGKILL), which frees the locks it holds, and only then is the run marked
    canceled, so that a canceled run never has a worker still writing. What was done, in words.
    (Dagster's own run monitoring marks such a run canceled after its cancel timeout without
    ending its worker, and only while a daemon runs.)"""
    from pipeline.run_launcher import process_alive, stop_process, worker_pid

    pid = worker_pid(instance, run.run_id)
    if pid is not None and process_alive(pid):
        stop_process(pid, grace_s=10.0)
        done = f"its worker (pid {pid}) was ended"
    else:
        done = "it had no worker left" if pid is not None else "its worker had not started"
    why = f"it did not stop within {waited_s:.0f} s of its cancel; {done}"
    now = instance.get_run_by_id(run.run_id)
    if now is not None and now.is_finished:  # it ended meanwhile, by itself
        return f"{why}, and the run ended {now.status.value}"
    instance.report_run_canceled(now or run, message=f"Canceled by the driver: {why}.")
    return why


def cancel_in_order(instance: dg.DagsterInstance, run_ids: list[str]) -> list[str]:
    """Cancel `run_ids` through the instance's run coordinator, the queued (and not yet
    submitted) ones first; the ids in the order canceled."""
    waiting = (dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED)
    runs = {rid: instance.get_run_by_id(rid) for rid in run_ids}
    order = sorted(run_ids, key=lambda rid: not (runs[rid] is not None
                                                  and runs[rid].status in waiting))
    for rid in order:
        instance.run_coordinator.cancel_run(rid)
    return order


def queue_stuck_message(instance: dg.DagsterInstance, stuck_s: float) -> str:
    """Why no run left the queue: the runs that hold the stages' pool (named, with their job,
    tags and how long they have been running), or no daemon launching runs."""
    busy = instance.get_run_records(filters=dg.RunsFilter(statuses=[
        dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED,
        dg.DagsterRunStatus.CANCELING]))
    head = f"no run left the queue in {stuck_s:.0f} s"
    if not daemon_alive(instance, within_s=45.0):
        return (f"{head}: no Dagster daemon is launching runs for "
                f"{instance.root_directory} (no heartbeat in 45 s). Start one "
                "(`dagster dev`), or run the command again to start its own.")
    if busy:
        held = "; ".join(
            f"run {r.dagster_run.run_id} ({r.dagster_run.job_name}"
            + (f", partition {p}" if (p := r.dagster_run.tags.get("dagster/partition")) else "")
            + f", {r.dagster_run.status.value}"
            + (f" for {time.time() - r.start_time:.0f} s" if r.start_time else "")
            + (f", driver {d}" if (d := r.dagster_run.tags.get("dihal/driver")) else "") + ")"
            for r in busy)
        return (f"{head}: the pool of runs is held by {held}. Wait for them, or cancel "
                "them (web UI, Runs page) and run the command again.")
    return (f"{head}: a Dagster daemon is alive but launches nothing; see its log "
            f"({Path(instance.root_directory) / 'dihal-daemon.log'} for the one a "
            "driver starts) and run the command again.")


def root_cause(error) -> str:
    """The innermost message of a Dagster error chain: what went wrong and, in our messages,
    the fix (Dagster's wrapper, "Error occurred while executing op ...", is dropped)."""
    while error.cause is not None:
        error = error.cause
    head, sep, text = error.message.strip().partition(": ")
    if sep and head.rsplit(".", 1)[-1] == error.cls_name:  # "pkg.mod.KeyError: ..." -> "KeyError: ..."
        return f"{error.cls_name}: {text}"
    return error.message.strip()


def failure_causes(events) -> list[str]:
    """One line per failed step: its name and the cause (a dg.Failure's description, else the
    innermost error). Errors outside a step (resource start-up, the run) where no step failed."""
    causes = []
    for e in events:
        data = e.event_specific_data
        if e.event_type_value == "STEP_FAILURE":
            user = data.user_failure_data
            why = (user.description if user is not None and user.description else None
                   ) or root_cause(data.error)
            causes.append(why if why.startswith(f"{e.step_key}:") else f"{e.step_key}: {why}")
    if not causes:
        causes = [root_cause(err) for e in events
                  if (err := getattr(e.event_specific_data, "error", None)) is not None]
    if not causes:  # ended from outside its steps: a dead worker (found by the code server
        # that launched it, or by run monitoring where that is gone too), a cancel
        causes = [e.message for e in events if e.message and (
            e.event_type_value in ("PIPELINE_FAILURE", "PIPELINE_CANCELED")
            or "Run execution process for" in e.message)]
        generic = "This run has been marked as failed from outside the execution context."
        causes = [c for c in causes if c != generic] or causes
    return causes or ["no error was recorded: see Dagster's log above"]


@contextmanager
def launcher(instance: dg.DagsterInstance, module: str, *, workers: int = 1,
             tags: dict[str, str] | None = None,
             ops: dict[str, dict] | None = None) -> Iterator[Launcher]:
    """A Launcher over the code location `module`, loaded in this process (under the driver's
    environment, so its config defaults are the driver's: pipeline.main.set_location_environment
    sets it before the location is imported) and named as `dagster dev` and `dg dev` name it
    (location_name), so that a daemon they started finds the code of the runs submitted here
    (the runs execute in the daemon's code servers, with the config spelled out here)."""
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster.version import __version__

    if stale := stale_defaults():
        raise RuntimeError(
            "the code location's config defaults were read under another environment than "
            "this driver's, and its runs would be submitted with them: " + "; ".join(stale)
            + " (set the environment before the location's modules are imported: "
            "pipeline.main.set_location_environment)")
    with ExitStack() as stack:
        with warnings.catch_warnings():
            # Dagster's own snapshot of each schedule reads a property it deprecated ("no
            # longer has any effect"): said on every load in process, of nothing set here
            warnings.filterwarnings("ignore", r"Property `ScheduleDefinition.environment_vars`",
                                    DeprecationWarning)
            ctx = stack.enter_context(WorkspaceProcessContext(
                instance, location_target(module), version=__version__))
            launch = Launcher(instance, ctx.create_request_context(), workers=workers,
                              tags=tags, ops=ops, process=ctx)
        yield launch
