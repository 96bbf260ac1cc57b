"""What the report reads of the generation families (Evaluate, Compare, FullTraining), typed
as dihal.inputs types Locate and Replace: each family's rows and summaries as frozen
dataclasses made with `from_dict` from what storage reads back (a key its stage writes only
in some cases is optional; storage refuses what an older stage version wrote). Standard
library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from dihal.generation_rows import (
    FULL_TRAINING_GENERATION,
    GENERATION_COLUMNS,
    GenerationRow,
    JudgeInfo,
    generation_rows,
)
from dihal.inputs import SeedSpread
from dihal.rows import (
    ABSENT,
    PAIR_STATS,
    ROLE_PAIRS,
    Absent,
    ByColumns,
    number,
    or_none,
    pair_column,
    seed_column,
)

# ------------------------------------------------------------------------------ Evaluate



@dataclass(frozen=True)
class ChosenSampler:
    """The (rule, K) the sampler-steps curve chose on validation, with its held-out hybrid NLL."""

    rule: str
    sampler_steps: int
    hybrid_nll: float

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> ChosenSampler | None:
        return cls(d["rule"], d["sampler_steps"], d["hybrid_nll"]) if d else None

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "sampler_steps": self.sampler_steps,
                "hybrid_nll": self.hybrid_nll}


@dataclass(frozen=True)
class SamplerChoice:
    """The samplers a stage generated with (the eval's controls, full training's sampler): the
    protocol's K, the (rule, K) chosen on validation (None: not chosen) and whether they are the
    same sampler; with the eval's note on why it has no regression hybrid (None where it has
    one). The eval writes `chosen_is_protocol` only where it is true, full training always:
    None where the stage wrote none (read as false), so that `to_dict` gives back what was
    stored."""

    chosen: ChosenSampler | None = None
    protocol_sampler_steps: int | None = None
    chosen_is_protocol: bool | None = None
    regression: str | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SamplerChoice:
        d = d or {}
        return cls(ChosenSampler.from_dict(d.get("chosen")), d.get("protocol_sampler_steps"),
                   d.get("chosen_is_protocol"), d.get("regression"))

    def to_dict(self) -> dict[str, Any]:
        return {"protocol_sampler_steps": self.protocol_sampler_steps,
                "chosen": self.chosen.to_dict() if self.chosen is not None else None,
                **({"chosen_is_protocol": self.chosen_is_protocol}
                   if self.chosen_is_protocol is not None else {}),
                **({"regression": self.regression} if self.regression is not None else {})}


@dataclass(frozen=True)
class CostRow(ByColumns):
    """One model's line of the eval's cost table (dihal.evaluate.cost.cost_rows): FLOPs and
    the one measured time per generated token (with the fastest and slowest round where
    recorded), each against the backbone's. `K` and `layer`: DiHAL's sampler steps and
    layer (None for a model without them)."""

    model: str
    K: int | None
    layer: int | None
    flops_from: str  # "flop model" (priced by it) or "counted" (over its own decode)
    flops_per_token: float
    ms_per_token: float
    flops_vs_backbone: float
    ms_vs_backbone: float
    time_over_flops: float
    ms_per_token_low: float | None = None
    ms_per_token_high: float | None = None

    @property
    def is_dihal(self) -> bool:
        return self.model.startswith("DiHAL")

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class OrderInK:
    """Whether DiHAL's time per token rises with K (dihal.evaluate.cost.order_in_k): the K
    timed, the falls (K, next K) and whether they are within the rounds' spread."""

    K: list[int]
    monotone: bool
    inversions: list[tuple[int, int]] = field(default_factory=list)
    within_noise: bool = False

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OrderInK:
        return cls(list(d["K"]), bool(d["monotone"]), [tuple(p) for p in d["inversions"]],
                   bool(d["within_noise"]))

    def to_dict(self) -> dict[str, Any]:
        return {"K": self.K, "monotone": self.monotone, "within_noise": self.within_noise,
                "inversions": [list(p) for p in self.inversions]}


