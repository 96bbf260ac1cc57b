"""Pre-flight: will this run fit, before anything runs?

Pure checks over facts gathered by the driver (pipeline/preflight.py, the whole run before any
run is launched) and by each heavy stage itself (stage_refusals, for every door: the web UI,
`dagster asset materialize`, `dg launch`, the schedules): the chosen preset's stage configs,
the backbone's shape and positions (max_position_embeddings against the sequences' length,
also checked by the sequences stage before it tokenises), the workers, the corpus's document lengths, the host's memory and disk,
the GPUs' memory, and the largest hidden state of a first batch. Each check that fails gives a
Refusal naming what does not fit, the numbers, and the setting to change. Every size is
dihal.run.capacity's: one model of the store, the pairs, the checkpoints and the GPU phases.
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from dihal.config import (
    DTYPE_MAX,
    MAX_TRAIN_STEPS,
    TRAIN_STEPS_WHY,
    BridgeProtocol,
    ExtractConfig,
    SequenceConfig,
)
from dihal.errors import DihalError
from dihal.locate.corpus import shortfall_message
from dihal.run.capacity import (
    GIB,
    TABLE_BYTES_PER_LAYER,
    Workload,
    bridge_training_bytes,
    denoiser_parameters,
    dump_phase_bytes,
    pair_bytes,
    pair_phase_bytes,
    state_store_bytes,
    training_disk_bytes,
)

# Keep this share of a resource free (the OS, page cache, the CUDA context, fragmentation)
HEADROOM = 0.9
# The storage dtype's maximum must exceed a first batch's largest |hidden state| this many times
# (a later batch can be larger: SmolLM2 reached 27,922 of float16's 65,504, 2.3x headroom)
FP16_MIN_HEADROOM = 1.5


class PreflightError(DihalError):
    """One or more checks refused the run; the message lists each with its fix."""


@dataclass(frozen=True)
class Refusal:
    check: str  # "positions", "corpus", "host memory", "disk", "GPU memory", "float16 headroom"
    message: str  # the numbers and the setting to change

    def __str__(self) -> str:
        return f"{self.check}: {self.message}"


def limit_refusals(*, seconds: float, disk_bytes: int, memory_bytes: int, what: str,
                   fixes: tuple[str, str, str], pairs: str, max_seconds: float | None = None,
                   disk_free: int | None = None, host_available: int | None = None
                   ) -> list[Refusal]:
    """What a study's estimate (its `seconds`, checkpoints' `disk_bytes`, its `pairs`'
    `memory_bytes`) does not fit of the limits given (None: not checked), each with the fix
    for time, disk and memory (`fixes`). `what` names the study in the time refusal."""
    out = []
    if max_seconds is not None and seconds > max_seconds:
        out.append(Refusal("time", f"{what} needs about {seconds / 3600:.1f} h "
                           f"(>{max_seconds / 3600:.1f} h allowed): {fixes[0]}"))
    if disk_free is not None and disk_bytes > HEADROOM * disk_free:
        out.append(Refusal("disk", f"its checkpoints need {disk_bytes / GIB:.2f} GiB, "
                           f"{disk_free / GIB:.2f} GiB is free: {fixes[1]}"))
    if host_available is not None and memory_bytes > HEADROOM * host_available:
        out.append(Refusal("host memory", f"{pairs} need {memory_bytes / GIB:.2f} GiB, "
                           f"{host_available / GIB:.2f} GiB is available: {fixes[2]}"))
    return out


@dataclass(frozen=True)
class Facts:
    """What the driver found out about this run (pipeline/preflight.py gathers it)."""

    backbone: str
    n_layers: int
    hidden: int
    intermediate: int
    n_params: int
    weight_bytes: int  # per parameter as loaded for compute (bf16: 2, float32: 4)
    device: str  # "cpu" or "cuda"
    workers: int
    swept_layers: int
    doc_lengths: dict[str, list[int]] | None  # token counts per split; None: not measured
    host_available: int  # bytes of host memory available now
    disk_free: int  # bytes free under the artifact root
    gpu_total: list[int] = field(default_factory=list)  # bytes per visible GPU
    first_batch_max_abs: float | None = None  # largest |h| over every layer of a first batch
    vocab: int = 0  # the LM head's width (the dump's reference logits)
    max_positions: int | None = None  # its config's max_position_embeddings; None: no limit


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _state_bytes(extract: ExtractConfig) -> int:
    """Bytes per value of the hidden-state store's dtype (float16: 2, float32: 4)."""
    return 2 if extract.dtype == "float16" else 4


