"""Every configuration of the method, in one place: frozen dataclasses validated on
construction. They import nothing heavy, so the Dagster layer builds its run-config classes
from them at load time (assets/configs.py): one config system, not two.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

NORMALIZATIONS = ("none", "rms", "standardize", "robust")
MONO_STATS = ("median", "q05", "min_eig")
DTYPE_MAX = {"float16": 65504.0, "float32": 3.4028234663852886e38}
MIN_SWEPT_LAYERS = 3  # bridgeability needs at least this many swept layers
RIDGE_LAMBDAS: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
"""The ridge penalties tried (per token, standardised units: mean squared error + lam ||W||^2);
the one with the lowest held-out error is kept."""
# The bridge sampler's update rules (dihal.bridge.sampler; docs/method.md §2): the posterior
# step ("ancestral", the default until measured otherwise) and the marginal-preserving one.
SAMPLER_RULES = ("ancestral", "marginal")
DEFAULT_SAMPLER_RULE = "ancestral"

# The driver sweeps at least this many distinct layers (or every candidate of a smaller
# backbone) where the sweep feeds bridgeability: a Spearman over 3 layers takes 4 values
MIN_BRIDGEABILITY_LAYERS = 5

# The decoding temperatures of the whole temperature frontier: DiHAL, the backbone and
# every baseline with a temperature, each sampled at each (the main temperature's points are
# the main rows), so that a lower Gen.PPL can be read against a lower diversity. The study and
# gpu presets draw it (dihal.run.profiles); the default draws DEFAULT_FRONTIER_TEMPERATURES.
FRONTIER_TEMPERATURES = (0.7, 0.85, 1.0)
# The default's frontier: the main rows' temperature alone (EvalConfig.temperature and
# BaselineRunConfig.temperature, 1), so that its points are the main rows, sampled once, and
# the held-out text's point: the models against each other and against real text at one
# temperature, at the cost of scoring the held-out text. The extra temperatures cost the
# default CPU run about 4 minutes of sampling and scoring (benchmarks/RESULTS.md), and no
# verdict of the main table reads them.
DEFAULT_FRONTIER_TEMPERATURES = (1.0,)

# The largest training budgets accepted. The pre-flight estimates memory and disk, not time, so
# these are fixed caps, far above any run the method needs, that stop a typo (epochs 1e12)
# before it allocates its sample order or runs for ever:
# - optimiser steps of one training (a bridge's or a baseline's, per seed): the sweep's default
#   budget is 128 steps, full training 256; a default bridge step takes about 0.16 s on a CPU
#   (benchmarks/RESULTS.md: 128 steps with validation in 20 s), so 10,000,000 steps are about
#   18 days of one training, and their sample order alone holds steps x batch_size indices.
#   Every pass over the training split is at least one step, so epochs are capped alike;
#   the steps themselves are checked where the number of training sequences is known (the
#   pre-flight, the training loop)
MAX_TRAIN_STEPS = 10_000_000
TRAIN_STEPS_WHY = (f"a training of more than {MAX_TRAIN_STEPS:,} steps (about 18 days of the "
                   "default bridge on a CPU) is refused as a mistake")
EPOCHS_WHY = f"each pass over the training split is at least one optimiser step; {TRAIN_STEPS_WHY}"
# - sampler steps K (denoiser passes per generated token): the sweep measures at 16, where the
#   hybrid's held-out NLL already rises past K = 4, and a SmolLM2 layer-3 bridge step costs
#   about as much as a backbone block (benchmarks/RESULTS.md), so 1,000 steps cost about 27
#   times the whole backbone per token
MAX_SAMPLER_STEPS = 1000
SAMPLER_STEPS_WHY = (f"each is a denoiser pass per generated token: {MAX_SAMPLER_STEPS:,} cost "
                     "about 27 times the backbone per token")


# ---------------------------------------------------------------------------------------------
# Validation helpers: each names the class, the field, what is allowed and the value given.


def _invalid(obj: object, name: str, allowed: str) -> ValueError:
    value = getattr(obj, name)
    return ValueError(f"{type(obj).__name__}.{name} must be {allowed}, got {value!r}")


def _ints(obj: object, minimum: int, *names: str, optional: bool = False) -> None:
    """Each field is an int >= minimum (or None where optional); a bool is not an int."""
    for name in names:
        v = getattr(obj, name)
        if optional and v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise _invalid(obj, name, f"an int >= {minimum}" + (" or None" if optional else ""))


def _reals(obj: object, *names: str, low: float, high: float = math.inf,
           low_open: bool = False, high_open: bool = True) -> None:
    """Each field is a finite number in the interval low..high (ends open or closed)."""
    if math.isinf(high):
        allowed = f"a finite number {'>' if low_open else '>='} {low:g}"
    else:
        allowed = (f"a number in {'(' if low_open else '['}{low:g}, {high:g}"
                   f"{')' if high_open else ']'}")
    for name in names:
        v = getattr(obj, name)
        ok = (not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v)
              and (v > low if low_open else v >= low) and (v < high if high_open else v <= high))
        if not ok:
            raise _invalid(obj, name, allowed)


def _at_most(obj: object, name: str, limit: int, why: str) -> None:
    """A number field (checked already) is at most `limit`; the message says why."""
    if getattr(obj, name) > limit:
        raise _invalid(obj, name, f"at most {limit:,} ({why})")


def _measurement(obj: object) -> None:
    """The optional measurement fields a study sets apart from the sweep bridge's protocol
    (`eval_sequences`, where the class has it, and `sampler_steps`): None or an int >= 1, K
    at most MAX_SAMPLER_STEPS."""
    _ints(obj, 1, *(n for n in ("eval_sequences", "sampler_steps") if hasattr(obj, n)),
          optional=True)
    if obj.sampler_steps is not None:
        _at_most(obj, "sampler_steps", MAX_SAMPLER_STEPS, SAMPLER_STEPS_WHY)


def is_positive(value: float) -> bool:  # also used by dihal.locate.geometry
    return math.isfinite(value) and value > 0


def _temperatures(obj: object, name: str) -> None:
    """The field is a tuple (a list from a run config) of distinct finite numbers > 0, stored
    as a tuple of floats; empty is allowed (no frontier)."""
    v = getattr(obj, name)
    ok = isinstance(v, tuple | list) and all(
        not isinstance(t, bool) and isinstance(t, int | float) and is_positive(t) for t in v)
    if not ok or len({float(t) for t in v}) != len(v):
        raise _invalid(obj, name, "a tuple of distinct finite numbers > 0 (empty: no frontier)")
    object.__setattr__(obj, name, tuple(float(t) for t in v))


def _bools(obj: object, *names: str) -> None:
    for name in names:
        if not isinstance(getattr(obj, name), bool):
            raise _invalid(obj, name, "True or False")


def _budgets(obj: object, name: str) -> None:
    """The field is a non-empty tuple (a list from a run config) of distinct training steps,
    each 1..MAX_TRAIN_STEPS, stored sorted."""
    v = getattr(obj, name)
    budgets = tuple(v) if isinstance(v, tuple | list) else None
    if (not budgets or len(set(budgets)) != len(budgets) or not all(
            isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= MAX_TRAIN_STEPS
            for b in budgets)):
        raise _invalid(obj, name, f"a non-empty tuple of distinct training steps, "
                       f"each 1..{MAX_TRAIN_STEPS:,} ({TRAIN_STEPS_WHY})")
    object.__setattr__(obj, name, tuple(sorted(budgets)))


def _choice(obj: object, name: str, choices: tuple[str, ...] | list[str]) -> None:
    if getattr(obj, name) not in choices:
        raise _invalid(obj, name, f"one of {tuple(choices)}")


def _text(obj: object, name: str, *, optional: bool = False) -> None:
    v = getattr(obj, name)
    if not (optional and v is None) and (not isinstance(v, str) or not v.strip()):
        raise _invalid(obj, name, "a non-empty string" + (" or None" if optional else ""))


@dataclass(frozen=True)
class CorpusConfig:
    """Which shards to read. ``paths`` are files or globs; ``url_list`` a file (or URL) with one
    shard URL per line. Neither given: the embedded sample under data/dolma_sample.

    Or a Hugging Face dataset (``hf_dataset``: an id, or a folder in the Hub's layout), streamed
    through `datasets` (dihal.locate.hub.HubSource): its ``hf_config``, ``hf_split``, the
    ``hf_text_field`` holding the text, optionally ``hf_id_field`` (the document id; default:
    the row's index in the split) and ``hf_revision``; ``max_docs`` bounds the documents read
    (required: a Hub dataset is streamed, never downloaded whole)."""

    paths: tuple[str, ...] = ()
    url_list: str | None = None
    max_shards: int | None = None
    max_docs: int | None = None
    on_malformed: str = "skip"  # "skip" (count and go on) | "error"
    # shorter (or empty, or without a printable character) documents are skipped and counted
    min_chars: int = 1
    hf_dataset: str | None = None
    hf_config: str | None = None
    hf_split: str = "train"
    hf_text_field: str = "text"
    hf_id_field: str | None = None
    hf_revision: str | None = None

    def __post_init__(self) -> None:
        paths = self.paths
        if isinstance(paths, str) or not isinstance(paths, tuple | list) or not all(
                isinstance(p, str) and p.strip() for p in paths):
            raise _invalid(self, "paths", "a tuple of non-empty path or glob strings")
        object.__setattr__(self, "paths", tuple(paths))  # a list from JSON -> tuple
        _text(self, "url_list", optional=True)
        _ints(self, 1, "max_shards", "max_docs", optional=True)
        _choice(self, "on_malformed", ("skip", "error"))
        _ints(self, 0, "min_chars")
        if self.paths and self.url_list:
            raise ValueError("CorpusConfig: give paths or a url_list, not both")
        _text(self, "hf_dataset", optional=True)
        for name in ("hf_config", "hf_id_field", "hf_revision"):
            _text(self, name, optional=True)
        _text(self, "hf_split")
        _text(self, "hf_text_field")
        if self.hf_dataset and (self.paths or self.url_list):
            raise ValueError("CorpusConfig: give a Hugging Face dataset (hf_dataset) or shards "
                             "(paths / url_list), not both")
        if self.hf_dataset and self.max_docs is None:
            raise ValueError(f"CorpusConfig.max_docs is needed with hf_dataset "
                             f"{self.hf_dataset!r}: the dataset is streamed, and max_docs bounds "
                             "the documents read (e.g. 20000)")


@dataclass(frozen=True)
class SequenceConfig:
    seq_len: int = 128
    n_train: int = 512
    n_val: int = 64
    val_fraction: float = 0.1
    seed: int = 0
    # Each document contributes at most this many tokens (None: all), so that a small budget
    # still covers many documents and genres rather than a few long ones [ours].
    max_tokens_per_doc: int | None = 256

    def __post_init__(self) -> None:
        _ints(self, 4, "seq_len")  # BOS + at least a few tokens
        _ints(self, 1, "n_train", "n_val")
        _reals(self, "val_fraction", low=0.0, high=1.0, low_open=True)
        _ints(self, 0, "seed")
        _ints(self, 1, "max_tokens_per_doc", optional=True)


@dataclass(frozen=True)
class ExtractConfig:
    batch_size: int = 16
    dtype: str = "float16"  # storage dtype: float16 (checked for overflow) or float32
    # Every layer of the held-out split is always stored (geometry, the bridges' validation).
    # True: the training split's too, and each bridge reads its pairs from the dump: fastest
    # where N x training tokens x d fits (the CPU default: 2.2 GB). False: each bridge computes
    # its pairs with the backbone's first l blocks, the same values, and disk does not grow
    # with the training budget (the GPU profile; at 8B and 1M tokens the training split alone
    # would take 260 GB).
    store_train: bool = True

    def __post_init__(self) -> None:
        _ints(self, 1, "batch_size")
        _choice(self, "dtype", sorted(DTYPE_MAX))
        _bools(self, "store_train")


@dataclass(frozen=True)
class GeometryConfig:
    """What the Locate stage computes per layer. Every field is recorded in artifact metadata."""

    n_tokens: int = 4096  # states sampled per layer (same positions for every layer)
    n_anchors: int = 2048
    k_neighbors: int = 32
    n_pairs: int = 4096
    gamma_rel: float = 1e-3  # gamma = gamma_rel * tr(Sigma) / d
    mono_stat: str = "median"  # "median" | "q05" | "min_eig"
    normalizations: tuple[str, ...] = NORMALIZATIONS
    seed: int = 0
    # token-bootstrap replicates of the proxies (0: none): how stable l* is
    n_resamples: int = 100

    def __post_init__(self) -> None:
        _ints(self, 2, "n_tokens", "k_neighbors")
        _ints(self, 0, "n_resamples")
        _ints(self, 1, "n_anchors", "n_pairs")
        _ints(self, 0, "seed")
        if self.n_anchors > self.n_tokens:
            raise ValueError(
                f"GeometryConfig.n_anchors ({self.n_anchors}) must be <= n_tokens ({self.n_tokens})"
            )
        if self.k_neighbors >= self.n_tokens:
            raise ValueError(
                f"GeometryConfig.k_neighbors ({self.k_neighbors}) must be < n_tokens "
                f"({self.n_tokens}): the anchor itself is excluded from its neighbours"
            )
        _reals(self, "gamma_rel", low=0.0, low_open=True)
        _choice(self, "mono_stat", MONO_STATS)
        norms = self.normalizations
        if isinstance(norms, str) or not isinstance(norms, tuple | list):
            raise ValueError(
                f"GeometryConfig.normalizations must be a tuple drawn from {NORMALIZATIONS}, "
                f"got {norms!r}"
            )
        norms = tuple(norms)
        bad = [k for k in norms if k not in NORMALIZATIONS]
        if not norms or bad or len(set(norms)) != len(norms):
            raise ValueError(
                f"GeometryConfig.normalizations must be a non-empty tuple of distinct values from "
                f"{NORMALIZATIONS}, got {norms!r}"
            )
        object.__setattr__(self, "normalizations", norms)  # a list from a run config -> tuple


@dataclass(frozen=True)
class BridgeProtocol:
    """One protocol for every candidate layer: same denoiser, data, order, seed, optimiser and
    token budget. `epochs` = 1 is the paper's single pass; full training raises it."""

    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    mlp_ratio: float = 4.0
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_frac: float = 0.05
    batch_size: int = 4
    epochs: float = 1.0
    grad_clip: float = 1.0
    seed: int = 0
    mixed_precision: str = "auto"  # "auto": bf16 on GPU, fp32 on CPU
    sigma: float = 1.0
    sampler_steps: int = 16  # the sampler's K (the training budget is `epochs`)
    eval_sequences: int = 32
    pin_first: bool = True
    checkpoint_every: int = 200
    # training seeds per bridge: the bridge kept is trained with `seed`; seeds - 1 replicates
    # more with derived seeds (initialisation, data order, validation noise), measured alike,
    # give the seed spread that bridgeability resamples (two levels: layers, seeds in layers).
    # 1 here; the driver's cpu profile trains 2 on a subset of the swept layers (a second seed
    # on every layer would add up to 10 min to the SmolLM2 CPU run); the gpu profile: 3
    seeds: int = 1
    # the layers whose bridge gets the `seeds` training seeds (the others: 1); empty: every
    # layer. A sweep partition or the bridge resolves it for its own layer (for_layer), so the
    # protocol it stores has none and the kept bridge of every layer is trained alike
    seed_layers: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _ints(self, 1, "d_model", "n_layers", "n_heads", "batch_size", "sampler_steps", "eval_sequences",
              "checkpoint_every", "seeds")
        layers = tuple(self.seed_layers) if isinstance(self.seed_layers, tuple | list) else None
        if layers is None or len(set(layers)) != len(layers) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in layers):
            raise _invalid(self, "seed_layers", "a tuple of distinct layers >= 1 (empty: every "
                           "layer)")
        object.__setattr__(self, "seed_layers", tuple(sorted(layers)))  # a run config's list
        if layers and self.seeds == 1:
            raise _invalid(self, "seed_layers", "empty while seeds is 1 (it names the layers "
                           "trained under several seeds: give seeds >= 2 with it)")
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"BridgeProtocol.d_model ({self.d_model}) must be a multiple of n_heads "
                f"({self.n_heads}) with an even quotient (the head size, for rotary positions)")
        _reals(self, "mlp_ratio", "lr", "epochs", "sigma", low=0.0, low_open=True)
        _at_most(self, "epochs", MAX_TRAIN_STEPS, EPOCHS_WHY)
        _at_most(self, "sampler_steps", MAX_SAMPLER_STEPS, SAMPLER_STEPS_WHY)
        _reals(self, "weight_decay", "grad_clip", low=0.0)  # grad_clip 0: no clipping
        _reals(self, "warmup_frac", low=0.0, high=1.0)
        _ints(self, 0, "seed")
        _choice(self, "mixed_precision", ("auto", "no", "bf16"))
        _bools(self, "pin_first")

    def for_layer(self, layer: int) -> BridgeProtocol:
        """The protocol of `layer`'s bridge: `seeds` where seed_layers is empty or names it,
        else 1; seed_layers resolved (empty)."""
        from dataclasses import replace

        seeds = self.seeds if not self.seed_layers or layer in self.seed_layers else 1
        return replace(self, seeds=seeds, seed_layers=())

    def to_dict(self) -> dict:
        """Its fields; seed_layers only where set (a resolved protocol, as every bridge stores
        it, has the fields and fingerprint it had before seed_layers existed)."""
        out = asdict(self)
        if not self.seed_layers:
            del out["seed_layers"]
        else:
            out["seed_layers"] = list(self.seed_layers)
        return out

    fingerprint_fields = to_dict  # storage.manifest.canonical: what a fingerprint and manifest hold


