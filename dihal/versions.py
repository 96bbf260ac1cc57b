"""The releases of its dependencies dihal supports: transformers, checked when dihal.backbones
is imported, and the other pinned packages whose release changes what the pipeline computes,
stores or runs on (SUPPORTED), checked where the code location loads and by the driver's
pre-flight (check_dependencies: package metadata only, nothing imported).

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

The other packages: pyproject.toml pins each (the same config gives the same artifacts), and
SUPPORTED allows the pin's patch releases, from the pin to the next minor release (exclusive),
as for transformers; a test keeps every minimum equal to its pin. An artifact's fingerprint
records its config and code version, not the releases that made it, so a store made partly
under another release would mix silently: a release outside the range is refused where it
changes what a stage computes or stores (torch, numpy, the tokenizer, the weight, zarr and
parquet formats, the statistics and metrics) or must match another (the Dagster packages, built
against one another), and warned about where it serves one optional path that fails loudly or
is checked itself (datasets: a Hub corpus, whose documents read are digested into its
fingerprint; accelerate: device_map="auto"; dask and distributed: the Dask executor).
matplotlib (plots only) and the dev extras are not checked.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache

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
        raise UnsupportedVersionError(f"cannot read the release {version!r}")
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


@dataclass(frozen=True)
class Supported:
    """The releases of one package dihal supports: minimum (inclusive, the pin of
    pyproject.toml) to below (exclusive: the next minor release, untested); refuse: False where
    a release outside them is only warned about; why: what such a release puts at risk."""

    minimum: str
    below: str
    refuse: bool
    why: str

    @property
    def range(self) -> str:
        return f">={self.minimum},<{self.below}"


_RESULTS = "its arithmetic makes the stored results (fingerprints do not record releases)"
_DAGSTER = ("the Dagster packages are built against one another: a mixed install fails inside a "
            "run, after its upstream stages ran")
SUPPORTED: dict[str, Supported] = {
    "transformers": Supported(TRANSFORMERS_MIN, TRANSFORMERS_BELOW, True,
                              "its KV-cache keyword may be ignored, which makes cached decoding "
                              "silently wrong"),
    "torch": Supported("2.13.0", "2.14.0", True, "every stage's arithmetic, the bridges' "
                       "training and their checkpoints (fingerprints do not record releases)"),
    "tokenizers": Supported("0.23.3", "0.24.0", True, "it makes the token ids of the stored "
                            "sequences"),
    "safetensors": Supported("0.8.0", "0.9.0", True, "it writes and reads the weights and "
                             "checkpoints"),
    "gguf": Supported("0.19.0", "0.20.0", True, "it dequantises the embedded backbones' weights"),
    "numpy": Supported("2.4.6", "2.5.0", True, _RESULTS),
    "scipy": Supported("1.17.1", "1.18.0", True, _RESULTS),
    "scikit-learn": Supported("1.9.1", "1.10.0", True, _RESULTS),
    "zarr": Supported("3.1.6", "3.2.0", True, "it writes and reads the hidden-state store"),
    "numcodecs": Supported("0.16.6", "0.17.0", True, "its codecs compress the hidden-state store"),
    "pyarrow": Supported("26.0.1", "26.1.0", True, "it writes and reads every parquet table"),
    "mauve-text": Supported("0.4.0", "0.5.0", True, "it computes MAUVE"),
    "faiss-cpu": Supported("1.15.1", "1.16.0", True, "its k-means quantises MAUVE's features"),
    "spacy": Supported("3.8.18", "3.9.0", True, "its English tokenizer counts the n-grams of "
                       "the diversity metric"),
    "dagster": Supported("1.13.27", "1.14.0", True, _DAGSTER),
    "dagster-webserver": Supported("1.13.27", "1.14.0", True, _DAGSTER),
    "dagster-dask": Supported("0.29.27", "0.30.0", True, _DAGSTER),
    "dagster-postgres": Supported("0.29.27", "0.30.0", True, _DAGSTER),
    "dagster-dg-cli": Supported("1.13.27", "1.14.0", True, _DAGSTER),
    "datasets": Supported("5.2.0", "5.3.0", False, "a Hugging Face corpus is streamed through "
                          "it (the documents read are digested into the corpus's fingerprint)"),
    "accelerate": Supported("1.15.0", "1.16.0", False, "it spreads a backbone over GPUs "
                            "(device_map='auto')"),
    "dask": Supported("2026.8.0", "2026.9.0", False, "the sweep's Dask executor runs on it"),
    "distributed": Supported("2026.8.0", "2026.9.0", False, "the sweep's Dask executor runs "
                             "on it"),
}


@cache
def installed(package: str) -> str | None:
    """The installed release of `package` from its metadata (nothing imported); None if absent."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def check_dependencies(versions: dict[str, str | None] | None = None) -> list[str]:
    """The warnings about SUPPORTED packages outside their range (installed, or as given:
    package -> release, None for absent); UnsupportedVersionError naming every refused one, its
    release, the supported range and the pip command that installs a supported one."""
    refused, warned = [], []
    for name, s in SUPPORTED.items():
        got = versions[name] if versions is not None and name in versions else installed(name)
        try:
            inside = got is not None and _parse(s.minimum) <= _parse(got) < _parse(s.below)
        except UnsupportedVersionError:  # a release string that is not one
            inside = False
        if inside:
            continue
        what = f"{name} is not installed, out of" if got is None else f"{name} {got} is outside"
        line = (f"{what} the range dihal supports ({s.range}; pyproject.toml pins "
                f"{s.minimum}): {s.why}")
        (refused if s.refuse else warned).append((name, s, line))
    if refused:
        fix = " ".join(f"'{name}{s.range}'" for name, s, _ in refused)
        raise UnsupportedVersionError(
            "installed packages outside the releases dihal supports:\n"
            + "\n".join(f"  - {line}" for _, _, line in refused)
            + f"\nInstall supported releases: pip install {fix} (or `make setup` in a fresh "
            "virtualenv: pyproject.toml pins the tested ones).")
    return [f"{line}. pip install '{name}{s.range}' installs a supported release"
            for name, s, line in warned]


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
