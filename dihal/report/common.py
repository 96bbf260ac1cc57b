"""What every section of the report shares: formatting of values and intervals, the section anchors."""

from __future__ import annotations

from dihal.report.inputs import ReportInputs
from dihal.rows import Spearman


def key_value(d: dict, keys: list[str] | None = None) -> list[dict]:
    return [{"setting": k, "value": d[k]} for k in (keys or sorted(d)) if k in d]


def layers_text(layers: list[int]) -> str:
    return ("layer " if len(layers) == 1 else "layers ") + ", ".join(map(str, layers))


def on_cpu(x: ReportInputs) -> bool:
    """Whether the run was on the CPU, as the eval recorded it (its sampling threads, 0 on a
    GPU)."""
    return x.evaluate.setting.cpu_threads > 0


def interval(s: Spearman | None) -> str:
    rho, lo, hi = s.interval() if s is not None else (None, None, None)
    if rho is None:
        return "undefined"
    return f"{rho:.2f} [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else f"{rho:.2f}"


def triple(v: tuple[float | None, float | None, float | None], fmt: str = "+.2f") -> str:
    value, lo, hi = v
    if value is None:
        return "undefined"
    return f"{value:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]" if lo is not None and hi is not None \
        else f"{value:{fmt}}"


# ----------------------------------------------------------------------------- the answers
# Where each section starts: the answers link to them
LOCATE, BRIDGEABILITY, REGRESSION, SAMPLER, GENERATION, FULL, BACKBONES, SAMPLES, CONFIG = (
    "locate", "bridgeability", "regression-control", "sampler-steps", "generation",
    "full-training", "across-backbones", "samples", "configuration")
CONTROLS, COST, FRONTIER = "control-hybrids", "cost", "temperature-frontier"
