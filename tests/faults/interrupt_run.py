"""Run by test_interrupt.py in a child process: the driver's materialisation of one sweep
partition (the default protocol: long enough to be interrupted) over a fault-suite world."""

import sys
from pathlib import Path

import dagster as dg

from pipeline.main import _materialize
from tests.faults.conftest import make_world

if __name__ == "__main__":
    folder, model, artifacts = (Path(a) for a in sys.argv[1:4])
    world = make_world(folder, model, artifacts)
    _materialize(world.defs, "key:bridge_sweep_llama", dg.DagsterInstance.get(), partition="1")
