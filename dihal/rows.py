"""Typed rows of the tables that cross modules: made by one stage (dihal.replace.stage, the
generation stages), written by storage, read by the report, the driver and the checks.

Each row serialises to exactly the columns its artifact has (`to_dict`, in that column order;
SpearmanRow gained the paired test's columns with bridgeability 3) and reads them back
(`from_dict`, older rows included). The composed column names ("spearman_vs_-val_loss", "vs_depth_-val_loss", ...)
are spelt here and nowhere else. Standard library only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# The bridgeability targets, each taken with its sign flipped (higher is better)
TARGETS = ("val_loss", "recon_error", "hybrid_nll")
DEPTH = "depth (-l)"  # the depth control's predictor name
ABOVE, BELOW, TIED = "above", "below", "not distinguishable"  # standings against depth


def number(v: Any) -> float | None:
    """A finite-or-infinite float, or None for a missing value (None, ABSENT) and NaN (no
    number)."""
    return None if v is None or v is ABSENT or v != v else float(v)


class ByColumns:
    """from_dict for a row whose fields are its stored columns, by name; a column missing from
    an older row reads as None."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Spearman:
    """A predictor's Spearman correlation with one target over the swept layers, its 95 %
    bootstrap interval over layers, and where it stands against depth's: "above" / "below" /
    "not distinguishable" (decided by the paired difference rho - depth's rho, with the same
    resamples of layers for both, its p-value Holm-corrected over predictors x targets:
    dihal.uncertainty.paired_standing), or "" for depth itself. Beside it the paired
    difference with its interval, the raw and corrected p-values, and the partial Spearman of
    the predictor with the target given depth, with its interval (None for depth, and in rows
    written before the paired test)."""

    rho: float
    low: float
    high: float
    vs_depth: str = ""
    diff: float | None = None
    diff_low: float | None = None
    diff_high: float | None = None
    p: float | None = None
    p_holm: float | None = None
    partial: float | None = None
    partial_low: float | None = None
    partial_high: float | None = None
    # the share of resamples in which the partial Spearman was undefined (the drawn layers
    # ranked alike by the predictor, or the target, and depth); its interval is None where
    # that share exceeds dihal.uncertainty.MAX_UNDEFINED; None in rows written before it
    partial_undefined: float | None = None

    def interval(self) -> tuple[float | None, float | None, float | None]:
        """(rho, low, high), None where undefined (NaN or missing)."""
        return number(self.rho), number(self.low), number(self.high)

    def difference(self) -> tuple[float | None, float | None, float | None]:
        """(paired difference from depth, low, high), None where undefined or not computed."""
        return number(self.diff), number(self.diff_low), number(self.diff_high)

    def partial_interval(self) -> tuple[float | None, float | None, float | None]:
        """(partial Spearman given depth, low, high), None where undefined or not computed."""
        return number(self.partial), number(self.partial_low), number(self.partial_high)


# the paired test's columns, after the four older ones of each target: field -> column name
_PAIRED = {"diff": "diff_vs_depth_-{}", "diff_low": "diff_low_vs_depth_-{}",
           "diff_high": "diff_high_vs_depth_-{}", "p": "p_vs_depth_-{}",
           "p_holm": "p_holm_vs_depth_-{}", "partial": "partial_given_depth_-{}",
           "partial_low": "partial_low_given_depth_-{}",
           "partial_high": "partial_high_given_depth_-{}",
           "partial_undefined": "partial_undefined_given_depth_-{}"}


@dataclass(frozen=True)
class SpearmanRow:
    """One predictor's line of bridgeability's Spearman table."""

    predictor: str
    targets: dict[str, Spearman]  # target (TARGETS) -> its Spearman

    @property
    def is_depth(self) -> bool:
        return self.predictor == DEPTH

    def of(self, target: str = "val_loss") -> Spearman | None:
        return self.targets.get(target)

    def to_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {"predictor": self.predictor}
        for m, s in self.targets.items():
            row.update({f"spearman_vs_-{m}": s.rho, f"low_vs_-{m}": s.low,
                        f"high_vs_-{m}": s.high, f"vs_depth_-{m}": s.vs_depth})
            row.update({col.format(m): getattr(s, f) for f, col in _PAIRED.items()})
        return row

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SpearmanRow:
        """The row of its columns; a target is read where its Spearman column is there (an
        older or partial row may lack the interval, the standing and the paired test)."""
        return cls(d["predictor"], {
            m: Spearman(d[f"spearman_vs_-{m}"], d.get(f"low_vs_-{m}"), d.get(f"high_vs_-{m}"),
                        d.get(f"vs_depth_-{m}") or "",
                        **{f: number(d.get(col.format(m))) for f, col in _PAIRED.items()})
            for m in TARGETS if f"spearman_vs_-{m}" in d})


