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
def test_bad_arguments_fail_at_once_naming_the_valid_values(argv, says, calls, capsys,
                                                            monkeypatch):
    """Refused before any work: the pre-flight (which reads the backbone, the corpus, the
    host's memory and disk) never runs, and the instance is never opened."""
    monkeypatch.setattr(driver, "_preflight", lambda *a, **k: calls.append("preflight"))
    with pytest.raises(SystemExit) as exit_:
        driver.main(argv)
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


class _Node:
    """A remote asset node as the launcher reads it: its jobs, partitions and policy."""

    def __init__(self, jobs, keys, per_run):
        self.job_names, self.is_materializable = jobs, True
        self.partitions_def = dg.StaticPartitionsDefinition(keys)
        self.backfill_policy = dg.BackfillPolicy.multi_run(per_run) if per_run else None


def _launcher(monkeypatch, workers: int, per_run: int, sent: list):
    """A Launcher over a fake code location: sweep's two assets over layers 1..9, cut `per_run`
    a run; the GraphQL requests it sends are recorded in `sent`."""
    from types import SimpleNamespace

    import pipeline.launch as launch

    monkeypatch.setattr(launch, "full_run_config", lambda job: {
        "ops": {}, "resources": {"compute": {"config": {"workers": 1}}}})

    def graphql(process, query, variables):
        sent.append((query, variables))
        if "launchRun" in query:
            return {"launchRun": {"__typename": "LaunchRunSuccess", "run": {"runId": "r"}}}
        if "cancelPartitionBackfill" in query:
            return {"cancelPartitionBackfill": {"__typename": "CancelBackfillSuccess"}}
        if variables["params"]["partitionNames"] == ["refused"]:
            return {"launchPartitionBackfill": {"__typename": "PythonError",
                                                "message": "no such partition"}}
        return {"launchPartitionBackfill": {"__typename": "LaunchBackfillSuccess",
                                            "backfillId": f"bf{len(sent)}"}}

    monkeypatch.setattr(launch, "graphql", graphql)
    layers = [str(i) for i in range(1, 10)]
    nodes = {dg.AssetKey("bridge_sweep_b"): _Node(["sweep"], layers, per_run),
             dg.AssetKey("regression_sweep_b"): _Node(["sweep"], layers, per_run),
             dg.AssetKey("bridge_b"): _Node(["bridge_eval"], layers, None)}
    lau = launch.Launcher.__new__(launch.Launcher)
    lau.workers, lau.ops, lau.tags = workers, {}, {"dihal/driver": "d"}
    lau.workspace = lau.process = None
    slots = {}
    lau.instance = SimpleNamespace(event_log_storage=SimpleNamespace(
        set_concurrency_slots=lambda pool, n: slots.__setitem__(pool, n)))
    lau.slots = slots
    lau._job = lambda name: SimpleNamespace(name=name)
    lau.location = SimpleNamespace(name="dihal")
    lau.repo = SimpleNamespace(name="__repository__", asset_graph=SimpleNamespace(
        toposorted_asset_keys=list(nodes), get=nodes.__getitem__))
    return lau


def test_the_driver_submits_requested_asset_backfills_and_the_daemon_makes_the_runs(
        monkeypatch):
    """The driver creates no run of a partitioned job itself: it submits asset backfills of the
    job's assets (as the web UI's "Materialize selected" does), one for each of --workers runs
    of consecutive partitions in the partitions' order, whose sizes differ by one at most, with
    the job's full run config and its tags, and sets the partitions' pool to its --workers;
    the daemon makes each backfill's run."""
    from assets._stage import POOL

    sent: list = []
    lau = _launcher(monkeypatch, workers=2, per_run=5, sent=sent)
    assert lau.backfill("sweep", ["7", "1", "2", "3", "4", "5", "6"]) == ["bf1", "bf2"]
    assert all("launchPartitionBackfill" in query for query, _ in sent)
    params = [variables["params"] for _, variables in sent]
    assert [p["partitionNames"] for p in params] == [["1", "2", "3", "4"], ["5", "6", "7"]]
    assert [p["title"] for p in params] == ["sweep 1-4 (1 of 2)", "sweep 5-7 (2 of 2)"]
    for p in params:
        assert p["assetSelection"] == [{"path": ["bridge_sweep_b"]},
                                       {"path": ["regression_sweep_b"]}]
        assert {"key": "dihal/driver", "value": "d"} in p["tags"]
        assert p["runConfigData"]["resources"]["compute"]["config"]["workers"] == 2
    assert lau.slots == {POOL: 2}
    # more workers than partitions: one backfill a partition
    sent.clear()
    lau.workers = 3
    assert lau.backfill("sweep", ["2", "9"]) == ["bf1", "bf2"]
    assert [v["params"]["partitionNames"] for _, v in sent] == [["2"], ["9"]]