@dataclass(frozen=True)
class FlopModel:
    """FLOPs per generated token of a backbone's parts and of one denoising step of a bridge.

    block_flops[i]: decoder block i; head_flops: the LM head; other_flops: whatever else the
    backbone's own decode counts (0 where the embedding is a lookup); denoiser_step_flops: one
    step of the bridge sampler (one denoiser pass per position), None without a bridge.
    """

    block_flops: tuple[float, ...]
    head_flops: float
    other_flops: float = 0.0
    denoiser_step_flops: float | None = None

    @property
    def n_layers(self) -> int:
        return len(self.block_flops)

    def _check_layer(self, layer: int) -> None:
        if not 0 <= layer <= self.n_layers - 1:
            raise ValueError(f"layer {layer} is out of range 0..{self.n_layers - 1}")

    def backbone(self) -> float:
        return sum(self.block_flops) + self.head_flops + self.other_flops

    def upper(self, layer: int) -> float:
        """Blocks layer..N-1 and the head: what every hybrid at `layer` runs."""
        self._check_layer(layer)
        return sum(self.block_flops[layer:]) + self.head_flops

    def hybrid(self, layer: int, steps: int, map_flops: float = 0.0) -> float:
        """A hybrid at `layer`: `steps` denoising steps (0 for a map-only control) plus
        `map_flops` per token (a ridge map: 2 d^2), then the upper part."""
        if steps < 0:
            raise ValueError(f"steps must be >= 0, got {steps}")
        if steps and self.denoiser_step_flops is None:
            raise ValueError("this FlopModel has no bridge (denoiser_step_flops is None)")
        return steps * (self.denoiser_step_flops or 0.0) + map_flops + self.upper(layer)

    def max_cheaper_steps(self, layer: int) -> int:
        """The largest K at which the hybrid at `layer` costs fewer FLOPs per token than the
        backbone (0: no K is cheaper)."""
        saved = self.backbone() - self.upper(layer)
        if self.denoiser_step_flops is None or self.denoiser_step_flops <= 0:
            raise ValueError("max_cheaper_steps needs a bridge with denoiser_step_flops > 0")
        return max(0, math.ceil(saved / self.denoiser_step_flops) - 1)

    def to_dict(self) -> dict[str, Any]:
        """As the eval's cost table stores it."""
        return {"block_flops": list(self.block_flops), "head_flops": self.head_flops,
                "other_flops": self.other_flops, "denoiser_step_flops": self.denoiser_step_flops}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FlopModel:
        return cls(tuple(d["block_flops"]), d["head_flops"], d["other_flops"],
                   d["denoiser_step_flops"])


@dataclass(frozen=True)
class CostTable:
    """The eval's cost table (dihal.evaluate.cost.eval_cost): the FLOP model, the rows, how the times were measured (n x length
    tokens, the median of `repeats` rounds, said in `timing`), the FLOP count's note and
    length, and DiHAL's order in K."""

    flop_model: FlopModel
    rows: list[CostRow]
    n: int
    length: int
    repeats: int
    note: str
    flop_length: int
    order_in_k: OrderInK
    timing: str

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> CostTable | None:
        if not d:
            return None
        return cls(FlopModel.from_dict(d["flop_model"]), [CostRow.from_dict(r) for r in d["rows"]],
                   d["n"],
                   d["length"], d["repeats"], d["note"], d["flop_length"],
                   OrderInK.from_dict(d["order_in_k"]), d["timing"])

    def to_dict(self) -> dict[str, Any]:
        return {"flop_model": self.flop_model.to_dict(), "rows": [r.to_dict() for r in self.rows],
                "n": self.n, "length": self.length, "flop_length": self.flop_length,
                "repeats": self.repeats, "note": self.note, "timing": self.timing,
                "order_in_k": self.order_in_k.to_dict()}

    def row(self, name: str) -> CostRow | None:
        return next((r for r in self.rows if r.model == name), None)

    def dihal(self, steps: int | None, layer: int) -> CostRow | None:
        """DiHAL's row at K = `steps` and `layer`, None where not timed."""
        return next((r for r in self.rows if r.is_dihal and r.K == steps and r.layer == layer),
                    None)


@dataclass(frozen=True)
class SamplingSetting:
    """How the eval sampled, as its first row recorded it: the CPU threads (0: a GPU), the
    CPU kernels and the unconditional start token with its id."""

    cpu_threads: int
    cpu_kernels: str
    start_token: str
    start_token_id: int

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SamplingSetting:
        return cls(d["cpu_threads"], d["cpu_kernels"], d["start_token"], d["start_token_id"])


