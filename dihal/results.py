"""The typed result of every stage: what a `dihal` stage function returns and what a `storage`
artifact class writes and reads back. Plain dataclasses, standard library only at import time,
so the storage and Dagster layers import them cheaply (arrays and tensors are typed loosely).

`info()` is the JSON summary a result leaves in its artifact's manifest (what downstream stages
and the report read without opening the data files); `metadata()` the key numbers shown with the
materialisation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dihal.config import BridgeProtocol
from dihal.generation_inputs import CostTable, CurvePoint, FullTrainingRow, SamplerChoice
from dihal.generation_rows import BudgetSample, GenerationRow, JudgeInfo, RoleSample, Sample
from dihal.inputs import (
    BackboneInfo,
    BridgeabilitySummary,
    GeometryRow,
    LayerScoreSummary,
    PredictorRow,
    ScoreRow,
    TokenResamples,
)
from dihal.net_configs import DenoiserConfig, TrainConfig
from dihal.rows import (
    TARGETS,
    BridgeMetrics,
    BudgetGenerationRow,
    BudgetPoint,
    Columns,
    TrainingPoint,
)


def _round(v: Any) -> Any:
    return round(v, 5) if isinstance(v, float) else v


# ------------------------------------------------------------------------------ the corpus
# What the corpus stage records of each shard it read, by content: a local file, a remote one
# (read as a stream, never downloaded whole), or a Hugging Face dataset read through `datasets`.
# Each stores as the dict of its fields; `identity()` is what the corpus fingerprint hashes.


@dataclass(frozen=True)
class LocalShard(Columns):
    """A local shard file: its path, the sha256 of its bytes and their count."""

    path: str
    sha256: str
    bytes: int

    def identity(self) -> str:
        """Its content, not where it lies: a copied or moved checkout keeps its artifacts."""
        return self.sha256


@dataclass(frozen=True)
class RemoteShard(Columns):
    """A remote shard, known by its URL."""

    url: str

    def identity(self) -> str:
        return self.url


@dataclass(frozen=True)
class HubShard(Columns):
    """A Hugging Face dataset (an id, or a local folder: `local`) read at `revision`, `config`,
    `split`, with its text and id fields, and the documents read: their count and the sha256 of
    their ids and texts, in order."""

    dataset: str
    local: bool
    revision: str | None
    config: str | None
    split: str
    text_field: str
    id_field: str | None
    documents: int
    sha256: str

    def identity(self) -> str:
        """The fingerprint's part: id (a folder: "local", its content is in the digest),
        revision, config, split, fields, and the documents read."""
        name = "local" if self.local else self.dataset
        return (f"hf:{name}@{self.revision or 'default'}/{self.config or 'default'}/"
                f"{self.split}/{self.text_field}/{self.id_field or 'index'}:"
                f"{self.documents}:{self.sha256}")


Shard = LocalShard | RemoteShard | HubShard
_SHARD_KINDS = {frozenset(c.__dataclass_fields__): c for c in (LocalShard, RemoteShard, HubShard)}


def shard_of(record: Any) -> Shard:
    """The shard of a stored record (`to_dict`'s dict); a ValueError naming it where it is no
    shard's record."""
    kind = _SHARD_KINDS.get(frozenset(record)) if isinstance(record, dict) else None
    if kind is None:
        raise ValueError(f"{record!r} is not a shard record (a local file's path, sha256 and "
                         "bytes, a remote shard's url, or a Hub dataset's fields)")
    return kind(**record)


@dataclass(frozen=True)
class CorpusCounts(Columns):
    """What the corpus stage counted while reading: usable documents, those skipped as empty,
    malformed lines (with up to 10 examples), documents by source, and their characters."""

    documents: int
    skipped_empty: int
    malformed: int
    malformed_examples: list[str]
    by_source: dict[str, int]
    chars: int


@dataclass(frozen=True)
class CorpusResult:
    shards: list[Shard]
    stats: CorpusCounts

    def info(self) -> dict:
        return {"shards": [s.to_dict() for s in self.shards], "stats": self.stats.to_dict()}

    def metadata(self) -> dict:
        s = self.stats
        return {"shards": len(self.shards), "documents": s.documents,
                "malformed_lines": s.malformed, "empty_documents": s.skipped_empty,
                "by_source": s.by_source}


@dataclass(frozen=True)
class SequencesResult:
    """Token sequences per split: input_ids (n, T), and which documents/sources each holds."""

    input_ids: dict[str, list[list[int]]]
    doc_ids: dict[str, list[list[str]]]
    sources: dict[str, list[list[str]]]
    bos_id: int
    eos_id: int
    revision: str
    vocab_size: int | None = None  # the tokenizer's, for problems(); not recorded

    def n(self, split: str) -> int:
        return len(self.input_ids[split])

    def problems(self, cfg) -> list[str]:
        """What breaks the promise of `cfg` (a SequenceConfig): a split with another count than
        n_train / n_val, a sequence of another length than seq_len, a token id that is not an
        integer of the vocabulary (0..vocab_size-1). Empty: sound."""
        out = []
        for split, want in (("train", cfg.n_train), ("val", cfg.n_val)):
            seqs = self.input_ids.get(split, [])
            if len(seqs) != want:
                out.append(f"{split}: {len(seqs)} sequences where {want} are asked for")
            for i, seq in enumerate(seqs):
                if len(seq) != cfg.seq_len:
                    out.append(f"{split} sequence {i}: {len(seq)} tokens, not seq_len "
                               f"{cfg.seq_len}")
                for pos, t in enumerate(seq):
                    if (not isinstance(t, int) or isinstance(t, bool) or t < 0
                            or self.vocab_size is not None and t >= self.vocab_size):
                        vocab = f"0..{self.vocab_size - 1}" if self.vocab_size else "integers"
                        out.append(f"{split} sequence {i} position {pos}: token id {t!r} is "
                                   f"outside the tokenizer's vocabulary ({vocab})")
                        break
                if len(out) >= 5:
                    return out
        return out

    @property
    def seq_len(self) -> int:
        return len(self.input_ids["train"][0])

    def info(self) -> dict:
        return {"revision": self.revision, "bos_id": self.bos_id, "eos_id": self.eos_id}

    def metadata(self) -> dict:
        docs = {s: len({d for ds in self.doc_ids[s] for d in ds}) for s in self.doc_ids}
        return {"train_sequences": self.n("train"), "val_sequences": self.n("val"),
                "seq_len": self.seq_len, "train_documents": docs["train"],
                "val_documents": docs["val"],
                "tokens": (self.n("train") + self.n("val")) * self.seq_len}


@dataclass(frozen=True)
class StateSpec:
    """Shapes of a hidden-state dump: every split has n_layers x n_seq[split] x seq_len x hidden."""

    n_layers: int
    seq_len: int
    hidden: int
    n_seq: dict[str, int]
    batch_size: int
    dtype: str = "float16"

    def n_batches(self, split: str) -> int:
        return -(-self.n_seq[split] // self.batch_size)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class HiddenStatesResult:
    """What the dump holds (the states themselves are written batch by batch to Zarr)."""

    backbone: BackboneInfo  # Backbone.info()
    spec: StateSpec
    dtype: str
    tokens_per_s: float
    batches_resumed: int
    max_abs: float
    fp16_headroom: float

    def info(self) -> dict:
        return {"backbone": self.backbone.to_dict(), "spec": self.spec.to_dict()}

    def metadata(self) -> dict:
        s = self.spec
        return {"backbone_id": self.backbone.hf_id, "revision": self.backbone.revision,
                **{f"shape_{split}": str((s.n_layers, n, s.seq_len, s.hidden))
                   for split, n in s.n_seq.items()},
                "dtype": self.dtype, "tokens_per_s": round(self.tokens_per_s, 1),
                "batches_resumed": self.batches_resumed, "max_abs_state": round(self.max_abs, 1),
                "fp16_headroom": round(self.fp16_headroom, 2)}


@dataclass(frozen=True)
class GeometryResult:
    rows: list[GeometryRow]  # every layer under every normalisation
    positions: Any  # (n_tokens, 2) int array of (sequence, position) in the val split
    anchors: Any  # (n_anchors,) int array: indices into the sample
    pairs: Any  # (n_pairs, 2) int array
    seconds: float
    plot_png: bytes = field(repr=False, default=b"")
    # the rival predictors of each candidate layer
    predictors: list[PredictorRow] = field(default_factory=list)
    # the proxies' token-bootstrap replicates
    resamples: TokenResamples = field(default_factory=TokenResamples)

    def info(self) -> dict:
        return {"seconds": round(self.seconds, 2)}

    def metadata(self) -> dict:
        return {"layers": len({r.layer for r in self.rows}), "tokens": len(self.positions),
                "seconds": round(self.seconds, 2)}


@dataclass(frozen=True)
class LayerScoreResult:
    """The layer_score artifact: S_l per layer and normalisation (a table), the answer
    (`summary`, its manifest's info) and the plot of the scores."""

    rows: list[ScoreRow]  # every layer under every normalisation
    summary: LayerScoreSummary
    primary_norm: str
    plot_png: bytes = field(repr=False, default=b"")

    def info(self) -> dict:
        return self.summary.to_dict()

    def metadata(self) -> dict:
        b = self.summary
        same = {f"l* same over resamples ({n})": v.same for n, v in b.stability.items()}
        seq = b.sequence_stability
        if seq.bootstrap:
            same["l* same over sequence resamples"] = seq.bootstrap.same
        if seq.split_half:
            same["split halves agree on l*"] = seq.split_half.agreement
        return {"l_star": b.l_star, "primary_norm": self.primary_norm,
                "l_star_by_norm": b.selected, "spearman_S_vs_depth": b.spearman_vs_depth,
                **same}


BRIDGE_OBJECTIVES = (None, "regression", "ridge")


@dataclass(frozen=True)
class BridgeHparams:
    """A saved bridge's hyper-parameters (its saved hyper-parameters file): the layer whose state it makes,
    the protocol it was trained under, the backbone (and its revision) it was made on, and
    what it is (`objective`): None for DiHAL's diffusion bridge, "regression" for the
    regression control's network, "ridge" for the closed-form ridge map with the lambda it
    chose, the lambdas it tried and their validation errors; a network's denoiser size and its
    training loop's protocol. A field that is None is not stored."""

    layer: int
    protocol: BridgeProtocol
    backbone: str | None = None
    revision: str | None = None
    objective: str | None = None
    denoiser_config: DenoiserConfig | None = None
    train_config: TrainConfig | None = None
    ridge_lambda: float | None = None
    lambdas: list[float] | None = None
    val_mses: list[float] | None = None

    def __post_init__(self) -> None:
        if self.objective not in BRIDGE_OBJECTIVES:
            raise ValueError(f"a bridge's objective is one of {BRIDGE_OBJECTIVES}, got "
                             f"{self.objective!r}")

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out = {k: v.to_dict() if hasattr(v, "to_dict") else v for k, v in out.items()}
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BridgeHparams:
        """From `to_dict`'s dict (the saved file); a field of no bridge is refused by name."""
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"no bridge's hyper-parameters have the fields {sorted(unknown)}")
        typed = {"protocol": BridgeProtocol(**d["protocol"])}
        for name, kind in (("denoiser_config", DenoiserConfig), ("train_config", TrainConfig)):
            if d.get(name) is not None:
                typed[name] = kind.from_dict(d[name])
        return cls(**{**d, **typed})


@dataclass(frozen=True)
class TrainedBridge:
    """A bridge as saved: weights (denoiser state dict, standardisers, pinned BOS state),
    hyper-parameters, bridgeability metrics and the training curve."""

    tensors: dict[str, Any] = field(repr=False)  # name -> CPU tensor
    hparams: BridgeHparams
    metrics: BridgeMetrics | None = None
    curve: list[TrainingPoint] = field(default_factory=list, repr=False)
    # the metrics of the protocol's further training seeds (protocol.seeds - 1 replicates of
    # the same layer, not kept); empty with one seed
    seed_metrics: list[BridgeMetrics] = field(default_factory=list)

    @property
    def layer(self) -> int:
        return int(self.hparams.layer)

    def info(self) -> dict:
        out = {"metrics": self.metrics.to_dict()}
        if self.seed_metrics:
            out["seed_metrics"] = [m.to_dict() for m in self.seed_metrics]
        return out

    def metadata(self) -> dict:
        return {k: _round(v) for k, v in self.metrics.to_dict().items()}


@dataclass(frozen=True)
class BridgeabilityResult:
    """The bridgeability artifact: every swept layer's metrics (a table), the answer
    (`summary`, its manifest's info; its Spearman and regression tables as Parquet too) and
    the scatter of S_l against bridgeability."""

    layers: list[BridgeMetrics]  # each swept layer's bridge, by layer
    summary: BridgeabilitySummary
    plot_png: bytes = field(repr=False, default=b"")

    def layer_columns(self) -> list[dict]:
        return [m.to_dict() for m in self.layers]

    def spearman_columns(self) -> list[dict]:
        return [r.to_dict() for r in self.summary.spearman]

    def regression_columns(self) -> list[dict]:
        return [r.to_dict() for r in self.summary.regression]

    def info(self) -> dict:
        return self.summary.to_dict()

    def metadata(self) -> dict:
        """l*, oracle, worst, the primary test and each predictor's Spearman as top-level
        numbers (the UI charts them over materialisations)."""
        b = self.summary
        rho = {f"spearman {r.predictor} vs -{target}": r.targets[target].rho
               for r in b.spearman for target in TARGETS}
        beats = sum(r.bridge_better_nll for r in b.regression)
        by_loss = b.oracle_by.by.get("val_loss")
        return {"l_star": b.l_star, "oracle": b.oracle, "worst": b.worst,
                "primary test p": b.primary.p, "primary test minimum p": b.primary.p_min,
                "primary test verdict": b.primary.verdict,
                **({f"{k} by val loss": v for k, v in by_loss.to_dict().items()} if by_loss
                   else {}),
                "swept_layers": b.swept_layers, **rho,
                "bridge beats regression (hybrid NLL)": f"{beats} of {len(b.regression)} layers"}


@dataclass(frozen=True)
class EvalResult:
    # one row per model (dihal.generation_rows.EVAL_ROW: model, role dihal | backbone | ..., gen_ppl,
    # diversity, repetition, mean_length, latency): the hybrid first, then the backbone
    rows: list[GenerationRow]
    samples: list[Sample]
    judge: JudgeInfo
    layer: int
    # the controls' settings (dihal.evaluate.generation.evaluate_with_controls): the protocol's K, the
    # (rule, K) chosen on validation, and why a control has no row
    controls: SamplerChoice | None = None
    # cost per generated token (dihal.evaluate.cost.eval_cost): the FLOP model and the measured rows
    cost: CostTable | None = None
    # the temperature frontier's points of DiHAL and the backbone (dihal.evaluate.frontier.point, one per
    # model and temperature; the main temperature's are the main rows'), kept out of `rows`
    frontier: list[GenerationRow] = field(default_factory=list)

    def info(self) -> dict:
        return {"rows": [r.to_dict() for r in self.rows], "judge": self.judge.to_dict(),
                **({"controls": self.controls.to_dict()} if self.controls else {}),
                **({"cost": self.cost.to_dict()} if self.cost else {}),
                **({"frontier": [p.to_dict() for p in self.frontier]} if self.frontier else {})}

    def metadata(self) -> dict:
        """Gen.PPL, diversity and latency of the hybrid and the backbone as top-level numbers."""
        # (by role for DiHAL and the backbone; by name for the controls, which share a role)
        numbers = {f"{r.role if r.role in ('dihal', 'backbone') else r.model} {k}": v
                   for r in self.rows for k, v in (
                       ("gen_ppl", r.gen_ppl.stored), ("diversity", r.diversity.stored),
                       ("repetition", r.repetition), ("ms_per_token", r.ms_per_token))}
        return {"layer": self.layer, "judge": self.judge.name, **numbers,
                "latency_vs_backbone": self.rows[0].latency_vs_backbone}


@dataclass(frozen=True)
class SamplerCurveResult:
    rows: list[CurvePoint]  # one per (rule, K)
    layer: int

    def info(self) -> dict:
        return {"rows": [p.to_dict() for p in self.rows], "layer": self.layer}

    @classmethod
    def from_dict(cls, d: dict) -> SamplerCurveResult:
        """From info(), as its manifest holds it."""
        return cls([CurvePoint.from_dict(p) for p in d["rows"]], d["layer"])

    def metadata(self) -> dict:
        """Each row's numbers keyed by K, and by its sampler rule too where the curve has more
        than one (so no rule's numbers overwrite another's)."""
        several = len({p.rule for p in self.rows}) > 1

        def label(p: CurvePoint) -> str:
            return (f"{p.rule} " if several else "") + f"K={p.sampler_steps}"

        return {"layer": self.layer, **{f"{label(p)} {k}": getattr(p, k) for p in self.rows
                                        for k in ("hybrid_nll", "recon_error", "ms_per_token")}}


@dataclass(frozen=True)
class BaselineResult:
    name: str
    # dihal.rows.BASELINE_ROW: its metrics (role "baseline"), its budget and training figures
    row: GenerationRow
    texts: list[str]
    tensors: dict[str, Any] = field(repr=False)  # the trained model's state dict
    hparams: dict[str, Any] = field(default_factory=dict)

    def info(self) -> dict:
        return {"row": self.row.to_dict(), "samples": self.texts[:5]}

    def metadata(self) -> dict:
        return {"gen_ppl": self.row.gen_ppl.stored, "diversity": self.row.diversity.stored,
                "repetition": self.row.repetition, "train_steps": self.row.train_steps}


@dataclass(frozen=True)
class ComparisonResult:
    rows: list[GenerationRow]  # dihal.rows.COMPARISON_ROW: model, role, metrics, budget figures
    missing: list[str]
    # the temperature frontier: the eval's points and every baseline's (dihal.evaluate.frontier.point)
    frontier: list[GenerationRow] = field(default_factory=list)

    def info(self) -> dict:
        return {"rows": [r.to_dict() for r in self.rows], "missing": self.missing,
                "frontier": [p.to_dict() for p in self.frontier]}

    def metadata(self) -> dict:
        numbers = {f"{r.model} {k}": v for r in self.rows
                   for k, v in (("gen_ppl", r.gen_ppl.stored), ("diversity", r.diversity.stored))}
        return {"models": len(self.rows), "missing": self.missing, **numbers}


@dataclass(frozen=True)
class FullTrainingResult:
    # role, layer, bridgeability (with the spread over training seeds) and generation metrics,
    # one row per role and sampler (the protocol's K; the (rule, K) chosen on validation)
    rows: list[FullTrainingRow]
    # the protocol's K, the (rule, K) chosen on validation, whether they are the same sampler
    sampler: SamplerChoice | None = None
    # every role's samples, each with the judge's NLL and token count
    samples: list[RoleSample] = field(default_factory=list, repr=False)

    def info(self) -> dict:
        return {"rows": [r.to_dict() for r in self.rows],
                **({"sampler": self.sampler.to_dict()} if self.sampler is not None else {})}

    def metadata(self) -> dict:
        return {"roles": {r.role: r.layer for r in self.rows}}


@dataclass(frozen=True)
class ReportResult:
    html: str = field(repr=False)
    markdown: str = field(repr=False)
    figures: list[bytes] = field(default_factory=list, repr=False)  # the Markdown's plots, in order

    def info(self) -> dict:
        return {}

    def metadata(self) -> dict:
        return {}


@dataclass(frozen=True)
class EstimateRecord:
    """What a stage's manifest records of the estimate it made before it started (the budget
    study's, or generation's at the budget's ends: dihal.run.estimates): its seconds, disk,
    host memory (of which the models' weights) and notes; generation's seconds by part too."""

    seconds: int = 0
    disk_bytes: int = 0
    memory_bytes: int = 0
    weights_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    parts: dict[str, int] | None = None  # seconds by part (generation's only)

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        return out if self.parts is not None else {k: v for k, v in out.items() if k != "parts"}


@dataclass(frozen=True)
class BudgetResult:
    """The training-budget study at one layer (dihal.replace.budget.study_layer): its points,
    in (steps, model) order, and the study's estimate made before it started."""

    layer: int
    points: tuple[BudgetPoint, ...]
    estimate: EstimateRecord = field(default_factory=EstimateRecord)

    def info(self) -> dict:
        return {"layer": self.layer, "points": [p.to_dict() for p in self.points],
                "estimate": self.estimate.to_dict()}

    def metadata(self) -> dict:
        """The hybrid NLL of each model at each budget (the backbone's once)."""
        return {(f"{p.model} hybrid_nll" if p.model == "backbone"
                 else f"{p.model} hybrid_nll @ {p.train_steps}"): round(p.hybrid_nll, 4)
                for p in self.points}


@dataclass(frozen=True)
class BudgetGenerationResult:
    """Generation at the training budget's ends (dihal.replace.budget_generation): one row per
    (model, budget), DiHAL's first at each budget; every sample; the estimate made before it
    started."""

    layer: int
    rows: tuple[BudgetGenerationRow, ...]
    samples: list[BudgetSample] = field(default_factory=list, repr=False)
    estimate: EstimateRecord = field(default_factory=EstimateRecord)

    def info(self) -> dict:
        """The rows without their per-sample scores (those are in the rows' table)."""
        return {"layer": self.layer, "estimate": self.estimate.to_dict(),
                "rows": [{k: v for k, v in r.to_dict().items() if not k.startswith("sample_")}
                         for r in self.rows]}

    def metadata(self) -> dict:
        """Gen.PPL and diversity of each model at each budget."""
        return {f"{r.model} {k} @ {r.train_steps}": _round(getattr(r, k))
                for r in self.rows for k in ("gen_ppl", "diversity")}