def test_a_refused_backfill_cancels_those_submitted_before_it(monkeypatch):
    """Where Dagster refuses one of the driver's backfills, the ones already submitted are
    canceled (no half sweep runs behind the error), and the error names the partitions."""
    sent: list = []
    lau = _launcher(monkeypatch, workers=2, per_run=5, sent=sent)
    with pytest.raises(RuntimeError, match="over refused was refused: no such partition"):
        lau.backfill("sweep", ["1", "refused"])
    assert [("cancelPartitionBackfill" in q, v) for q, v in sent] == [
        (False, sent[0][1]), (False, sent[1][1]), (True, {"id": "bf1"})]


@pytest.mark.parametrize(("keys", "n", "chunks"), [
    (["1", "2", "3"], 3, [["1"], ["2"], ["3"]]), (["1", "2", "3"], 1, [["1", "2", "3"]]),
    ([str(i) for i in range(1, 30)], 2, [[str(i) for i in range(1, 16)],
                                         [str(i) for i in range(16, 30)]]),
    (["1", "2", "3", "4", "5"], 3, [["1", "2"], ["3", "4"], ["5"]]),
    (["1"], 1, [["1"]])])
def test_even_chunks_are_consecutive_and_differ_by_one_at_most(keys, n, chunks):
    from pipeline.launch import chunk_label, even_chunks

    assert even_chunks(keys, n) == chunks
    assert [k for c in chunks for k in c] == keys
    assert chunk_label(["4"]) == "4" and chunk_label(["1", "2", "3"]) == "1-3"


@pytest.mark.parametrize(("partitions", "per_run", "runs"), [
    (["1", "2", "3"], 5, 1), (["1", "2", "3", "4", "5", "6", "7"], 3, 3),
    (["1", "2", "3", "5", "9"], 5, 3), (["2", "4", "6"], 1, 3), (["1", "2", "3"], 1, 3)])
def test_the_driver_counts_the_runs_as_dagster_cuts_them(partitions, per_run, runs):
    """planned_runs (which sizes each run's share of the cores) agrees with Dagster's own cut
    of a backfill by a multi-run policy: contiguous ranges, each cut into runs of at most
    max_partitions_per_run."""
    from types import SimpleNamespace

    from dagster._core.definitions.automation_tick_evaluation_context import (
        _build_run_requests_with_backfill_policy,
    )

    import pipeline.launch as launch

    layers = [str(i) for i in range(1, 10)]
    node = _Node(["sweep"], layers, per_run)
    lau = launch.Launcher.__new__(launch.Launcher)
    lau.repo = SimpleNamespace(asset_graph=SimpleNamespace(get=lambda key: node))
    dagster_cut = _build_run_requests_with_backfill_policy(
        [dg.AssetKey("a")], [], node.backfill_policy, frozenset(partitions),
        node.partitions_def, {}, None)
    assert lau.planned_runs(dg.AssetKey("a"), partitions) == len(dagster_cut) == runs


