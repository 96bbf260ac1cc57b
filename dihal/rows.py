"""Typed rows of the tables that cross modules: made by one stage (dihal.replace.stage, the
generation stages), written by storage, read by the report, the driver and the checks.

Each row serialises to exactly the columns its artifact has (`to_dict`, in that column order;
SpearmanRow gained the paired test's columns with bridgeability 3) and reads them back
(`from_dict`, older rows included). The composed column names ("spearman_vs_-val_loss", "vs_depth_-val_loss", ...)
are spelt here and nowhere else. Standard library only.
"""

from __future__ import annotations

import dataclasses
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


class Columns:
    """A record whose fields are what it stores, in order: `to_dict` is what is written,
    `from_dict` reads it back (every field required)."""

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class TrainingPoint(Columns):
    """One entry of a training curve (dihal.training): the mean training loss over the steps
    since the last entry, at optimiser step `step`, with that step's learning rate and
    gradient norm. Kept in every checkpoint and in a trained bridge's curve table, as `to_dict`."""

    step: int
    loss: float
    lr: float
    grad_norm: float


@dataclass(frozen=True)
class ValidationPoint(Columns):
    """One validation of a training run: the held-out loss at optimiser step `step`."""

    step: int
    val_loss: float


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
    """One point of the budget study: one model at one layer after `train_steps` optimiser steps."""
    layer: int
    train_steps: int        # the budget: optimiser steps of bridge/network/residual; ridge: fitted in closed form on the same tokens as that budget's bridge; backbone: 0
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
        """(layer, model, train_steps): what a resumed study recognises as done."""
        return (self.layer, self.model, self.train_steps)


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
    train_steps: int        # optimiser steps
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
    cpu_threads: int        # the CPU threads it was sampled with (0: on a GPU); with the
    cpu_kernels: str        # CPU's kernels they decide DiHAL's samples bit for bit

    @property
    def repeats(self) -> float:
        """How often each training token is seen (1: every token fresh)."""
        return self.tokens / self.distinct_tokens if self.distinct_tokens else float("nan")

    @property
    def key(self) -> tuple[str, int]:
        """(model, train_steps): what a resumed run recognises as done."""
        return (self.model, self.train_steps)

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


@dataclass(frozen=True)
class BridgeMetrics:
    """Bridgeability of one trained bridge and what its training consumed."""

    layer: int
    val_loss: float
    recon_error: float
    hybrid_nll: float
    backbone_nll: float
    top1_agreement: float
    hybrid_ppl: float
    backbone_ppl: float
    init_val_loss: float  # the validation loss of the untrained denoiser: training must beat it
    train_loss: float | None
    train_steps: int  # the optimiser steps taken
    train_tokens: int  # sequences consumed x sequence length: what baselines are matched to
    seconds: float
    resumed_from_step: int
    denoiser_parameters: int
    # the validation loss at t = 1 alone (x_1 = the condition): the bridge's own endpoint error;
    # None in metrics saved before it was measured
    t1_loss: float | None = None
    # the hybrid NLL on the first half of the held-out sequences (which chooses the oracle and
    # the worst layer) and on the second half (which judges that choice); None in metrics
    # saved before they were measured
    hybrid_nll_select: float | None = None
    hybrid_nll_judge: float | None = None

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> BridgeMetrics:
        """The metrics of `to_dict`'s dict (a row of the bridgeability stage's layer table); a
        missing or unknown field is refused by name."""
        from dataclasses import fields

        names = {f.name for f in fields(cls)}
        if set(d) != names:
            raise ValueError(f"a BridgeMetrics needs exactly the fields {sorted(names)}: "
                             f"missing {sorted(names - set(d))}, unknown {sorted(set(d) - names)}")
        return cls(**d)
