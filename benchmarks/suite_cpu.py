"""Where `make test`'s time goes: each test's wall time and CPU seconds, in the suite's own
setting (pytest-xdist processes side by side), then a summary by file and by process.

As a pytest plugin it appends one JSON line per test to <out>/cpu-<xdist worker>.jsonl: the
wall seconds of the test (set-up, call, tear-down), the CPU seconds of the pytest process
itself (`self`) and of the child processes it waited for in that time (`children`: drivers,
daemons, `dg dev`, Dask workers, fresh interpreters; a process's CPU counts once it is reaped,
so a server started by a module fixture counts in the test that stops it). As a script it
summarises those lines.

    rm -rf /tmp/suite-cpu && SUITE_CPU_OUT=/tmp/suite-cpu PYTHONPATH=benchmarks \\
        /usr/bin/time -v python -m pytest -n 3 --dist loadfile -p suite_cpu -q
    python benchmarks/suite_cpu.py /tmp/suite-cpu [--top 25]

The CPU of the whole command (`/usr/bin/time`'s user + sys) bounds its wall time from below
on a machine of N cores: CPU / N, however the files are spread.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import time
from pathlib import Path

import pytest

OUT_ENV = "SUITE_CPU_OUT"
_out = None


def _cpu() -> tuple[float, float]:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _out
    if _out is None:
        folder = Path(os.environ.get(OUT_ENV, "/tmp/suite-cpu"))
        folder.mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        _out = open(folder / f"cpu-{worker}.jsonl", "a")  # noqa: SIM115 (the session's)
    me, kids, t0 = *_cpu(), time.time()
    yield
    me2, kids2 = _cpu()
    _out.write(json.dumps({"id": item.nodeid, "start": t0, "wall": time.time() - t0,
                           "self": me2 - me, "children": kids2 - kids}) + "\n")
    _out.flush()


def summarise(folder: Path, top: int) -> str:
    rows = []
    for path in sorted(folder.glob("cpu-*.jsonl")):
        worker = path.stem.removeprefix("cpu-")
        rows += [{**json.loads(line), "worker": worker} for line in path.read_text().splitlines()]
    if not rows:
        raise SystemExit(f"no cpu-*.jsonl under {folder}: run the suite with -p suite_cpu first")
    t0 = min(r["start"] for r in rows)
    lines = ["| process | tests | busy (s) | last test ends at (s) | CPU (s) |", "|---|---:|---:|---:|---:|"]
    for worker in sorted({r["worker"] for r in rows}):
        mine = [r for r in rows if r["worker"] == worker]
        lines.append(f"| {worker} | {len(mine)} | {sum(r['wall'] for r in mine):.0f} | "
                     f"{max(r['start'] + r['wall'] for r in mine) - t0:.0f} | "
                     f"{sum(r['self'] + r['children'] for r in mine):.0f} |")
    files = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for r in rows:
        f = files[r["id"].split("::")[0]]
        f[0] += 1
        f[1] += r["wall"]
        f[2] += r["self"]
        f[3] += r["children"]
    lines += ["", f"| file (the {top} longest) | tests | wall (s) | CPU in pytest (s) | "
              "CPU in child processes (s) |", "|---|---:|---:|---:|---:|"]
    for name, (n, wall, me, kids) in sorted(files.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"| {name} | {n} | {wall:.0f} | {me:.0f} | {kids:.0f} |")
    total = [sum(f[i] for f in files.values()) for i in (1, 2, 3)]
    lines.append(f"| all {len(rows)} tests | | {total[0]:.0f} | {total[1]:.0f} | {total[2]:.0f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, nargs="?", default=Path("/tmp/suite-cpu"))
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    print(summarise(args.folder, args.top))


if __name__ == "__main__":
    main()
