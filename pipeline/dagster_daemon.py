"""The Dagster daemon a driver starts: `dagster-daemon`, with its backfill daemon looking for
work every $DIHAL_BACKFILL_INTERVAL_S seconds (BACKFILL_INTERVAL_S by default) instead of every
30.

Dagster's backfill daemon sleeps a fixed 30 s between iterations. A REQUESTED backfill waits
for the next iteration to get its runs, and a backfill whose runs have ended waits for the one
after to be marked done: each sweep or baselines stage of a driver waited 16-25 s at either end
(the run records of a tiny sweep on the 2-core machine). The 30 s is a module constant with no
setting; this entry point sets it before running Dagster's own daemon command line, unchanged
otherwise but for the race below. The price: while a backfill is active the daemon used 4.5 % of one core at 5 s
against 2.7 % at 30 s (benchmarks/RESULTS.md). The other daemons keep their own
intervals (dagster.yaml's auto_materialize.minimum_interval_seconds holds the asset daemon's,
which would otherwise default to the same constant). Run as
`python -m pipeline.dagster_daemon run -w <workspace.yaml>`; `dagster dev` and `dg dev` start
Dagster's daemon as it is.

It also closes a race in Dagster's asset backfills that the shorter interval makes likely
(`wait_for_retry_decisions`): a run's FAILURE is stored a moment before its `dagster/will_retry`
decision, and a backfill iteration falling in between completes the backfill, after which
Dagster refuses the retry it had decided on ("part of a backfill that is in a terminal state").
Dagster's own open fix for it takes the same course: a backfill with a failed run whose retry
is not yet decided is not complete.

Used by pipeline.daemon; imports nothing of the project but dihal.environment and dihal.heap.
"""

from __future__ import annotations

import sys

BACKFILL_INTERVAL_ENV = "DIHAL_BACKFILL_INTERVAL_S"
BACKFILL_INTERVAL_S = 5


def backfill_interval_s() -> int:
    """$DIHAL_BACKFILL_INTERVAL_S (whole seconds, 1 to 30), else BACKFILL_INTERVAL_S; another
    value is refused by name (dihal.environment)."""
    from dihal.environment import env_int

    return env_int(BACKFILL_INTERVAL_ENV, BACKFILL_INTERVAL_S, lo=1, hi=30)


def set_backfill_interval(seconds: int) -> bool:
    """Make Dagster's backfill daemon, in this process, sleep `seconds` between iterations;
    False (said on stderr) where this Dagster has no such constant to set."""
    from dagster._daemon import controller

    if not isinstance(getattr(controller, "DEFAULT_DAEMON_INTERVAL_SECONDS", None), int):
        print("[dihal] this Dagster has no DEFAULT_DAEMON_INTERVAL_SECONDS: its backfill "
              "daemon keeps its own interval", file=sys.stderr, flush=True)
        return False
    controller.DEFAULT_DAEMON_INTERVAL_SECONDS = seconds
    return True


# how long a failed run of a backfill may lack its retry decision before the backfill stops
# waiting for it (Dagster tags the run within moments of storing its failure; a decision that
# never comes, as after a crash between the two, must not hold the backfill open for ever)
DECISION_WAIT_S = 60.0


def retry_undecided(instance, backfill_id: str, now: float,
                    wait_s: float = DECISION_WAIT_S) -> list[str]:
    """The runs of backfill `backfill_id` that keep it open while run retries are on: a failed
    run whose `dagster/will_retry` decision is not yet stored (for at most `wait_s` after its
    end), or is "true" with its retry not yet made; then any run not finished (a retry made
    since). [] where retries are off."""
    from dagster import DagsterRunStatus, RunsFilter
    from dagster._core.storage.dagster_run import NOT_FINISHED_STATUSES
    from dagster._core.storage.tags import BACKFILL_ID_TAG, WILL_RETRY_TAG

    if not instance.run_retries_enabled:
        return []
    tag = {BACKFILL_ID_TAG: backfill_id}
    failed = instance.get_run_records(RunsFilter(tags=tag, statuses=[DagsterRunStatus.FAILURE]))
    pending = [r.dagster_run.run_id for r in failed
               if r.dagster_run.is_complete_and_waiting_to_retry
               or (WILL_RETRY_TAG not in r.dagster_run.tags
                   and now - _ended(r) < wait_s)]
    # after the failed runs: a retry made since the look above is a run not finished here
    return pending or list(instance.get_run_ids(
        RunsFilter(tags=tag, statuses=NOT_FINISHED_STATUSES), limit=1))


def _ended(record) -> float:
    """When a run record's run ended (its last update where its end was not recorded)."""
    return record.end_time if record.end_time is not None else (
        record.update_timestamp.timestamp())


def wait_for_retry_decisions() -> bool:
    """Make Dagster's asset backfills, in this process, complete only once no failed run of
    theirs waits for its retry decision or its retry (`retry_undecided`); False (said on stderr)
    where this Dagster has no `backfill_runs_are_complete` to extend."""
    from dagster._core.execution import asset_backfill

    complete = getattr(asset_backfill, "backfill_runs_are_complete", None)
    if not callable(complete):
        print("[dihal] this Dagster has no backfill_runs_are_complete: a backfill may complete "
              "before a failed run's retry is decided", file=sys.stderr, flush=True)
        return False

    def runs_are_complete(backfill_id, instance, logger, *args, **kwargs) -> bool:
        if not complete(backfill_id, instance, logger, *args, **kwargs):
            return False
        import time

        if pending := retry_undecided(instance, backfill_id, time.time()):
            logger.info("A failed run of the backfill awaits its retry decision or its retry: "
                        f"{', '.join(pending)}. Backfill is still in progress.")
            return False
        return True

    asset_backfill.backfill_runs_are_complete = runs_are_complete
    return True


def main() -> None:
    from dihal import heap

    heap.use_in_this_process()
    set_backfill_interval(backfill_interval_s())
    wait_for_retry_decisions()
    from importlib.metadata import entry_points

    # Dagster's own `dagster-daemon` command, by the entry point its package declares
    (command,) = entry_points(group="console_scripts", name="dagster-daemon")
    command.load()()


if __name__ == "__main__":
    main()