# the protocol fields that may differ between swept layers under one protocol: how many training
# seeds a layer's bridge has (its kept bridge is trained alike either way)
SEED_FIELDS = ("seeds", "seed_layers")


@dataclass(frozen=True)
class EvalConfig:
    n_samples: int = 64
    length: int = 64
    temperature: float = 1.0
    seed: int = 0
    batch_size: int = 32
    eta: float = 0.0
    # DiHAL (at its protocol's K) and the backbone sampled again at each of these temperatures
    # (n_samples, length, seed, judge as above; no MAUVE): the temperature frontier, kept out
    # of the main rows. The point at `temperature` is the main row's, not sampled again. The
    # default is that temperature alone (DEFAULT_FRONTIER_TEMPERATURES); the whole frontier is
    # FRONTIER_TEMPERATURES (the study and gpu presets). (): no frontier
    frontier_temperatures: tuple[float, ...] = DEFAULT_FRONTIER_TEMPERATURES

    def __post_init__(self) -> None:
        _ints(self, 1, "n_samples", "length", "batch_size")
        _reals(self, "temperature", low=0.0, low_open=True)
        _ints(self, 0, "seed")
        _reals(self, "eta", low=0.0)  # 0: deterministic sampler; 1: the exact bridge posterior
        _temperatures(self, "frontier_temperatures")