def test_a_lone_run_takes_every_core_and_a_backfill_divides_them_by_the_runs_at_once(monkeypatch):
    """The driver's `--workers` divides the CPU cores between the runs that can be at once: a
    backfill's runs get min(workers, its runs) as their compute workers; a lone run
    (locate, the eval, the comparison: the driver submits nothing beside it) gets 1, every
    core, where it once had a 1/workers share while the other shares sat idle."""
    sent: list = []
    lau = _launcher(monkeypatch, workers=2, per_run=2, sent=sent)

    def workers() -> list:
        got = [v["params"]["runConfigData"]["resources"]["compute"]["config"]["workers"]
               for _, v in sent]
        sent.clear()
        return got

    assert lau.launch("locate") == "r"
    ((query, variables),) = sent  # GraphQL launchRun, as the web UI's launchpad submits a run
    assert "launchRun" in query
    assert variables["params"]["selector"] == {
        "repositoryLocationName": "dihal", "repositoryName": "__repository__", "jobName": "locate"}
    tags = {t["key"]: t["value"] for t in variables["params"]["executionMetadata"]["tags"]}
    assert tags == {"dihal/driver": "d"}  # the pool, not a tag, limits the runs at once
    assert workers() == [1]
    lau.backfill("sweep", ["1", "2", "3"])  # two backfills, two runs: 1-2 and 3
    assert workers() == [2, 2]
    lau.backfill("sweep", ["7"])  # one run: nothing beside it either
    assert workers() == [1]
    lau.workers = 1
    lau.backfill("sweep", ["1", "2"])  # one run of both
    assert workers() == [1]
    lau.backfill("sweep", ["1", "5", "9"])  # one backfill; three runs, one at a time
    assert workers() == [1]


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


def test_a_run_that_a_cancel_does_not_stop_has_its_worker_ended_before_it_is_marked_canceled():
    """A run still CANCELING when the driver's wait ends (its worker ignores the interrupt, or
    the cancel was lost) is stopped by force: the worker process first, so that its locks are
    free, and only then the run marked canceled. A run that ended by itself meanwhile keeps its
    own status."""
    import signal
    import subprocess
    import sys

    from dagster._core.events import EngineEventData

    from pipeline.launch import force_canceled
    from pipeline.run_launcher import STARTED, process_alive

    stubborn = subprocess.Popen([sys.executable, "-c", (
        "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(300)")])
    with dg.DagsterInstance.ephemeral() as instance:
        run = instance.add_run(dg.DagsterRun(job_name="sweep", run_id="c" * 36,
                                             status=dg.DagsterRunStatus.CANCELING))
        instance.report_engine_event(
            f"{STARTED}{stubborn.pid}).", run, EngineEventData(
                metadata={"pid": dg.MetadataValue.int(stubborn.pid)}))
        try:
            why = force_canceled(instance, run, 60.0)
            assert stubborn.wait(timeout=30) in (-signal.SIGTERM, -signal.SIGKILL)
        finally:
            stubborn.kill()
        assert why == (f"it did not stop within 60 s of its cancel; its worker (pid "
                       f"{stubborn.pid}) was ended")
        assert not process_alive(stubborn.pid)
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.CANCELED
        # one that ended by itself just before is not marked again
        done = instance.add_run(dg.DagsterRun(job_name="sweep", run_id="d" * 36,
                                              status=dg.DagsterRunStatus.SUCCESS))
        assert force_canceled(instance, done, 60.0).endswith(
            "its worker had not started, and the run ended SUCCESS")
        assert instance.get_run_by_id(done.run_id).status == dg.DagsterRunStatus.SUCCESS


