"""What the door tests share (tests/pipeline/test_doors.py): a project with tiny declared
backbones under the tiny preset, chosen once for the project, and `dg dev` serving it; the
driver, the CLI and the instance as a user reaches them. Not a test module."""

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from dihal import registry
from tests.tiny import make_docs, serving, tiny_profile, write_shard

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def preset_label(path: Path) -> str:
    """The label the artifacts made under the JSON preset at `path` record: its file name and
    the digest of its content (dihal.run.profiles.Preset.label)."""
    from dihal.run.profiles import resolve_preset

    return resolve_preset(str(path)).label


@contextlib.contextmanager
def beside_dg_dev(tmp: Path, tiny_llama_dir: Path, stories: tuple[str, ...]):
    """A project in `tmp` declaring each of `stories` as a backbone (the same tiny model: each
    story starts from nothing of its own), with the tiny preset and `dg dev` serving it:
    yields (tmp, env, dev) once its daemon beats."""
    shard = write_shard(tmp / "s0.json.gz", make_docs(120))
    tiny_profile(tmp / "tiny.json", shard)
    # the preset chosen once for the project: every door reads it (no DIHAL_PROFILE)
    (tmp / "dihal.toml").write_text('preset = "tiny.json"\n' + "".join(
        f'\n[backbones.{b}]\nmodel = "{tiny_llama_dir}"\njudge = "{tiny_llama_dir}"\n'
        for b in stories))
    home = tmp / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "dagster.yaml").read_text())
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DAGSTER_HOME": str(home),
           "DIHAL_ARTIFACTS": str(tmp / "artifacts"), "DIHAL_CONFIG": str(tmp / "dihal.toml"),
           "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", "NO_COLOR": "1"}
    for k in (registry.DECLARED_ENV, "DAGSTER_MODULE_NAME", "DIHAL_PROFILE"):
        env.pop(k, None)
    with serving([str(BIN / "dg"), "dev"], tmp / "dg-dev.log", env=env) as dev:
        deadline = time.monotonic() + 300
        while not daemon_beating(env):
            assert dev.proc.poll() is None and time.monotonic() < deadline, dev.log_tail()
            time.sleep(2)
        yield tmp, env, dev


def daemon_beating(env: dict) -> bool:
    """The daemon of the instance at $DAGSTER_HOME beats (pipeline.daemon.daemon_alive)."""
    from pipeline.daemon import daemon_alive

    with open_instance(env) as instance:
        return daemon_alive(instance)


def driver(env: dict, backbone: str, *args: str) -> subprocess.CompletedProcess:
    """`python -m pipeline.main --backbone <backbone> ...` in the project, under its preset."""
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "pipeline.main", "--backbone", backbone, *args],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    print(out.stdout[-4000:], out.stderr[-4000:], f"driver beside dg dev: "
          f"{time.monotonic() - t0:.0f} s", sep="\n")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def open_instance(env: dict):
    """The Dagster instance `dg dev` and every door of the test share ($DAGSTER_HOME)."""
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(env["DAGSTER_HOME"]))


def materializations(env: dict, key: str) -> list[dict]:
    """The metadata of each materialisation of `key`, oldest first, with its run's id."""
    import dagster as dg

    with open_instance(env) as instance:
        records = instance.fetch_materializations(dg.AssetKey(key), limit=20,
                                                  ascending=True).records
        return [{"run_id": r.run_id, **{k: getattr(v, "value", v) for k, v in
                                        r.asset_materialization.metadata.items()}}
                for r in records]


def finished_run(env: dict, deadline_s: float = 400, **filters):
    """The newest run matching `filters` (dagster.RunsFilter's) once it has finished."""
    import dagster as dg

    deadline = time.monotonic() + deadline_s
    with open_instance(env) as instance:
        while time.monotonic() < deadline:
            runs = instance.get_runs(dg.RunsFilter(**filters), limit=1)
            if runs and runs[0].is_finished:
                return runs[0]
            time.sleep(2)
        raise AssertionError(f"no run of {filters} finished in {deadline_s:.0f} s: "
                             f"{[(r.job_name, r.status) for r in instance.get_runs(limit=5)]}")


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    """A command of the project's environment (`dagster ...`, `dg ...`) in the project."""
    return subprocess.run([str(BIN / args[0]), *args[1:]], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=900)


def cli_reuses(env: dict, key: str, manifest: Path, made: dict) -> list[dict]:
    """`dagster asset materialize --select key` succeeds and leaves the manifest's fingerprint
    as `made` had it; the materializations of `key` so far, oldest first."""
    out = cli(env, "dagster", "asset", "materialize", "-m", "pipeline.definitions",
              "--select", key)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert json.loads(manifest.read_text())["fingerprint"] == made["fingerprint"]
    return materializations(env, key)
