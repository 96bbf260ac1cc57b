"""What the training-budget study and generation at its ends cost, before they start: seconds,
disk and host memory from the study's own plan (dihal.replace.budget.plan_budget) and the one
capacity model (dihal.run.capacity), and what the pre-flight refuses (dihal.run.preflight).
The rates are CPU measurements (benchmarks/RESULTS.md); a device passes its own."""

from __future__ import annotations

import math
from dataclasses import dataclass

from dihal.bridge.train import loop_config
from dihal.config import BridgeProtocol, BudgetGenerationConfig
from dihal.errors import LayerIndexError
from dihal.replace.budget import BudgetPlan, BudgetStudyConfig, plan_budget
from dihal.results import EstimateRecord
from dihal.rows import GENERATION_MODELS
from dihal.run.capacity import (
    GIB,
    baseline_parameters,
    denoiser_parameters,
    pair_bytes,
    training_disk_bytes,
)
from dihal.run.preflight import PreflightError, Refusal, limit_refusals

CODAR = GENERATION_MODELS[1]

# ---------------------------------------------------------------- the study

# Seconds of one token through one backbone block on the CPU: the SmolLM2 dump (30 blocks, with
# its writes and next-token reference) ran at 465-560 tokens/s on 2 quiet cores
# (benchmarks/RESULTS.md), so about 1 / (500 x 30)
SECONDS_PER_TOKEN_BLOCK = 1 / (500 * 30)
# A default bridge step on the CPU: 128 steps with their validation in 20 s (benchmarks/RESULTS.md)
SECONDS_PER_STEP = 0.16
# Measuring one point: measure_bridge took 18.5 s at layer 2 (K = 16 hybrid NLL 11.9,
# reconstruction 4.8, losses 2), the ridge fit and its hybrid NLL 10.1 s (benchmarks/RESULTS.md)
SECONDS_PER_MEASURE = 20.0


@dataclass(frozen=True)
class BudgetEstimate:
    """The study's cost before it starts (estimate_study), and what a pre-flight refuses."""

    seconds: float
    disk_bytes: int
    memory_bytes: int  # the peak: one layer's training and held-out pairs (float32), the weights
    plans: tuple[BudgetPlan, ...]
    seconds_by_layer: dict[int, float]
    notes: tuple[str, ...]  # the budgets that repeat tokens, how often
    weights_bytes: int = 0  # of memory_bytes: the models' weights in host memory (0: not known)

    def refusals(self, *, max_seconds: float | None = None, disk_free: int | None = None,
                 host_available: int | None = None) -> list[Refusal]:
        """What does not fit the limits given (None: not checked), each with the fix."""
        return limit_refusals(
            seconds=self.seconds, disk_bytes=self.disk_bytes, memory_bytes=self.memory_bytes,
            what="the budget study", pairs="a layer's pairs", max_seconds=max_seconds,
            disk_free=disk_free, host_available=host_available,
            fixes=("drop layers or the largest budget, or run it on a GPU",
                   "free space, or drop layers",
                   "drop the largest budget or use a host with more memory"))

    def summary(self) -> str:
        """The estimate in words: what a study says before it starts."""
        return (f"the study needs about {self.seconds / 60:.0f} min, {self.disk_bytes / GIB:.2f} "
                f"GiB of disk and {self.memory_bytes / GIB:.2f} GiB of host memory"
                + _memory_parts(self.memory_bytes, self.weights_bytes)
                + "".join(f"; {n}" for n in self.notes))

    def info(self) -> EstimateRecord:
        """What the study's manifest records of its estimate."""
        return EstimateRecord(round(self.seconds), self.disk_bytes, self.memory_bytes,
                              self.weights_bytes, list(self.notes))

    def require(self, **limits) -> None:
        """PreflightError listing every refusal, if any (the limits as `refusals`)."""
        if found := self.refusals(**limits):
            raise PreflightError("the budget study does not fit: " + "; ".join(map(str, found)))


# What the study's process holds beside its pairs and the models' weights: the interpreter,
# torch's and transformers' runtime, the backbone's forward for the targets and the held-out
# measurement's buffers. Measured once: SmolLM2's layer-2 study peaked at 3.96 GiB of RSS
# against 1.94 GiB of pairs and 0.50 of weights (benchmarks/RESULTS.md), so about 1.5 GiB.
PROCESS_BYTES = int(1.5 * GIB)