@pytest.mark.parametrize("tags, ended_ago, want", [
    ({}, 5.0, False),  # failed: whether it is retried is not written yet
    ({}, 500.0, None),  # never written
    ({"dagster/will_retry": "false"}, 0.0, None),  # failed by a step, or its retry used up
    ({"dagster/will_retry": "true"}, 5.0, False),  # announced, not made yet: wait
    ({"dagster/will_retry": "true", "dagster/auto_retry_run_id": "r2" * 18}, 5.0, "r2" * 18),
    ({"dagster/will_retry": "true"}, 500.0, None),  # announced, never made: given up
])
def test_the_driver_follows_the_retry_dagster_makes_of_a_failed_run(tags, ended_ago, want):
    import time
    from types import SimpleNamespace

    from pipeline.launch import RETRY_WAIT_S, Followed, Launcher

    run = dg.DagsterRun(job_name="sweep_b", run_id="r1" * 18, tags=tags,
                        status=dg.DagsterRunStatus.FAILURE)
    f = Followed(run.run_id, "1-3", dg.DagsterRunStatus.FAILURE, ended=time.time() - ended_ago,
                 causes=["the run worker (pid 7) is gone without ending the run"])
    said: list[str] = []
    launcher = Launcher.__new__(Launcher)
    launcher.instance = SimpleNamespace(run_retries_enabled=True)
    assert launcher._retry_of(run, f, said.append) == want
    assert said == ([f"  1-3: run {'r1' * 4} failed (the run worker (pid 7) is gone without "
                     f"ending the run); Dagster retries it as run {'r2' * 4}"]
                    if isinstance(want, str) else [])
    given_up = ended_ago > RETRY_WAIT_S and tags
    assert (f"made none in {RETRY_WAIT_S:.0f} s" in f.causes[-1]) == bool(given_up)
    f.retried_as = want if isinstance(want, str) else None
    assert f.failed == (not isinstance(want, str))  # a retried run is not the chain's failure
    # without run_retries in the instance, a failed run is never waited on
    launcher.instance = SimpleNamespace(run_retries_enabled=False)
    assert launcher._retry_of(run, f, said.append) is None


def test_the_backfill_statuses_the_driver_waits_on_are_dagsters():
    """The driver reads a backfill's status by name (no private import): each name it waits on
    is one of Dagster's, and its finished statuses are not among them."""
    from dagster._core.execution.backfill import BulkActionStatus

    import pipeline.launch as launch

    names = {s.value for s in BulkActionStatus}
    assert set(launch.BACKFILL_GOING) <= names
    assert not {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED",
                "CANCELED"} & set(launch.BACKFILL_GOING)


def test_the_launcher_names_a_code_location_that_failed_to_load_and_an_unknown_job():
    from types import SimpleNamespace

    import pipeline.launch as launch
    import pipeline.location as location

    broken = SimpleNamespace(code_location_names=["dihal"],
                             has_code_location_error=lambda name: True,
                             get_code_location_error=lambda name: "ImportError: no module x")
    with pytest.raises(RuntimeError, match="code location dihal failed to load: ImportError"):
        location.only_location(broken)
    lau = launch.Launcher.__new__(launch.Launcher)
    lau.location = SimpleNamespace(name="dihal")
    lau.repo = SimpleNamespace(get_all_jobs=lambda: [SimpleNamespace(name="locate_tiny")])
    assert lau._job("locate_tiny").name == "locate_tiny"
    with pytest.raises(RuntimeError, match="has no job 'sweep_tiny'; its jobs: locate_tiny"):
        lau._job("sweep_tiny")


def test_the_drivers_graphql_answers_data_or_names_the_refusal_and_builds_its_schema_once(
        tmp_path, monkeypatch):
    """The driver's GraphQL requests (launchRun, launchPartitionBackfill) go to Dagster's own
    schema in process, built once for every request: a query it answers gives its data, one
    it refuses raises naming Dagster's message."""
    import pipeline.launch as launch

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    monkeypatch.setenv("DIHAL_TINY_MODEL", str(tmp_path / "unused"))
    launch._schema.cache_clear()
    from pipeline.daemon import location_name

    with dg.DagsterInstance.local_temp(str(tmp_path)) as instance, launch.launcher(
            instance, "tests.tiny_location") as lau:
        data = launch.graphql(lau.process, "{ repositoriesOrError { ... on RepositoryConnection "
                              "{ nodes { location { name } } } } }", {})
        assert [n["location"]["name"] for n in data["repositoriesOrError"]["nodes"]] == [
            location_name("tests.tiny_location")]
        with pytest.raises(RuntimeError, match="Dagster's GraphQL refused the request: Cannot "
                                               "query field 'noSuchField'"):
            launch.graphql(lau.process, "{ noSuchField }", {})
    assert launch._schema.cache_info().misses == 1


