"""A busy host's slow code server: the launch of a run waits long enough for a loaded machine.
Dagster's gRPC client waits DAGSTER_GRPC_TIMEOUT_SECONDS (its own default 60 s); every daemon and
`dagster dev` the driver or `make ui` starts gets 300 s unless the environment sets another
value, and env.sh exports the same for the dagster commands."""

import json
import os
import subprocess
import sys
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from dagster._grpc.__generated__ import dagster_api_pb2

from pipeline.daemon import GRPC_TIMEOUT_ENV, cli_env, grpc_timeout_s

ROOT = Path(__file__).resolve().parents[2]

# what a daemon's gRPC client does when it asks a code server to start a run: StartRun under
# the client's default deadline (dagster._grpc.client.DagsterGrpcClient.start_run)
START_RUN = """
import sys
from dagster._grpc.__generated__ import dagster_api_pb2
from dagster._grpc.client import DagsterGrpcClient
client = DagsterGrpcClient(port=int(sys.argv[1]), host="127.0.0.1")
try:
    reply = client._query("StartRun", dagster_api_pb2.StartRunRequest,
                          serialized_execute_run_args="{}")
    print("started:", reply.serialized_start_run_result)
except Exception as exc:
    print("refused:", type(exc).__name__, exc)
"""


@pytest.fixture(scope="module")
def slow_code_server():
    """A gRPC server answering StartRun after 3 s, as a code server on a loaded host does."""
    def start_run(request, context):
        time.sleep(3)
        return dagster_api_pb2.StartRunReply(serialized_start_run_result="yes")

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("api.DagsterApi", {
        "StartRun": grpc.unary_unary_rpc_method_handler(
            start_run, request_deserializer=dagster_api_pb2.StartRunRequest.FromString,
            response_serializer=dagster_api_pb2.StartRunReply.SerializeToString)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield port
    server.stop(0)


def _start_run(port: int, deadline_s: str) -> str:
    env = {**os.environ, GRPC_TIMEOUT_ENV: deadline_s}
    return subprocess.run([sys.executable, "-c", START_RUN, str(port)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120).stdout


def test_a_slow_launch_within_the_deadline_starts_and_past_it_is_refused(slow_code_server):
    assert _start_run(slow_code_server, "10").strip() == "started: yes"
    said = _start_run(slow_code_server, "1")
    assert said.startswith("refused: DagsterUserCodeUnreachableError"), said


def test_every_daemon_gets_the_deadline_a_loaded_host_needs(monkeypatch, tmp_path):
    monkeypatch.delenv(GRPC_TIMEOUT_ENV, raising=False)
    assert grpc_timeout_s() == 300 and cli_env()[GRPC_TIMEOUT_ENV] == "300"
    monkeypatch.setenv(GRPC_TIMEOUT_ENV, "900")
    assert cli_env()[GRPC_TIMEOUT_ENV] == "900"
    # env.sh gives the dagster commands the same, and keeps a value already set
    for given, want in (("", "300"), ("900", "900")):
        env = {k: v for k, v in os.environ.items() if k != GRPC_TIMEOUT_ENV}
        if given:
            env[GRPC_TIMEOUT_ENV] = given
        env["DAGSTER_HOME"] = str(tmp_path / "home")  # env.sh fills it: not the checkout's
        out = subprocess.run(["bash", "-c", f". {ROOT / 'env.sh'} >/dev/null 2>&1; "
                              f"python -c 'import json, os; print(json.dumps(os.environ.get("
                              f"\"{GRPC_TIMEOUT_ENV}\")))'"],
                             env=env, capture_output=True, text=True, timeout=60).stdout
        assert json.loads(out) == want
