"""Settings from the process environment are checked where they are read (dihal.environment):
a value not of its type or out of its range is refused with an error naming the variable, its
value, what is allowed and the fix, never replaced by the default or clamped. Unset, empty or
spaces only: the default."""

import ast
import contextlib
import importlib.util
import pathlib
import sys

import pytest

from dihal import environment as env
from dihal.errors import DihalError, SettingError

ROOT = pathlib.Path(__file__).resolve().parents[2]
V = "DIHAL_TEST_SETTING"


@pytest.fixture()
def setting(monkeypatch):
    """Sets V (None: unsets it)."""

    def put(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv(V, raising=False)
        else:
            monkeypatch.setenv(V, value)

    return put


def refused(call, name: str, value: str, allowed: str) -> SettingError:
    with pytest.raises(SettingError) as err:
        call()
    msg = str(err.value)
    assert f"{name}={value!r}" in msg and allowed in msg and "unset it" in msg, msg
    return err.value


def test_a_refusal_is_a_dihal_error_and_a_value_error():
    assert issubclass(SettingError, DihalError) and issubclass(SettingError, ValueError)


# ------------------------------------------------------------------------------------- helpers

@pytest.mark.parametrize(("raw", "value"), [
    (None, 7), ("", 7), ("   ", 7), ("3", 3), (" 3 ", 3), ("+3", 3), ("1", 1), ("10", 10)])
def test_env_int_reads_a_whole_number_in_range(setting, raw, value):
    setting(raw)
    assert env.env_int(V, 7, lo=1, hi=10) == value


@pytest.mark.parametrize("raw", ["abc", "3.0", "1e3", "inf", "nan", "-inf", "0", "-3", "11",
                                 "3_0", "0x3"])
def test_env_int_refuses_what_is_not_a_whole_number_in_range(setting, raw):
    setting(raw)
    refused(lambda: env.env_int(V, 7, lo=1, hi=10), V, raw, "a whole number from 1 to 10")


def test_env_int_without_an_upper_bound(setting):
    setting("100000")
    assert env.env_int(V, 1, lo=1) == 100000
    setting("0")
    refused(lambda: env.env_int(V, 1, lo=1), V, "0", "a whole number of at least 1")


@pytest.mark.parametrize(("raw", "value"), [
    (None, 24.0), ("", 24.0), ("0", 0.0), ("2.5", 2.5), (" 1e1 ", 10.0), ("8760", 8760.0)])
def test_env_float_reads_a_finite_number_in_range(setting, raw, value):
    setting(raw)
    assert env.env_float(V, 24.0, lo=0, hi=8760) == value


@pytest.mark.parametrize("raw", ["inf", "-inf", "Infinity", "nan", "NaN", "-5", "-0.001",
                                 "8760.5", "1e308", "abc", "1,5"])
def test_env_float_refuses_inf_nan_out_of_range_and_non_numbers(setting, raw):
    setting(raw)
    refused(lambda: env.env_float(V, 24.0, lo=0, hi=8760), V, raw,
            "a finite number from 0 to 8760")


@pytest.mark.parametrize(("raw", "value"), [
    ("1", True), ("true", True), ("TRUE", True), ("Yes", True), ("on", True), (" 1 ", True),
    ("0", False), ("false", False), ("False", False), ("NO", False), ("off", False),
    (None, True), ("", True)])
def test_env_flag_reads_a_fixed_set_of_yes_and_no(setting, raw, value):
    setting(raw)
    assert env.env_flag(V, True) is value


@pytest.mark.parametrize("raw", ["maybe", "2", "y", "n", "-1", "t", "offline"])
def test_env_flag_refuses_anything_else(setting, raw):
    setting(raw)
    refused(lambda: env.env_flag(V, False), V, raw, "one of 1, true, yes, on, 0, false, no, off")


def test_env_choice_reads_one_of_its_choices_exactly(setting):
    setting(None)
    assert env.env_choice(V, None, ("a", "b")) is None
    setting("b")
    assert env.env_choice(V, None, ("a", "b")) == "b"
    for raw in ("c", "B", " b"):
        setting(raw)
        refused(lambda: env.env_choice(V, None, ("a", "b")), V, raw, "one of a, b")


def test_env_text_takes_any_value_or_one_matching_its_pattern(setting):
    setting("/some where")
    assert env.env_text(V, "x") == "/some where"
    setting("")
    assert env.env_text(V, "x") == "x"
    assert env.env_text(V) is None
    setting("no")
    refused(lambda: env.env_text(V, pattern=env.re.compile("^yes$"), allowed="yes"), V, "no",
            "must be yes")


@pytest.mark.parametrize(("raw", "value"), [
    (None, []), ("", []), ("[]", []), ('[{"name": "m", "model": "org/m"}]',
                                       [{"name": "m", "model": "org/m"}])])
def test_env_json_list_reads_a_list_of_objects(setting, raw, value):
    setting(raw)
    assert env.env_json_list(V) == value


@pytest.mark.parametrize(("raw", "says"), [
    ("not json", "it is not JSON"), ("[1]", "a JSON list of objects"),
    ('{"name": "m"}', "a JSON list of objects"), ('"x"', "a JSON list of objects"),
    ('[{"name": "m"},', "it is not JSON")])
def test_env_json_list_refuses_what_is_not_a_list_of_objects(setting, raw, says):
    setting(raw)
    refused(lambda: env.env_json_list(V), V, raw, says)


@pytest.mark.parametrize("raw", ["auto", "cpu", "cuda", "cuda:0", "cuda:7"])
def test_a_device_is_auto_cpu_cuda_or_one_cuda_device(monkeypatch, raw):
    monkeypatch.setenv("DIHAL_DEVICE", raw)
    assert env.device() == raw


@pytest.mark.parametrize("raw", ["gpu", "CUDA", "cuda:", "cuda:x", "mps", "cuda:0,1"])
def test_another_device_is_refused(monkeypatch, raw):
    monkeypatch.setenv("DIHAL_DEVICE", raw)
    refused(env.device, "DIHAL_DEVICE", raw, "auto, cpu, cuda or cuda:<index>")


@pytest.mark.parametrize("raw", ["tcp://127.0.0.1:8786", "host:8786", "tls://[::1]:8786",
                                 "tcp://node-3.cluster:65535"])
def test_a_dask_scheduler_is_an_address_with_a_port(monkeypatch, raw):
    monkeypatch.setenv("DIHAL_DASK_SCHEDULER", raw)
    assert env.dask_scheduler() == raw


@pytest.mark.parametrize(("raw", "says"), [
    ("not an address", "[scheme://]host:port"), ("tcp://host", "[scheme://]host:port"),
    ("tcp://host:port", "[scheme://]host:port"), ("tcp://host:0", "port is from 1 to 65535"),
    ("tcp://host:70000", "port is from 1 to 65535")])
def test_another_dask_scheduler_is_refused(monkeypatch, raw, says):
    monkeypatch.setenv("DIHAL_DASK_SCHEDULER", raw)
    refused(env.dask_scheduler, "DIHAL_DASK_SCHEDULER", raw, says)


# ---------------------------------------------------------------------------------- read sites

def fresh(monkeypatch, relative: str):
    """A fresh copy of a module whose class defaults read the environment at import time,
    executed under this test's environment (the imported module itself is left alone)."""
    name = "fresh_" + relative.replace("/", "_").removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


RESOURCE_SETTINGS = [  # (variable, a refused value, allowed)
    ("DIHAL_VERIFY_EVERY_HOURS", "inf", "a finite number from 0 to 8760"),
    ("DIHAL_VERIFY_EVERY_HOURS", "nan", "a finite number from 0 to 8760"),
    ("DIHAL_VERIFY_EVERY_HOURS", "-5", "a finite number from 0 to 8760"),
    ("DIHAL_VERIFY_EVERY_HOURS", "abc", "a finite number from 0 to 8760"),
    ("DIHAL_DEVICE", "gpu", "auto, cpu, cuda or cuda:<index>"),
    ("DIHAL_WORKERS", "abc", "a whole number of at least 1"),
    ("DIHAL_WORKERS", "0", "a whole number of at least 1"),
    ("DIHAL_WORKERS", "-3", "a whole number of at least 1"),
    ("HF_HUB_OFFLINE", "maybe", "one of 1, true, yes, on, 0, false, no, off"),
    ("DIHAL_DEVICE_MAP", "bogus", "one of auto, balanced, balanced_low_0, sequential"),
]


@pytest.mark.parametrize(("name", "raw", "allowed"), RESOURCE_SETTINGS)
def test_the_resources_refuse_a_bad_setting_when_the_code_location_loads(monkeypatch, name, raw,
                                                                         allowed):
    monkeypatch.setenv(name, raw)
    refused(lambda: fresh(monkeypatch, "resources/__init__.py"), name, raw, allowed)


def test_the_resources_read_good_settings(monkeypatch):
    for name, raw in [("DIHAL_ARTIFACTS", ""), ("DIHAL_VERIFY_EVERY_HOURS", "0"),
                      ("DIHAL_DEVICE", "cuda:1"), ("DIHAL_WORKERS", "3"),
                      ("HF_HUB_OFFLINE", "no"), ("DIHAL_DEVICE_MAP", "balanced"),
                      ("DIHAL_JUDGE", " ")]:
        monkeypatch.setenv(name, raw)
    res = fresh(monkeypatch, "resources/__init__.py")
    storage, compute = res.StorageResource(), res.ComputeResource()
    backbones, judge = res.BackboneResource(), res.JudgeResource()
    assert storage.root == ".dihal/artifacts"  # empty: the default, not the working directory
    assert storage.verify_every_hours == 0.0  # 0: digests checked every time
    assert (compute.device, compute.workers) == ("cuda:1", 3)
    assert backbones.offline is False and judge.offline is False
    assert backbones.device_map == "balanced" and judge.name == ""


@pytest.mark.parametrize("hours", [float("inf"), float("nan"), -5.0, 8761.0])
def test_the_digest_interval_given_as_resource_config_has_the_environments_range(hours):
    """The storage resource's verify_every_hours, given in a run's or definitions' config
    rather than the environment, is refused alike (inf would switch the check off for good)."""
    from pydantic import ValidationError

    from resources import StorageResource

    with pytest.raises(ValidationError, match=r"verify_every_hours must be a number of hours "
                                              r"from 0 \(every time\) to 8760"):
        StorageResource(verify_every_hours=hours)
    assert StorageResource(verify_every_hours=0).verify_every_hours == 0.0


@pytest.mark.parametrize("raw", ["-5", "0", "nan", "abc", "inf", "1.5", "86401"])
def test_a_bad_launch_deadline_is_refused_not_clamped_or_replaced(monkeypatch, raw):
    from pipeline.daemon import GRPC_TIMEOUT_ENV, cli_env, grpc_timeout_s

    monkeypatch.setenv(GRPC_TIMEOUT_ENV, raw)
    refused(grpc_timeout_s, GRPC_TIMEOUT_ENV, raw, "a whole number from 1 to 86400")
    refused(cli_env, GRPC_TIMEOUT_ENV, raw, "a whole number from 1 to 86400")


def test_the_registry_refuses_a_bad_offline_flag_and_a_malformed_declaration(monkeypatch):
    from dihal import registry

    monkeypatch.setenv("HF_HUB_OFFLINE", "maybe")
    refused(registry.declared_backbones, "HF_HUB_OFFLINE", "maybe", "one of 1, true")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for raw in ("not json", "[1]", '{"a": 1}'):
        monkeypatch.setenv(registry.DECLARED_ENV, raw)
        refused(lambda: registry.declare_model("org/x"), registry.DECLARED_ENV, raw,
                "a JSON list of objects")
        # the code location keeps the built-in backbones and warns of the list by name
        assert set(registry.BACKBONES) <= set(registry.all_backbones())
        problem = registry.declaration_problems()[registry.FILE_PROBLEM]
        assert isinstance(problem, SettingError) and registry.DECLARED_ENV in str(problem)


def test_an_empty_config_or_profile_variable_counts_as_unset(monkeypatch):
    from dihal import registry
    from dihal.run import profiles

    monkeypatch.setenv(registry.CONFIG_ENV, " ")
    assert registry.config_file() == registry.PROJECT_CONFIG
    monkeypatch.setenv(profiles.PRESET_ENV, "")
    assert profiles.chosen_preset()[1] != f"${profiles.PRESET_ENV}"
    monkeypatch.setenv(profiles.PRESET_ENV, "tiny")
    assert profiles.chosen_preset() == ("tiny", f"${profiles.PRESET_ENV}")


def test_the_dask_scheduler_is_refused_where_steps_are_placed(monkeypatch):
    from pipeline.definitions import executor
    from storage.locks import distributed_engine

    monkeypatch.setenv("DIHAL_DASK_SCHEDULER", "not an address")
    refused(executor, "DIHAL_DASK_SCHEDULER", "not an address", "host:port")
    refused(distributed_engine, "DIHAL_DASK_SCHEDULER", "not an address", "host:port")
    monkeypatch.setenv("DIHAL_DASK_SCHEDULER", "")
    assert distributed_engine() is False


HOLD_SETTINGS = [  # (variable, a refused value, allowed)
    *[("DIHAL_TINY_HOLD_S", raw, "a finite number from 0 to 3600")
      for raw in ("inf", "nan", "-1", "abc")],
    *[("DIHAL_TINY_HOLD_RUNS", raw, "a whole number from 0 to 64")
      for raw in ("-1", "65", "abc", "1.5")],
]


@pytest.mark.parametrize("name,raw,allowed", HOLD_SETTINGS)
def test_the_tiny_location_refuses_a_bad_hold(monkeypatch, name, raw, allowed):
    monkeypatch.delenv("DIHAL_TINY_MODEL", raising=False)
    monkeypatch.setenv(name, raw)
    refused(lambda: fresh(monkeypatch, "tests/tiny_location.py"), name, raw, allowed)


def test_the_tiny_location_holds_in_runs_of_a_partition_or_a_range_of_them(monkeypatch):
    """The driver's backfill runs carry the ends of their partition range, not
    dagster/partition: the hold applies to them as to a run of one partition, not to Locate's."""
    from types import SimpleNamespace

    monkeypatch.delenv("DIHAL_TINY_MODEL", raising=False)
    location = fresh(monkeypatch, "tests/tiny_location.py")
    held = {}
    for name, tags in {"one": {"dagster/partition": "1"},
                       "range": {"dagster/asset_partition_range_start": "1",
                                 "dagster/asset_partition_range_end": "1"},
                       "locate": {}}.items():
        compute = location.HeldCompute(device="cpu", threads=1)
        compute.setup_for_execution(SimpleNamespace(
            dagster_run=SimpleNamespace(tags=tags, run_id=name)))
        held[name] = compute._partitioned
    assert held == {"one": True, "range": True, "locate": False}


def test_a_held_step_keeps_its_device_until_every_run_has_marked_itself(monkeypatch, tmp_path):
    """tests.tiny_location's hold: alone, the whole hold; once as many runs as asked have
    computed a step (marked themselves in the folder), not a moment longer; never past the
    hold where the other runs do not come."""
    monkeypatch.delenv("DIHAL_TINY_MODEL", raising=False)
    location = fresh(monkeypatch, "tests/tiny_location.py")
    clock = [0.0]
    monkeypatch.setattr(location, "monotonic", lambda: clock[0])
    monkeypatch.setattr(location, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    released = []

    def hold(*args) -> float:
        start = clock[0]
        with location._held(contextlib.nullcontext("slot"), *args) as slot:
            assert slot == "slot"
        released.append(len(released))
        return clock[0] - start

    meet = tmp_path / "meet"
    assert hold(30.0) == 30.0  # no folder: the whole hold
    assert 30.0 <= hold(30.0, meet / "run-a", 2) < 30.3  # the other run never comes
    assert hold(30.0, meet / "run-b", 2) == 0.0  # run-a is there: no wait
    assert sorted(p.name for p in meet.iterdir()) == ["run-a", "run-b"]
    assert hold(30.0, meet / "run-a", 2) == 0.0  # a later step of a run already there
    assert released == [0, 1, 2, 3]  # every lease was left


def test_the_driver_refuses_a_bad_default_from_the_environment(monkeypatch, capsys):
    import pipeline.main as driver

    for name, raw in [("DIHAL_WORKERS", "abc"), ("DIHAL_WORKERS", "0"),
                      ("DIHAL_DEVICE_MAP", "bogus")]:
        monkeypatch.setenv(name, raw)
        with pytest.raises(SystemExit) as exit_:
            driver.build_parser()
        assert exit_.value.code == 2
        assert f"{name}={raw!r}" in capsys.readouterr().err.strip().splitlines()[-1]
        monkeypatch.delenv(name)
    monkeypatch.setenv("DIHAL_WORKERS", "3")
    assert driver.build_parser().parse_args([]).workers == 3


# Read by their own libraries, which check them: Dagster's home, CUDA's workspace setting
OTHERS = {"DAGSTER_HOME", "CUBLAS_WORKSPACE_CONFIG"}


def direct_reads(files: list[pathlib.Path], root: pathlib.Path) -> list[str]:
    """`file:line NAME` for each read of the environment (os.environ.get, os.environ[...],
    `in os.environ`, os.getenv) that does not go through dihal.environment."""

    def environ(node: ast.AST) -> bool:
        return ast.unparse(node) in ("os.environ", "environ")

    out = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            key = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                if (node.func.attr == "get" and environ(node.func.value)) or \
                        ast.unparse(node.func) == "os.getenv":
                    key = node.args[0]
            elif isinstance(node, ast.Subscript) and environ(node.value) \
                    and isinstance(node.ctx, ast.Load):
                key = node.slice
            elif isinstance(node, ast.Compare) and any(environ(c) for c in node.comparators):
                key = node.left
            if key is not None:
                name = key.value if isinstance(key, ast.Constant) else ast.unparse(key)
                if name not in OTHERS:
                    out.append(f"{f.relative_to(root)}:{node.lineno} {name}")
    return out


def test_every_setting_is_read_through_dihal_environment():
    files = [f for top in ("dihal", "storage", "assets", "resources", "pipeline")
             for f in sorted((ROOT / top).rglob("*.py")) if f != ROOT / "dihal" / "environment.py"]
    assert direct_reads([*files, ROOT / "tests" / "tiny_location.py"], ROOT) == []


def test_a_direct_read_is_found(tmp_path):
    (tmp_path / "m.py").write_text(
        "import os\nA = os.environ.get('A', '1')\nB = os.environ['B']\nC = 'C' in os.environ\n"
        "D = os.getenv('D')\nos.environ['E'] = '1'\nH = os.environ.get('DAGSTER_HOME')\n")
    assert direct_reads([tmp_path / "m.py"], tmp_path) == ["m.py:2 A", "m.py:3 B", "m.py:4 C",
                                                           "m.py:5 D"]


@pytest.mark.parametrize("device", ["cpu", "cuda:0", "cuda", "auto"])
@pytest.mark.parametrize("dtype", ["auto", "float32", "bfloat16", "float16", "float64", "half",
                                   "float"])
def test_the_compute_resources_dtype_name_is_its_torch_dtypes(device, dtype):
    """The dtype in a dump's fingerprint, named without torch where the device is named: the
    same string as str() of the dtype a step loads the backbone in (aliases through torch)."""
    from resources import ComputeResource

    compute = ComputeResource(device=device, dtype=dtype)
    assert compute.dtype_name() == str(compute.torch_dtype())
    if dtype == "auto" and device != "auto":  # bfloat16 on a GPU, float32 on the CPU
        want = "torch.bfloat16" if device.startswith("cuda") else "torch.float32"
        assert compute.dtype_name() == want