@dataclass(frozen=True)
class SamplerCurveConfig:
    """The sampler-steps curve at l*: the bridge re-measured with each K in `steps`, and its
    generation latency on n_samples x length tokens."""

    steps: tuple[int, ...] = (1, 2, 4, 8, 16)
    n_samples: int = 8
    length: int = 32
    seed: int = 0
    # the sampler rules measured, each at every K (SAMPLER_RULES); eval samples the bridge at
    # the (rule, K) of lowest held-out hybrid NLL over all of them (dihal.replace.sampler_steps.choose_steps)
    rules: tuple[str, ...] = SAMPLER_RULES

    def __post_init__(self) -> None:
        steps = tuple(self.steps) if isinstance(self.steps, tuple | list) else None
        if (not steps or len(set(steps)) != len(steps)
                or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in steps)):
            raise _invalid(self, "steps", "a non-empty tuple of distinct ints >= 1")
        object.__setattr__(self, "steps", steps)
        if max(steps) > MAX_SAMPLER_STEPS:
            raise _invalid(self, "steps", f"a tuple of ints each at most {MAX_SAMPLER_STEPS:,} "
                           f"({SAMPLER_STEPS_WHY})")
        rules = tuple(self.rules) if isinstance(self.rules, tuple | list) else None
        if not rules or len(set(rules)) != len(rules) or not set(rules) <= set(SAMPLER_RULES):
            raise _invalid(self, "rules", f"a non-empty tuple of distinct rules from {SAMPLER_RULES}")
        object.__setattr__(self, "rules", rules)
        _ints(self, 1, "n_samples", "length")
        _ints(self, 0, "seed")


