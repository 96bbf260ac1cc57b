"""dihal.heap: the garbage collector's settings in dihal's own processes, and none in a program
that imports dihal as a library. Each check runs in a fresh interpreter: the test processes
use the settings themselves (tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(script: str) -> None:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok"), out.stdout


def test_a_library_user_keeps_the_collector_and_the_entry_points_settings_apply():
    _run("""
        import gc, sys
        from dihal import heap

        default = gc.get_threshold()
        # not asked for: nothing changes
        heap.settle()
        with heap.importing():
            assert gc.isenabled()
            import json  # noqa: F401
        assert gc.get_threshold() == default and gc.get_freeze_count() == 0, "touched"

        heap.use_in_this_process()
        assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, *default[1:])
        with heap.importing():
            assert not gc.isenabled()  # paused while importing
            keep = [[i] for i in range(1000)]
        assert gc.isenabled() and gc.get_freeze_count() >= 1000  # then frozen
        frozen = gc.get_freeze_count()
        # a collector the program disabled stays disabled; its larger threshold is kept
        gc.disable()
        with heap.importing():
            pass
        assert not gc.isenabled()
        gc.enable()
        gc.set_threshold(50_000, 5, 5)
        heap.use_in_this_process()
        assert gc.get_threshold() == (50_000, 5, 5)

        # the model libraries: imported once, then frozen with them
        heap.MODEL_LIBRARIES = ("email.mime.text", "xml.dom.minidom")
        heap.import_model_libraries()
        assert {"email.mime.text", "xml.dom.minidom"} <= set(sys.modules)
        assert gc.get_freeze_count() > frozen
        print("ok")
        """)


def test_the_code_location_and_the_driver_use_the_settings():
    _run("""
        import gc
        import pipeline.definitions  # what code servers, run workers and the CLIs load
        from dihal import heap

        assert heap.in_use() and gc.get_threshold()[0] == heap.YOUNG_THRESHOLD
        assert gc.get_freeze_count() > 10_000  # Dagster and the definitions, frozen
        print("ok")
        """)
    _run("""
        import gc
        from dihal import heap
        from pipeline.main import main

        try:
            main(["--help"])
        except SystemExit:
            pass
        assert heap.in_use() and gc.get_threshold()[0] == heap.YOUNG_THRESHOLD
        print("ok")
        """)