def spearman_rows(rows: list[dict]) -> list[SpearmanRow]:
    return [SpearmanRow.from_dict(r) for r in rows]


# The pre-registered primary test's target: the measure full training follows (hybrid NLL, the
# one closest to generation), taken with its sign flipped as every target
PRIMARY_TARGET = "hybrid_nll"


@dataclass(frozen=True)
class PrimaryTest:
    """The one pre-registered test of bridgeability (dihal.uncertainty.primary_test): S_l under
    the primary normalisation against depth on -PRIMARY_TARGET over the swept layers,
    one-sided (H1: S_l's Spearman is higher), its p-value from `n_boot` resamples of layers,
    and the design's floor: `p_min`, the smallest p any target could have given at these
    layers (`ties`: the share of resamples in which S_l and depth rank the drawn layers
    alike), with the floor at every candidate layer (`p_min_all`, over `layers_all`) and the
    fewest evenly spread swept layers whose floor is under alpha (`layers_needed`; None where
    not even all candidates reach it). `verdict`: "better", "not distinguishable" or "design
    cannot decide" (dihal.uncertainty.PRIMARY_*)."""

    predictor: str
    target: str
    rho: float
    rho_reference: float
    diff: float
    low: float
    p: float
    p_min: float
    ties: float
    undefined: float
    n_boot: int
    layers: int
    alpha: float
    verdict: str
    p_min_all: float | None = None
    layers_all: int | None = None
    layers_needed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> PrimaryTest | None:
        """The test as stored (None: a table computed without a primary normalisation)."""
        return None if d is None else cls(**d)


@dataclass(frozen=True)
class RegressionRow:
    """The diffusion bridge against its regression control at one swept layer
    (bridgeability's regression table)."""

    layer: int
    bridge_recon_error: float
    regression_recon_error: float
    bridge_hybrid_nll: float
    regression_hybrid_nll: float
    bridge_top1: float
    regression_top1: float
    regression_mse: float  # the control's validation loss

    @property
    def bridge_better_nll(self) -> bool:
        return self.bridge_hybrid_nll < self.regression_hybrid_nll

    @property
    def bridge_better_recon(self) -> bool:
        return self.bridge_recon_error < self.regression_recon_error

    @classmethod
    def of(cls, bridge, control) -> RegressionRow:
        """From the two BridgeMetrics of one layer."""
        return cls(layer=bridge.layer, bridge_recon_error=bridge.recon_error,
                   regression_recon_error=control.recon_error,
                   bridge_hybrid_nll=bridge.hybrid_nll,
                   regression_hybrid_nll=control.hybrid_nll, bridge_top1=bridge.top1_agreement,
                   regression_top1=control.top1_agreement, regression_mse=control.val_loss)

    def to_dict(self) -> dict[str, Any]:
        return {"layer": self.layer, "bridge_recon_error": self.bridge_recon_error,
                "regression_recon_error": self.regression_recon_error,
                "bridge_hybrid_nll": self.bridge_hybrid_nll,
                "regression_hybrid_nll": self.regression_hybrid_nll,
                "bridge_top1": self.bridge_top1, "regression_top1": self.regression_top1,
                "regression_mse": self.regression_mse,
                "bridge_better_nll": self.bridge_better_nll,
                "bridge_better_recon": self.bridge_better_recon}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RegressionRow:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


def regression_rows(rows: list[dict]) -> list[RegressionRow]:
    return [RegressionRow.from_dict(r) for r in rows]


class Absent:
    """The value of a column a row does not have, distinct from a stored None: `to_dict` leaves
    it out. One instance, ABSENT; false in a test, as a missing value is."""

    _one: Absent | None = None

    def __new__(cls) -> Absent:
        if cls._one is None:
            cls._one = super().__new__(cls)
        return cls._one

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> tuple:
        return Absent, ()


ABSENT = Absent()


def or_none(v: Any) -> Any:
    """A column's value, None where the row has no such column."""
    return None if v is ABSENT else v