@dataclass(frozen=True)
class BudgetConfig:
    """The training-budget study at one layer (dihal.replace.budget): the bridge, the network
    control and (with `residual`) our ridge-started residual bridge each trained for every
    budget in `budgets` (optimiser steps), the ridge map fitted on the same tokens, all
    measured as the sweep measures its bridges. The default budgets are the sweep's 128 steps,
    4x and 16x; the gpu preset adds 8,192. `eval_sequences` and `sampler_steps`: the held-out
    sequences and the sampler's K each point is measured at; None, the sweep bridge's (the cpu
    preset sizes the sweep's measurement to its layer ranking and sets the study's apart)."""

    budgets: tuple[int, ...] = (128, 512, 2048)
    residual: bool = True
    eval_sequences: int | None = None
    sampler_steps: int | None = None

    def __post_init__(self) -> None:
        _budgets(self, "budgets")
        _bools(self, "residual")
        _measurement(self)


@dataclass(frozen=True)
class BudgetGenerationConfig:
    """Generation at the training budget's ends (dihal.replace.budget_generation): DiHAL's
    bridge at l* and CoDAR, each trained at the lowest and the highest of `budgets` (the budget
    study's, optimiser steps) on the study's training sequences, then sampled and scored as the
    eval samples (`n_samples`, `length`, `temperature`, `seed`, `batch_size`, `eta`: EvalConfig's
    defaults) and CoDAR trained as the baselines stage trains it (`lr`, `restrict_vocab`:
    BaselineRunConfig's; `seed` seeds it too). `sampler_steps`: DiHAL's K (and CoDAR's budget's);
    None, the sweep bridge's."""

    budgets: tuple[int, ...] = (128, 512, 2048)
    n_samples: int = 64
    length: int = 64
    temperature: float = 1.0
    seed: int = 0
    batch_size: int = 32
    eta: float = 0.0
    lr: float = 1e-3
    restrict_vocab: bool = True
    sampler_steps: int | None = None

    def __post_init__(self) -> None:
        _budgets(self, "budgets")  # as the budget study's
        _measurement(self)
        _ints(self, 1, "n_samples", "length", "batch_size")
        _ints(self, 0, "seed")
        _reals(self, "temperature", "lr", low=0.0, low_open=True)
        _reals(self, "eta", low=0.0)
        _bools(self, "restrict_vocab")

    @property
    def ends(self) -> tuple[int, ...]:
        """The budgets generated at: the lowest and the highest (one where they are equal)."""
        return tuple(sorted({min(self.budgets), max(self.budgets)}))


