"""The transformers releases dihal supports, checked when dihal.backbones is imported.

transformers renamed the KV-cache keyword of decoder layers, model forwards and the mask
builders from `past_key_values` to `cache` (5.24 has `cache`, 5.17 `past_key_values`). An old
release given `cache=` swallows it in **kwargs: cached decoding then runs without a cache's
positions and gives wrong tokens with no error. So the keyword is chosen from each callee's own
signature (cache_keyword), and a release outside the tested range is refused at import.

The range is declared in pyproject.toml ([tool.dihal] transformers) and here; a test keeps the
two equal. Tried (tests/unit/test_backbones.py, tests/unit/test_hybrid.py, slow ones included): 5.24.0,
the pin, passes all; 5.17.0, the GPU image's, passes the replay and cached-decoding tests with
cache_keyword, but the Gemma 3 tokenizer it converts from the GGUF adds no BOS (the gemma3
backbone and the judge change), so the range starts at 5.24: the GPU recipe carries the wheel.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import lru_cache

from dihal.errors import DihalError

TRANSFORMERS_MIN = "5.24.0"  # inclusive (5.17: see above)
TRANSFORMERS_BELOW = "5.25.0"  # exclusive: releases after the pin are untested


class UnsupportedVersionError(DihalError):
    """An installed package is outside the range dihal was tested with."""


def _parse(version: str) -> tuple[int, ...]:
    """(major, minor, patch) of a release string; pre-release/local tails are dropped."""
    import re

    m = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", version)
    if not m:
        raise UnsupportedVersionError(f"cannot read the transformers version {version!r}")
    return tuple(int(x or 0) for x in m.groups())


def check_transformers(version: str | None = None) -> str:
    """The installed (or given) transformers version, or UnsupportedVersionError naming the
    supported range and the fix."""
    if version is None:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as installed

        try:
            version = installed("transformers")
        except PackageNotFoundError:
            raise UnsupportedVersionError(
                f"transformers is not installed: pip install 'transformers>={TRANSFORMERS_MIN},"
                f"<{TRANSFORMERS_BELOW}' (pyproject.toml pins the tested one)") from None
    if not _parse(TRANSFORMERS_MIN) <= _parse(version) < _parse(TRANSFORMERS_BELOW):
        raise UnsupportedVersionError(
            f"transformers {version} is outside the range dihal supports (>={TRANSFORMERS_MIN},"
            f" <{TRANSFORMERS_BELOW}; pyproject.toml [tool.dihal]): its KV-cache keyword may be "
            f"ignored, which makes cached decoding silently wrong. Install a supported release: "
            f"pip install 'transformers>={TRANSFORMERS_MIN},<{TRANSFORMERS_BELOW}'.")
    return version


@lru_cache(maxsize=64)
def _keyword(fn: Callable) -> str:
    params = inspect.signature(fn).parameters
    for name in ("cache", "past_key_values", "past_key_value"):
        if name in params:
            return name
    raise UnsupportedVersionError(
        f"{getattr(fn, '__qualname__', fn)} takes no KV-cache argument (cache or "
        "past_key_values): this transformers release is not supported.")


def cache_keyword(fn: Callable) -> str:
    """The name under which `fn` (a decoder layer's or a model's forward, a mask builder)
    takes its KV cache in the installed transformers."""
    fn = getattr(fn, "forward", fn)  # a module: its forward
    return _keyword(getattr(fn, "__func__", fn))