@dataclass(frozen=True)
class Estimate:
    """A generation metric with its 95 % interval over samples: its three columns as the row
    stored them (`stored`, `stored_low`, `stored_high`; a NaN kept, ABSENT where the row has
    no such column), read by `value`, `low` and `high` as numbers (None: missing or NaN)."""

    stored: Any = ABSENT
    stored_low: Any = ABSENT
    stored_high: Any = ABSENT

    @property
    def value(self) -> float | None:
        return number(self.stored)

    @property
    def low(self) -> float | None:
        return number(self.stored_low)

    @property
    def high(self) -> float | None:
        return number(self.stored_high)

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    def separated_from(self, other: Estimate) -> bool:
        """The two intervals do not overlap (False where either is missing)."""
        if not (self.has_interval and other.has_interval):
            return False
        return self.high < other.low or other.high < self.low

    def below(self, other: Estimate) -> bool:
        """This value is lower than `other`'s (False where either is missing, as NaN compares)."""
        return self.value is not None and other.value is not None and self.value < other.value

    def formatted(self, fmt: str) -> str:
        """The value alone in `fmt`, "nan" where missing (a NaN as the row stored it)."""
        return format(float("nan") if self.value is None else self.value, fmt)

    def text(self, fmt: str = ".1f") -> str:
        """"value [low, high]", "value" without an interval, "n/a" without a value."""
        if self.value is None:
            return "n/a"
        if not self.has_interval:
            return f"{self.value:{fmt}}"
        return f"{self.value:{fmt}} [{self.low:{fmt}}, {self.high:{fmt}}]"


# ------------------------------------------------------------------ the generation rows
# The kinds of generation row, each a table's row with its own columns in its own order (the
# order its writer gives them, which Parquet keeps): the eval's rows (DiHAL, the backbone, the
# control hybrids: dihal.evaluate.generation), the comparison's (dihal.compare.stage
# .comparison), the temperature frontier's points (dihal.evaluate.frontier.point), a
# baseline's row and its row at the recipe's own temperature (dihal.compare.stage.baseline),
# and the generation columns of full training's rows (dihal.generation_inputs.FullTrainingRow)
EVAL_ROW, COMPARISON_ROW, FRONTIER_POINT = "eval", "comparison", "frontier point"
BASELINE_ROW, FULL_TRAINING_GENERATION = "baseline", "full training"

# dihal.evaluate.generation.text_metrics's columns, in its order
TEXT_METRICS = ("gen_ppl", "gen_ppl_mean", "judge_tokens", "n_samples", "empty_samples",
                "empty_rate", "empty_rate_low", "empty_rate_high", "diversity", "diversity_spacy",
                "repetition", "mean_length", "mean_judge_length", "gen_ppl_low", "gen_ppl_high",
                "gen_ppl_mean_low", "gen_ppl_mean_high", "diversity_low", "diversity_high",
                "sample_nll", "sample_tokens", "gen_ppl_at_length", "gen_ppl_at_length_low",
                "gen_ppl_at_length_high", "ppl_length", "ppl_length_scored", "ppl_length_short",
                "ppl_length_empty", "mauve", "mauve_low", "mauve_high", "mauve_buckets",
                "mauve_kmeans_seeds", "mauve_seed_min", "mauve_seed_max", "mauve_n_p",
                "mauve_n_q", "mauve_diagnostic")
# the paired difference of a row's log Gen.PPL from DiHAL's (dihal.evaluate.generation
# .paired_against_first)
PAIRED_COLUMNS = ("dihal_log_ppl_diff", "dihal_log_ppl_diff_low", "dihal_log_ppl_diff_high",
                  "dihal_log_ppl_diff_p", "dihal_verdict", "paired_samples")
# Gen.PPL both ways, diversity and MAUVE, each with its interval over samples
GENERATION_KEYS = tuple(f"{m}{end}" for m in ("gen_ppl", "gen_ppl_mean", "diversity", "mauve")
                        for end in ("", "_low", "_high"))
# what every comparison and full-training row carries beside GENERATION_KEYS: diversity with
# spaCy's tokens, length in judge tokens, Gen.PPL on the first ppl_length judge tokens of every
# sample, the decoding temperature, MAUVE's sample counts and diagnostic flag, and the
# per-sample judge NLL and token counts (log_ppl_difference, samples_for_effect)
LENGTH_KEYS = ("diversity_spacy", "mean_judge_length", "gen_ppl_at_length",
               "gen_ppl_at_length_low", "gen_ppl_at_length_high", "ppl_length",
               "ppl_length_scored", "ppl_length_short", "temperature", "mauve_diagnostic",
               "mauve_n_p", "mauve_n_q", "mauve_kmeans_seeds", "sample_nll", "sample_tokens",
               # the failed (empty) samples (metrics.empty_rate) and those short of L
               "n_samples", "empty_samples", "empty_rate", "empty_rate_low", "empty_rate_high",
               "ppl_length_empty")
