"""benchmarks/process_cpu.py: each kind of process the suite starts is told apart by its
command line, and the summary adds each kind's CPU."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from process_cpu import by_file, kind, summary  # noqa: E402

PY = "/venv/bin/python"


def test_each_kind_of_process_is_told_apart_by_its_command_line():
    cases = {
        "run worker": [PY, "-B", "-c", "from multiprocessing.spawn import spawn_main; "
                       "spawn_main(tracker_fd=12, pipe_handle=14)", "--multiprocessing-fork"],
        "driver (pipeline.main)": [PY, "-m", "pipeline.main", "--backbone", "llama"],
        "the drivers' daemon": [PY, "-m", "pipeline.dagster_daemon", "run", "-w", "w.yaml"],
        "Dagster's daemon": [PY, "-m", "dagster._daemon", "run"],
        "code server": [PY, "-m", "dagster", "api", "grpc", "--lazy-load-user-code"],
        "CLI (dagster, dg)": [PY, "/venv/bin/dagster", "asset", "materialize", "--select", "x"],
        "Dagster's orphan watcher": [PY, "/venv/lib/dagster/_core/execution/scripts/"
                                     "watch_orphans.py", "1", "2"],
        "other pipeline module": [PY, "-m", "pipeline.preflight"],
        "other": [PY, "script.py"],
    }
    assert {name: kind(argv) for name, argv in cases.items()} == {n: n for n in cases}


def test_the_summary_adds_each_kinds_cpu_largest_first(tmp_path):
    rows = [([PY, "-m", "pipeline.main"], 4.0), ([PY, "-m", "pipeline.main"], 2.0),
            ([PY, "-m", "dagster", "api", "grpc"], 1.5)]
    for i, (argv, cpu) in enumerate(rows):
        (tmp_path / f"{i}.json").write_text(json.dumps({"argv": argv, "cpu": cpu, "wall": 9.0}))
    lines = summary(tmp_path).splitlines()
    assert lines[0] == "3 processes, 8 s of CPU"
    assert lines[4:] == ["| driver (pipeline.main) | 2 | 6 | 3.0 |", "| code server | 1 | 2 | 1.5 |"]


def test_by_file_adds_the_processes_each_test_file_started_leaving_pytests_own_out(tmp_path):
    rows = [([PY, "-m", "pipeline.main"], 4.0, "tests/a.py::test_x (call)"),
            ([PY, "-m", "dagster", "api", "grpc"], 1.5, "tests/a.py::test_y (setup)"),
            ([PY, "-m", "pipeline.main"], 3.0, "tests/b.py::test_z (call)"),
            ([PY, "-m", "pytest", "-n", "3"], 50.0, "tests/a.py::test_x (call)")]
    for i, (argv, cpu, test) in enumerate(rows):
        (tmp_path / f"{i}.json").write_text(json.dumps({"argv": argv, "cpu": cpu, "wall": 9.0,
                                                        "test": test}))
    lines = by_file(tmp_path).splitlines()
    assert lines[0] == "3 processes started by tests, 8 s of CPU"
    assert lines[4:] == ["| tests/a.py | 2 | 6 | driver (pipeline.main) 4 |",
                         "| tests/b.py | 1 | 3 | driver (pipeline.main) 3 |"]
