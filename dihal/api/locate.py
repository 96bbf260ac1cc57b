"""The Locate step on a model and a few texts in memory, for a quick look before a full run:
the geometry proxies of every layer, the layer score S_l and l* (docs/method.md §1), as a
table.

The texts are packed as the pipeline's sequences are (dihal.locate.corpus.pack_sequences:
each text's tokens and an EOS, cut into sequences of BOS + seq_len - 1 tokens, no padding),
the backbone's hidden states of every layer are kept in memory, and the geometry and the score
are the pipeline's own functions (dihal.locate.stage.compute_geometry, score_summary) with the
token sample, anchors and neighbourhoods cut to what the texts hold. A few hundred tokens give
a rough l*; the pipeline's Locate takes 4,096 states a layer from its held-out split, with
bootstrap and sequence-resample stability on top. Pure compute, no Dagster.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from dihal.backbones import Backbone
from dihal.config import GeometryConfig
from dihal.inputs import PredictorRow, ScoreRow
from dihal.locate.stage import compute_geometry, score_summary
from dihal.proxies import NAMES, PROXIES

MIN_TOKENS = 32  # below this the proxies' neighbourhoods say nothing
SHOWN = (*NAMES, *(p.z_column for p in PROXIES), "S", "rank")


@dataclass(frozen=True)
class Located:
    """l* and the rows behind it: one per layer under normalisation `norm` (layer, m_curv,
    m_mono, k_eff, their z-scores over the candidate layers, S and its rank; layer 0 is no
    candidate), l* under every normalisation computed (`selected`), the rival predictors of each
    candidate layer, the proxies' plot (PNG bytes), and the tokens and time it took."""

    l_star: int
    norm: str
    rows: list[ScoreRow]
    selected: dict[str, int]
    predictors: list[PredictorRow] = field(default_factory=list)
    n_tokens: int = 0
    n_sequences: int = 0
    seconds: float = 0.0
    plot_png: bytes = field(default=b"", repr=False)

    def table(self) -> str:
        """Markdown: the proxies, z-scores and S_l of every layer, l* marked."""
        head = ["layer", *SHOWN]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in self.rows:
            cells = [f"{r.layer}" + (" (l*)" if r.layer == self.l_star else "")]
            for k in SHOWN:
                v = getattr(r, k)
                cells.append("" if v is None or (isinstance(v, float) and np.isnan(v))
                             else f"{v:.4g}" if isinstance(v, float) else str(v))
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)


def pack_texts(tokenizer, texts: Sequence[str], seq_len: int, *, bos_id: int,
               eos_id: int) -> np.ndarray:
    """(n, T) token ids: each text's tokens and an EOS, one stream, cut into rows of BOS +
    T - 1 tokens (T = seq_len, or all the tokens in one row where they are fewer)."""
    stream: list[int] = []
    for text in texts:
        stream += list(tokenizer.encode(text, add_special_tokens=False)) + [eos_id]
    body = min(seq_len - 1, len(stream))
    n = len(stream) // body if body else 0
    return np.asarray([[bos_id] + stream[i * body:(i + 1) * body] for i in range(n)],
                      dtype=np.int64).reshape(n, body + 1)


class MemoryStates:
    """Hidden states held in memory with the reading interface of a dump
    (storage.states.StateReader's `shape` and `layer`), one split: "val"."""

    splits = ("val",)

    def __init__(self, states: np.ndarray) -> None:
        self.states = states  # (N, n, T, d)

    def shape(self, split: str) -> tuple[int, ...]:
        return self.states.shape

    def layer(self, split: str, layer: int) -> np.ndarray:
        return self.states[layer]


@torch.no_grad()
def hidden_states_of(backbone: Backbone, ids: np.ndarray, batch_size: int = 8) -> np.ndarray:
    """hs[0..N-1] of every row of `ids`, float32 on the host: (N, n, T, d)."""
    parts = [backbone.hidden_states(torch.from_numpy(ids[i:i + batch_size]))
             .float().cpu().numpy() for i in range(0, len(ids), batch_size)]
    return np.concatenate(parts, axis=1)


def locate(backbone: Backbone, texts: str | Sequence[str], *, seq_len: int = 64,
           n_tokens: int | None = None, primary_norm: str = "none", seed: int = 0,
           progress: Callable[[str], None] | None = None) -> Located:
    """l* of `backbone` from the geometry of its hidden states on `texts`: packed into
    sequences of `seq_len`, `n_tokens` states a layer sampled (default: every token after the
    BOS of each sequence, at most 4,096), k_neighbors 32 where the tokens allow (else a quarter
    of them), the default normalisations; l* under `primary_norm`."""
    t0 = time.perf_counter()
    if isinstance(texts, str):
        texts = [texts]
    ids = pack_texts(backbone.tokenizer, texts, seq_len, bos_id=backbone.bos_id,
                     eos_id=backbone.eos_id)
    available = int(ids.shape[0] * (ids.shape[1] - 1)) if ids.size else 0
    n = min(available, n_tokens or 4096)
    if n < MIN_TOKENS:
        raise ValueError(f"locate needs at least {MIN_TOKENS} tokens of text to sample states "
                         f"from; the texts give {available} (after each sequence's BOS) with "
                         f"seq_len {seq_len}: give more or longer texts")
    cfg = GeometryConfig(n_tokens=n, n_anchors=min(2048, n), k_neighbors=min(32, n // 4),
                         seed=seed, n_resamples=0)
    if progress is not None:
        progress(f"hidden states of {len(ids)} sequences x {ids.shape[1]} tokens, "
                 f"{backbone.n_layers} layers")
    reader = MemoryStates(hidden_states_of(backbone, ids))
    geometry = compute_geometry(reader, cfg, backbone=backbone.spec.name, progress=progress)
    summary = score_summary(geometry.rows, primary_norm=primary_norm)
    rows = [r for r in summary["rows"] if r.norm == primary_norm]
    return Located(l_star=summary["l_star"], norm=primary_norm, rows=rows,
                   selected=summary["selected"], predictors=geometry.predictors, n_tokens=n,
                   n_sequences=len(ids), seconds=time.perf_counter() - t0,
                   plot_png=geometry.plot_png)
