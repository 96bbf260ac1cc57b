"""Every door into the pipeline is one product: the driver beside `dg dev` (one code location
name, one instance, one daemon), under the preset chosen once for the project."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from dihal import registry
from tests.tiny import make_docs, tiny_profile, write_shard

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_the_driver_names_the_code_location_as_dg_dev_does():
    """The launcher's location and the daemon's workspace file carry pyproject's
    [tool.dagster] name, which Dagster's own pyproject loading (`dagster dev`, `dg dev`,
    `make ui`) gives the project's module."""
    from dagster._core.workspace.load_target import PyProjectFileTarget

    from pipeline.launch import load_target, location_name

    served = PyProjectFileTarget(str(ROOT / "pyproject.toml")).create_origins()[0]
    assert load_target("pipeline.definitions").create_origins()[0].location_name == \
        served.location_name == "dihal"
    assert location_name("tests.tiny_location") == "tests.tiny_location"


def test_a_missing_upstream_of_a_backbone_without_weights_names_the_weights_first(tmp_path):
    """`dagster asset materialize --select bridge_llama` on a host without Llama's weights:
    the first message already says how to get them (then what to materialise)."""
    import dagster as dg

    from pipeline.definitions import build_definitions
    from resources import StorageResource

    defs = build_definitions(("llama",), resources={
        "storage": StorageResource(root=str(tmp_path / "artifacts"))})
    res = dg.materialize(list(defs.assets), selection=["bridge_llama"], resources=defs.resources,
                         instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    (fail,) = [e for e in res.all_events if e.event_type_value == "STEP_FAILURE"]
    text = fail.step_failure_data.user_failure_data.description
    assert text.startswith("weights of backbone 'llama' (meta-llama/Llama-3.1-8B-Instruct) were "
                           "not found"), text
    assert "hf download meta-llama/Llama-3.1-8B-Instruct" in text
    assert "Then: upstream asset layer_score_llama has not been materialised" in text


@pytest.fixture(scope="module")
def beside(tmp_path_factory, tiny_llama_dir):
    """A project with a tiny declared backbone and the tiny preset, and `dg dev` serving it."""
    tmp = tmp_path_factory.mktemp("doors")
    shard = write_shard(tmp / "s0.json.gz", make_docs(120))
    tiny_profile(tmp / "tiny.json", shard)
    # the preset chosen once for the project: every door reads it (no DIHAL_PROFILE)
    (tmp / "dihal.toml").write_text(
        'preset = "tiny.json"\n\n'
        f'[backbones.tinyfolder]\nmodel = "{tiny_llama_dir}"\njudge = "{tiny_llama_dir}"\n')
    home = tmp / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "dagster.yaml").read_text())
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DAGSTER_HOME": str(home),
           "DIHAL_ARTIFACTS": str(tmp / "artifacts"), "DIHAL_CONFIG": str(tmp / "dihal.toml"),
           "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", "NO_COLOR": "1"}
    for k in (registry.DECLARED_ENV, "DAGSTER_MODULE_NAME", "DIHAL_PROFILE"):
        env.pop(k, None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp / "dg-dev.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([str(BIN / "dg"), "dev", "-h", "127.0.0.1", "-p", str(port)],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 400
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
                break
            except OSError:
                assert proc.poll() is None, (tmp / "dg-dev.log").read_text()[-3000:]
                assert time.monotonic() < deadline, (tmp / "dg-dev.log").read_text()[-3000:]
                time.sleep(1)
        yield tmp, env, proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()


def _daemon_beating(env: dict, within_s: float = 70.0) -> bool:
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    from pipeline.launch import QUEUE_DAEMON

    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(env["DAGSTER_HOME"])) as instance:
        beat = instance.get_daemon_heartbeats().get(QUEUE_DAEMON)
        return beat is not None and time.time() - beat.timestamp < within_s


