"""Dump hidden states hs[0..N-1] of tokenised sequences, batch by batch, resumably.

Every layer of the held-out split is stored (the geometry sample and the bridges' validation
data), with the backbone's own next-token reference on it from the same forward pass (its top-1
token and the NLL of the actual next token: `next_token_reference`), which every bridge
measurement compares against instead of running the backbone again. The training split's
states are stored too unless ExtractConfig.store_train is False (bounded storage: the dump
does not grow with the training budget); then a bridge's training pairs (hs[0], hs[l]) are
computed when it trains, by the backbone's first l blocks (`layer_pairs`), in the same batches
and rounded to the same storage dtype as the dump: the values are identical to a stored dump's.

The forward pass of batch i+1 overlaps with the write of batch i (a one-slot writer thread),
so the dump runs at close to the speed of the bare forward pass. Every batch is checked before
it is written: non-finite states, or values beyond the storage dtype's range, stop the run with
an error naming the layer and sequence; batches already written stay on disk.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from dihal.config import DTYPE_MAX, ExtractConfig  # noqa: F401 (re-exported)
from dihal.errors import DihalError, StateValueError
from dihal.results import HiddenStatesResult, StateSpec


def stack_on_one_device(states, device: torch.device | str | None = None) -> torch.Tensor:
    """torch.stack of `states` on one device (default: the first state's). A backbone spread
    over several GPUs (device_map="auto") returns each block's states on that block's GPU:
    accelerate gathers the outputs of the outer model only, and DiHAL calls its inner decoder
    (and hooks inside it). A state already on `device` is not copied."""
    states = list(states)
    device = torch.device(device) if device is not None else states[0].device
    return torch.stack([s.to(device) for s in states])


def stored(sequences: dict[str, np.ndarray], cfg: ExtractConfig) -> dict[str, np.ndarray]:
    """The sequences whose states the dump keeps (every layer): all, or the held-out split."""
    return dict(sequences) if cfg.store_train else {"val": sequences["val"]}


def check_states(states: torch.Tensor, dtype: str, *, split: str, first_seq: int,
                 layers: tuple[int, ...] | None = None) -> float:
    """Raise StateValueError for NaN/inf or values the storage dtype cannot hold.

    `layers` names the layer of each row of `states` (default: row i is layer i). Returns the
    largest absolute value (for the overflow headroom record)."""
    name = (lambda i: layers[i]) if layers is not None else (lambda i: i)
    # Row by row: torch.isfinite and abs() allocate 7 and 4 bytes per element, which over all
    # N layers of a batch at once would be the dump's peak device memory (dihal.run.capacity).
    for row in range(states.shape[0]):
        finite = torch.isfinite(states[row])
        if not bool(finite.all()):
            b, pos = (int(v) for v in (~finite).nonzero()[0][:2])
            raise StateValueError(
                f"non-finite hidden state at layer {name(row)}, {split} sequence "
                f"{first_seq + b}, position {pos}. The backbone produced NaN/inf: check its "
                "dtype (float32 on CPU, bfloat16 rather than float16 on GPU) and the weights. "
                "Batches before this one are kept."
            )
        del finite
    per_layer = [float(states[row].abs().amax()) for row in range(states.shape[0])]
    amax = max(per_layer)
    limit = DTYPE_MAX[dtype]
    if amax > limit:
        layer = name(next(i for i, a in enumerate(per_layer) if a > limit))
        raise StateValueError(
            f"hidden state magnitude {amax:.1f} at layer {layer} ({split} batch from sequence "
            f"{first_seq}) overflows {dtype} (max {limit:.0f}). Store float32 instead "
            "(extract config dtype='float32'). Batches before this one are kept."
        )
    return amax


@dataclass
class ExtractReport:
    tokens: int = 0
    batches_written: int = 0
    batches_skipped: int = 0
    forward_s: float = 0.0
    wall_s: float = 0.0
    max_abs: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s else float("nan")


def extract_hidden_states(
    backbone,
    sequences: dict[str, np.ndarray],
    writer,
    cfg: ExtractConfig,
    progress: Callable[[str], None] | None = None,
) -> ExtractReport:
    """Run the backbone over ``sequences[split]`` (n_seq, seq_len) and write every batch.

    ``writer`` is a storage.states.StateWriter (or anything with is_done / write_batch);
    batches it already holds are skipped, so a second call after an interruption resumes.
    """
    report = ExtractReport()
    t_start = time.perf_counter()
    pending: Future | None = None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="zarr-writer") as pool:
        try:
            for split, ids in sequences.items():
                n_batches = -(-len(ids) // cfg.batch_size)
                for b in range(n_batches):
                    if writer.is_done(split, b):
                        report.batches_skipped += 1
                        continue
                    lo = b * cfg.batch_size
                    batch = torch.as_tensor(ids[lo : lo + cfg.batch_size], dtype=torch.long)
                    t0 = time.perf_counter()
                    reference = None
                    if split in writer.reference_splits:
                        hs, final = backbone.hidden_states(batch, final=True)
                        reference = next_token_reference(backbone, final, batch, split=split,
                                                         first_seq=lo)
                    else:
                        hs = backbone.hidden_states(batch)
                    hs = hs.float()
                    report.forward_s += time.perf_counter() - t0
                    amax = check_states(hs, cfg.dtype, split=split, first_seq=lo)
                    report.max_abs = max(report.max_abs, amax)
                    arr = hs.to(getattr(torch, cfg.dtype)).cpu().numpy()
                    if pending is not None:
                        pending.result()  # one write in flight at most: memory bounded
                    pending = pool.submit(writer.write_batch, split, b, arr, reference)
                    report.tokens += batch.numel()
                    report.batches_written += 1
                    if progress:
                        rate = report.tokens / (time.perf_counter() - t_start)
                        progress(
                            f"{split} batch {b + 1}/{n_batches} ({rate:.0f} tokens/s, "
                            f"max |h| {report.max_abs:.0f})"
                        )
        finally:
            if pending is not None:
                pending.result()
    report.wall_s = time.perf_counter() - t_start
    return report


@torch.no_grad()
def next_token_reference(backbone, final: torch.Tensor, ids: torch.Tensor, *, split: str = "val",
                         first_seq: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The backbone's own next-token prediction on a batch, from its final-normed states
    `final` (B, T, d) of the same forward pass: its top-1 token at every position (B, T) int32,
    and the NLL (nats) of the actual next token (B, T-1) float32. The bridges measure top-1
    agreement and the backbone's NLL against it instead of running the backbone again. One
    sequence's logits are held at a time (a 262k vocabulary makes a batch's large)."""
    import torch.nn.functional as F

    n, seq_len = ids.shape
    top = np.empty((n, seq_len), dtype=np.int32)
    nll = np.empty((n, seq_len - 1), dtype=np.float32)
    for i in range(n):
        logits = backbone.head(final[i]).float()
        top[i] = logits.argmax(-1).cpu().numpy()
        nll[i] = F.cross_entropy(logits[:-1], ids[i, 1:].to(logits.device),
                                 reduction="none").cpu().numpy()
    if not np.isfinite(nll).all():
        b, pos = (int(v) for v in np.argwhere(~np.isfinite(nll))[0])
        raise StateValueError(
            f"non-finite next-token NLL of the backbone at {split} sequence {first_seq + b}, "
            f"position {pos}: check its dtype and weights. Batches before this one are kept.")
    return top, nll


def dump_hidden_states(backbone, sequences: dict[str, np.ndarray], writer, cfg: ExtractConfig,
                       progress: Callable[[str], None] | None = None) -> HiddenStatesResult:
    """The hidden_states stage: extract (resuming what `writer` holds) and summarise."""
    report = extract_hidden_states(backbone, sequences, writer, cfg, progress)
    return HiddenStatesResult(
        backbone=backbone.info(), spec=writer.spec, dtype=cfg.dtype,
        tokens_per_s=report.tokens_per_s, batches_resumed=report.batches_skipped,
        max_abs=report.max_abs, fp16_headroom=DTYPE_MAX["float16"] / max(report.max_abs, 1e-9))


@torch.no_grad()
def layer_pairs(backbone, ids: np.ndarray, layer: int, cfg: ExtractConfig, *,
                progress: Callable[[str], None] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(c, h) = (hs[0], hs[layer]) of the sequences `ids` (n, T), float32 on the host, computed
    by the backbone's first `layer` blocks in batches of cfg.batch_size and rounded through
    cfg.dtype: the values a dump of all layers would have stored. Host memory: 2 x n x T x d x
    4 bytes; nothing is written to disk."""
    n, seq_len = ids.shape
    d = backbone.hidden_size
    c = torch.empty((n, seq_len, d), dtype=torch.float32)
    h = torch.empty((n, seq_len, d), dtype=torch.float32)
    store = getattr(torch, cfg.dtype)
    t0 = time.perf_counter()
    for lo in range(0, n, cfg.batch_size):
        batch = torch.as_tensor(ids[lo : lo + cfg.batch_size], dtype=torch.long)
        c_b, h_b = backbone.lower_states(batch, layer)
        both = stack_on_one_device([c_b.float(), h_b.float()])  # c_b and h_b: each its GPU
        check_states(both, cfg.dtype, split="train", first_seq=lo, layers=(0, layer))
        c[lo : lo + len(batch)] = both[0].to(store).cpu().float()
        h[lo : lo + len(batch)] = both[1].to(store).cpu().float()
        if progress:
            progress(f"layer {layer} training pairs: {min(lo + cfg.batch_size, n)}/{n} sequences "
                     f"({time.perf_counter() - t0:.0f} s)")
    return c, h


def state_spec(backbone, revision: str, sequences: dict[str, np.ndarray], cfg: ExtractConfig) -> StateSpec:
    """The shapes of the dump of `sequences`; the sequences must have been tokenised for the
    loaded weights."""

    if backbone.weights.revision != revision:
        raise DihalError(f"the sequences were tokenised for {revision} but the loaded weights are "
                         f"{backbone.weights.revision}: re-materialise the sequences asset.")
    return StateSpec(n_layers=backbone.n_layers, seq_len=next(iter(sequences.values())).shape[1],
                     hidden=backbone.hidden_size, n_seq={s: len(v) for s, v in sequences.items()},
                     batch_size=cfg.batch_size, dtype=cfg.dtype)
