"""A Dagster code location over a tiny world, for tests that go through a real instance and
separate processes (the browser test, the driver through the daemon, the Dask engine): the
tiny model from DIHAL_TINY_MODEL, the artifact root from DIHAL_ARTIFACTS, and the tiny configs
from DIHAL_PROFILE (a JSON profile, see tests.tiny.tiny_profile). `dagster dev -m
tests.tiny_location` serves it. Not a test module: it only defines `defs`.

DIHAL_TINY_HOLD_S: each computing step of a partitioned run (a sweep layer) keeps its device
that many seconds after it computed. The tests of runs that overlap (a backfill's partitions at
once, one per Dask worker) need steps that last, not steps that burn CPU: a tiny bridge trains
in a fraction of a second, and the same training made long enough by more epochs cost most of
those tests' CPU."""

import contextlib
import time

from pydantic import PrivateAttr

from dihal.environment import env_float, env_text
from pipeline.definitions import build_definitions
from resources import BackboneResource, ComputeResource, JudgeResource, StorageResource


class HeldCompute(ComputeResource):
    """The compute resource, with a partitioned run's steps holding their device `hold_s`
    seconds longer (after computing: the artifacts are the same as without)."""

    hold_s: float = env_float("DIHAL_TINY_HOLD_S", 0.0, lo=0, hi=3600)
    _partitioned: bool = PrivateAttr(default=False)

    def setup_for_execution(self, context) -> None:
        run = context.dagster_run
        self._partitioned = run is not None and "dagster/partition" in run.tags

    def lease(self, lock_dir, log=None):
        return _held(super().lease(lock_dir, log), self.hold_s if self._partitioned else 0.0)


@contextlib.contextmanager
def _held(lease, hold_s: float):
    with lease as slot:
        yield slot
        time.sleep(hold_s)


if (_model := env_text("DIHAL_TINY_MODEL")) is not None:
    defs = build_definitions(("llama",), n_layers={"llama": 4}, resources={
        "storage": StorageResource(),  # DIHAL_ARTIFACTS
        "backbones": BackboneResource(paths={"llama": _model}),
        "compute": HeldCompute(device="cpu", threads=1),
        "judge": JudgeResource(name=_model),
    })