# what a frontier point keeps of a row's metrics (beside model, role, temperature)
POINT_KEYS = ("gen_ppl", "gen_ppl_low", "gen_ppl_high", "gen_ppl_at_length",
              "gen_ppl_at_length_low", "gen_ppl_at_length_high", "ppl_length", "diversity",
              "diversity_low", "diversity_high", "diversity_spacy", "repetition", "mean_length",
              "mean_judge_length", "empty_samples", "ms_per_token", "n_samples")
# a comparison row's budget (the backbone's: None)
BUDGET_COLUMNS = ("denoiser_parameters", "train_tokens", "sampler_steps", "seq_len")
# each kind's columns, in the order its writer gives them
GENERATION_COLUMNS = {
    EVAL_ROW: ("model", "role", *TEXT_METRICS, "ms_per_token", "ms_per_step", "length",
               "temperature", "start_token", "start_token_id", "cpu_threads", "cpu_kernels",
               "layer", "steps", "rule", "latency_vs_backbone", *PAIRED_COLUMNS, "train_tokens",
               "denoiser_parameters", "ridge_lambda", "ridge_val_mse"),
    COMPARISON_ROW: ("model", "role", *GENERATION_KEYS, "repetition", "mean_length",
                     *LENGTH_KEYS, *BUDGET_COLUMNS, "train_steps", "layer", *PAIRED_COLUMNS),
    FRONTIER_POINT: ("model", "role", "temperature", *POINT_KEYS, "sampled", "sample_seconds"),
    BASELINE_ROW: ("model", "role", *TEXT_METRICS, "temperature", "sample_seconds", "native",
                   "frontier", "budget", "total_parameters", "train_steps", "train_seconds",
                   "final_loss", "vocab_size"),
    FULL_TRAINING_GENERATION: (*GENERATION_KEYS, "repetition", "mean_length",
                               *(k for k in LENGTH_KEYS if not k.startswith("sample_")),
                               *PAIRED_COLUMNS),
}
# the fields that hold an Estimate: the columns <field>, <field>_low, <field>_high
_ESTIMATES = ("gen_ppl", "gen_ppl_mean", "gen_ppl_at_length", "diversity", "mauve", "empty_rate",
              "dihal_log_ppl_diff")


def _estimate_columns(name: str) -> tuple[str, str, str]:
    return name, f"{name}_low", f"{name}_high"


