"""A Dagster code location over a tiny world, for tests that go through a real instance and
separate processes (the browser test, the driver through the daemon, the Dask engine): the
tiny model from DIHAL_TINY_MODEL, the artifact root from DIHAL_ARTIFACTS, and the tiny configs
from DIHAL_PROFILE (a JSON profile, see tests.tiny.tiny_profile). `dagster dev -m
tests.tiny_location` serves it. Not a test module: it only defines `defs`.

DIHAL_TINY_HOLD_S: each computing step of a partitioned run (a sweep layer) keeps its device
that many seconds after it computed. The tests of runs that overlap (a backfill's partitions at
once, one per Dask worker) need steps that last, not steps that burn CPU: a tiny bridge trains
in a fraction of a second, and the same training made long enough by more epochs cost most of
those tests' CPU. With DIHAL_TINY_HOLD_RUNS=n and DIHAL_TINY_HOLD_DIR=<folder>, a step marks
its run in the folder once it has computed and keeps its device only until n runs have marked
themselves there (at most DIHAL_TINY_HOLD_S): the runs are then all under way at once, however
far apart the daemon started them, and none waits longer than that takes."""

import contextlib
from pathlib import Path
from time import monotonic, sleep

from dagster._core.storage.tags import ASSET_PARTITION_RANGE_START_TAG, PARTITION_NAME_TAG
from pydantic import PrivateAttr

from dihal.environment import env_float, env_int, env_text
from pipeline.definitions import build_definitions
from resources import BackboneResource, ComputeResource, JudgeResource, StorageResource


class HeldCompute(ComputeResource):
    """The compute resource, with a partitioned run's steps holding their device `hold_s`
    seconds longer (after computing: the artifacts are the same as without)."""

    hold_s: float = env_float("DIHAL_TINY_HOLD_S", 0.0, lo=0, hi=3600)
    # 0: hold hold_s; n: until n runs have computed a step (each marks itself in hold_dir)
    hold_runs: int = env_int("DIHAL_TINY_HOLD_RUNS", 0, lo=0, hi=64)
    hold_dir: str | None = env_text("DIHAL_TINY_HOLD_DIR")
    _partitioned: bool = PrivateAttr(default=False)
    _run_id: str = PrivateAttr(default="")

    def setup_for_execution(self, context) -> None:
        run = context.dagster_run
        # a run of one partition, or of a range of them (the driver's backfills: Dagster tags
        # those with the range's ends only)
        self._partitioned = run is not None and bool(
            {PARTITION_NAME_TAG, ASSET_PARTITION_RANGE_START_TAG} & set(run.tags))
        self._run_id = run.run_id if run is not None else ""
        if self.hold_runs and not self.hold_dir:
            raise ValueError("DIHAL_TINY_HOLD_RUNS needs DIHAL_TINY_HOLD_DIR: the folder "
                             "where the runs mark themselves")

    def lease(self, lock_dir, log=None):
        if not self._partitioned:
            return super().lease(lock_dir, log)
        meet = Path(self.hold_dir) / self._run_id if self.hold_runs else None
        return _held(super().lease(lock_dir, log), self.hold_s, meet, self.hold_runs)


@contextlib.contextmanager
def _held(lease, hold_s: float, mark: Path | None = None, runs: int = 0):
    """`lease`, kept `hold_s` seconds after its step computed; with `mark` (a run's file in
    the folder where the runs meet), only until `runs` runs have marked themselves there."""
    with lease as slot:
        yield slot
        deadline = monotonic() + hold_s
        if mark is None:
            sleep(hold_s)
            return
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.touch()
        while (len(list(mark.parent.iterdir())) < runs
               and monotonic() < deadline):
            sleep(0.2)


if (_model := env_text("DIHAL_TINY_MODEL")) is not None:
    defs = build_definitions(("llama",), n_layers={"llama": 4}, resources={
        "storage": StorageResource(),  # DIHAL_ARTIFACTS
        "backbones": BackboneResource(paths={"llama": _model}),
        "compute": HeldCompute(device="cpu", threads=1),
        "judge": JudgeResource(name=_model),
    })
