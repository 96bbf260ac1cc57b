"""`make ui` on a user's machine: env.sh keeps a DAGSTER_HOME of the user's and the instance's
own dagster.yaml (a code-server start-up timeout raised there stays raised; the project's
allows 600 s); Ctrl-C on `python -m pipeline.ui` (what `make ui` runs) leaves no process of
`dagster dev` behind."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_env_sh_keeps_the_users_dagster_home_and_its_dagster_yaml(tmp_path):
    home = tmp_path / "mine"
    home.mkdir()
    own = "code_servers:\n  local_startup_timeout: 1200\n"
    (home / "dagster.yaml").write_text(own)
    out = subprocess.run(["bash", "-c", ". ./env.sh && echo $DAGSTER_HOME"], cwd=ROOT,
                         env={**os.environ, "DAGSTER_HOME": str(home)}, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == str(home)
    assert (home / "dagster.yaml").read_text() == own
    assert f"keeping {home}/dagster.yaml" in out.stderr
    fresh = tmp_path / "fresh"
    subprocess.run(["bash", "-c", ". ./env.sh"], cwd=ROOT, timeout=60, check=True,
                   env={**os.environ, "DAGSTER_HOME": str(fresh)})
    copied = yaml.safe_load((fresh / "dagster.yaml").read_text())
    assert copied["code_servers"]["local_startup_timeout"] == 600


def test_ctrl_c_on_make_ui_leaves_no_process_behind(tmp_path):
    from pipeline.run_launcher import process_alive
    from pipeline.ui import descendants

    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "dagster.yaml").read_text())
    (tmp_path / "dihal.toml").write_text("[backbones]\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(ROOT),
           "DIHAL_CONFIG": str(tmp_path / "dihal.toml"), "DIHAL_ARTIFACTS": str(tmp_path / "a")}
    log = open(tmp_path / "ui.log", "w")  # noqa: SIM115 (closed below)
    ui = subprocess.Popen([sys.executable, "-m", "pipeline.ui", "-h", "127.0.0.1", "-p",
                           str(port)], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
                break
            except OSError:
                assert ui.poll() is None and time.monotonic() < deadline, (
                    (tmp_path / "ui.log").read_text()[-3000:])
                time.sleep(1)
        time.sleep(5)  # the daemon and its code server start too
        tree = descendants(ui.pid)
        assert len(tree) >= 3, tree  # dagster dev, its web server, its daemon, code servers
        t0 = time.monotonic()
        ui.send_signal(signal.SIGINT)
        assert ui.wait(120) == 0
        left = [p for p in tree if process_alive(p)]
        print(f"make ui: {len(tree)} processes, all gone {time.monotonic() - t0:.1f} s after "
              "Ctrl-C")
        assert left == [], left
    finally:
        if ui.poll() is None:
            ui.kill()
        log.close()
