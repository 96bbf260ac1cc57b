"""The supported transformers range: declared in pyproject, checked at import, and the KV-cache
keyword taken from the callee's own signature (transformers renamed it)."""

import tomllib
from pathlib import Path

import pytest

from dihal.versions import (
    TRANSFORMERS_BELOW,
    TRANSFORMERS_MIN,
    UnsupportedVersionError,
    cache_keyword,
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