@dataclass(frozen=True)
class BaselineRunConfig:
    """What a baseline run may choose; everything in the Budget is taken from DiHAL's bridge."""

    lr: float = 1e-3  # the same default as BridgeProtocol.lr and TrainConfig.lr
    seed: int = 0
    n_samples: int = 64
    length: int = 64
    # the decoder's sampling temperature, for recipes that have one (CoDAR, LD4LG): the eval's
    # (EvalConfig.temperature), so every row of the comparison decodes alike; a recipe whose own
    # default differs also gets one extra row at it
    temperature: float = 1.0
    # Token tables (embeddings, read-out, rounding) over the tokens of the training data only
    # (plus BOS/EOS), mapped back to backbone ids when sampling [ours]: a baseline trained
    # from scratch never learns the others, and the full 49k read-out dominates CPU time.
    restrict_vocab: bool = True
    # the temperature frontier (as EvalConfig's, the same default): a recipe with a
    # temperature sampled again at each (the points at `temperature` and at its native one are
    # those rows'); a recipe that rounds deterministically gives one point. (): no frontier
    frontier_temperatures: tuple[float, ...] = DEFAULT_FRONTIER_TEMPERATURES

    def __post_init__(self) -> None:
        _reals(self, "lr", low=0.0, low_open=True)
        _ints(self, 0, "seed")
        _ints(self, 1, "n_samples", "length")
        _reals(self, "temperature", low=0.0, low_open=True)
        _bools(self, "restrict_vocab")
        _temperatures(self, "frontier_temperatures")


@dataclass(frozen=True)
class LayerScoreConfig:
    # The normalisation whose argmax is l* (docs/method.md: the paper does not say; plain reading).
    primary_norm: str = "none"
    # l*'s stability when the held-out SEQUENCES change (dihal.locate.stability), under primary_norm:
    # cluster-bootstrap replicates of whole sequences, each recomputing the geometry of every
    # candidate layer from the dump, and seeded splits of the sequences into two disjoint
    # halves (each as costly as a replicate). About 29 s a replicate for SmolLM2's 30 layers at
    # the default geometry on one shared CPU thread (55 s beside other work), so the CPU
    # default is 5 (+1 split: 7 geometries, about 3.5 min; 10 took 660 s of a loaded run,
    # benchmarks/RESULTS.md): enough to see l* move, not to put a fine share on it. The gpu
    # profile takes 20 + 3. 0 turns either off.
    sequence_resamples: int = 5
    split_halves: int = 1

    def __post_init__(self) -> None:
        _choice(self, "primary_norm", NORMALIZATIONS)
        _ints(self, 0, "sequence_resamples", "split_halves")