@dataclass(frozen=True)
class CurvePoint:
    """One (rule, K) of the sampler-steps curve at l* (dihal.replace.sampler_steps), as its stage
    makes it and storage writes it (its fields are the table's columns, in order)."""

    sampler_steps: int  # the sampler's K
    rule: str
    recon_error: float
    hybrid_nll: float
    backbone_nll: float
    top1_agreement: float
    ms_per_token: float  # generation latency at this (rule, K)
    measure_seconds: float  # 0 where the point is another rule's (same_as_rule)
    protocol_sampler_steps: int  # the K of the bridge's protocol, which it was measured at when trained
    from_bridge_metrics: bool  # the bridge's own measurement, reused (K and rule its protocol's)
    # the rule whose point this one is (K = 1 lands on the predicted endpoint under every rule),
    # or None where it was measured
    same_as_rule: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CurvePoint:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class EvaluateInputs:
    """The Evaluate family: the eval's generation rows (typed views), its judge, how it sampled, its control hybrids' sampler and note, its cost table
    (None: not measured), and the sampler-steps curve at `curve_layer`."""

    rows: list[GenerationRow]
    judge: JudgeInfo
    setting: SamplingSetting
    controls: SamplerChoice
    cost: CostTable | None
    curve: list[CurvePoint]
    curve_layer: int

    @classmethod
    def from_dicts(cls, evaluation: dict[str, Any], sampler_curve: dict[str, Any]
                   ) -> EvaluateInputs:
        """From EvalResult.info() and SamplerCurveResult.info()."""
        rows = evaluation["rows"]
        return cls(generation_rows(rows), JudgeInfo.from_dict(evaluation["judge"]),
                   SamplingSetting.from_dict(rows[0]),
                   SamplerChoice.from_dict(evaluation.get("controls")),
                   CostTable.from_dict(evaluation.get("cost")),
                   [CurvePoint.from_dict(p) for p in sampler_curve["rows"]],
                   sampler_curve["layer"])


# ------------------------------------------------------------------------------- Compare


@dataclass(frozen=True)
class CompareInputs:
    """The Compare family (ComparisonResult.info()): every model's generation row, the
    baselines not run, and the temperature frontier's points (generation rows too; empty
    before the frontier was measured)."""

    rows: list[GenerationRow]
    missing: list[str] = field(default_factory=list)
    frontier: list[GenerationRow] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CompareInputs:
        return cls(generation_rows(d["rows"]), list(d.get("missing") or []),
                   generation_rows(d.get("frontier") or []))

    def frontier_points(self) -> list[dict[str, Any]]:
        """The frontier's points as stored (what dihal.evaluate.frontier and the plots read)."""
        return [p.to_dict() for p in self.frontier]


# ------------------------------------------------------------------------- Full training

SEED_MEASURES = ("val_loss", "t1_loss", "hybrid_nll")  # spread over full training's seeds


@dataclass(frozen=True)
class RolePair:
    """The paired generation test of two full-training roles (dihal.compare.stage
    .paired_roles), as the second role's protocol row holds it (None in the other rows): the
    log Gen.PPL difference with its interval, the raw and Holm-corrected p, the verdict and the
    samples paired."""

    log_ppl_diff: float | None = None
    log_ppl_diff_low: float | None = None
    log_ppl_diff_high: float | None = None
    p: float | None = None
    p_holm: float | None = None
    verdict: str | None = None
    pairs: int | None = None

    @property
    def tested(self) -> bool:
        """Whether the row holds a test (not one of fewer than 2 samples a pair scored)."""
        return number(self.log_ppl_diff) is not None


