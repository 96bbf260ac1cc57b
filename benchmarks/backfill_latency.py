"""How long a driver's backfills waited on the Dagster daemon: for each asset backfill of an
instance, the seconds from its submission to its first run's creation, and from its last run's
end to the backfill's end (when the daemon marked it done), besides the seconds its runs ran.

    DAGSTER_HOME=<home> python benchmarks/backfill_latency.py

Example: the concurrent-backfill door with the daemon's backfill interval at 30 s (Dagster's)
and at 5 s (pipeline/dagster_daemon.py), each instance kept under pytest's base temp:

    DIHAL_BACKFILL_INTERVAL_S=30 python -m pytest -p no:cacheprovider --basetemp=/tmp/bf30 \\
        tests/pipeline/test_scale_out.py -k concurrent_backfill
    DAGSTER_HOME=$(ls -d /tmp/bf30/*0/dagster_home) python benchmarks/backfill_latency.py
"""

from __future__ import annotations

import os
import statistics

import dagster as dg


def latencies(instance: dg.DagsterInstance) -> list[dict]:
    """One row per finished asset backfill, oldest first: its id, the seconds to its first
    run (`start_wait`), its runs' span (`runs`) and the seconds after its last run ended
    (`end_wait`)."""
    rows = []
    for b in sorted(instance.get_backfills(), key=lambda b: b.backfill_timestamp):
        recs = instance.get_run_records(filters=dg.RunsFilter(tags={"dagster/backfill":
                                                                    b.backfill_id}))
        ended = [r.end_time for r in recs if r.end_time is not None]
        if not recs or not ended or b.backfill_end_timestamp is None:
            continue
        first = min(r.create_timestamp.timestamp() for r in recs)
        rows.append({"backfill": b.backfill_id, "start_wait": first - b.backfill_timestamp,
                     "runs": max(ended) - first, "end_wait": b.backfill_end_timestamp
                     - max(ended)})
    return rows


def main() -> None:
    os.environ.setdefault("DIHAL_WORKERS", "1")  # dagster.yaml reads it
    with dg.DagsterInstance.get() as instance:
        rows = latencies(instance)
    for r in rows:
        print(f"{r['backfill']}: first run after {r['start_wait']:.1f} s, runs {r['runs']:.1f} s, "
              f"marked done {r['end_wait']:.1f} s after its last run")
    if rows:
        print(f"median wait: {statistics.median(r['start_wait'] for r in rows):.1f} s before, "
              f"{statistics.median(r['end_wait'] for r in rows):.1f} s after ({len(rows)} "
              "backfills)")
    else:
        print("no finished backfill in this instance")


if __name__ == "__main__":
    main()
