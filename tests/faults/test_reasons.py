"""Reasons reach the user: a failing check's reason and a fallback's warning appear in the
Dagster event log and in the driver's output; a fix command in an error names the preset to
remake the upstream under (or the driver command that launched the run)."""

import dagster as dg

from assets._stage import StageRun
from assets.checks import _result
from pipeline.launch import Launcher
from resources import ComputeResource, StorageResource


def _follow(instance, run_id) -> list[str]:
    """What the driver says while following a finished run."""
    said: list[str] = []
    launcher = Launcher.__new__(Launcher)  # the follower alone: no code location needed
    launcher.instance = instance
    launcher.follow({"thing": run_id}, said.append)
    return said


def _fallback(folder):
    """The training loop's fallback from a damaged newest checkpoint (dihal.checkpoint:
    it warns naming the file)."""
    import torch

    from dihal.checkpoint import checkpoint_name, load_latest_good, save_checkpoint

    model = torch.nn.Linear(2, 2)
    for step in (2, 4):
        save_checkpoint(folder, step, model, None, {}, keep=2)
    newest = folder / checkpoint_name(4)
    for f in newest.iterdir():
        f.write_bytes(b"garbage")
    assert load_latest_good(folder, model, None)[0] == folder / checkpoint_name(2)
    return newest


def test_a_failing_checks_reason_and_a_fallback_reach_the_event_log_and_the_driver(tmp_path):
    made = {}

    @dg.asset(required_resource_keys={"storage", "compute"})
    def thing(context):
        made["newest"] = StageRun(context, None).computing(lambda: _fallback(tmp_path / "ck"))
        return 1

    @dg.asset_check(asset=thing, blocking=False)
    def losses_fell():
        return _result(lambda: (False, {"layers": 3, "not_learned": "layer_002"}))

    instance = dg.DagsterInstance.ephemeral()
    res = dg.materialize([thing, losses_fell], instance=instance, resources={
        "storage": StorageResource(root=str(tmp_path)),
        "compute": ComputeResource(device="cpu", threads=1)})
    assert res.success
    # the event log: the fallback as a warning of the step, the check's reason as its description
    fallback = f"RuntimeWarning: checkpoint {made['newest']}"
    logs = instance.all_logs(res.run_id)
    assert any(e.level == 30 and fallback in (e.user_message or "") and "falling back" in
               e.user_message for e in logs), [e.user_message for e in logs]
    (check,) = [e.dagster_event.event_specific_data for e in logs if e.dagster_event
                and e.dagster_event.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert not check.passed and check.description == "failed: layers 3, not_learned layer_002"
    # the driver's output
    said = _follow(instance, res.run_id)
    assert any(fallback in line for line in said), said
    assert "  thing: check losses_fell of thing failed: layers 3, not_learned layer_002" in said


def test_a_fix_command_carries_the_runs_preset_or_its_driver_command(world):
    import shutil

    shutil.rmtree(world.path("hidden_states"))
    # an in-process run with its own geometry config: the fix remakes the upstream under the
    # run's preset (tests/faults/test_preset_mix.py), not with this run's geometry config
    geometry = {"n_tokens": 60, "n_anchors": 24, "k_neighbors": 6, "n_pairs": 100}
    res, err = world.materialize(["geometry_llama"], geometry_llama={"config": geometry})
    assert not res.success
    assert "Run: dagster asset materialize --select '*hidden_states_llama'" in err[0]
    assert "This run's preset is 'cpu'" in err[0] and "--config-json" not in err[0], err[0]
    # a run the driver launched: the fix is the driver's own command (it carries the config)
    command = "python -m pipeline.main --backbone llama --profile /tmp/mine.json"
    res = dg.materialize(
        list(world.defs.assets), selection=["geometry_llama"], resources=world.defs.resources,
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False,
        tags={"dihal/command": command, "dihal/profile": "/tmp/mine.json"})
    (fail,) = [e for e in res.all_events if e.event_type_value == "STEP_FAILURE"]
    text = fail.step_failure_data.user_failure_data.description
    assert text.endswith(f"This run was launched by `{command}` (profile /tmp/mine.json): run "
                         "that again to repair it under the same run config (the command above "
                         "uses the code location's defaults).]"), text