@dataclass(frozen=True)
class FullTrainingRow:
    """One full-training bridge sampled once (FullTrainingResult.rows): its role and layer, its
    bridgeability measures (hybrid_nll_judge: on the held-out half that did not choose the
    oracle and the worst), training tokens, optimiser steps and seconds, its seeds and each
    measure's spread over them (`seed_columns`: SEED_MEASURES -> mean, sd, min, max; None with
    one seed), the sampler ("protocol", or the (rule, K) chosen on validation; `from_eval`: l*'s
    samples are the eval's), its generation columns (`generation`, FULL_TRAINING_GENERATION),
    and the paired tests of the roles before it (`pair_tests`: first role -> its columns, on
    every row once a pair was tested). The writer (dihal.compare.stage.full_training) makes it,
    storage writes `to_dict()` (in that column order) and the report reads it back with
    `from_dict`; a column the row does not have is ABSENT."""

    role: str
    layer: int
    val_loss: float | None | Absent = ABSENT
    t1_loss: float | None | Absent = ABSENT
    recon_error: float | None | Absent = ABSENT
    hybrid_nll: float | None | Absent = ABSENT
    hybrid_nll_select: float | None | Absent = ABSENT
    hybrid_nll_judge: float | None | Absent = ABSENT
    top1_agreement: float | None | Absent = ABSENT
    train_tokens: int | None | Absent = ABSENT
    train_steps: int | None | Absent = ABSENT  # the optimiser steps its training took
    train_seconds: float | None | Absent = ABSENT
    train_seconds_all_seeds: float | None | Absent = ABSENT
    n_seeds: int | None | Absent = ABSENT
    seed_columns: dict[str, SeedSpread] = field(default_factory=dict)
    from_eval: bool | Absent = ABSENT
    sampler: str | Absent = ABSENT  # PROTOCOL_K or CHOSEN_ON_VALIDATION
    sampler_steps: int | None | Absent = ABSENT
    rule: str | None | Absent = ABSENT
    generation: GenerationRow = field(
        default_factory=lambda: GenerationRow(FULL_TRAINING_GENERATION))
    pair_tests: dict[str, RolePair] = field(default_factory=dict)

    @property
    def seed_spread(self) -> dict[str, SeedSpread]:
        """The spread of each measure over the seeds where the row has its mean (a NaN mean
        included: a measure undefined over the seeds)."""
        return {m: s for m, s in self.seed_columns.items() if s.mean is not None}

    @property
    def pairs(self) -> dict[str, RolePair]:
        """first role -> the paired test of it against this row's role, where tested."""
        return {first: t for first, second in ROLE_PAIRS if second == self.role
                and (t := self.pair_tests.get(first)) is not None and t.tested}

    def to_dict(self) -> dict[str, Any]:
        out = {"role": self.role, "layer": self.layer, **{k: getattr(self, k) for k in _BRIDGE}}
        for m, s in self.seed_columns.items():
            out.update({seed_column(m, k): getattr(s, k) for k in _SPREAD})
        out.update({k: getattr(self, k) for k in ("from_eval", "sampler", "sampler_steps", "rule")})
        out.update(self.generation.to_dict())
        for first, t in self.pair_tests.items():
            out.update({pair_column(k, first): getattr(t, k) for k in PAIR_STATS})
        return {k: v for k, v in out.items() if v is not ABSENT}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FullTrainingRow:
        """The row of its stored columns (a column no full-training row has is refused by
        name)."""
        unknown = set(d) - _FULL_TRAINING_COLUMNS
        if unknown:
            raise ValueError(f"no full-training row has the columns {sorted(unknown)}")
        seeds = {m: SeedSpread(*(d[seed_column(m, k)] for k in _SPREAD)) for m in SEED_MEASURES
                 if seed_column(m, "mean") in d}
        firsts = dict.fromkeys(first for first, _ in ROLE_PAIRS)
        tests = {first: RolePair(*(d[pair_column(k, first)] for k in PAIR_STATS))
                 for first in firsts if pair_column("log_ppl_diff", first) in d}
        generation = GenerationRow.from_dict(
            {k: d[k] for k in GENERATION_COLUMNS[FULL_TRAINING_GENERATION] if k in d},
            FULL_TRAINING_GENERATION)
        return cls(d["role"], d["layer"],
                   **{k: d.get(k, ABSENT) for k in (*_BRIDGE, "from_eval", "sampler",
                                                    "sampler_steps", "rule")},
                   seed_columns=seeds, generation=generation, pair_tests=tests)

    def measures(self) -> dict[str, Any]:
        """The bridge's columns by name, as the full-training table shows them."""
        return {"role": self.role, "layer": self.layer,
                **{k: or_none(getattr(self, k)) for k in _BRIDGE if k != "hybrid_nll_select"}}


# a full-training row's bridge columns (after role and layer), and the spread's
_BRIDGE = ("val_loss", "t1_loss", "recon_error", "hybrid_nll", "hybrid_nll_select",
           "hybrid_nll_judge", "top1_agreement", "train_tokens", "train_steps", "train_seconds",
           "train_seconds_all_seeds", "n_seeds")
_SPREAD = ("mean", "sd", "min", "max")
_FULL_TRAINING_COLUMNS = {
    "role", "layer", *_BRIDGE, "from_eval", "sampler", "sampler_steps", "rule",
    *(seed_column(m, k) for m in SEED_MEASURES for k in _SPREAD),
    *GENERATION_COLUMNS[FULL_TRAINING_GENERATION],
    *(pair_column(k, first) for first, _ in ROLE_PAIRS for k in PAIR_STATS)}


def filled_pairs(rows: list[FullTrainingRow]) -> list[FullTrainingRow]:
    """The rows with the columns of every pair test any of them holds (None in the others),
    as one table of them stores them."""
    firsts = [first for first in dict.fromkeys(f for f, _ in ROLE_PAIRS)
              if any(first in r.pair_tests for r in rows)]
    return [replace(r, pair_tests={f: r.pair_tests.get(f, RolePair()) for f in firsts})
            for r in rows]


@dataclass(frozen=True)
class FullTrainingInputs:
    """The FullTraining family: every row (each role at each sampler) and the samplers used."""

    rows: list[FullTrainingRow]
    sampler: SamplerChoice = field(default_factory=SamplerChoice)

    @classmethod
    def from_dicts(cls, full_training: list[dict], full_training_sampler: dict[str, Any] | None
                   ) -> FullTrainingInputs:
        return cls([FullTrainingRow.from_dict(r) for r in full_training],
                   SamplerChoice.from_dict(full_training_sampler))

    def trained(self) -> list[FullTrainingRow]:
        """One row per role: its bridge sampled at the protocol's K."""
        return [r for r in self.rows if r.sampler == "protocol"]
