"""A busy host's slow code server: the launch of a run waits long enough for a loaded machine
(300 s by default, Dagster's own is 60 s; $DIHAL_LAUNCH_TIMEOUT_S), and past its deadline the
run fails with a message naming the host's load and the fix, not a raw gRPC traceback."""

import time
from concurrent import futures

import grpc
import pytest
from dagster._core.errors import DagsterUserCodeUnreachableError
from dagster._grpc.__generated__ import dagster_api_pb2
from dagster._grpc.client import DagsterGrpcClient

from pipeline.run_launcher import (
    LAUNCH_TIMEOUT_ENV,
    _PatientClient,
    launch_timeout_s,
)


@pytest.fixture()
def slow_code_server():
    """A gRPC server answering StartRun after 3 s, as a code server on a loaded host does."""
    def start_run(request, context):
        time.sleep(3)
        return dagster_api_pb2.StartRunReply(serialized_start_run_result="started")

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("api.DagsterApi", {
        "StartRun": grpc.unary_unary_rpc_method_handler(
            start_run, request_deserializer=dagster_api_pb2.StartRunRequest.FromString,
            response_serializer=dagster_api_pb2.StartRunReply.SerializeToString)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield DagsterGrpcClient(port=port, host="127.0.0.1")
    server.stop(0)


def test_a_slow_launch_within_the_deadline_starts(slow_code_server):
    assert _PatientClient(slow_code_server, 10).start_run({"run": 1}) == "started"


def test_a_launch_past_its_deadline_names_the_load_and_the_fix(slow_code_server):
    with pytest.raises(DagsterUserCodeUnreachableError) as exc:
        _PatientClient(slow_code_server, 1).start_run({"run": 1})
    text = str(exc.value)
    assert text.startswith("the code server did not start this run within 1 s (load average ")
    assert f"give launches longer: {LAUNCH_TIMEOUT_ENV}=<seconds>" in text


def test_the_default_deadline_fits_a_loaded_host(monkeypatch):
    monkeypatch.delenv(LAUNCH_TIMEOUT_ENV, raising=False)
    assert launch_timeout_s() == 300
    monkeypatch.setenv(LAUNCH_TIMEOUT_ENV, "900")
    assert launch_timeout_s() == 900
