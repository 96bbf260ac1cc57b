"""Postgres instance storage (dagster.postgres.yaml, dagster-postgres) against a real local
PostgreSQL server that this test starts (initdb and pg_ctl in a temporary folder, on a free port,
as a non-root user where the tests run as root), stopped at the end. A project asset is
materialised through a DagsterInstance on it; a second instance (another host's view) reads the
run, its event log and the materialisation back; the rows are in Postgres, not SQLite files.
Skipped, with the reason, only where PostgreSQL's server binaries are missing (.ci/run installs
Debian's postgresql package)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import dagster as dg
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _server_bin() -> Path | None:
    """The folder of initdb/pg_ctl: on PATH, else Debian's /usr/lib/postgresql/<v>/bin."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                      key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_user():
    """(preexec_fn, uid, gid): PostgreSQL refuses to run as root, so root runs it as the
    `postgres` user (Debian's package makes it), else `nobody`."""
    if os.geteuid() != 0:
        return None, os.getuid(), os.getgid()
    for name in ("postgres", "nobody"):
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            continue

        def drop(uid=pw.pw_uid, gid=pw.pw_gid):
            os.setgid(gid)
            os.setuid(uid)

        return drop, pw.pw_uid, pw.pw_gid
    pytest.fail("running as root and neither a `postgres` nor a `nobody` user exists")


@pytest.fixture(scope="module")
def postgres_url():
    bindir = _server_bin()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found: install Debian's "
                    "postgresql package (apt-get install -y postgresql; .ci/run does)")
    preexec, uid, gid = _as_user()
    folder = Path(tempfile.mkdtemp(prefix="dihal-pg-"))
    os.chown(folder, uid, gid)
    data, port = folder / "data", _free_port()
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}

    def run(*cmd):
        out = subprocess.run([str(bindir / cmd[0]), *cmd[1:]], preexec_fn=preexec, env=env,
                             cwd=folder, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, f"{cmd}: {out.stdout[-2000:]}{out.stderr[-2000:]}"

    run("initdb", "-D", str(data), "-U", "dihal", "--auth=trust", "-E", "UTF8")
    run("pg_ctl", "-D", str(data), "-l", str(folder / "server.log"), "-w", "-t", "60", "-o",
        f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
    try:
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=port, user="dihal", dbname="postgres")
        conn.autocommit = True
        conn.cursor().execute("CREATE DATABASE dagster")
        conn.close()
        yield f"postgresql+psycopg2://dihal@127.0.0.1:{port}/dagster"
    finally:
        run("pg_ctl", "-D", str(data), "-w", "-m", "fast", "stop")
        shutil.rmtree(folder, ignore_errors=True)


def test_postgres_variant_is_dagster_yaml_plus_postgres_storage():
    base = yaml.safe_load((ROOT / "dagster.yaml").read_text())
    pg = yaml.safe_load((ROOT / "dagster.postgres.yaml").read_text())
    assert pg.pop("storage") == {"postgres": {"postgres_url": {"env": "DIHAL_POSTGRES_URL"}}}
    assert pg == base


def _instance(home: Path) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_config(str(home))


def test_a_materialisation_goes_through_an_instance_on_postgres(postgres_url, tmp_path,
                                                                 monkeypatch, tiny_llama_dir):
    import psycopg2
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage

    from tests.tiny import make_world

    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.postgres.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DIHAL_POSTGRES_URL", postgres_url)
    monkeypatch.setenv("DIHAL_WORKERS", "1")
    world = make_world(tmp_path, tiny_llama_dir)
    with _instance(home) as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        res = dg.materialize(
            list(world.defs.assets), selection=["corpus"], instance=instance,
            resources=world.defs.resources,
            run_config={"ops": {"corpus": {"config": {"paths": [str(world.shard)]}}}})
        assert res.success
        run_id = res.run_id
    with _instance(home) as other:  # a fresh instance: what a worker on another host sees
        run = other.get_run_by_id(run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS
        event = other.get_latest_materialization_event(dg.AssetKey("corpus"))
        assert event is not None and event.run_id == run_id
        types = {e.dagster_event.event_type for e in other.all_logs(run_id) if e.dagster_event}
        kinds = dg.DagsterEventType
        assert {kinds.RUN_START, kinds.STEP_START, kinds.ASSET_MATERIALIZATION,
                kinds.RUN_SUCCESS} <= types
    dsn = postgres_url.replace("postgresql+psycopg2://", "postgresql://")
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT status FROM runs WHERE run_id = %s", (run_id,))
        assert cur.fetchone() == ("SUCCESS",)
        cur.execute("SELECT count(*) FROM event_logs WHERE run_id = %s", (run_id,))
        assert cur.fetchone()[0] > 5
    assert not list(home.rglob("*.db"))  # no SQLite storage beside it