def _memory_parts(memory: int, weights: int) -> str:
    """What the host memory of an estimate is made of, in words."""
    pairs, process = (memory - weights - PROCESS_BYTES) / GIB, PROCESS_BYTES / GIB
    if not weights:
        return (f" ({pairs:.2f} of pairs, {process:.2f} of the process; the models' weights "
                "are counted once they are loaded)")
    return f" ({pairs:.2f} of pairs, {weights / GIB:.2f} of weights, {process:.2f} of the process)"


def _bytes(value: int) -> int:
    """weights_bytes, checked: an int >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"weights_bytes must be an int >= 0, got {value!r}")
    return value


def host_weight_bytes(*models) -> int:
    """The bytes of the parameters and buffers that `models` (torch modules; each counted once,
    however often given) hold in host memory: those on a device are not counted."""
    seen, total = set(), 0
    for model in models:
        if id(model) in seen:
            continue
        seen.add(id(model))
        for t in [*model.parameters(), *model.buffers()]:
            if t.device.type == "cpu":
                total += t.numel() * t.element_size()
    return total


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def estimate_study(cfg: BudgetStudyConfig, protocol: BridgeProtocol, *, n_layers: int,
                   hidden: int, seq_len: int, available: int | None, sweep_sequences: int,
                   stored: bool = True, weights_bytes: int = 0,
                   seconds_per_step: float = SECONDS_PER_STEP,
                   seconds_per_token_block: float = SECONDS_PER_TOKEN_BLOCK,
                   seconds_per_measure: float = SECONDS_PER_MEASURE) -> BudgetEstimate:
    """The study's seconds, disk and memory, before it starts.

    With B the budgets, m = len(cfg.trained) models trained per budget (bridge, network,
    residual), bs the protocol's batch size, T = seq_len, d = hidden, A = `available`
    training sequences of the corpus, S = `sweep_sequences` (the Sequences stage's n_train):
      n_b  = min(b * bs, A)                      sequences of budget b (plan_budget)
      N    = max(max_b n_b, min(S, A))           sequences whose pairs a layer computes
      seconds(l) = (N - S if `stored` else N) * T * l * seconds_per_token_block   (targets)
                 + sum_b m * b * seconds_per_step                                (training)
                 + |B| * (m + 1) * seconds_per_measure          (measuring the m and ridge)
      seconds    = sum over cfg.layers of seconds(l)
      memory     = 2 * (N + protocol.eval_sequences) * T * d * 4       (float32 pairs)
                   + weights_bytes          (the backbone's weights in host memory; 0 where they
                                             are on a device, or not known yet)
                   + PROCESS_BYTES          (the process itself, measured)
      disk       = |layers| * |B| * m * (4 P + k * 4 * 3 P)   (P denoiser parameters, k
                   kept checkpoints: dihal.run.capacity.training_disk_bytes)
    The defaults are CPU measurements (benchmarks/RESULTS.md); pass the device's own where it
    differs. A layer outside 1..n_layers - 1 or a non-positive rate is refused."""
    for name, value in (("seconds_per_step", seconds_per_step),
                        ("seconds_per_token_block", seconds_per_token_block),
                        ("seconds_per_measure", seconds_per_measure)):
        _positive(name, value)
    bad = [ll for ll in cfg.layers if not 1 <= ll <= n_layers - 1]
    if bad:
        raise LayerIndexError(f"budget study layers {bad} are not candidates of a backbone "
                              f"with {n_layers} layers: choose among 1..{n_layers - 1}")
    if available is not None and available < sweep_sequences:
        raise ValueError(f"the corpus holds {available} training sequences, fewer than the "
                         f"sweep's {sweep_sequences}: it changed since the sequences were made")
    bs, m = protocol.batch_size, len(cfg.trained)
    plans = tuple(plan_budget(b, bs, seq_len, available) for b in cfg.budgets)
    n = max(max(p.sequences for p in plans), min(sweep_sequences, available or sweep_sequences))
    computed = max(0, n - sweep_sequences) if stored else n
    train = sum(m * b * seconds_per_step for b in cfg.budgets)
    measure = len(cfg.budgets) * (m + 1) * seconds_per_measure
    by_layer = {ll: computed * seq_len * ll * seconds_per_token_block + train + measure
                for ll in cfg.layers}
    params = denoiser_parameters(hidden, protocol, seq_len)
    keep = loop_config(protocol, "cpu").keep_checkpoints
    disk = len(cfg.layers) * len(cfg.budgets) * m * training_disk_bytes(params, params, keep)
    memory = (pair_bytes((n + protocol.eval_sequences) * seq_len, hidden) + _bytes(weights_bytes)
              + PROCESS_BYTES)
    notes = tuple(f"{p.train_steps} steps: {p.sequences:,} distinct sequences, each seen "
                  f"{p.repeats:.2f} times" for p in plans if p.repeats > 1)
    return BudgetEstimate(sum(by_layer.values()), disk, memory, plans, by_layer, notes,
                          weights_bytes)


# ---------------------------------------------------------------- generation at the ends


# A CoDAR training step at DiHAL's default size on SmolLM2's width (d = 576, 128 tokens, batch
# 4, 16,384 vocabulary rows) over a default bridge step, both through the one training loop on
# the same 2 threads: 2.35 and 2.66 in two runs (benchmarks/bench_codar_step.py --steps 8, on a
# machine shared with other work); CoDAR's training is priced at this times SECONDS_PER_STEP
CODAR_STEP_RATIO = 2.5
# Sampling the hybrid at l* on the CPU: the eval's DiHAL row's 5.4 ms a token (SmolLM2,
# 64 x 64 tokens, docs/configuration.md); CoDAR's small denoiser samples in seconds
SECONDS_PER_HYBRID_TOKEN = 5.4e-3
# The judge's scoring: 11-22 s per 64 x 64 sampled tokens (docs/configuration.md), the upper end
SECONDS_PER_JUDGED_TOKEN = 22 / 4096
# CoDAR's samples are drawn and scored twice: at the common temperature and at its own 0.7
CODAR_TEMPERATURES = 2


@dataclass(frozen=True)
class GenerationEstimate:
    """The cost of generation at the budget's ends before it starts (estimate_generation)."""

    seconds: float
    disk_bytes: int
    memory_bytes: int
    plans: tuple[BudgetPlan, ...]
    parts: dict[str, float]  # seconds by part: pairs, DiHAL's and CoDAR's training, sampling
    notes: tuple[str, ...]  # the budgets that repeat tokens, how often
    weights_bytes: int = 0  # of memory_bytes: the models' weights in host memory (0: not known)

    def refusals(self, *, max_seconds: float | None = None, disk_free: int | None = None,
                 host_available: int | None = None) -> list[Refusal]:
        """What does not fit the limits given (None: not checked), each with the fix."""
        return limit_refusals(
            seconds=self.seconds, disk_bytes=self.disk_bytes, memory_bytes=self.memory_bytes,
            what="generation at the budget's ends", pairs="l*'s pairs",
            max_seconds=max_seconds, disk_free=disk_free, host_available=host_available,
            fixes=("lower the largest budget, or run it on a GPU", "free space",
                   "lower the largest budget or use a host with more memory"))

    def summary(self) -> str:
        """The estimate in words: what the run says before it starts."""
        parts = ", ".join(f"{k} {v / 60:.0f} min" for k, v in self.parts.items())
        return (f"generation at {', '.join(f'{p.train_steps:,}' for p in self.plans)} steps needs "
                f"about {self.seconds / 60:.0f} min ({parts}), {self.disk_bytes / GIB:.2f} GiB "
                f"of disk and {self.memory_bytes / GIB:.2f} GiB of host memory"
                + _memory_parts(self.memory_bytes, self.weights_bytes)
                + "".join(f"; {n}" for n in self.notes))

    def info(self) -> EstimateRecord:
        """What the manifest records of its estimate."""
        return EstimateRecord(round(self.seconds), self.disk_bytes, self.memory_bytes,
                              self.weights_bytes, list(self.notes),
                              {k: round(v) for k, v in self.parts.items()})

    def require(self, **limits) -> None:
        """PreflightError listing every refusal, if any (the limits as `refusals`)."""
        if found := self.refusals(**limits):
            raise PreflightError("generation at the budget's ends does not fit: "
                                 + "; ".join(map(str, found)))


def estimate_generation(cfg: BudgetGenerationConfig, protocol: BridgeProtocol, *, layer: int,
                        hidden: int, vocab: int, seq_len: int, available: int | None,
                        sweep_sequences: int, stored: bool = True, bos_id: int = 0,
                        weights_bytes: int = 0, seconds_per_step: float = SECONDS_PER_STEP,
                        codar_step_ratio: float = CODAR_STEP_RATIO,
                        seconds_per_token_block: float = SECONDS_PER_TOKEN_BLOCK,
                        seconds_per_hybrid_token: float = SECONDS_PER_HYBRID_TOKEN,
                        seconds_per_judged_token: float = SECONDS_PER_JUDGED_TOKEN
                        ) -> GenerationEstimate:
    """Seconds, disk and memory of generate_at_budgets, before it starts.

    With E = cfg.ends (the lowest and the highest budget), bs the protocol's batch size, T =
    seq_len, d = hidden, A = `available` training sequences, S = `sweep_sequences`, n x L =
    cfg.n_samples x cfg.length sampled tokens, P DiHAL's denoiser parameters:
      N        = max(n_hi, min(S, A)), n_hi = min(max(E) * bs, A)      sequences whose pairs
      pairs    = (N - S if `stored` else N) * T * layer * seconds_per_token_block   l*'s pairs
      DiHAL    = sum(E) * seconds_per_step
      CoDAR    = sum(E) * seconds_per_step * codar_step_ratio
      sampling = |E| * n * L * (seconds_per_hybrid_token + seconds_per_judged_token)   DiHAL
               + |E| * CODAR_TEMPERATURES * n * L * seconds_per_judged_token             CoDAR
      memory   = 2 * (N + protocol.eval_sequences) * T * d * 4            (float32 pairs)
                 + weights_bytes       (the backbone's and the judge's weights in host memory;
                                        0 where they are on a device, or not known yet)
      disk     = |E| * (training_disk_bytes(P, P, k) + training_disk_bytes(CoDAR's, k))
    (k kept checkpoints; CoDAR's parameters at the backbone's whole vocabulary `vocab`, an upper
    bound where restrict_vocab trims it). The defaults are CPU measurements."""
    rates = {"seconds_per_step": seconds_per_step, "codar_step_ratio": codar_step_ratio,
             "seconds_per_token_block": seconds_per_token_block,
             "seconds_per_hybrid_token": seconds_per_hybrid_token,
             "seconds_per_judged_token": seconds_per_judged_token}
    for name, value in rates.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not (
                math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    if available is not None and available < sweep_sequences:
        raise ValueError(f"the corpus holds {available} training sequences, fewer than the "
                         f"sweep's {sweep_sequences}: it changed since the sequences were made")
    plans = tuple(plan_budget(b, protocol.batch_size, seq_len, available) for b in cfg.ends)
    n = max(plans[-1].sequences, min(sweep_sequences, available or sweep_sequences))
    computed = max(0, n - sweep_sequences) if stored else n
    steps, tokens = sum(cfg.ends), cfg.n_samples * cfg.length
    parts = {"pairs": computed * seq_len * layer * seconds_per_token_block,
             "DiHAL training": steps * seconds_per_step,
             "CoDAR training": steps * seconds_per_step * codar_step_ratio,
             "sampling and scoring": len(plans) * tokens * (
                 seconds_per_hybrid_token + (1 + CODAR_TEMPERATURES) * seconds_per_judged_token)}
    params = denoiser_parameters(hidden, protocol, seq_len)
    keep = loop_config(protocol, "cpu").keep_checkpoints
    codar = baseline_parameters(CODAR, vocab, hidden, params, seq_len, bos_id)
    disk = len(plans) * (training_disk_bytes(params, params, keep)
                         + training_disk_bytes(*codar, keep))
    memory = (pair_bytes((n + protocol.eval_sequences) * seq_len, hidden) + _bytes(weights_bytes)
              + PROCESS_BYTES)
    notes = tuple(f"{p.train_steps} steps: {p.sequences:,} distinct sequences, each seen "
                  f"{p.repeats:.2f} times" for p in plans if p.repeats > 1)
    return GenerationEstimate(sum(parts.values()), disk, memory, plans, parts, notes,
                              weights_bytes)
