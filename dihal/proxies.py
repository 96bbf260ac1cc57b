"""The one table of the geometry proxies the layer score is made of: each proxy's column, its
sign in S_l, the score table's column of its z-score, and what it measures. The score, the
stability resamples, the plots, the report and storage all read it.

A new proxy is one entry here, its function in dihal.locate.geometry, which returns it under
`name` in every layer's row (and in the token-bootstrap replicates), and its columns' fields in
dihal.inputs: `name` in GeometryRow, `z_column` in ScoreRow. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar


@dataclass(frozen=True)
class Proxy:
    name: str  # its column in the geometry rows and the replicates
    sign: int  # +1: S_l rewards it; -1: S_l penalises it
    z_column: str  # the layer-score table's column of its z-score
    title: str
    measures: str


PROXIES = (
    Proxy("m_curv", +1, "z_curv", "local curvature",
          "the median over anchors of 1 / the largest eigenvalue of the covariance of the "
          "anchor's k nearest neighbours; higher = compact neighbourhoods"),
    Proxy("m_mono", +1, "z_mono", "global monotonicity",
          "the median over random pairs of the Rayleigh quotient of the regularised precision "
          "matrix along their difference; higher = global directional stiffness"),
    Proxy("k_eff", -1, "z_keff", "effective rank",
          "tr(Sigma) / ||Sigma||_2; lower = variance concentrated on a low-dimensional manifold"),
)
NAMES = tuple(p.name for p in PROXIES)


def _term(i: int, p: Proxy) -> str:
    op = ("" if p.sign > 0 else "-") if i == 0 else (" + " if p.sign > 0 else " - ")
    return f"{op}z({p.name})"


SCORE_FORMULA = "S_l = " + "".join(_term(i, p) for i, p in enumerate(PROXIES))

T = TypeVar("T")


def combine(z: Mapping[str, T]) -> T:
    """S_l from each proxy's z-score (numbers or arrays), added in the table's order with its
    sign: z(m_curv) + z(m_mono) - z(k_eff)."""
    total = None
    for p in PROXIES:
        v = z[p.name]
        if total is None:
            total = v if p.sign > 0 else -v
        else:
            total = total + v if p.sign > 0 else total - v
    return total