@dataclass(frozen=True)
class GenerationRow:
    """A model's line of the generation tables: an eval row, a comparison row, a temperature
    frontier point, a baseline's row, or the generation columns of a full-training row
    (`kind`, which fixes its columns and their order: GENERATION_COLUMNS). The writers make
    it, the results hold it, storage writes `to_dict()` and the readers get it back with
    `from_dict`. Every column is a field (an Estimate holds a metric's three); a column the
    row does not have is ABSENT, which `to_dict` leaves out (a stored None stays None)."""

    kind: str
    model: str | None | Absent = ABSENT
    # dihal | backbone | control | baseline | ..., a frontier point's too
    role: str | None | Absent = ABSENT
    # the metrics (dihal.evaluate.generation.text_metrics)
    gen_ppl: Estimate = Estimate()
    gen_ppl_mean: Estimate = Estimate()
    judge_tokens: int | Absent = ABSENT
    n_samples: int | None | Absent = ABSENT  # every sample, as recorded
    empty_samples: int | None | Absent = ABSENT  # the empty ones (failures)
    empty_rate: Estimate = Estimate()
    diversity: Estimate = Estimate()
    diversity_spacy: float | None | Absent = ABSENT
    repetition: float | None | Absent = ABSENT
    mean_length: float | None | Absent = ABSENT  # in words
    mean_judge_length: float | None | Absent = ABSENT  # in judge tokens
    sample_nll: list[float] | None | Absent = field(repr=False, default=ABSENT)  # the judge's
    sample_tokens: list[int] | None | Absent = field(repr=False, default=ABSENT)  # per sample
    gen_ppl_at_length: Estimate = Estimate()  # over each sample's first ppl_length tokens
    ppl_length: int | None | Absent = ABSENT  # the common length L of gen_ppl_at_length
    ppl_length_scored: int | None | Absent = ABSENT  # the non-empty samples reaching L
    ppl_length_short: int | None | Absent = ABSENT  # ... and those shorter than L
    ppl_length_empty: int | None | Absent = ABSENT  # ... and the empty ones
    mauve: Estimate = Estimate()
    mauve_buckets: int | Absent = ABSENT
    mauve_kmeans_seeds: int | None | Absent = ABSENT
    mauve_seed_min: float | Absent = ABSENT
    mauve_seed_max: float | Absent = ABSENT
    mauve_n_p: int | None | Absent = ABSENT
    mauve_n_q: int | None | Absent = ABSENT
    mauve_diagnostic: bool | None | Absent = ABSENT
    # how it was sampled
    ms_per_token: float | None | Absent = ABSENT
    ms_per_step: float | Absent = ABSENT
    length: int | Absent = ABSENT
    temperature: float | None | Absent = ABSENT  # None: deterministic rounding
    start_token: str | Absent = ABSENT
    start_token_id: int | Absent = ABSENT
    cpu_threads: int | Absent = ABSENT
    cpu_kernels: str | Absent = ABSENT
    # DiHAL's and the controls' layer and sampler steps, DiHAL's sampler rule
    layer: int | None | Absent = ABSENT
    steps: int | None | Absent = ABSENT
    rule: str | None | Absent = ABSENT
    latency_vs_backbone: float | Absent = ABSENT
    # log Gen.PPL of DiHAL minus this row's, paired by sample, with its interval, p-value,
    # verdict ("below" / "above" / "not distinguishable") and the samples paired
    dihal_log_ppl_diff: Estimate = Estimate()
    dihal_log_ppl_diff_p: float | None | Absent = ABSENT
    dihal_verdict: str | None | Absent = ABSENT
    paired_samples: int | None | Absent = ABSENT
    # the budget figures (the controls' as the eval recorded them; the ridge hybrid's fit)
    train_tokens: int | None | Absent = ABSENT
    denoiser_parameters: int | None | Absent = ABSENT
    ridge_lambda: float | None | Absent = ABSENT
    ridge_val_mse: float | None | Absent = ABSENT
    sampler_steps: int | None | Absent = ABSENT
    seq_len: int | None | Absent = ABSENT
    train_steps: int | None | Absent = ABSENT  # the optimiser steps (DiHAL's bridge, a baseline)
    # a frontier point: sampled again (False: a main row's), and its sampling seconds
    sampled: bool | Absent = ABSENT
    sample_seconds: float | Absent = ABSENT
    # a baseline's row: its row at the recipe's own temperature (BASELINE_ROW, without model
    # and role), its frontier points, its budget (dihal.compare.baselines.base.Budget) and
    # training figures
    native: GenerationRow | Absent = ABSENT
    frontier: list[GenerationRow] | Absent = ABSENT
    budget: dict[str, int] | Absent = ABSENT
    total_parameters: int | Absent = ABSENT
    train_seconds: float | Absent = ABSENT
    final_loss: float | Absent = ABSENT
    vocab_size: int | Absent = ABSENT

    @property
    def name(self) -> str:
        return self.model if self.model not in (None, ABSENT) else or_none(self.role)

    @property
    def temperature_recorded(self) -> bool:
        """Whether the row has a temperature column at all."""
        return self.temperature is not ABSENT

    @property
    def vs_dihal(self) -> Estimate:
        """log Gen.PPL of DiHAL minus this row's, paired by sample, with its interval."""
        return self.dihal_log_ppl_diff

    @property
    def vs_dihal_p(self) -> float | None:
        return or_none(self.dihal_log_ppl_diff_p)

    @property
    def vs_dihal_verdict(self) -> str | None:
        """"below" / "above" / "not distinguishable"; "" where the row has no such column."""
        return "" if self.dihal_verdict is ABSENT else self.dihal_verdict

    def _columns(self) -> dict[str, Any]:
        """Every column by name, ABSENT where the row has none."""
        out: dict[str, Any] = {}
        for f in _GENERATION_FIELDS:
            v = getattr(self, f)
            if f in _ESTIMATES:
                out.update(zip(_estimate_columns(f), (v.stored, v.stored_low, v.stored_high),
                               strict=True))
            elif f == "native" and v is not ABSENT:
                out[f] = v.to_dict()
            elif f == "frontier" and v is not ABSENT:
                out[f] = [p.to_dict() for p in v]
            else:
                out[f] = v
        return out

    def to_dict(self) -> dict[str, Any]:
        """The row as its table stores it: its columns, in its kind's order."""
        columns, order = self._columns(), GENERATION_COLUMNS[self.kind]
        stray = [c for c, v in columns.items() if v is not ABSENT and c not in order]
        if stray:
            raise ValueError(f"a generation row of kind {self.kind!r} has no column {stray}")
        return {c: columns[c] for c in order if columns[c] is not ABSENT}

    @classmethod
    def from_dict(cls, d: dict[str, Any], kind: str | None = None) -> GenerationRow:
        """The row of its stored columns; its kind, where not given, the first of
        GENERATION_COLUMNS's kinds that has every one of them (a column no kind has is
        refused by name)."""
        kind = kind or next((k for k, cs in GENERATION_COLUMNS.items() if set(d) <= set(cs)),
                            None)
        if kind is None:
            raise ValueError(f"no kind of generation row has all the columns {sorted(d)}")
        if stray := set(d) - set(GENERATION_COLUMNS[kind]):
            raise ValueError(f"a generation row of kind {kind!r} has no column {sorted(stray)}")
        given: dict[str, Any] = {}
        for f in _GENERATION_FIELDS:
            if f in _ESTIMATES:
                given[f] = Estimate(*(d.get(c, ABSENT) for c in _estimate_columns(f)))
            elif f == "native" and f in d:
                given[f] = cls.from_dict(d[f], BASELINE_ROW)
            elif f == "frontier" and f in d:
                given[f] = [cls.from_dict(p, FRONTIER_POINT) for p in d[f]]
            else:
                given[f] = d.get(f, ABSENT)
        return cls(kind, **given)

    def select(self, kind: str, columns: Iterable[str]) -> GenerationRow:
        """A row of `kind` with this row's `columns` (None where this row has one not)."""
        have = self._columns()
        return GenerationRow.from_dict({c: or_none(have[c]) for c in columns}, kind)


