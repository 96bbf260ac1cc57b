"""The driver checks its arguments before any work, and a failed step ends with its cause."""

import json
import time

import dagster as dg
import pytest

import pipeline.main as driver


@pytest.mark.parametrize(("argv", "says"), [
    (["--layers", "0,99"], "--layers 0,99: 0, 99 out of range: smollm2 has 30 layers, "
                           "the candidate layers are 1..29"),
    (["--backbone", "llama", "--layers", "32"], "32 out of range: llama has 32 layers, the "
                                                "candidate layers are 1..31"),
    (["--layers", "1,x"], "give comma-separated integers (smollm2 has 30 layers"),
    (["--backbone", "gpt2"], "unknown backbone 'gpt2': known backbones are ['gemma3', 'llama', "
                             "'qwen', 'smollm2']"),
    (["--baselines", "sed,foo"], "unknown foo; the baselines are diffusion-lm, sed, ld4lg, codar"),
    (["--sweep-count", "0"], "--sweep-count 0: give at least 1"),
    (["--workers", "0"], "--workers 0: give at least 1"),
    (["--profile", "tpu"], "unknown preset 'tpu' (from --profile): give one of cpu, gpu, gpu-smollm2, study, tiny or a .json file"),
    (["--layers", "1,2,3,4,8,12", "--seed-layers", "5,16"],
     "--seed-layers 5,16: 5, 16 not swept (the swept layers are 1, 2, 3, 4, 8, 12): give seed "
     "layers among them, or add those to --layers"),
    (["--seed-layers", "1,x"], "--seed-layers 1,x: give comma-separated swept layers"),
    (["--seeds", "0"], "--seeds 0: give at least 1"),
    (["--seeds", "1", "--seed-layers", "4"], "--seed-layers 4: those layers would be trained "
                                             "under 1 seed; give --seeds 2 or more with it"),
])
def test_bad_arguments_fail_at_once_naming_the_valid_values(argv, says, calls, capsys):
    t0 = time.monotonic()
    with pytest.raises(SystemExit) as exit_:
        driver.main(argv)
    assert time.monotonic() - t0 < 0.5
    assert exit_.value.code == 2 and calls == []
    assert says in capsys.readouterr().err.strip().splitlines()[-1]


def _tiny_defs() -> dg.Definitions:
    class ShardChanged(RuntimeError):
        pass

    @dg.asset
    def wrapped():
        try:
            raise ShardChanged("shard s1 changed: re-materialise the corpus asset")
        except ShardChanged as exc:
            raise ValueError("a wrapper with no news") from exc

    @dg.asset
    def refused():
        try:
            raise ShardChanged("the inner reason")
        except ShardChanged as exc:
            raise dg.Failure(description="sequences_x: the stage's own words") from exc

    return dg.Definitions(assets=[wrapped, refused])


