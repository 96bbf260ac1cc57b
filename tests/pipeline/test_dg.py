"""The project is a `dg` project (pyproject's [tool.dg]): `dg list defs` and `dg launch
--assets` work beside `dagster asset list` / `dagster asset materialize --select`, on the real
code location (pipeline.definitions) with a backbone declared from a tiny model's folder
($DIHAL_CONFIG) and the tiny profile ($DIHAL_PROFILE): the corpus and the declared backbone's
sequences are cheap. `dg dev` serving the same location: tests/pipeline/test_doors.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dihal import registry
from tests.pipeline.doors import materializations
from tests.tiny import ROOT, make_docs, tiny_profile, write_shard

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_llama_dir):
    tmp = tmp_path_factory.mktemp("dg")
    shard = write_shard(tmp / "s0.json.gz", make_docs(120))
    (tmp / "dihal.toml").write_text(
        f'[backbones.tinyfolder]\nmodel = "{tiny_llama_dir}"\njudge = "{tiny_llama_dir}"\n')
    (tmp / "home").mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DAGSTER_HOME": str(tmp / "home"),
           "DIHAL_ARTIFACTS": str(tmp / "artifacts"), "DIHAL_CONFIG": str(tmp / "dihal.toml"),
           "DIHAL_PROFILE": str(tiny_profile(tmp / "profile.json", shard)),
           "HF_HUB_OFFLINE": "1", "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop(registry.DECLARED_ENV, None)
    return tmp, env


def cli(env, *args, timeout=600) -> subprocess.CompletedProcess:
    out = subprocess.run([str(BIN / args[0]), *args[1:]], cwd=ROOT, env=env, text=True,
                         capture_output=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def test_dg_list_defs_shows_the_code_location_with_the_declared_backbone(world):
    _, env = world
    listed = json.loads(cli(env, "dg", "list", "defs", "--json").stdout)
    assets = {a["asset_key"] for a in listed["assets"]}
    assert {"corpus", "bridge_llama", "layer_score_smollm2", "sequences_tinyfolder",
            "report_tinyfolder"} <= assets
    assert {"locate_tinyfolder", "sweep_tinyfolder"} <= {j["name"] for j in listed["jobs"]}
    assert "reevaluate_tinyfolder_nightly" in {s["name"] for s in listed["schedules"]}
    seq = next(a for a in listed["assets"] if a["asset_key"] == "sequences_tinyfolder")
    assert seq["group_name"] == "tinyfolder" and seq["dependency_keys"] == ["corpus"]


def test_dagster_asset_list_shows_the_declared_backbone(world):
    _, env = world
    out = cli(env, "dagster", "asset", "list", "-m", "pipeline.definitions").stdout.split()
    assert {"layer_score_tinyfolder", "bridge_tinyfolder", "bridge_llama"} <= set(out)


def test_dg_launch_and_dagster_asset_materialize_make_the_same_artifacts(world):
    """dg launch makes the corpus and the declared backbone's sequences; dagster asset
    materialize then finds both up to date (reused: same fingerprint, nothing recomputed)."""
    tmp, env = world
    launched = cli(env, "dg", "launch", "--assets", "corpus,sequences_tinyfolder")
    assert "RUN_SUCCESS" in launched.stderr + launched.stdout
    manifest = tmp / "artifacts" / "tinyfolder" / "sequences" / "manifest.json"
    made = json.loads(manifest.read_text())
    assert made["backbone"] == "tinyfolder" and made["info"]["metadata"]["train_sequences"] == 8
    again = cli(env, "dagster", "asset", "materialize", "-m", "pipeline.definitions",
                "--select", "corpus,sequences_tinyfolder")
    assert "RUN_SUCCESS" in again.stderr + again.stdout
    assert json.loads(manifest.read_text())["fingerprint"] == made["fingerprint"]
    assert [m["cached"] for m in materializations(env, "sequences_tinyfolder")] == [False, True]
    assert [m["cached"] for m in materializations(env, "corpus")] == [False, True]