_GENERATION_FIELDS = tuple(f.name for f in dataclasses.fields(GenerationRow) if f.name != "kind")


def filled(rows: list[GenerationRow]) -> list[GenerationRow]:
    """The rows with every column any of them has (None in a row that has it not), as one
    table of them stores them."""
    columns = [r._columns() for r in rows]
    anywhere = {c for cs in columns for c, v in cs.items() if v is not ABSENT}
    return [GenerationRow.from_dict({c: or_none(cs[c]) for c in anywhere}, r.kind)
            for r, cs in zip(rows, columns, strict=True)]


def generation_rows(rows: list[dict]) -> list[GenerationRow]:
    return [GenerationRow.from_dict(r) for r in rows]


# Full training's paired generation test of its roles (dihal.compare.stage.paired_roles): the
# pairs, and each pair's columns on the second role's protocol row
ROLE_PAIRS = (("geometry l*", "oracle"), ("geometry l*", "worst"), ("oracle", "worst"))
PAIR_STATS = ("log_ppl_diff", "log_ppl_diff_low", "log_ppl_diff_high", "p", "p_holm", "verdict",
              "pairs")


def seed_column(measure: str, stat: str) -> str:
    """The column of a full-training row that holds `stat` (mean, sd, min, max) of `measure`
    over the bridge's training seeds."""
    return f"{measure}_seed_{stat}"


def pair_column(stat: str, first: str) -> str:
    """The column of the second role's protocol row that holds `stat` of its test against
    `first` ("geometry l*" -> "l_star")."""
    return f"{stat}_vs_{'l_star' if first == 'geometry l*' else first}"


# ------------------------------------------------------------------ the budget study
BUDGET_MODELS = ("bridge", "ridge", "network", "residual", "backbone")
# bridge: the paper's diffusion bridge; ridge: the closed-form ridge map (context-free);
# network: the regression control (the same denoiser trained as a one-step regression);
# residual: OUR variant (not the paper's): a bridge whose denoiser starts from the ridge map and
# learns only the residual; backbone: the unmodified model (the floor, no training)


