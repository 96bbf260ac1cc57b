"""The Dagster daemon a driver starts: `dagster-daemon`, with its backfill daemon looking for
work every $DIHAL_BACKFILL_INTERVAL_S seconds (BACKFILL_INTERVAL_S by default) instead of every
30.

Dagster's backfill daemon sleeps a fixed 30 s between iterations. A REQUESTED backfill waits
for the next iteration to get its runs, and a backfill whose runs have ended waits for the one
after to be marked done: each sweep or baselines stage of a driver waited 16-25 s at either end
(the run records of a tiny sweep on the 2-core machine). The 30 s is a module constant with no
setting; this entry point sets it before running Dagster's own daemon command line, unchanged
otherwise. The price: while a backfill is active the daemon used 4.5 % of one core at 5 s
against 2.7 % at 30 s (benchmarks/RESULTS.md). The other daemons keep their own
intervals (dagster.yaml's auto_materialize.minimum_interval_seconds holds the asset daemon's,
which would otherwise default to the same constant). Run as
`python -m pipeline.dagster_daemon run -w <workspace.yaml>`; `dagster dev` and `dg dev` start
Dagster's daemon as it is.

Used by pipeline.daemon; imports nothing of the project but dihal.environment.
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


def main() -> None:
    set_backfill_interval(backfill_interval_s())
    from importlib.metadata import entry_points

    # Dagster's own `dagster-daemon` command, by the entry point its package declares
    (command,) = entry_points(group="console_scripts", name="dagster-daemon")
    command.load()()


if __name__ == "__main__":
    main()