def test_the_driver_runs_beside_dg_dev_through_its_daemon(beside):
    """With `dg dev` up (its daemon serving the location it names `dihal`), the driver uses
    that daemon and its runs find their code: Locate of the declared backbone succeeds, under
    the project's preset."""
    tmp, env, dev = beside
    deadline = time.monotonic() + 300
    while not _daemon_beating(env):
        assert dev.poll() is None and time.monotonic() < deadline, (
            (tmp / "dg-dev.log").read_text()[-3000:])
        time.sleep(2)
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "pipeline.main", "--backbone", "tinyfolder", "--layers", "1",
         "--stop-after", "locate", "--skip-bridgeability"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    print(out.stdout[-4000:], out.stderr[-4000:], f"driver beside dg dev: "
          f"{time.monotonic() - t0:.0f} s", sep="\n")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "using the Dagster daemon that is already running" in out.stdout
    assert "started a Dagster daemon" not in out.stdout
    score = json.loads((tmp / "artifacts" / "tinyfolder" / "layer_score" / "manifest.json")
                       .read_text())
    assert score["backbone"] == "tinyfolder" and score["info"]["preset"] == "tiny.json"
    assert "profile " + str(tmp / "tiny.json") in out.stdout
    assert dev.poll() is None  # dg dev still serves


def _materializations(env: dict, key: str) -> list[dict]:
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(env["DAGSTER_HOME"])) as instance:
        records = instance.fetch_materializations(dg.AssetKey(key), limit=20,
                                                  ascending=True).records
        return [{k: getattr(v, "value", v) for k, v in
                 r.asset_materialization.metadata.items()} for r in records]


def _cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / args[0]), *args[1:]], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=900)


def test_the_cli_and_dg_reuse_the_drivers_artifact_with_one_fingerprint(beside):
    """`dagster asset materialize` and `dg launch`, under the project's preset as the driver
    was, find layer_score up to date: the same fingerprint, nothing recomputed."""
    tmp, env, _ = beside
    manifest = tmp / "artifacts" / "tinyfolder" / "layer_score" / "manifest.json"
    made = json.loads(manifest.read_text())["fingerprint"]
    for command in (["dagster", "asset", "materialize", "-m", "pipeline.definitions",
                     "--select", "layer_score_tinyfolder"],
                    ["dg", "launch", "--assets", "layer_score_tinyfolder"]):
        out = _cli(env, *command)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert json.loads(manifest.read_text())["fingerprint"] == made
    doors = _materializations(env, "layer_score_tinyfolder")
    print("layer_score_tinyfolder by door (driver, CLI, dg):",
          [(m["fingerprint"], m["cached"], m["preset"]) for m in doors])
    assert [(m["cached"], m["preset"]) for m in doors] == [
        (False, "tiny.json"), (True, "tiny.json"), (True, "tiny.json")]
    assert {m["fingerprint"] for m in doors} == {made[:16]}


def test_a_door_under_another_preset_is_refused_with_the_command(beside):
    """The CLI under another preset (a process's DIHAL_PROFILE) does not mix its geometry
    with the project preset's hidden states: refused, naming the upstream and the command."""
    tmp, env, _ = beside
    other = tiny_profile(tmp / "other.json", tmp / "s0.json.gz",
                         geometry={"n_tokens": 60, "n_anchors": 24, "k_neighbors": 6,
                                   "n_pairs": 100})
    out = _cli({**env, "DIHAL_PROFILE": str(other)}, "dagster", "asset", "materialize", "-m",
               "pipeline.definitions", "--select", "geometry_tinyfolder")
    assert out.returncode != 0
    text = out.stdout + out.stderr
    print(text[text.find("geometry_tinyfolder: its upstream"):][:700])
    assert ("geometry_tinyfolder: its upstream hidden_states_tinyfolder was made under preset "
            "'tiny.json', this run's preset is 'other.json'") in text
    assert f"DIHAL_PROFILE={other} dagster asset materialize --select " \
           "'*hidden_states_tinyfolder'" in text
