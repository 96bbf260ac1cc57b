"""A setting in the driver's environment that is not allowed is refused like a wrong argument:
exit status 2, the variable named on stderr, no traceback, before any work, `--help` included."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


RUN = ["--layers", "1,2,3,4,5", "--stop-after", "sweep"]  # a normal argument list


@pytest.mark.parametrize(("name", "raw", "allowed", "argv"), [
    ("DIHAL_WORKERS", "abc", "a whole number of at least 1", ["--help"]),
    ("DIHAL_WORKERS", "abc", "a whole number of at least 1", RUN),
    ("DIHAL_WORKERS", "0", "a whole number of at least 1", ["--help"]),
    ("DIHAL_WORKERS", "0", "a whole number of at least 1", RUN),
    ("DIHAL_DEVICE_MAP", "bogus", "one of auto, balanced, balanced_low_0, sequential", RUN),
])
def test_a_bad_setting_stops_the_driver_like_a_wrong_argument(name, raw, allowed, argv):
    # without DAGSTER_HOME: were the setting let through, the driver still stops before any run
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"} | {name: raw}
    out = subprocess.run([sys.executable, "-m", "pipeline.main", *argv], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and out.stdout == ""
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m pipeline.main: error: ")  # argparse's, as for arguments
    assert f"{name}={raw!r}" in last and allowed in last and "unset it" in last, last
