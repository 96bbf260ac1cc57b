"""`make ui` on a user's machine: env.sh keeps a DAGSTER_HOME of the user's and the instance's
own dagster.yaml (a code-server start-up timeout raised there stays raised; the project's
allows 600 s); Ctrl-C on `python -m pipeline.ui` (what `make ui` runs) leaves no process of
`dagster dev` behind."""

import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tests.tiny import ROOT, serving


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
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(ROOT),
           "DIHAL_CONFIG": str(tmp_path / "dihal.toml"), "DIHAL_ARTIFACTS": str(tmp_path / "a")}
    with serving([sys.executable, "-m", "pipeline.ui"], tmp_path / "ui.log", env=env,
                 deadline_s=600) as served:
        ui = served.proc
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


# A stand-in web server taking `-h HOST -p PORT`: it answers /server_info, and first starts
# a child that ignores SIGTERM (as `dg dev`'s children outlive its exit), printing its pid.
STAND_IN = """
import http.server, signal, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                          "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
print("child", child.pid, flush=True)
if "--exit" in sys.argv:
    sys.exit("no server today")
class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")
port = int(sys.argv[sys.argv.index("-p") + 1])
http.server.HTTPServer(("127.0.0.1", port), Answer).serve_forever()
"""


def test_serving_leaves_no_process_of_the_group_behind(tmp_path):
    """tests.tiny.serving waits for /server_info, and on leaving stops the whole process group:
    a child that ignores SIGTERM and outlives its parent is killed too. A server that exits
    first fails with its log's end."""
    from pipeline.run_launcher import process_alive

    log = tmp_path / "stand-in.log"
    with serving([sys.executable, "-c", STAND_IN], log, cwd=tmp_path, grace_s=2) as served:
        child = int(log.read_text().split()[1])
        assert served.proc.poll() is None and process_alive(child)
    for _ in range(20):  # the killed child is reaped by init
        if not process_alive(child):
            break
        time.sleep(0.25)
    assert not process_alive(child)
    with pytest.raises(AssertionError, match=r"(?s)exited \(1\) before serving: .*no server today"):
        with serving([sys.executable, "-c", STAND_IN, "--exit"], log, cwd=tmp_path, grace_s=2):
            pass
