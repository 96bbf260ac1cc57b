"""Benchmark: scoring a set of generated texts with the judge (Gen.PPL, the length-controlled
Gen.PPL and MAUVE's features), one pass (Judge.score_ids, what the eval and the baselines now
run) against the two passes it replaced (token_nll_each, then features), alternating rounds
on the same texts; and the paired comparison's re-scoring, which the eval's memo now skips.

The texts are the eval's own samples where a run left them (--samples, a samples.jsonl), else
the embedded corpus's first documents cut to about --words words.

    .venv/bin/python benchmarks/bench_judge.py [--backbone smollm2] [--samples PATH]
        [--n 64] [--words 48] [--rounds 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from pathlib import Path

import torch


def texts_from(args) -> list[str]:
    if args.samples:
        rows = [json.loads(line) for line in Path(args.samples).read_text().splitlines()]
        first = rows[0]["model"]
        return [r["text"] for r in rows if r["model"] == first][: args.n]
    from dihal.config import CorpusConfig
    from dihal.locate.corpus import iter_documents, resolve_shards

    cfg = CorpusConfig()
    docs = itertools.islice(iter_documents(resolve_shards(cfg), cfg), args.n)
    return [" ".join(d.text.split()[: args.words]) for d in docs]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backbone", default="smollm2")
    p.add_argument("--samples", default=None)
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--words", type=int, default=48)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    from dihal.evaluate.judge import load_judge
    from dihal.registry import get_spec
    from storage.layout import ArtifactLayout

    layout = ArtifactLayout(os.environ.get("DIHAL_ARTIFACTS", ".dihal/artifacts"))
    judge = load_judge(get_spec(args.backbone).judge, cache_dir=layout.judge_cache())
    texts = [t for t in texts_from(args) if t.strip()]
    ids = [judge.encode(t) for t in texts]
    print(f"judge {judge.name}, {len(texts)} texts, {sum(map(len, ids))} judge tokens, "
          f"{args.threads} thread(s)")
    two, one = [], []
    for r in range(args.rounds):
        t = time.perf_counter()
        judge.token_nll_each(ids)
        judge.features(texts)
        two.append(time.perf_counter() - t)
        t = time.perf_counter()
        judge.score_ids(ids)
        one.append(time.perf_counter() - t)
        print(f"round {r + 1}: two passes {two[-1]:.2f} s, one pass {one[-1]:.2f} s")
    a, b = sorted(two)[len(two) // 2], sorted(one)[len(one) // 2]
    t = time.perf_counter()
    judge.nll_each(texts)
    paired = time.perf_counter() - t
    print(f"median: two passes {a:.2f} s, one pass {b:.2f} s ({b / a:.2f}x); the paired "
          f"comparison's re-scoring of these texts (now served by the memo): {paired:.2f} s")


if __name__ == "__main__":
    main()
