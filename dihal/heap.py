"""Python's garbage collector in dihal's own processes: the driver, its daemon, every process
that loads the code location (code servers, run workers, the dagster and dg commands), and the
test processes.

torch, transformers' model code and Dagster leave about 450,000 objects the collector tracks,
alive as long as the process. At its default settings the collector examines all of them again
at each full collection, and it makes one at every quarter of growth of that long-lived heap,
while they are imported and after: 12 s of the 66 s of CPU of one driver story's processes,
1.7 s of each run worker's 8.7 s (`python benchmarks/process_cpu.py summary`,
benchmarks/RESULTS.md). So, in a process that asks for it (`use_in_this_process`, called by the
entry points):
- a young collection every 10,000 allocations instead of 700 (so a full one far less often);
- the model libraries are imported with the collector paused (`import_model_libraries`), and
  what is alive once they are, or once the code location is loaded (`settle`), is left out of
  later collections (`gc.freeze`). Frozen objects are still freed when nothing refers to them;
  only a reference cycle among them is never collected, and what is alive at those two moments
  (modules, classes, the code location's definitions) lives as long as the process anyway.

A program that imports dihal as a library keeps the collector as it had it: nothing here acts
unless `use_in_this_process` was called in the process.
"""

from __future__ import annotations

import contextlib
import gc
import sys

YOUNG_THRESHOLD = 10_000
# what import_model_libraries imports: the bulk of transformers' model code (every model's
# module imports modeling_utils; the rest is small) and the Auto classes the loaders use
MODEL_LIBRARIES = ("torch", "transformers.modeling_utils", "transformers.models.auto")

_used = False


def use_in_this_process() -> None:
    """Fewer young collections from now on, and settle points that freeze (above). Idempotent;
    a young threshold already above YOUNG_THRESHOLD (set by the program) is kept."""
    global _used
    _used = True
    young, *older = gc.get_threshold()
    gc.set_threshold(max(young, YOUNG_THRESHOLD), *older)


def in_use() -> bool:
    return _used


def settle() -> None:
    """Leave what is alive now out of later collections (where this process uses the policy):
    called where what is alive lives as long as the process."""
    if _used:
        gc.freeze()


@contextlib.contextmanager
def importing():
    """Import within the block with the collector paused, then settle (where this process uses
    the policy; else the block runs as it is)."""
    if not _used:
        yield
        return
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        settle()


def import_model_libraries() -> None:
    """Import torch and transformers' model code once, within `importing()`: called before a
    model is loaded."""
    if all(name in sys.modules for name in MODEL_LIBRARIES):
        return
    import importlib

    with importing():
        for name in MODEL_LIBRARIES:
            importlib.import_module(name)
