"""Settings read from the process environment, each checked where it is read. A value outside
what its setting allows is refused with a SettingError that names the variable, its value, what
is allowed and the fix; it is never replaced by the default, clamped into range, or read as
another setting ("inf" hours is not "never", "-5" seconds is not "1").

An unset variable takes its default, and so does one set to the empty string or to spaces only
(`export DIHAL_WORKERS=` clears it, as a shell user expects). Numbers may have spaces around
them; a whole number is digits with an optional sign ("3.0" and "1e3" are not whole numbers).

The settings read in more than one place (the driver and the resources, the registry and the
resources) are read here, each with its one rule. Standard library only.
"""

from __future__ import annotations

import json
import math
import os
import re

from dihal.errors import SettingError

FLAGS = {"1": True, "true": True, "yes": True, "on": True,
         "0": False, "false": False, "no": False, "off": False}
# the device_map values of from_pretrained (accelerate) DiHAL accepts: spread over the visible
# GPUs (dihal.backbones loads with them; the driver's --device-map and DIHAL_DEVICE_MAP)
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
_DEVICE = re.compile(r"^(auto|cpu|cuda|cuda:[0-9]+)$")
_WHOLE = re.compile(r"^[+-]?[0-9]+$")
# [scheme://]host:port, the host a name, an IPv4 address or an [IPv6] address
_ADDRESS = re.compile(
    r"^(?:[a-z][a-z0-9+.-]*://)?(?:\[[0-9a-fA-F:.]+\]|[^\s/:\[\]]+):([0-9]{1,5})/?$")


def _raw(name: str) -> str | None:
    """The variable's value; None where it is unset, empty or spaces only."""
    raw = os.environ.get(name)
    return None if raw is None or not raw.strip() else raw


def refuse(name: str, raw: str, allowed: str, default: object) -> SettingError:
    """The error for `name`=`raw`: what is allowed, and the two fixes."""
    shown = "none" if default is None else default
    return SettingError(f"{name}={raw!r} in the environment: {name} must be {allowed}. Give it "
                        f"such a value, or unset it (default: {shown}).")


def _span(lo: float | None, hi: float | None) -> str:
    if hi is None:
        return f"of at least {lo}"
    return f"from {lo} to {hi}"


def env_text(name: str, default: str | None = None, *, pattern: re.Pattern | None = None,
             allowed: str = "") -> str | None:
    """$name as it is (a path, a model id), else `default`; with `pattern`, refused unless it
    matches (`allowed` says what does)."""
    raw = _raw(name)
    if raw is None:
        return default
    if pattern is not None and not pattern.match(raw):
        raise refuse(name, raw, allowed, default)
    return raw


def env_int(name: str, default: int, *, lo: int, hi: int | None = None) -> int:
    """$name as a whole number in [lo, hi] (no upper bound where `hi` is None), else `default`."""
    raw = _raw(name)
    if raw is None:
        return default
    allowed = f"a whole number {_span(lo, hi)}"
    if not _WHOLE.match(raw.strip()):
        raise refuse(name, raw, allowed, default)
    value = int(raw)
    if value < lo or (hi is not None and value > hi):
        raise refuse(name, raw, allowed, default)
    return value


def env_float(name: str, default: float, *, lo: float, hi: float) -> float:
    """$name as a finite number in [lo, hi] (never inf or nan), else `default`."""
    raw = _raw(name)
    if raw is None:
        return default
    allowed = f"a finite number {_span(lo, hi)}"
    try:
        value = float(raw)
    except ValueError:
        raise refuse(name, raw, allowed, default) from None
    if not (math.isfinite(value) and lo <= value <= hi):
        raise refuse(name, raw, allowed, default)
    return value


def env_flag(name: str, default: bool) -> bool:
    """$name as a yes/no: 1, true, yes, on or 0, false, no, off, in any case; else `default`."""
    raw = _raw(name)
    if raw is None:
        return default
    value = FLAGS.get(raw.strip().lower())
    if value is None:
        raise refuse(name, raw, f"one of {', '.join(FLAGS)} (any case)",
                     "1" if default else "0")
    return value


def env_choice(name: str, default: str | None, choices: tuple[str, ...]) -> str | None:
    """$name as one of `choices` (exactly), else `default`."""
    raw = _raw(name)
    if raw is None:
        return default
    if raw not in choices:
        raise refuse(name, raw, f"one of {', '.join(choices)}", default)
    return raw


def env_json_list(name: str) -> list[dict]:
    """$name as a JSON list of objects, else []."""
    raw = _raw(name)
    if raw is None:
        return []
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise refuse(name, raw, f"a JSON list of objects (it is not JSON: {exc})", "[]") from None
    if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
        raise refuse(name, raw, "a JSON list of objects", "[]")
    return value


# ----------------------------------- settings read by several modules, or with a rule of their own

def workers() -> int:
    """$DIHAL_WORKERS: steps at once on this host (the driver's --workers default), 1 or more."""
    return env_int("DIHAL_WORKERS", 1, lo=1)


def device() -> str:
    """$DIHAL_DEVICE: the device for model work, auto (a free GPU, else the CPU) by default."""
    return env_text("DIHAL_DEVICE", "auto", pattern=_DEVICE,
                    allowed="auto, cpu, cuda or cuda:<index> (e.g. cuda:0)")


def hub_offline() -> bool:
    """$HF_HUB_OFFLINE: whether model loading stays off the Hugging Face hub; yes by default."""
    return env_flag("HF_HUB_OFFLINE", True)


def device_map() -> str | None:
    """$DIHAL_DEVICE_MAP: one of DEVICE_MAPS, else None (the step's one device)."""
    return env_choice("DIHAL_DEVICE_MAP", None, DEVICE_MAPS)


def dask_scheduler() -> str | None:
    """$DIHAL_DASK_SCHEDULER: the Dask scheduler's address ([scheme://]host:port), else None."""
    raw = env_text("DIHAL_DASK_SCHEDULER", pattern=_ADDRESS,
                   allowed="a scheduler address [scheme://]host:port, e.g. tcp://host:8786")
    if raw is not None and not 1 <= int(_ADDRESS.match(raw).group(1)) <= 65535:
        raise refuse("DIHAL_DASK_SCHEDULER", raw, "an address whose port is from 1 to 65535", None)
    return raw
