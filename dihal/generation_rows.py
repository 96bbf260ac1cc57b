"""The generation rows: one typed row for every line of the generation tables (the eval's
rows, the comparison's, the temperature frontier's points, a baseline's row, and the generation
columns of full training's rows), with each kind's columns in the order its writer gives them.
The writers make the rows, the stage results hold them, storage writes `to_dict()` and the
readers get them back with `from_dict`. Standard library only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from dihal.rows import ABSENT, Absent, Columns, Estimate, or_none


@dataclass(frozen=True)
class Budget(Columns):
    """The figures a comparison holds fixed across methods (dihal.compare.baselines.base
    .check_budget): the denoiser's parameters, the training tokens, the sampler's steps and
    the sequence length."""

    denoiser_parameters: int
    train_tokens: int
    sampler_steps: int
    seq_len: int


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
               "layer", "sampler_steps", "rule", "latency_vs_backbone", *PAIRED_COLUMNS, "train_tokens",
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
    # DiHAL's and the controls' layer (their sampler's K: sampler_steps below), DiHAL's sampler
    # rule
    layer: int | None | Absent = ABSENT
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
    sampler_steps: int | None | Absent = ABSENT  # the sampler's K (a budget's, or DiHAL's)
    seq_len: int | None | Absent = ABSENT
    train_steps: int | None | Absent = ABSENT  # the optimiser steps (DiHAL's bridge, a baseline)
    # a frontier point: sampled again (False: a main row's), and its sampling seconds
    sampled: bool | Absent = ABSENT
    sample_seconds: float | Absent = ABSENT
    # a baseline's row: its row at the recipe's own temperature (BASELINE_ROW, without model
    # and role), its frontier points, its budget and training figures
    native: GenerationRow | Absent = ABSENT
    frontier: list[GenerationRow] | Absent = ABSENT
    budget: Budget | Absent = ABSENT
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
            elif f == "budget" and isinstance(v, Budget):  # None stays None, as stored
                out[f] = v.to_dict()
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
            elif f == "budget" and d.get(f) is not None:
                given[f] = Budget.from_dict(d[f])
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


# ------------------------------------------------------------------ the samples
@dataclass(frozen=True)
class Sample(Columns):
    """One generated text, as the eval keeps it (its samples file): the model that drew it, its
    index in that model's draw (models drawn with one seed draw sample i alike, so samples pair
    up by index), the draw's seed and the text."""

    model: str
    index: int
    seed: int
    text: str


@dataclass(frozen=True)
class RoleSample:
    """A sample of one role of full training (l*, the oracle, the worst layer) at one of its
    samplers, with the judge's NLL of it and its token count (None for an empty text, which the
    judge cannot score)."""

    role: str
    layer: int
    sampler: str
    sample: Sample
    nll: float | None = None
    tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "layer": self.layer, "sampler": self.sampler,
                **self.sample.to_dict(), "nll": self.nll, "tokens": self.tokens}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RoleSample:
        return cls(d["role"], d["layer"], d["sampler"], Sample.from_dict(d), d["nll"], d["tokens"])


@dataclass(frozen=True)
class BudgetSample(Columns):
    """A sample of the generation at the training budget's ends: the model, the optimiser steps
    it was trained for, its index in that model's draw and the text."""

    model: str
    train_steps: int
    index: int
    text: str


@dataclass(frozen=True)
class JudgeInfo:
    """The judge LM that scored a generation (Gen.PPL, MAUVE's features), as the eval records
    it: its name (a model id or a folder, `judge` in the record), its revision (a local
    folder's is its content digest), architecture, vocabulary size and the chunk of tokens it
    scores at a time."""

    name: str
    revision: str
    architecture: str
    vocab_size: int
    chunk_size: int

    def to_dict(self) -> dict[str, Any]:
        return {"judge": self.name, "revision": self.revision, "architecture": self.architecture,
                "vocab_size": self.vocab_size, "chunk_size": self.chunk_size}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JudgeInfo:
        return cls(d["judge"], d["revision"], d["architecture"], d["vocab_size"],
                   d["chunk_size"])


def texts_by_model(samples: list[Sample]) -> dict[str, list[str]]:
    """Each model's texts, in the samples' order."""
    out: dict[str, list[str]] = {}
    for s in samples:
        out.setdefault(s.model, []).append(s.text)
    return out
