"""The supported transformers range: declared in pyproject, checked at import, and the KV-cache
keyword taken from the callee's own signature (transformers renamed it). The other pinned
packages' ranges: from pyproject's pins, checked where the code location loads and by the
driver's pre-flight, a release outside refused (or, on an optional path, warned about) by name."""

import tomllib
from pathlib import Path

import pytest

from dihal.versions import (
    SUPPORTED,
    TRANSFORMERS_BELOW,
    TRANSFORMERS_MIN,
    UnsupportedVersionError,
    cache_keyword,
    check_dependencies,
    check_transformers,
)


def test_the_range_in_pyproject_is_the_one_checked():
    meta = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert meta["tool"]["dihal"]["transformers"] == f">={TRANSFORMERS_MIN},<{TRANSFORMERS_BELOW}"
    pin = next(d for d in meta["project"]["dependencies"] if d.startswith("transformers=="))
    check_transformers(pin.split("==")[1])  # the pin is inside the range


def test_the_installed_release_is_supported():
    assert check_transformers() == __import__("transformers").__version__


@pytest.mark.parametrize("version", ["5.17.0", "4.57.1", "5.25.0", "6.0.0rc1"])
def test_a_release_outside_the_range_is_refused_with_the_fix(version):
    with pytest.raises(UnsupportedVersionError) as err:
        check_transformers(version)
    msg = str(err.value)
    assert f"transformers {version} is outside the range" in msg
    assert f"pip install 'transformers>={TRANSFORMERS_MIN},<{TRANSFORMERS_BELOW}'" in msg


def test_the_cache_keyword_follows_the_signature(tiny_backbone):
    def old(hidden, attention_mask=None, past_key_values=None, **kwargs):
        pass

    def new(hidden, attention_mask=None, cache=None, **kwargs):
        pass

    def none(hidden, **kwargs):
        pass

    assert cache_keyword(old) == "past_key_values" and cache_keyword(new) == "cache"
    with pytest.raises(UnsupportedVersionError, match="takes no KV-cache argument"):
        cache_keyword(none)
    # the installed release (the pin): the decoder layers and the model take `cache`
    assert cache_keyword(tiny_backbone.decoder.layers[0]) == "cache"
    assert cache_keyword(tiny_backbone.model) == "cache"


# ---------------------------------------------------------------- the other pinned packages

def _pins() -> dict[str, str]:
    meta = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    return dict(d.split("==") for d in meta["project"]["dependencies"])


def _next_minor(release: str) -> str:
    major, minor = release.split(".")[:2]
    return f"{major}.{int(minor) + 1}.0"


def test_the_checked_ranges_start_at_pyprojects_pins_and_end_before_the_next_minor():
    pins = _pins()
    assert set(pins) - set(SUPPORTED) == {"matplotlib"}  # plots only: every other pin checked
    assert set(SUPPORTED) <= set(pins)
    for name, s in SUPPORTED.items():
        assert (s.minimum, s.below) == (pins[name], _next_minor(pins[name])), name
    assert check_dependencies(pins) == []  # the pins themselves pass
    assert check_dependencies() == []  # and so does this install (make setup's)


@pytest.mark.parametrize("package", ["torch", "zarr", "pyarrow", "dagster", "tokenizers"])
@pytest.mark.parametrize("release", ["older", "next minor", "absent"])
def test_a_refused_package_outside_its_range_is_named_with_the_range_and_the_fix(package,
                                                                                release):
    s = SUPPORTED[package]
    given = {"older": "0.1.0", "next minor": s.below, "absent": None}[release]
    with pytest.raises(UnsupportedVersionError) as err:
        check_dependencies({**_pins(), package: given})
    msg = str(err.value)
    assert (f"{package} {given} is outside the range dihal supports ({s.range}"
            if given else f"{package} is not installed, out of the range") in msg
    assert f"pip install '{package}{s.range}'" in msg
    assert msg.count("\n  - ") == 1  # only the one package


def test_every_refused_package_is_listed_in_one_error():
    with pytest.raises(UnsupportedVersionError) as err:
        check_dependencies({**_pins(), "numpy": "1.26.4", "dagster-dask": "0.30.1"})
    msg = str(err.value)
    assert "numpy 1.26.4 is outside" in msg and "dagster-dask 0.30.1 is outside" in msg
    assert "pip install 'numpy>=2.4.6,<2.5.0' 'dagster-dask>=0.29.27,<0.30.0'" in msg


@pytest.mark.parametrize("package", ["datasets", "accelerate", "dask", "distributed"])
def test_an_optional_paths_package_outside_its_range_is_a_warning_naming_it(package):
    s = SUPPORTED[package]
    assert not s.refuse
    (msg,) = check_dependencies({**_pins(), package: "1.0.0"})
    assert msg.startswith(f"{package} 1.0.0 is outside the range dihal supports ({s.range}")
    assert f"pip install '{package}{s.range}'" in msg


def test_a_local_build_of_the_pin_is_inside_its_range():
    assert check_dependencies({**_pins(), "torch": "2.13.0+cu128", "zarr": "3.1.7"}) == []


def test_the_code_location_and_the_driver_refuse_before_any_work(monkeypatch):
    """Both doors check: loading the code location (every door: the web UI, the CLIs, a run's
    process) and the driver's pre-flight, which refuses before it imports torch or reads the
    corpus."""
    import argparse

    import dihal.versions as versions
    from dihal.run.preflight import PreflightError
    from pipeline import preflight
    from pipeline.definitions import build_definitions

    monkeypatch.setattr(versions, "installed", lambda name: "2.0.0" if name == "zarr" else
                        _pins()[name])
    with pytest.raises(UnsupportedVersionError, match="zarr 2.0.0 is outside the range"):
        build_definitions(backbones=())
    monkeypatch.setattr(preflight, "gather", lambda *a: pytest.fail("gathered facts"))
    args = argparse.Namespace(backbone="smollm2", profile="tiny", workers=1)
    with pytest.raises(PreflightError, match=r"(?s)refused smollm2.*versions: .*zarr 2\.0\.0"):
        preflight.preflight(args, [1, 2, 3], print)
    monkeypatch.setattr(versions, "installed", lambda name: "1.0.0" if name == "dask" else
                        _pins()[name])
    with pytest.warns(UserWarning, match="dask 1.0.0 is outside"):
        build_definitions(backbones=())