@pytest.mark.parametrize(("selection", "last"), [
    ("key:wrapped", "wrapped: ShardChanged: shard s1 changed: re-materialise the corpus asset"),
    ("key:refused", "refused: sequences_x: the stage's own words"),
])
def test_a_failed_step_ends_stderr_with_its_root_cause(selection, last, capsys):
    defs = _tiny_defs()
    res = dg.materialize(list(defs.assets), selection=dg.AssetSelection.from_string(selection),
                         instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    with pytest.raises(SystemExit) as exit_:
        driver._fail(selection, 1.0, driver.failure_causes(res.all_events))
    assert exit_.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == last
    assert err[-2].startswith(f"FAILED {selection}") and err[-2].endswith("; the cause:")
    assert not any("Error occurred while executing op" in line for line in err[-2:])


def test_the_driver_needs_a_persistent_instance(monkeypatch, capsys):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv("DIHAL_PROFILE", "cpu")  # main() sets them for the code location
    monkeypatch.setenv("DIHAL_WORKERS", "1")
    with pytest.raises(SystemExit) as exit_:
        driver.main(["--layers", "1,2,3", "--stop-after", "sweep"])
    assert exit_.value.code == 2
    assert "DAGSTER_HOME is not set" in capsys.readouterr().err


def test_an_eval_row_prints_as_one_short_line():
    """The driver prints each generation row's key numbers, never its per-sample lists."""
    from pipeline.main import eval_line

    row = {"model": "ridge (l=1)", "gen_ppl": 355.41, "gen_ppl_low": 275.5, "gen_ppl_high": 469.2,
           "diversity": 0.8705, "mean_length": 49.67, "ms_per_token": 3.505,
           "sample_nll": [363.8] * 64, "dihal_log_ppl_diff": 0.7858,
           "dihal_log_ppl_diff_low": 0.4141, "dihal_log_ppl_diff_high": 1.147,
           "dihal_verdict": "above"}
    line = eval_line(row)
    assert line == ("  ridge (l=1): Gen.PPL 355.4 [275.5, 469.2], diversity 0.871, mean length "
                    "49.7 words, 3.50 ms/token; DiHAL's log Gen.PPL minus this: +0.786 "
                    "[+0.414, +1.147] (above)")
    assert "363.8" not in line
    # DiHAL's own row has no paired standing; a row made before a metric existed prints n/a
    assert eval_line({"model": "DiHAL (l=1)", "gen_ppl": 779.8}).endswith(
        "Gen.PPL 779.8 [n/a, n/a], diversity n/a, mean length n/a words, n/a ms/token")


@pytest.mark.parametrize(("argv", "want"), [
    # the cpu profile: 2 seeds on 4 of the 29 swept layers, evenly spread, first and last included
    ([], {"seeds": 2, "seed_layers": [1, 10, 20, 29]}),
    (["--seeds", "3"], {"seeds": 3, "seed_layers": [1, 10, 20, 29]}),
    (["--seed-layers", "29,2"], {"seeds": 2, "seed_layers": [2, 29]}),
    (["--seed-layers", "all"], {"seeds": 2, "seed_layers": []}),  # every swept layer
    (["--seeds", "1"], {"seeds": 1, "seed_layers": []}),
    (["--layers", "2,5,9", "--stop-after", "sweep"], {"seeds": 2, "seed_layers": [2, 5, 9]}),
    (["--profile", "gpu"], {"seeds": 3, "seed_layers": []}),  # the gpu profile: every layer
    (["--profile", "gpu", "--seed-layers", "3,7"], {"seeds": 3, "seed_layers": [3, 7]}),
])
def test_the_driver_chooses_the_seed_layers(argv, want):
    args = driver.build_parser().parse_args(["--profile", "cpu", *argv])
    layers, _ = driver.plan(args)
    assert driver.seed_plan(args, layers) == want
    assert driver.seed_line(want, layers).startswith(
        "one training seed" if want["seeds"] == 1 else f"{want['seeds']} training seeds on layers")


def test_default_seed_layers_spread_over_the_sweep():
    from dihal.replace.stage import default_seed_layers

    assert default_seed_layers([29, 1, 2, 3, 4, 8, 12, 16, 21, 25]) == [1, 4, 16, 29]
    assert default_seed_layers([1, 2, 3, 4, 5]) == [1, 2, 4, 5]
    assert default_seed_layers([3, 9], 4) == [3, 9]
    assert default_seed_layers(list(range(1, 30)), 2) == [1, 29]
    with pytest.raises(ValueError):
        default_seed_layers([1, 2], 0)


def test_the_launcher_merges_the_drivers_seeds_into_the_sweeps_run_config(monkeypatch):
    import pipeline.launch as launch

    full = {"ops": {"bridge_sweep_smollm2": {"config": {"seeds": 1, "seed_layers": [], "lr": 1e-3}},
                    "regression_sweep_smollm2": {"config": {"x": 1}}},
            "resources": {"compute": {"config": {"workers": 1}}}}
    monkeypatch.setattr(launch, "full_run_config", lambda job: json.loads(json.dumps(full)))
    lau = launch.Launcher.__new__(launch.Launcher)
    lau.workers, lau.ops = 2, {"bridge_sweep_smollm2": {"config": {"seeds": 2, "seed_layers": [1, 4]}},
                               "eval_smollm2": {"config": {"n_samples": 8}}}
    got = lau.run_config(None)
    assert got["ops"]["bridge_sweep_smollm2"]["config"] == {"seeds": 2, "seed_layers": [1, 4],
                                                            "lr": 1e-3}
    assert "eval_smollm2" not in got["ops"]  # only the ops of the job
    assert got["ops"]["regression_sweep_smollm2"] == full["ops"]["regression_sweep_smollm2"]
    assert got["resources"]["compute"]["config"]["workers"] == 2
    assert lau.run_config(None, workers=1)["resources"]["compute"]["config"]["workers"] == 1


def test_a_backfill_is_recorded_only_after_its_runs_exist(monkeypatch):
    """The daemon's BackfillDaemon creates the runs of any REQUESTED backfill whose partitions
    have none yet: the driver, which creates its own runs, must never leave its backfill
    REQUESTED while it does (a default run once ran 7 of 10 sweep partitions twice). Here the
    instance records what it held after every call; a failure midway records FAILED."""
    from types import SimpleNamespace

    from dagster._core.execution import job_backfill
    from dagster._core.execution.backfill import BulkActionStatus

    import pipeline.launch as launch

    class Instance:
        def __init__(self):
            self.backfills, self.log = {}, []

        def add_backfill(self, record):
            self.backfills[record.backfill_id] = record
            self.log.append(("add", record.status))

        def update_backfill(self, record):
            self.backfills[record.backfill_id] = record
            self.log.append(("update", record.status))

        def submit_run(self, run_id, workspace):
            # what a BackfillDaemon iteration would find at this moment
            assert not [b for b in self.backfills.values()
                        if b.status == BulkActionStatus.REQUESTED]
            self.log.append(("submit", run_id))

    made = []

    def create(workspace, instance, location, job, pset, record, name, tags, config):
        if name == "fail":
            raise RuntimeError("the code server went away")
        made.append((name, config))
        return SimpleNamespace(run_id=f"run-{name}")

    monkeypatch.setattr(job_backfill, "create_backfill_run", create)
    monkeypatch.setattr(launch, "full_run_config", lambda job: {"ops": {}})
    pset = SimpleNamespace(job_name="sweep", get_remote_origin=lambda: None, name="sweep_set")
    lau = launch.Launcher.__new__(launch.Launcher)
    lau.workers, lau.ops, lau.tags, lau._runs, lau.workspace = 1, {}, {"dihal/driver": "d"}, 0, None
    lau.instance = Instance()
    lau._job = lambda name: SimpleNamespace(name=name)
    lau.repo = SimpleNamespace(get_partition_sets=lambda: [pset], handle=None)

    def params(partitions):
        lau.location = SimpleNamespace(get_partition_set_execution_params=lambda **kw: SimpleNamespace(
            partition_data=[SimpleNamespace(name=p, tags={}, run_config=None) for p in partitions]))

    params(["1", "2", "3"])
    backfill_id, runs = lau.backfill("sweep", ["1", "2", "3"])
    assert runs == {"1": "run-1", "2": "run-2", "3": "run-3"}
    assert lau.instance.log == [("submit", "run-1"), ("submit", "run-2"), ("submit", "run-3"),
                                ("add", BulkActionStatus.COMPLETED)]
    assert lau.instance.backfills[backfill_id].backfill_end_timestamp is not None
    # creating a run fails midway: the runs made stay, the backfill is recorded FAILED
    lau.instance = Instance()
    params(["4", "fail"])
    with pytest.raises(RuntimeError, match="code server"):
        lau.backfill("sweep", ["4", "fail"])
    assert lau.instance.log == [("submit", "run-4"), ("add", BulkActionStatus.FAILED)]


def test_a_lone_run_takes_every_core_and_a_backfill_divides_them_by_the_runs_at_once(monkeypatch):
    """The driver's `--workers` divides the CPU cores between the runs that can be at once: a
    backfill's partitions get min(workers, partitions) as their compute workers; a lone run
    (locate, the eval, the comparison: the driver submits nothing beside it) gets 1, every
    core, where it once had a 1/workers share while the other shares sat idle."""
    from types import SimpleNamespace

    from dagster._cli import job as cli_job
    from dagster._core.execution import job_backfill

    import pipeline.launch as launch

    made = []
    monkeypatch.setattr(launch, "full_run_config", lambda job: {
        "ops": {}, "resources": {"compute": {"config": {"workers": 1}}}})
    monkeypatch.setattr(cli_job, "_create_run", lambda **kw: (
        made.append((kw["remote_job"].name, kw["run_config"])) or SimpleNamespace(run_id="r")))

    def create(workspace, instance, location, job, pset, record, name, tags, config):
        made.append((name, config))
        return SimpleNamespace(run_id=f"run-{name}")

    monkeypatch.setattr(job_backfill, "create_backfill_run", create)
    lau = launch.Launcher.__new__(launch.Launcher)
    lau.workers, lau.ops, lau.tags, lau._runs, lau.workspace = 2, {}, {"dihal/driver": "d"}, 0, None
    lau.instance = SimpleNamespace(submit_run=lambda *a: None, add_backfill=lambda r: None)
    lau._job = lambda name: SimpleNamespace(name=name)
    pset = SimpleNamespace(job_name="sweep", get_remote_origin=lambda: None, name="sweep_set")
    lau.repo = SimpleNamespace(get_partition_sets=lambda: [pset], handle=None)
    lau.location = None

    def backfill(partitions):
        lau.location = SimpleNamespace(get_partition_set_execution_params=lambda **kw: SimpleNamespace(
            partition_data=[SimpleNamespace(name=p, tags={}, run_config=None) for p in partitions]))
        lau.backfill("sweep", partitions)

    def workers() -> list:
        got = [(name, c["resources"]["compute"]["config"]["workers"]) for name, c in made]
        made.clear()
        return got

    lau.launch("locate")
    assert workers() == [("locate", 1)]
    backfill(["1", "2", "3"])
    assert workers() == [("1", 2), ("2", 2), ("3", 2)]
    backfill(["7"])  # one partition: nothing beside it either
    assert workers() == [("7", 1)]
    lau.workers = 1
    backfill(["1", "2"])
    assert workers() == [("1", 1), ("2", 1)]


class _Runs:
    """An instance of runs {id: status} whose coordinator records each cancel; a run that is
    STARTING when canceled loses its first cancel (its worker is not up yet), as a code
    server's does."""

    def __init__(self, statuses: dict[str, str]):
        from types import SimpleNamespace

        self.status = {rid: dg.DagsterRunStatus[s] for rid, s in statuses.items()}
        self.canceled: list[str] = []
        self.run_coordinator = SimpleNamespace(cancel_run=self._cancel)

    def _cancel(self, rid: str) -> None:
        first = rid not in self.canceled
        self.canceled.append(rid)
        if self.status[rid] == dg.DagsterRunStatus.STARTING and first:
            self.status[rid] = dg.DagsterRunStatus.STARTED  # lost: it goes on starting
        else:
            self.status[rid] = dg.DagsterRunStatus.CANCELED

    def get_run_by_id(self, rid: str):
        from types import SimpleNamespace

        status = self.status[rid]
        return SimpleNamespace(run_id=rid, status=status, is_finished=status in (
            dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.SUCCESS))


def test_an_interrupt_cancels_the_queued_runs_before_the_running_ones():
    """Canceling a running run frees its queue slot; were the queued runs canceled after it,
    the daemon could launch one of them into that slot first (a sweep interrupted on a loaded
    machine left layer 26 training, holding the device, after the driver had exited)."""
    from pipeline.launch import cancel_in_order

    runs = _Runs({"a": "STARTED", "b": "QUEUED", "c": "NOT_STARTED", "d": "QUEUED"})
    assert cancel_in_order(runs, ["a", "b", "c", "d"]) == ["b", "c", "d", "a"]
    assert all(runs.status[r] == dg.DagsterRunStatus.CANCELED for r in "abcd")


def test_a_run_caught_starting_is_canceled_again_while_the_driver_waits():
    import pipeline.launch as launch

    runs = _Runs({"a": "STARTED", "b": "STARTING"})
    lau = launch.Launcher.__new__(launch.Launcher)
    lau.instance = runs
    lau.cancel(["a", "b"], wait_s=5.0, again_s=0.0)
    assert runs.canceled == ["a", "b", "b"]  # b's first cancel was lost, the second stopped it
    assert all(runs.status[r] == dg.DagsterRunStatus.CANCELED for r in "ab")