def test_a_location_whose_defaults_were_read_under_another_environment_is_not_launched_from(
        monkeypatch):
    """The driver loads its code location in process: its config defaults (the resources', the
    stages' preset), read when its modules were imported, are what its runs are submitted with.
    Where the environment changed since (a profile, workers or device map set after the import),
    the launcher refuses before it loads anything, naming each default and both values."""
    import assets.configs
    import pipeline.launch as launch
    import pipeline.location as location
    import resources
    from dihal.run.profiles import resolve_preset

    assert location.stale_defaults() == []
    workers = resources.IMPORTED_DEFAULTS["compute"]["workers"]
    other = "tiny" if resources.IMPORTED_DEFAULTS["preset"]["name"] != "tiny" else "cpu"
    monkeypatch.setenv("DIHAL_WORKERS", str(workers + 2))
    monkeypatch.setenv("DIHAL_DEVICE_MAP", "auto")
    monkeypatch.setenv("DIHAL_PROFILE", other)
    stale = location.stale_defaults()
    assert stale[:3] == [
        f"compute.workers: {workers} when it was imported, {workers + 2} now",
        f"backbones.device_map: {resources.IMPORTED_DEFAULTS['backbones']['device_map']!r} "
        "when it was imported, 'auto' now",
        f"preset.name: {resources.IMPORTED_DEFAULTS['preset']['name']!r} when it was imported, "
        f"{other!r} now"], stale
    assert stale[3:] == [f"the stages' preset: {assets.configs.PRESET.label!r} "
                         f"when it was imported, {resolve_preset(other).label!r} now"]
    with pytest.raises(RuntimeError, match="read under another environment than this driver's"
                                           ".*compute.workers.*pipeline.main.set_location_env"):
        with launch.launcher(None, "tests.tiny_location"):
            pass
    monkeypatch.undo()
    assert location.stale_defaults() == []  # the environment as it was: nothing stale


