"""Where the time of a driver run went: every run of a Dagster instance (the driver's jobs and
backfill partitions), and the wall time of each asset's steps summed over its runs.

    python benchmarks/run_breakdown.py                       # the instance of $DAGSTER_HOME
    python benchmarks/run_breakdown.py --dagster-home DIR    # another clone's .dagster
    python benchmarks/run_breakdown.py --compare OTHER_DIR   # and the change from another run
    python benchmarks/run_breakdown.py --within eval         # the phases inside one asset step

Reads only the instance's run storage (step start and end events); changes nothing.
"""

from __future__ import annotations

import argparse
import os
import re
from collections import defaultdict
from pathlib import Path


def step_seconds(dagster_home: str | Path,
                 backbone: str) -> tuple[dict[str, float], dict[str, float], float]:
    """({step (asset or check, the backbone's name dropped): seconds summed over runs}, {job:
    run seconds summed}, first run start to last run end in seconds)."""
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(Path(dagster_home).resolve())
    instance = dg.DagsterInstance.get()
    steps: dict[str, float] = defaultdict(float)
    jobs: dict[str, float] = defaultdict(float)
    starts, ends = [], []
    for run in instance.get_runs():
        stats = instance.get_run_stats(run.run_id)
        if stats.start_time is None or stats.end_time is None:
            continue
        starts.append(stats.start_time)
        ends.append(stats.end_time)
        jobs[run.job_name.replace(f"_{backbone}", "")] += stats.end_time - stats.start_time
        for s in instance.get_run_step_stats(run.run_id):
            if s.start_time is not None and s.end_time is not None:
                steps[s.step_key.replace(f"_{backbone}", "")] += s.end_time - s.start_time
    span = (max(ends) - min(starts)) if starts else 0.0
    return dict(steps), dict(jobs), span


PROGRESS = re.compile(r"step \d+/\d+ (val )?loss")  # a training loop's progress lines


def phases(dagster_home: str | Path, backbone: str, step: str) -> list[tuple[str, float]]:
    """[(message, seconds until the next message or the step's end)] of every run of asset
    step `step` (the backbone's name dropped), in run order: what each progress message
    announced took that long. Training progress lines fold into the message before them."""
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(Path(dagster_home).resolve())
    instance = dg.DagsterInstance.get()
    out: list[tuple[str, float]] = []
    for run in reversed(instance.get_runs()):  # get_runs lists the newest first
        stats = {s.step_key: s for s in instance.get_run_step_stats(run.run_id)}
        key = next((k for k in stats if k.replace(f"_{backbone}", "") == step), None)
        if key is None or stats[key].end_time is None:
            continue
        marks = [(e.timestamp, e.user_message) for e in instance.all_logs(run.run_id)
                 if e.step_key == key and not e.dagster_event and e.user_message
                 and not PROGRESS.search(e.user_message)]
        if not marks:
            continue
        ends = [t for t, _ in marks[1:]] + [stats[key].end_time]
        out += [(m, end - t) for (t, m), end in zip(marks, ends, strict=True)]
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dagster-home", default=os.environ.get("DAGSTER_HOME", ".dagster"))
    ap.add_argument("--compare", help="another run's DAGSTER_HOME: show both and the change")
    ap.add_argument("--backbone", default="smollm2")
    ap.add_argument("--within", metavar="STEP",
                    help="the phases of one asset step (eval, sampler_steps, layer_score, ...)")
    args = ap.parse_args(argv)
    if args.within:
        print(f"| {args.within}: phase (its progress message) | s |\n|---|---|")
        for message, seconds in phases(args.dagster_home, args.backbone, args.within):
            print(f"| {message[:110]} | {seconds:.0f} |")
        return
    after = step_seconds(args.dagster_home, args.backbone)
    before = step_seconds(args.compare, args.backbone) if args.compare else None
    for i, title in ((1, "job"), (0, "asset step")):
        keys = sorted(set(after[i]) | set(before[i] if before else ()),
                      key=lambda k: -after[i].get(k, 0.0))
        head = f"| {title} | s |" if not before else f"| {title} | {args.compare} (s) | {args.dagster_home} (s) | change (s) |"
        print(head)
        print("|" + "---|" * (head.count("|") - 1))
        for k in keys:
            a = after[i].get(k, 0.0)
            if before:
                b = before[i].get(k, 0.0)
                print(f"| {k} | {b:.0f} | {a:.0f} | {a - b:+.0f} |")
            else:
                print(f"| {k} | {a:.0f} |")
        print()
    print(f"first run start to last run end: {after[2]:.0f} s"
          + (f" (the other: {before[2]:.0f} s, change {after[2] - before[2]:+.0f} s)" if before else ""))


if __name__ == "__main__":
    main()
