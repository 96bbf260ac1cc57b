"""What the report reads, typed family by family (Locate and Replace here, and the backbones'
summaries; the generation families in dihal.generation_inputs): each family's rows and summaries as frozen
dataclasses, made with `from_dict` from the tables and manifest infos that storage reads
back, so the report reads attributes, not column names. A key its stage writes only in
some cases is optional (None, or empty); every other is required: what an older version of
a stage wrote is refused as stale before it is read (storage's Artifact.require). Standard
library only (dihal.report.inputs builds ReportInputs from these).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dihal.config import BridgeProtocol, EvalConfig, GeometryConfig
from dihal.generation_rows import GenerationRow, generation_rows
from dihal.rows import (
    BridgeMetrics,
    Columns,
    PrimaryTest,
    RegressionRow,
    SpearmanRow,
    regression_rows,
    spearman_rows,
)

# -------------------------------------------------------------------------------- Locate


@dataclass(frozen=True)
class GeometryRow(Columns):
    """One layer's geometry proxies under one normalisation (the geometry table's row, as
    dihal.locate.stage.compute_geometry makes it from dihal.locate.geometry.layer_proxies): the
    proxies of the score (dihal.proxies.NAMES: m_curv, m_mono, k_eff), the other monotonicity
    statistics and the spectrum's trace and largest eigenvalue."""

    layer: int
    norm: str
    m_curv: float
    m_mono: float  # the statistic GeometryConfig.mono_stat names
    m_mono_median: float
    m_mono_q05: float
    m_mono_min_eig: float
    k_eff: float
    tr_sigma: float
    lambda_max: float