def _stored_sequences(seq: SequenceConfig, extract: ExtractConfig) -> int:
    """The sequences whose states the store keeps: the held-out split, and the training split
    where store_train is true."""
    return seq.n_val + (seq.n_train if extract.store_train else 0)


def max_positions(config: dict) -> int | None:
    """max_position_embeddings of a model's config (config.json as a dict, or a transformers
    config's to_dict(); a multimodal one's text_config), None where it names none."""
    for cfg in (config, config.get("text_config") or {}):
        value = cfg.get("max_position_embeddings")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def read_max_positions(folder: Path) -> int | None:
    """max_positions of the config.json in a model folder (the resolved weights' folder: read
    without loading the model or its tokenizer); None where there is none."""
    import json

    path = Path(folder) / "config.json"
    return max_positions(json.loads(path.read_text())) if path.is_file() else None


def check_positions(backbone: str, limit: int | None, seq: SequenceConfig) -> list[Refusal]:
    """A sequence is [BOS] + (seq_len - 1) corpus tokens, at positions 0..seq_len - 1: the
    backbone must have position embeddings for each (rotary or learned: positions past its
    max_position_embeddings were never trained). A model whose config names no limit: none."""
    if limit is None or seq.seq_len <= limit:
        return []
    return [Refusal("positions", (
        f"sequences.seq_len {seq.seq_len} (the BOS included) is longer than {backbone}'s "
        f"max_position_embeddings {limit} (its config.json): its positions past {limit} were "
        f"never trained. Set sequences.seq_len to at most {limit}."))]


def require_positions(backbone: str, limit: int | None, seq: SequenceConfig) -> None:
    """Raise PreflightError where check_positions refuses (the sequences stage, before it
    tokenises a document)."""
    if found := check_positions(backbone, limit, seq):
        raise PreflightError(f"pre-flight refused the sequences of {backbone} (1 problem(s)):\n"
                             f"  - {found[0]}")


def check_training_budget(seq: SequenceConfig, protocol: BridgeProtocol) -> list[Refusal]:
    """A bridge's optimiser steps (each seed's, as the training loop counts them) against
    dihal.config.MAX_TRAIN_STEPS."""
    from dihal.bridge.train import loop_config
    from dihal.training import total_steps

    steps = total_steps(seq.n_train, loop_config(protocol, "cpu"))
    if steps <= MAX_TRAIN_STEPS:
        return []
    return [Refusal("training budget", (
        f"a bridge trains {steps:,} optimiser steps (epochs {protocol.epochs:g} x "
        f"sequences.n_train {seq.n_train:,} / batch_size {protocol.batch_size}), over the "
        f"limit of {MAX_TRAIN_STEPS:,} ({TRAIN_STEPS_WHY}). Lower epochs."))]


def check_corpus(facts: Facts, seq: SequenceConfig) -> list[Refusal]:

    if facts.doc_lengths is None:
        return []
    msg = shortfall_message(facts.doc_lengths, seq)
    return [Refusal("corpus", msg)] if msg else []