def test_the_drivers_daemon_looks_for_backfill_work_every_few_seconds(monkeypatch):
    """The daemon a driver starts is Dagster's, run by pipeline.dagster_daemon with the backfill
    daemon's interval set (Dagster's 30 s otherwise delays each backfill at both ends); a
    Dagster without the constant is said, not failed; a bad interval is refused by name."""
    import subprocess
    import sys
    from pathlib import Path

    from dagster._daemon import backfill, controller

    import pipeline.dagster_daemon as dd
    from dihal.errors import SettingError
    from pipeline.daemon import daemon_command

    assert daemon_command(Path("/h/ws.yaml")) == [
        sys.executable, "-m", "pipeline.dagster_daemon", "run", "-w", "/h/ws.yaml"]
    # the loop reads the constant each time it sleeps, so setting it before the CLI starts works
    loop = backfill.execute_backfill_iteration_loop.__code__
    assert "DEFAULT_DAEMON_INTERVAL_SECONDS" in loop.co_names
    monkeypatch.setattr(controller, "DEFAULT_DAEMON_INTERVAL_SECONDS", 30)
    monkeypatch.delenv(dd.BACKFILL_INTERVAL_ENV, raising=False)
    assert dd.set_backfill_interval(dd.backfill_interval_s())
    assert controller.DEFAULT_DAEMON_INTERVAL_SECONDS == dd.BACKFILL_INTERVAL_S == 5
    monkeypatch.setenv(dd.BACKFILL_INTERVAL_ENV, "12")
    assert dd.backfill_interval_s() == 12
    for bad in ("0", "31", "2.5", "x"):
        monkeypatch.setenv(dd.BACKFILL_INTERVAL_ENV, bad)
        with pytest.raises(SettingError, match=f"DIHAL_BACKFILL_INTERVAL_S='{bad}' in the "
                                               "environment"):
            dd.backfill_interval_s()
        with pytest.raises(SystemExit):  # the driver refuses it before any work
            driver.build_parser()
    monkeypatch.delattr(controller, "DEFAULT_DAEMON_INTERVAL_SECONDS")
    assert not dd.set_backfill_interval(5)
    # the command line is Dagster's daemon's
    monkeypatch.delenv(dd.BACKFILL_INTERVAL_ENV)
    out = subprocess.run([sys.executable, "-m", "pipeline.dagster_daemon", "run", "--help"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "Run any daemons configured on the DagsterInstance" in (
        out.stdout), out.stderr[-2000:]


def test_the_drivers_daemon_keeps_a_backfill_open_until_a_failed_runs_retry_is_decided(
        monkeypatch):
    """Dagster stores a run's FAILURE a moment before its retry decision (`dagster/will_retry`);
    a backfill iteration in between completed the backfill, and Dagster then refused the retry
    (seen under load in the killed-worker story). The drivers' daemon waits for the decision,
    for the retry it announces, and for that retry's end; not for a decision that never comes,
    nor where retries are off."""
    import logging

    from dagster._core.execution import asset_backfill
    from dagster._core.storage.tags import AUTO_RETRY_RUN_ID_TAG, BACKFILL_ID_TAG, WILL_RETRY_TAG

    import pipeline.dagster_daemon as dd

    log = logging.getLogger("test")
    dagsters_own = asset_backfill.backfill_runs_are_complete

    def instance_with(retries: bool, *runs: tuple[str, dg.DagsterRunStatus, dict]):
        instance = dg.DagsterInstance.ephemeral(settings={"run_retries": {"enabled": retries}})
        for run_id, status, tags in runs:
            instance.add_run(dg.DagsterRun(job_name="sweep", run_id=run_id, status=status,
                                           tags={BACKFILL_ID_TAG: "bf", **tags}))
        return instance

    failed = dg.DagsterRunStatus.FAILURE
    now = time.time()
    undecided = instance_with(True, ("r1", failed, {}))
    assert dagsters_own("bf", undecided, log)  # Dagster's own check completes it: the race
    assert dd.retry_undecided(undecided, "bf", now) == ["r1"]
    # a decision that never comes holds the backfill for DECISION_WAIT_S after the run's end
    assert dd.retry_undecided(undecided, "bf", now + dd.DECISION_WAIT_S + 1) == []
    assert dd.retry_undecided(instance_with(False, ("r1", failed, {})), "bf", now) == []
    assert dd.retry_undecided(instance_with(True, ("r1", failed, {WILL_RETRY_TAG: "false"})),
                              "bf", now) == []
    announced = instance_with(True, ("r1", failed, {WILL_RETRY_TAG: "true"}))
    assert dd.retry_undecided(announced, "bf", now) == ["r1"]
    made = instance_with(True, ("r1", failed, {WILL_RETRY_TAG: "true", AUTO_RETRY_RUN_ID_TAG: "r2"}),
                         ("r2", dg.DagsterRunStatus.NOT_STARTED, {}))
    assert dd.retry_undecided(made, "bf", now) == ["r2"]
    ended = instance_with(True, ("r1", failed, {WILL_RETRY_TAG: "true", AUTO_RETRY_RUN_ID_TAG: "r2"}),
                          ("r2", dg.DagsterRunStatus.SUCCESS, {}))
    assert dd.retry_undecided(ended, "bf", now) == []
    # the daemon's entry point puts the wait into Dagster's completion check
    monkeypatch.setattr(asset_backfill, "backfill_runs_are_complete", dagsters_own)
    assert dd.wait_for_retry_decisions()
    assert not asset_backfill.backfill_runs_are_complete("bf", undecided, log)
    assert asset_backfill.backfill_runs_are_complete("bf", ended, log)
    monkeypatch.delattr(asset_backfill, "backfill_runs_are_complete")
    assert not dd.wait_for_retry_decisions()