@dataclass(frozen=True)
class TokenResamples:
    """The geometry proxies' token-bootstrap replicates (dihal.locate.stage.compute_geometry), as
    the columns of one table: one row per (replicate, layer, normalisation), with the score's
    proxies (dihal.proxies.NAMES) recomputed on that replicate of the sampled tokens. Empty
    where the geometry stage drew none."""

    resample: list[int] = field(default_factory=list)
    layer: list[int] = field(default_factory=list)
    norm: list[str] = field(default_factory=list)
    m_curv: list[float] = field(default_factory=list)
    m_mono: list[float] = field(default_factory=list)
    k_eff: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        lengths = {k: len(getattr(self, k)) for k in self.__dataclass_fields__}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"the token resamples' columns differ in length: {lengths}")

    def __len__(self) -> int:
        return len(self.resample)

    def columns(self) -> dict[str, list]:
        """The table's columns, in order (what storage writes)."""
        return {k: list(getattr(self, k)) for k in self.__dataclass_fields__}

    @classmethod
    def from_columns(cls, columns: dict[str, list]) -> TokenResamples:
        """From `columns()`'s dict (a stored table); a missing or unknown column is refused
        by name."""
        names = set(cls.__dataclass_fields__)
        if set(columns) != names:
            raise ValueError(f"the token resamples need exactly the columns {sorted(names)}: "
                             f"missing {sorted(names - set(columns))}, unknown "
                             f"{sorted(set(columns) - names)}")
        return cls(**{k: list(columns[k]) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class ScoreRow(GeometryRow):
    """One layer's score under one normalisation (the layer score table's row, as
    dihal.locate.score.layer_scores makes it): its geometry row, each proxy's z-score over the
    candidate layers (Proxy.z_column), S_l, whether it is a candidate, and its rank (1: l*).
    Layer 0 is no candidate: NaN z-scores and S, rank None."""

    z_curv: float
    z_mono: float
    z_keff: float
    S: float
    candidate: bool
    rank: int | None


@dataclass(frozen=True)
class PredictorRow(Columns):
    """The rival predictors of one candidate layer (dihal.locate.predictors.layer_predictors;
    their names are dihal.locate.predictors.PREDICTORS): the predictors table's row."""

    layer: int
    cond_distance: float
    cond_cka: float
    block_influence: float
    ridge_r2: float
    twonn_id: float
    massive_share: float


@dataclass(frozen=True)
class Picks:
    """l* over bootstrap replicates (dihal.locate.stability.pick_summary, or the token
    bootstrap's dihal.locate.stage.l_star_stability, which also counts the replicates it
    `dropped`): the full sample's l*, the share of replicates picking it again, the picked
    layer's 95 % range, and each layer's share."""

    l_star: int
    same: float
    low: int
    high: int
    replicates: int
    picks: dict[int, float]  # layer -> share
    dropped: int | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Picks | None:
        if d is None:
            return None
        return cls(d["l_star"], d["same"], d["low"], d["high"], d["replicates"],
                   {int(k): v for k, v in d["picks"].items()}, d.get("dropped"))

    def to_dict(self) -> dict[str, Any]:
        out = {"l_star": self.l_star, "same": self.same, "low": self.low, "high": self.high,
               "replicates": self.replicates, "picks": self.picks}
        return out if self.dropped is None else {**out, "dropped": self.dropped}

    def shares(self, n: int = 4) -> str:
        """The `n` most picked layers with their shares, most picked first (ties: the
        shallower first), whatever the order of `picks` (a manifest keeps it by key)."""
        ranked = sorted(self.picks.items(), key=lambda t: (-t[1], t[0]))
        return ", ".join(f"{ll}: {sh:.0%}" for ll, sh in ranked[:n])


@dataclass(frozen=True)
class SplitHalves:
    """l* on disjoint halves of the held-out sequences: each split's pair of l*, and the share
    of splits whose halves agree."""

    splits: list[tuple[int, int]]
    agreement: float

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SplitHalves | None:
        if d is None:
            return None
        return cls([(s["l_star_a"], s["l_star_b"]) for s in d["splits"]], d["agreement"])

    def to_dict(self) -> dict[str, Any]:
        return {"splits": [{"l_star_a": a, "l_star_b": b, "agree": a == b}
                           for a, b in self.splits], "agreement": self.agreement}


@dataclass(frozen=True)
class SequenceStability:
    """l*'s stability under the primary normalisation `norm` over whole held-out sequences
    (dihal.locate.stage.sequence_stability): the bootstrap and the split halves (each None
    where its count is 0), the sequences and the seconds; every field None where neither ran."""

    norm: str | None = None
    bootstrap: Picks | None = None
    split_half: SplitHalves | None = None
    sequences: int | None = None
    seconds: float | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SequenceStability:
        if not d:
            return cls()
        return cls(d["norm"], Picks.from_dict(d["bootstrap"]),
                   SplitHalves.from_dict(d["split_half"]), d["sequences"], d["seconds"])

    def to_dict(self) -> dict[str, Any]:
        if self.norm is None:
            return {}
        return {"norm": self.norm,
                "bootstrap": self.bootstrap.to_dict() if self.bootstrap is not None else None,
                "split_half": self.split_half.to_dict() if self.split_half is not None else None,
                "sequences": self.sequences, "seconds": self.seconds}


@dataclass(frozen=True)
class LayerScoreSummary:
    """The layer score's answer, as its stage makes it, its manifest keeps it (`to_dict`) and
    the report reads it back (`from_dict`): l* under the primary normalisation, l* and the
    Spearman of S_l with depth per normalisation, and l*'s stability over the token bootstrap
    (per normalisation; empty where the geometry drew no replicates) and over whole sequences."""

    l_star: int
    selected: dict[str, int]
    spearman_vs_depth: dict[str, float | None]
    stability: dict[str, Picks] = field(default_factory=dict)  # normalisation -> token bootstrap
    sequence_stability: SequenceStability = field(default_factory=SequenceStability)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LayerScoreSummary:
        return cls(d["l_star"], dict(d["selected"]), dict(d["spearman_vs_depth"]),
                   {n: Picks.from_dict(v) for n, v in d["stability"].items()},
                   SequenceStability.from_dict(d["sequence_stability"]))

    def to_dict(self) -> dict[str, Any]:
        return {"l_star": self.l_star, "selected": self.selected,
                "spearman_vs_depth": self.spearman_vs_depth,
                "stability": {n: p.to_dict() for n, p in self.stability.items()},
                "sequence_stability": self.sequence_stability.to_dict()}


@dataclass(frozen=True)
class LocateInputs:
    """The Locate family: the geometry proxies, the rival predictors, the scores and the
    score's summary."""

    geometry: list[GeometryRow]
    predictors: list[PredictorRow]
    scores: list[ScoreRow]
    score: LayerScoreSummary


# ------------------------------------------------------------------------------- Replace


@dataclass(frozen=True)
class OracleWorst:
    """The oracle (best) and the worst swept layer by one measure."""

    oracle: int
    worst: int

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OracleWorst:
        return cls(d["oracle"], d["worst"])

    def to_dict(self) -> dict[str, Any]:
        return {"oracle": self.oracle, "worst": self.worst}


@dataclass(frozen=True)
class OracleBy:
    """The oracle and the worst swept layer by each measure (dihal.uncertainty
    .oracle_by_measures), the measure full training followed (`chosen_by`) and whether the
    measures disagree."""

    by: dict[str, OracleWorst] = field(default_factory=dict)
    chosen_by: str | None = None
    oracle_disagree: bool = False
    worst_disagree: bool = False

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OracleBy:
        return cls({m: OracleWorst.from_dict(v) for m, v in d["by"].items()}, d["chosen_by"],
                   bool(d["oracle_disagree"]), bool(d["worst_disagree"]))

    def to_dict(self) -> dict[str, Any]:
        return {"by": {m: o.to_dict() for m, o in self.by.items()}, "chosen_by": self.chosen_by,
                "oracle_disagree": self.oracle_disagree, "worst_disagree": self.worst_disagree}


@dataclass(frozen=True)
class SeedSpread:
    """One measure at one layer over its training seeds (dihal.uncertainty.seed_spread): mean,
    sd (None or NaN with one seed), min and max."""

    mean: float
    sd: float | None
    min: float
    max: float
    layer: int | None = None
    n_seeds: int = 1

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SeedSpread:
        return cls(d["mean"], d["sd"], d["min"], d["max"], d["layer"], d["n_seeds"])

    def to_dict(self) -> dict[str, Any]:
        return {"layer": self.layer, "n_seeds": self.n_seeds, "mean": self.mean, "sd": self.sd,
                "min": self.min, "max": self.max}


# l*'s standing over resampled seeds: seed_oracle writes these where it was given l*
_L_STAR_STANDING = ("l_star_rank", "l_star_rank_low", "l_star_rank_high", "l_star_is_oracle",
                    "gap", "gap_low", "gap_high")


@dataclass(frozen=True)
class SeedOracle:
    """Where the oracle by hybrid NLL goes over resampled seeds (dihal.uncertainty.seed_oracle):
    the oracle, the share of resamples that keep it, each layer's share (`picks`), and, where
    l* was given, its rank, its share as the oracle and its gap to the best mean, with
    intervals (None otherwise)."""

    oracle: int
    oracle_share: float
    picks: dict[int, float] = field(default_factory=dict)
    l_star_rank: int | None = None
    l_star_rank_low: int | None = None
    l_star_rank_high: int | None = None
    l_star_is_oracle: float | None = None
    gap: float | None = None
    gap_low: float | None = None
    gap_high: float | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SeedOracle:
        return cls(d["oracle"], d["oracle_share"], {int(k): v for k, v in d["picks"].items()},
                   **{k: d[k] for k in _L_STAR_STANDING if k in d})

    def to_dict(self) -> dict[str, Any]:
        out = {"oracle": self.oracle, "oracle_share": self.oracle_share, "picks": self.picks}
        if self.l_star_rank is not None:
            out.update({k: getattr(self, k) for k in _L_STAR_STANDING})
        return out


@dataclass(frozen=True)
class SeedInfo:
    """The sweep's training seeds: the most per layer, each measure's spread per layer, the
    oracle over seeds, and the replicates' count and time."""

    n_seeds: int
    spread: dict[str, list[SeedSpread]]
    oracle: SeedOracle
    replicates: int
    replicate_seconds: float
    bridge_seconds: float

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SeedInfo | None:
        """The seeds, or None where every swept layer had one (an empty dict)."""
        if not d:
            return None
        return cls(d["n_seeds"], {m: [SeedSpread.from_dict(r) for r in rows]
                                  for m, rows in d["spread"].items()},
                   SeedOracle.from_dict(d["oracle"]), d["replicates"], d["replicate_seconds"],
                   d["bridge_seconds"])

    def to_dict(self) -> dict[str, Any]:
        return {"n_seeds": self.n_seeds,
                "spread": {m: [r.to_dict() for r in rows] for m, rows in self.spread.items()},
                "oracle": self.oracle.to_dict(), "replicates": self.replicates,
                "replicate_seconds": self.replicate_seconds, "bridge_seconds": self.bridge_seconds}

    def counts(self) -> dict[int, int]:
        """layer -> its training seeds (the kept bridge and its replicates)."""
        first = next(iter(self.spread.values()), [])
        return {int(r.layer): int(r.n_seeds) for r in first}


@dataclass(frozen=True)
class BridgeabilitySummary:
    """Bridgeability's answer, as its stage makes it, its manifest keeps it (`to_dict`) and the
    report reads it back (`from_dict`): l*, the oracle and worst swept layer, the swept
    layers, the Spearman and regression tables, the pre-registered primary test, the oracle by
    each measure and the training seeds (None: one seed a layer)."""

    l_star: int
    oracle: int  # the swept layer full training follows (by oracle_by.chosen_by)
    worst: int
    swept_layers: list[int]
    spearman: list[SpearmanRow]  # one per predictor
    regression: list[RegressionRow]  # the bridge against its control, per layer that has both
    primary: PrimaryTest
    oracle_by: OracleBy
    seeds: SeedInfo | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BridgeabilitySummary:
        if d["primary"] is None:
            raise ValueError("a bridgeability summary without its pre-registered primary test "
                             "(the bridgeability stage always runs it)")
        return cls(d["l_star"], d["oracle"], d["worst"], list(d["swept_layers"]),
                   spearman_rows(d["spearman"]), regression_rows(d["regression"]),
                   PrimaryTest.from_dict(d["primary"]), OracleBy.from_dict(d["oracle_by"]),
                   SeedInfo.from_dict(d["seeds"]))

    def to_dict(self) -> dict[str, Any]:
        return {"l_star": self.l_star, "oracle": self.oracle, "worst": self.worst,
                "oracle_by": self.oracle_by.to_dict(),
                "seeds": self.seeds.to_dict() if self.seeds is not None else {},
                "swept_layers": self.swept_layers,
                "spearman": [r.to_dict() for r in self.spearman],
                "regression": [r.to_dict() for r in self.regression],
                "primary": self.primary.to_dict()}


@dataclass(frozen=True)
class ReplaceInputs:
    """The Replace family: bridgeability's summary, every swept layer's bridge, and the
    protocol the sweep trained them under (the oracle's, as its bridge stored it)."""

    info: BridgeabilitySummary
    layers: list[BridgeMetrics]
    protocol: BridgeProtocol

    @classmethod
    def from_dicts(cls, bridgeability: dict[str, Any], sweep_layers: list[BridgeMetrics],
                   sweep_protocol: dict[str, Any]) -> ReplaceInputs:
        """`sweep_protocol`: the oracle's bridge's stored config (BridgeProtocol.to_dict)."""
        return cls(BridgeabilitySummary.from_dict(bridgeability), list(sweep_layers),
                   BridgeProtocol(**sweep_protocol))


# ------------------------------------------------------------------------------ Backbones


@dataclass(frozen=True)
class Placement:
    """Where a device_map spread a backbone's decoder blocks: the mode it was loaded with
    ("auto", ...) and how many blocks each device holds (device -> count, in block order)."""

    mode: str
    blocks: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "blocks": dict(self.blocks)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Placement:
        return cls(str(d["mode"]), {str(k): int(v) for k, v in d["blocks"].items()})


@dataclass(frozen=True)
class BackboneInfo:
    """A loaded backbone as Backbone.info() describes it and the hidden-state dump records it
    (its manifest and the Zarr store's attributes): what the report names and sizes it by."""

    backbone: str  # the registry's name
    hf_id: str
    revision: str
    origin: str  # where its weights came from (dihal.identity)
    architecture: str
    n_layers: int
    hidden_size: int
    vocab_size: int
    n_parameters: int
    # where a device_map put the decoder blocks; None for a model on one device
    device_map: Placement | None

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        return {**out, "device_map": None if self.device_map is None else self.device_map.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BackboneInfo:
        fields = {k: d[k] for k in cls.__dataclass_fields__}
        placed = fields["device_map"]
        return cls(**{**fields, "device_map": None if placed is None else Placement.from_dict(placed)})


@dataclass(frozen=True)
class BackboneSummary:
    """One materialised backbone's line of the cross-backbone tables (storage's
    backbone_summary): l* per normalisation, the oracle and worst swept layer, the swept
    layers, the Spearman rows, and where it was evaluated its eval's rows and judge (None:
    not evaluated)."""

    backbone: str
    selected: dict[str, int]
    oracle: int
    worst: int
    swept_layers: list[int]
    spearman: list[SpearmanRow]
    eval_rows: list[GenerationRow] | None = None
    judge: str | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BackboneSummary:
        """From {"backbone", "selected", "bridgeability" (its info), "eval_rows", "judge"}."""
        b, rows = d["bridgeability"], d.get("eval_rows")
        return cls(d["backbone"], dict(d["selected"]), b["oracle"], b["worst"],
                   list(b["swept_layers"]), spearman_rows(b["spearman"]),
                   None if rows is None else generation_rows(rows), d.get("judge"))

    def by_role(self) -> dict[str, GenerationRow]:
        """The eval's rows by role (none where not evaluated)."""
        return {r.role: r for r in self.eval_rows or []}


# ------------------------------------------------------------------- configs and plots


@dataclass(frozen=True)
class StageConfigs:
    """The config each stage ran with (`stages`, shown as it is), and the configs the report
    quotes settings from: the layer score's primary normalisation, the geometry stage's and the
    eval's configs (dihal.config, as they stored them)."""

    stages: dict[str, dict[str, Any]]
    primary_norm: str
    geometry: GeometryConfig
    eval: EvalConfig

    @classmethod
    def from_dict(cls, configs: dict[str, dict[str, Any]]) -> StageConfigs:
        return cls(dict(configs), configs["layer_score"]["primary_norm"],
                   GeometryConfig(**configs["geometry"]), EvalConfig(**configs["eval"]))


@dataclass(frozen=True)
class Plots:
    """The stages' plots (PNG bytes) the report shows: the proxies and the layer score per
    layer, and the score against bridgeability."""

    proxies: bytes = field(repr=False)
    score: bytes = field(repr=False)
    scatter: bytes = field(repr=False)
