"""benchmarks/process_cpu.py: each kind of process the suite starts is told apart by its
command line, and the summary adds each kind's CPU."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from process_cpu import by_file, by_import, kind, summary  # noqa: E402

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


def test_the_summary_adds_each_kinds_cpu_and_collector_time_largest_first(tmp_path):
    rows = [([PY, "-m", "pipeline.main"], 4.0, [0.1, 0.2, 1.0]),
            ([PY, "-m", "pipeline.main"], 2.0, [0.0, 0.0, 0.5]),
            ([PY, "-m", "dagster", "api", "grpc"], 1.5, None)]  # a probe without the column
    for i, (argv, cpu, gc) in enumerate(rows):
        row = {"argv": argv, "cpu": cpu, "wall": 9.0} | ({"gc": gc} if gc else {})
        (tmp_path / f"{i}.json").write_text(json.dumps(row))
    lines = summary(tmp_path).splitlines()
    assert lines[0] == "3 processes, 8 s of CPU, 2 s of it in the garbage collector"
    assert lines[4:] == ["| driver (pipeline.main) | 2 | 6 | 3.0 | 1.8 |",
                         "| code server | 1 | 2 | 1.5 | 0.0 |"]


def test_by_import_tells_processes_apart_by_the_heavy_libraries_they_had_imported(tmp_path):
    rows = [([PY, "-m", "pipeline.main"], 4.0, ["torch", "transformers.modeling_utils",
                                                "dagster", "zarr"]),
            ([PY, "-m", "pipeline.main"], 1.0, ["dagster"]),
            ([PY, "script.py"], 0.5, [])]
    for i, (argv, cpu, imported) in enumerate(rows):
        (tmp_path / f"{i}.json").write_text(json.dumps({"argv": argv, "cpu": cpu, "wall": 9.0,
                                                        "imported": imported}))
    assert by_import(tmp_path).splitlines()[2:] == [
        "| driver (pipeline.main) | torch+transformers+dagster | 1 | 4 | 4.0 |",
        "| driver (pipeline.main) | dagster | 1 | 1 | 1.0 |",
        "| other | none | 1 | 0 | 0.5 |"]


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
