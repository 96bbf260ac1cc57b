"""Where the CPU of a command goes, by the kind of Python process that spent it: every Python
process of this environment started while the probe is installed writes its command line and
its CPU seconds (user + system, `getrusage`) to a folder when it ends (normally, or by SIGTERM
where it keeps Python's default for it; a process ended by SIGKILL is not counted). Then a
summary by kind: pytest-xdist processes, drivers, daemons, code servers, run workers (the
code server's `multiprocessing` spawns), the CLIs, `dg dev` and the web server; or, with
--by-file, by the test file whose test started the process (the processes other than pytest's
own: what each file's stories cost beyond the in-process work); or, with --by-import, by kind
and by the heavy libraries (torch, transformers' model code, Dagster) the process had imported.

    python benchmarks/process_cpu.py install /tmp/probe    # a .pth file in this venv
    CPU_PROBE_OUT=/tmp/probe make test                      # or any command
    python benchmarks/process_cpu.py remove
    python benchmarks/process_cpu.py summary /tmp/probe
    python benchmarks/process_cpu.py summary --by-file /tmp/probe
    python benchmarks/process_cpu.py summary --by-import /tmp/probe

The probe acts only where $CPU_PROBE_OUT names a folder; `remove` takes it out of the venv
again. It sets a SIGTERM handler only in processes that have none of their own, and that handler
re-raises the signal once it has written its line.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import site
from pathlib import Path

PTH, MODULE = "zz_dihal_cpu_probe.pth", "_dihal_cpu_probe.py"
PROBE = '''import os
if os.environ.get("CPU_PROBE_OUT"):
    import atexit, json, resource, signal, sys, time
    _start = time.time()
    # the test that started this process (pytest sets it in the test's process; children
    # inherit it)
    _test = os.environ.get("PYTEST_CURRENT_TEST", "")
    # the heavy libraries a process had imported when it ended
    _HEAVY = ("torch", "transformers.modeling_utils", "dagster", "zarr", "sklearn")
    # the CPU seconds the process spent in the garbage collector's collections, by generation
    _gc = [0.0, 0.0, 0.0]
    _gc_start = [0.0]

    def _on_gc(phase, info):
        if phase == "start":
            _gc_start[0] = time.thread_time()
        else:
            _gc[info["generation"]] += time.thread_time() - _gc_start[0]

    import gc
    gc.callbacks.append(_on_gc)

    def _write():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        path = os.path.join(os.environ["CPU_PROBE_OUT"], f"{os.getpid()}.json")
        try:
            with open(path, "w") as f:
                json.dump({"argv": list(getattr(sys, "orig_argv", sys.argv))[:8],
                           "test": _test, "cpu": usage.ru_utime + usage.ru_stime,
                           "wall": time.time() - _start,
                           "imported": [m for m in _HEAVY if m in sys.modules],
                           "gc": _gc}, f)
        except OSError:
            pass

    def _on_term(signum, frame):
        _write()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    atexit.register(_write)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        try:
            signal.signal(signal.SIGTERM, _on_term)
        except ValueError:  # not the main thread
            pass
'''
# (kind, pattern on the command line), first match wins
KINDS = [("pytest-xdist process", r"execnet|-c import sys;exec"), ("pytest", r"-m pytest"),
         ("driver (pipeline.main)", r"pipeline\.main"),
         ("the drivers' daemon", r"pipeline\.dagster_daemon"),
         ("Dagster's daemon", r"dagster\._daemon|dagster-daemon"),
         ("code server", r"api grpc|code-server start"),
         ("run worker", r"multiprocessing\.spawn"), ("web server", r"webserver"),
         ("dg dev / dagster dev", r"bin/dg dev|_cli.*dev|bin/dagster dev"),
         ("CLI (dagster, dg)", r"bin/dg |bin/dagster "), ("Dask", r"\bdask\b|distributed"),
         ("Dagster's orphan watcher", r"watch_orphans"), ("other pipeline module", r"pipeline\.")]


def kind(argv: list[str]) -> str:
    line = " ".join(argv)
    return next((name for name, pattern in KINDS if re.search(pattern, line)), "other")


def summary(folder: Path) -> str:
    rows = [json.loads(p.read_text()) for p in folder.glob("*.json")]
    by = collections.defaultdict(lambda: [0, 0.0])
    for r in rows:
        k = by[kind(r["argv"])]
        k[0] += 1
        k[1] += r["cpu"]
    total = sum(c for _, c in by.values())
    gc_time = collections.defaultdict(float)
    for r in rows:
        gc_time[kind(r["argv"])] += sum(r.get("gc", ()))
    lines = [f"{len(rows)} processes, {total:.0f} s of CPU, {sum(gc_time.values()):.0f} s of it "
             "in the garbage collector", "",
             "| kind | processes | CPU (s) | CPU a process (s) | in the garbage collector (s) |",
             "|---|---:|---:|---:|---:|"]
    for name, (n, cpu) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"| {name} | {n} | {cpu:.0f} | {cpu / n:.1f} | {gc_time[name]:.1f} |")
    return "\n".join(lines)


def by_file(folder: Path) -> str:
    """The processes started by each test file's tests (pytest's own processes left out), with
    their CPU, largest first; and the largest kind in each."""
    rows = [json.loads(p.read_text()) for p in folder.glob("*.json")]
    by = collections.defaultdict(lambda: [0, 0.0, collections.Counter()])
    for r in rows:
        name = kind(r["argv"])
        if name.startswith("pytest"):
            continue
        f = by[r.get("test", "").split("::")[0] or "(no test)"]
        f[0] += 1
        f[1] += r["cpu"]
        f[2][name] += r["cpu"]
    total = sum(c for _, c, _ in by.values())
    lines = [f"{sum(n for n, _, _ in by.values())} processes started by tests, {total:.0f} s of "
             "CPU", "", "| test file | processes | CPU (s) | largest kind (s) |",
             "|---|---:|---:|---|"]
    for name, (n, cpu, kinds) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        top, top_cpu = kinds.most_common(1)[0]
        lines.append(f"| {name} | {n} | {cpu:.0f} | {top} {top_cpu:.0f} |")
    return "\n".join(lines)


def by_import(folder: Path) -> str:
    """Processes by kind and by which heavy libraries they had imported when they ended."""
    rows = [json.loads(p.read_text()) for p in folder.glob("*.json")]
    by = collections.defaultdict(lambda: [0, 0.0])
    for r in rows:
        heavy = "+".join(m.split(".")[0] for m in r.get("imported", [])
                         if m in ("torch", "transformers.modeling_utils", "dagster")) or "none"
        k = by[(kind(r["argv"]), heavy)]
        k[0] += 1
        k[1] += r["cpu"]
    lines = ["| kind | imported | processes | CPU (s) | CPU a process (s) |",
             "|---|---|---:|---:|---:|"]
    for (name, heavy), (n, cpu) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"| {name} | {heavy} | {n} | {cpu:.0f} | {cpu / n:.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    sub.add_parser("install").add_argument("folder", type=Path)
    sub.add_parser("remove")
    summ = sub.add_parser("summary")
    summ.add_argument("folder", type=Path)
    summ.add_argument("--by-file", action="store_true", help="by the test file that started "
                      "each process, instead of by kind")
    summ.add_argument("--by-import", action="store_true", help="by kind and by the heavy "
                      "libraries each process had imported")
    args = ap.parse_args()
    packages = Path(site.getsitepackages()[0])
    if args.what == "install":
        args.folder.mkdir(parents=True, exist_ok=True)
        (packages / MODULE).write_text(PROBE)
        (packages / PTH).write_text(f"import {MODULE.removesuffix('.py')}\n")
        print(f"installed in {packages}; set CPU_PROBE_OUT={args.folder} for the command")
    elif args.what == "remove":
        for name in (PTH, MODULE):
            (packages / name).unlink(missing_ok=True)
        print(f"removed from {packages}")
    else:
        print(by_file(args.folder) if args.by_file else
              by_import(args.folder) if args.by_import else summary(args.folder))


if __name__ == "__main__":
    main()
