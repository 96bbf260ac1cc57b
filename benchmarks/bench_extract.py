"""Extraction throughput and memory: the Zarr dump vs a bare forward pass on the same batches.

    .venv/bin/python benchmarks/bench_extract.py                 # ratio, alternating A/B rounds
    .venv/bin/python benchmarks/bench_extract.py --memory        # peak RSS for 4 vs 16 batches

Target: extraction incl. Zarr writes >= 0.9x the bare forward's tokens/s.
The two are timed in alternating rounds in one process, so machine noise hits both alike;
the ratio of the medians is reported.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dihal.backbones import load_backbone  # noqa: E402
from dihal.locate.corpus import (  # noqa: E402
    CorpusConfig,
    SequenceConfig,
    iter_documents,
    pack_sequences,
    resolve_shards,
)
from dihal.locate.extract import ExtractConfig, extract_hidden_states  # noqa: E402
from storage.states import StateSpec, StateWriter  # noqa: E402


def sequences(bb, n: int, seq_len: int) -> np.ndarray:
    cfg = SequenceConfig(seq_len=seq_len, n_train=n, n_val=1)
    docs = iter_documents(resolve_shards(CorpusConfig()), CorpusConfig())
    packed = pack_sequences(docs, bb.tokenizer, cfg, bos_id=bb.bos_id, eos_id=bb.eos_id)
    return np.array(packed["train"].input_ids, dtype=np.int64)


def bare(bb, ids: np.ndarray, batch: int) -> float:
    t0 = time.perf_counter()
    for lo in range(0, len(ids), batch):
        hs = bb.hidden_states(torch.as_tensor(ids[lo : lo + batch])).float()
        hs.to(torch.float16).numpy()  # the same device->host copy the dump makes
    return ids.size / (time.perf_counter() - t0)


def dump(bb, ids: np.ndarray, batch: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        spec = StateSpec(bb.n_layers, ids.shape[1], bb.hidden_size, {"train": len(ids)}, batch)
        w = StateWriter(Path(tmp) / "w", spec, "bench", tokens={"train": ids}, attrs={})
        rep = extract_hidden_states(bb, {"train": ids}, w, ExtractConfig(batch_size=batch))
        return rep.tokens / rep.wall_s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--memory", action="store_true", help="peak RSS for 4 vs 16 batches")
    ap.add_argument("--rss-only", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    bb = load_backbone("smollm2", cache_dir=ROOT / ".dihal/artifacts/cache/models")

    if args.rss_only:
        ids = sequences(bb, args.rss_only * args.batch_size, args.seq_len)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        dump(bb, ids, args.batch_size)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"batches": args.rss_only, "rss_before_mib": before / 1024,
                          "peak_rss_mib": after / 1024}))
        return
    if args.memory:
        for n in (4, 16):
            out = subprocess.run([sys.executable, __file__, "--rss-only", str(n)],
                                 capture_output=True, text=True, check=True)
            print(out.stdout.strip().splitlines()[-1])
        return

    ids = sequences(bb, args.batches * args.batch_size, args.seq_len)
    bare(bb, ids[: args.batch_size], args.batch_size)  # warm-up
    a, b = [], []
    for r in range(args.rounds):
        a.append(bare(bb, ids, args.batch_size))
        b.append(dump(bb, ids, args.batch_size))
        print(f"round {r + 1}: bare {a[-1]:.0f} tok/s, dump {b[-1]:.0f} tok/s")
    ratio = statistics.median(b) / statistics.median(a)
    print(json.dumps({"tokens_per_round": int(ids.size), "threads": torch.get_num_threads(),
                      "bare_tok_s": round(statistics.median(a), 1),
                      "dump_tok_s": round(statistics.median(b), 1), "ratio": round(ratio, 3)}))


if __name__ == "__main__":
    main()