def check_host_memory(facts: Facts, seq: SequenceConfig) -> list[Refusal]:
    """Each concurrent step holds its layer's training pairs; on the CPU it also holds its own
    copy of the backbone."""
    concurrent = facts.workers if facts.device == "cpu" else min(facts.workers,
                                                                 max(1, len(facts.gpu_total)))
    pairs = pair_bytes(seq.n_train * seq.seq_len, facts.hidden)
    weights = facts.n_params * facts.weight_bytes if facts.device == "cpu" else 0
    need = concurrent * (pairs + weights)
    have = HEADROOM * facts.host_available
    if need <= have:
        return []
    fit = int(have // (pairs + weights)) if pairs + weights else 0
    return [Refusal("host memory", (
        f"{concurrent} concurrent step(s) x ({_gib(pairs)} of training pairs (2 x {seq.n_train} x "
        f"{seq.seq_len} x {facts.hidden} float32)" + (f" + {_gib(weights)} of weights"
                                                       if weights else "")
        + f") = {_gib(need)}, but {_gib(facts.host_available)} is available. "
        + (f"Lower --workers to {fit}" if fit >= 1 else "Lower sequences.n_train")
        + " (or sequences.n_train, or run on a host with more memory)."))]


def check_disk(facts: Facts, seq: SequenceConfig, extract: ExtractConfig,
               protocol: BridgeProtocol, with_store: bool = True) -> list[Refusal]:
    """The store (unless it is made already), the swept bridges' weights and the checkpoints
    of the steps in flight."""
    sequences = _stored_sequences(seq, extract)
    store = (state_store_bytes(facts.n_layers, sequences * seq.seq_len, facts.hidden,
                               _state_bytes(extract)) if with_store else 0)
    n = denoiser_parameters(facts.hidden, protocol, seq.seq_len)
    bridges = facts.swept_layers * 2 * (4 * n + TABLE_BYTES_PER_LAYER)  # bridge + regression
    in_flight = facts.workers * training_disk_bytes(n, n, 2)
    need = store + bridges + in_flight
    if need <= HEADROOM * facts.disk_free:
        return []
    fix = ("Set hidden_states.store_train to false (each bridge then computes its pairs), "
           if extract.store_train else "")
    return [Refusal("disk", (
        f"the store ({_gib(store)}: {facts.n_layers} layers of {sequences} sequences), "
        f"{facts.swept_layers} swept layers' bridges ({_gib(bridges)}) and {facts.workers} "
        f"training checkpoints ({_gib(in_flight)}) need {_gib(need)}; {_gib(facts.disk_free)} "
        f"is free under the artifact root. {fix}free space or point DIHAL_ARTIFACTS at a larger "
        "disk, or lower sequences.n_val / n_train."))]


def gpu_step_bytes(facts: Facts, seq: SequenceConfig, extract: ExtractConfig,
                   protocol: BridgeProtocol) -> dict[str, int]:
    """Peak GPU bytes of one step of each kind on one device: the dump (all N states of a
    batch, phase by phase), a pair-building batch, a bridge's training; the weights plus
    dihal.run.capacity's phase model, which matches the dump's measured peak (21.0 GiB at
    Llama-3.1-8B where the forward-only estimate said 17.4 and about 24 was measured)."""
    w = Workload(seq_len=seq.seq_len, n_train=seq.n_train, n_val=seq.n_val,
                 state_bytes=_state_bytes(extract), extract_batch=extract.batch_size,
                 bridge=protocol)
    weights = facts.n_params * facts.weight_bytes
    b = facts.weight_bytes
    n = denoiser_parameters(facts.hidden, protocol, seq.seq_len)
    return {
        "dump": weights + max(dump_phase_bytes(facts.n_layers, facts.hidden, facts.intermediate,
                                               facts.vocab, w, dtype_bytes=b).values()),
        "pair-building batch": weights + max(pair_phase_bytes(facts.hidden, facts.intermediate,
                                                              w, dtype_bytes=b).values()),
        "bridge training": weights + bridge_training_bytes(facts.hidden, n, w),
    }


def check_gpu_memory(facts: Facts, seq: SequenceConfig, extract: ExtractConfig,
                     protocol: BridgeProtocol) -> list[Refusal]:
    """Each step holds one GPU (dihal.run.devices): its peak must fit the smallest one."""
    if facts.device != "cuda" or not facts.gpu_total:
        return []
    steps = gpu_step_bytes(facts, seq, extract, protocol)
    kind, need = max(steps.items(), key=lambda kv: kv[1])
    have = HEADROOM * min(facts.gpu_total)
    if need <= have:
        return []
    return [Refusal("GPU memory", (
        f"the {kind} of {facts.backbone} needs about {_gib(need)} on one GPU (weights "
        f"{_gib(facts.n_params * facts.weight_bytes)} and the batch's states, by "
        f"dihal.run.capacity's phase model of the measured peak), but the smallest "
        f"GPU has {_gib(min(facts.gpu_total))}. Lower hidden_states.batch_size (now "
        f"{extract.batch_size}) or bridge batch_size (now {protocol.batch_size}), or spread "
        "the backbone with the backbones resource's device_map='auto'."))]


def check_headroom(facts: Facts, extract: ExtractConfig) -> list[Refusal]:
    """The store's dtype against the largest state of a first batch."""
    if facts.first_batch_max_abs is None:
        return []
    top = DTYPE_MAX[extract.dtype]
    if not math.isfinite(facts.first_batch_max_abs):
        return [Refusal("float16 headroom", (
            f"a first batch of {facts.backbone} already has non-finite hidden states in the "
            "backbone's compute dtype: load it in float32 (the compute resource's dtype)."))]
    ratio = top / max(facts.first_batch_max_abs, 1e-30)
    if ratio >= FP16_MIN_HEADROOM:
        return []
    return [Refusal("float16 headroom", (
        f"the largest |hidden state| of a first batch is {facts.first_batch_max_abs:,.0f}, "
        f"{extract.dtype} holds at most {top:,.0f}: headroom {ratio:.2f}x, below "
        f"{FP16_MIN_HEADROOM}x (later batches overflow). Set hidden_states.dtype to float32."))]


def refusals(facts: Facts, seq: SequenceConfig, extract: ExtractConfig,
             protocol: BridgeProtocol) -> list[Refusal]:
    """Every check's refusals, in the order the run would meet them."""
    return (check_positions(facts.backbone, facts.max_positions, seq)
            + check_training_budget(seq, protocol)
            + check_corpus(facts, seq) + check_headroom(facts, extract)
            + check_host_memory(facts, seq) + check_disk(facts, seq, extract, protocol)
            + check_gpu_memory(facts, seq, extract, protocol))


def require(facts: Facts, seq: SequenceConfig, extract: ExtractConfig,
            protocol: BridgeProtocol) -> None:
    """Raise PreflightError listing every refusal; return where the run fits."""
    found = refusals(facts, seq, extract, protocol)
    if found:
        raise PreflightError(
            f"pre-flight refused {facts.backbone} ({len(found)} problem(s)):\n"
            + "\n".join(f"  - {r}" for r in found))


# ---------------------------------------------------------------- facts of this host

def available_memory() -> int:
    """MemAvailable of /proc/meminfo (bytes); the physical pages where there is none."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def disk_free(root: Path) -> int:
    """Free bytes on the disk `root` is (or will be) made on."""
    p = Path(root).resolve()
    while not p.exists():  # the root may not exist yet: the disk it will be made on
        p = p.parent
    return shutil.disk_usage(p).free


def model_facts(bb, device: str, *, workers: int, swept_layers: int, root: Path,
                doc_lengths: dict[str, list[int]] | None = None,
                first_batch_max_abs: float | None = None) -> Facts:
    """The Facts of a loaded backbone (dihal.backbones.Backbone) on `device`, on this host."""
    import torch

    cfg = bb.model.config
    on_gpu = device.startswith("cuda")
    gpus = ([torch.cuda.get_device_properties(i).total_memory
             for i in range(torch.cuda.device_count())] if on_gpu else [])
    return Facts(
        backbone=bb.spec.name, n_layers=bb.n_layers, hidden=bb.hidden_size,
        intermediate=int(getattr(cfg, "intermediate_size", 4 * bb.hidden_size)),
        n_params=sum(p.numel() for p in bb.model.parameters()),
        weight_bytes=next(bb.model.parameters()).element_size(),
        device="cuda" if on_gpu else "cpu", workers=workers, swept_layers=swept_layers,
        doc_lengths=doc_lengths, host_available=available_memory(), disk_free=disk_free(root),
        gpu_total=gpus, first_batch_max_abs=first_batch_max_abs, vocab=int(cfg.vocab_size),
        max_positions=max_positions(cfg.to_dict()))


# ---------------------------------------------------------------- the checks of one stage

def stage_refusals(kind: str, facts: Facts, seq: SequenceConfig, extract: ExtractConfig,
                   protocol: BridgeProtocol) -> list[Refusal]:
    """The pre-flight's checks that a stage of `kind` meets before its heavy work, whichever
    door launched it: "dump" (the hidden-state store on disk, the dump on one GPU), "training"
    (a bridge's pairs in host memory for each concurrent step, its training on one GPU, its
    weights and a checkpoint on disk); both, the sequences' length against the backbone's
    positions (sequences made for another model folder, or before the sequences stage
    checked it)."""
    from dataclasses import replace

    positions = check_positions(facts.backbone, facts.max_positions, seq)
    if kind == "dump":  # the store only: no bridge, no checkpoint yet
        return (positions
                + check_disk(replace(facts, swept_layers=0, workers=0), seq, extract, protocol)
                + check_gpu_memory(facts, seq, extract, protocol))
    if kind == "training":  # one bridge: the store is there already
        one = replace(facts, swept_layers=1, workers=1)
        return (positions + check_training_budget(seq, protocol) + check_host_memory(facts, seq)
                + check_disk(one, seq, replace(extract, store_train=False), protocol,
                             with_store=False)
                + check_gpu_memory(facts, seq, extract, protocol))
    raise ValueError(f"unknown stage kind {kind!r}: dump or training")


def require_stage(kind: str, facts: Facts, seq: SequenceConfig, extract: ExtractConfig,
                  protocol: BridgeProtocol) -> None:
    """Raise PreflightError listing the refusals of stage_refusals."""
    found = stage_refusals(kind, facts, seq, extract, protocol)
    if found:
        raise PreflightError(
            f"pre-flight refused this {kind} step of {facts.backbone} ({len(found)} "
            "problem(s)):\n" + "\n".join(f"  - {r}" for r in found))


# ---------------------------------------------------------------- the folders a run writes to

# The least free space a run needs where Dagster and dihal write before any stage sizes its own
# need (check_disk): the instance's SQLite storage, event and compute logs, locks, manifests
MIN_FREE_BYTES = 100 * 2**20


@dataclass(frozen=True)
class Folder:
    """A folder a run writes to, as this host has it (folder_facts)."""

    path: Path
    variable: str  # the environment variable that places it: DAGSTER_HOME, DIHAL_ARTIFACTS
    what: str  # what is kept there, for the message
    read_only: bool  # on a file system mounted read-only
    writable: bool  # this user may make files in it (or, not made yet, in its nearest parent)
    free: int  # bytes free to this user on its file system


def folder_facts(path: Path | str, variable: str, what: str) -> Folder:
    """The Folder at `path` (made later where it does not exist yet: its nearest existing
    parent's file system and permissions count). Reads only: nothing is written."""
    p = Path(path).absolute()
    probe = p
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    st = os.statvfs(probe)
    return Folder(path=p, variable=variable, what=what,
                  read_only=bool(st.f_flag & os.ST_RDONLY),
                  writable=os.access(probe, os.W_OK | os.X_OK),
                  free=st.f_bavail * st.f_frsize)


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def check_folder(folder: Folder, min_free: int = MIN_FREE_BYTES) -> list[Refusal]:
    """A folder a run writes to must be writable and have `min_free` bytes free."""
    f = folder
    elsewhere = (f"point {f.variable} at a folder on another disk (the files already there are "
                 "kept; copy them along to reuse them), then run again. Nothing was run or "
                 "changed.")
    if f.read_only:
        why = f"{f.path} is on a read-only file system"
    elif not f.writable:
        why = f"{f.path} is not writable by this user (uid {os.getuid()})"
    elif f.free < min_free:
        return [Refusal(f.variable, (
            f"the disk holding {f.path} is full: {_mib(f.free)} free, a run needs at least "
            f"{_mib(min_free)} there for {f.what}. Free space on it, or {elsewhere}"))]
    else:
        return []
    return [Refusal(f.variable, (
        f"{why}: a run writes {f.what} there. Make it writable (remount it read-write, fix its "
        f"permissions), or {elsewhere}"))]


def require_folders(folders: list[Folder], min_free: int = MIN_FREE_BYTES) -> None:
    """Raise PreflightError listing the refusals of check_folder for each of `folders`."""
    found = [r for f in folders for r in check_folder(f, min_free)]
    if found:
        raise PreflightError(f"pre-flight refused this run ({len(found)} problem(s)):\n"
                             + "\n".join(f"  - {r}" for r in found))
