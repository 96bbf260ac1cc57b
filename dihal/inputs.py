"""What the report reads, typed family by family (Locate, ...): each family's rows and
summaries as frozen dataclasses, made with `from_dict` from the tables and manifest infos that
storage reads back, so the report reads attributes, not column names. Every `from_dict` reads
older artifacts too: a column or key added later is optional (None, or empty). Standard
library only (dihal.results builds ReportInputs from these).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# -------------------------------------------------------------------------------- Locate


@dataclass(frozen=True)
class GeometryRow:
    """One layer's geometry proxies under one normalisation (the geometry table's row)."""

    layer: int
    norm: str
    proxies: dict[str, float]  # proxy name (dihal.proxies.NAMES) -> value; the other columns

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GeometryRow:
        return cls(d["layer"], d["norm"],
                   {k: v for k, v in d.items() if k not in ("layer", "norm")})


@dataclass(frozen=True)
class ScoreRow:
    """One layer's score S_l under one normalisation (None: layer 0, which has no score)."""

    layer: int
    norm: str
    S: float | None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ScoreRow:
        return cls(d["layer"], d["norm"], d.get("S"))


@dataclass(frozen=True)
class Picks:
    """l* over bootstrap replicates (dihal.locate.stability.pick_summary, or the token
    bootstrap's dihal.locate.stage.l_star_stability): the full sample's l*, the share of
    replicates picking it again, the picked layer's 95 % range, and each layer's share (most
    picked first)."""

    l_star: int
    same: float
    low: int
    high: int
    replicates: int
    picks: dict[Any, float]  # layer (a string where read back from JSON) -> share

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Picks | None:
        if not d:
            return None
        return cls(d["l_star"], d["same"], d["low"], d["high"], d["replicates"],
                   dict(d.get("picks") or {}))

    def shares(self, n: int = 4) -> str:
        """The `n` most picked layers with their shares."""
        return ", ".join(f"{ll}: {sh:.0%}" for ll, sh in list(self.picks.items())[:n])


@dataclass(frozen=True)
class SplitHalves:
    """l* on disjoint halves of the held-out sequences: each split's pair of l*, and the share
    of splits whose halves agree."""

    splits: list[tuple[int, int]]
    agreement: float

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SplitHalves | None:
        if not d:
            return None
        return cls([(s["l_star_a"], s["l_star_b"]) for s in d["splits"]], d["agreement"])


@dataclass(frozen=True)
class SequenceStability:
    """l*'s stability under the primary normalisation over whole held-out sequences
    (dihal.locate.stage.sequence_stability): the bootstrap and the split halves, each None
    where not run; `seconds` None where not recorded."""

    bootstrap: Picks | None = None
    split_half: SplitHalves | None = None
    sequences: int | None = None
    seconds: float | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SequenceStability:
        d = d or {}
        return cls(Picks.from_dict(d.get("bootstrap")), SplitHalves.from_dict(d.get("split_half")),
                   d.get("sequences"), d.get("seconds"))


@dataclass(frozen=True)
class LayerScoreInfo:
    """The layer score's summary (LayerScoreResult.info()): l* under the primary
    normalisation, l* and the Spearman of S_l with depth per normalisation, and l*'s
    stability (empty / not run in older artifacts)."""

    l_star: int
    selected: dict[str, int]
    spearman_vs_depth: dict[str, float | None]
    stability: dict[str, Picks] = field(default_factory=dict)  # normalisation -> token bootstrap
    sequence_stability: SequenceStability = field(default_factory=SequenceStability)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LayerScoreInfo:
        return cls(d["l_star"], dict(d["selected"]), dict(d["spearman_vs_depth"]),
                   {n: Picks.from_dict(v) for n, v in (d.get("stability") or {}).items() if v},
                   SequenceStability.from_dict(d.get("sequence_stability")))


@dataclass(frozen=True)
class LocateInputs:
    """The Locate family: the geometry proxies, the rival predictors (shown as they are: their
    columns vary with the predictors run), the scores and the score's summary."""

    geometry: list[GeometryRow]
    predictors: list[dict[str, Any]]
    scores: list[ScoreRow]
    score: LayerScoreInfo

    @classmethod
    def from_dicts(cls, geometry_rows: list[dict], predictor_rows: list[dict],
                   score_rows: list[dict], score: dict[str, Any]) -> LocateInputs:
        return cls([GeometryRow.from_dict(g) for g in geometry_rows],
                   [dict(p) for p in predictor_rows],
                   [ScoreRow.from_dict(s) for s in score_rows], LayerScoreInfo.from_dict(score))