@dataclass(frozen=True)
class BudgetPoint:
    """One point of the budget study: one model at one layer after `steps` optimiser steps."""
    layer: int
    steps: int              # the budget: optimiser steps of bridge/network/residual; ridge: fitted in closed form on the same tokens as that budget's bridge; backbone: 0
    tokens: int             # training tokens seen (steps * batch_size * seq_len; ridge: tokens fitted on)
    distinct_tokens: int    # distinct training tokens behind them (tokens / distinct = how often each repeats)
    model: str              # one of BUDGET_MODELS
    val_loss: float | None  # bridge/residual: validation loss; others None
    t1_loss: float | None   # bridge/residual: loss at t = 1; others None
    recon_error: float | None
    hybrid_nll: float       # held-out hybrid NLL (backbone: the backbone's own NLL)
    seconds: float          # training + measuring seconds of this point

    def to_dict(self) -> dict:
        """A plain JSON-able dict of the fields."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> BudgetPoint:
        """The point of `to_dict`'s dict; a missing or unknown field, or a model outside
        BUDGET_MODELS, is refused by name."""
        names = {f.name for f in dataclasses.fields(cls)}
        if set(d) != names:
            raise ValueError(f"a BudgetPoint needs exactly the fields {sorted(names)}: missing "
                             f"{sorted(names - set(d))}, unknown {sorted(set(d) - names)}")
        if d["model"] not in BUDGET_MODELS:
            raise ValueError(f"BudgetPoint.model must be one of {BUDGET_MODELS}, got {d['model']!r}")
        return cls(**d)

    @property
    def key(self) -> tuple[int, str, int]:
        """(layer, model, steps): what a resumed study recognises as done."""
        return (self.layer, self.model, self.steps)


# ---------------------------------------------------------------- generation at the budget's ends
GENERATION_MODELS = ("dihal", "codar")
# dihal: DiHAL's hybrid with the bridge at l* trained at the budget; codar: the CoDAR baseline
# trained at the same budget (tokens, optimiser steps) at DiHAL's denoiser size


@dataclass(frozen=True)
class BudgetGenerationRow:
    """One model (GENERATION_MODELS) trained at one budget, then sampled and scored as the eval
    samples: the budget it had and the Gen.PPL and diversity of its samples, each with its 95 %
    interval over samples, and the judge's score of each sample (what the report's tests read)."""

    layer: int              # l*, where DiHAL's bridge replaces layers 1..l*
    model: str              # one of GENERATION_MODELS
    steps: int              # optimiser steps
    tokens: int             # training tokens seen (steps * batch_size * seq_len)
    distinct_tokens: int    # distinct training tokens behind them (tokens / distinct: how often each repeats)
    denoiser_parameters: int
    sampler_steps: int      # denoiser passes per generated token (DiHAL's K, CoDAR's sampler steps)
    temperature: float
    gen_ppl: float
    gen_ppl_low: float
    gen_ppl_high: float
    diversity: float
    diversity_low: float
    diversity_high: float
    n_samples: int
    empty_samples: int      # samples with no text (failures; Gen.PPL is over the others)
    sample_nll: list[float] = field(repr=False)  # the judge's NLL of each non-empty sample
    sample_tokens: list[int] = field(repr=False)  # ... and its judge tokens
    seconds: float          # training, sampling and scoring

    @property
    def repeats(self) -> float:
        """How often each training token is seen (1: every token fresh)."""
        return self.tokens / self.distinct_tokens if self.distinct_tokens else float("nan")

    @property
    def key(self) -> tuple[str, int]:
        """(model, steps): what a resumed run recognises as done."""
        return (self.model, self.steps)

    def to_dict(self) -> dict:
        """A plain JSON-able dict of the fields."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> BudgetGenerationRow:
        """The row of `to_dict`'s dict; a missing or unknown field, or a model outside
        GENERATION_MODELS, is refused by name."""
        names = {f.name for f in dataclasses.fields(cls)}
        if set(d) != names:
            raise ValueError(f"a BudgetGenerationRow needs exactly the fields {sorted(names)}: "
                             f"missing {sorted(names - set(d))}, unknown {sorted(set(d) - names)}")
        if d["model"] not in GENERATION_MODELS:
            raise ValueError(f"BudgetGenerationRow.model must be one of {GENERATION_MODELS}, "
                             f"got {d['model']!r}")
        return cls(**{**d, "sample_nll": [float(v) for v in d["sample_nll"]],
                      "sample_tokens": [int(v) for v in d["sample_tokens"]]})
