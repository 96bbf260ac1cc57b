"""The autoregressive reader that LD4LG and CoDAR share (`TokenDecoder`: a small causal
transformer that cross-attends to a memory and reads tokens out through a frozen table), and the
transformer layers it and LD4LG's autoencoder are made of."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Attention(nn.Module):
    """Multi-head attention of queries from x (B, T, D) over keys/values from source (B, S, D)."""

    def __init__(self, d: int, n_heads: int) -> None:
        super().__init__()
        if d % n_heads:
            raise ValueError(f"d={d} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.q = nn.Linear(d, d)
        self.kv = nn.Linear(d, 2 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x: Tensor, source: Tensor, causal: bool = False) -> Tensor:
        (B, T, D), S, h = x.shape, source.shape[1], self.n_heads
        q = self.q(x).view(B, T, h, D // h).transpose(1, 2)
        k, v = self.kv(source).view(B, S, 2, h, D // h).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return self.out(y.transpose(1, 2).reshape(B, T, D))


def mlp(d: int, ratio: float) -> nn.Sequential:
    hidden = int(round(ratio * d))
    return nn.Sequential(nn.Linear(d, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, d))


class Layer(nn.Module):
    """Pre-norm transformer layer: self-attention (causal or not), optionally cross-attention
    to a memory (B, M, D), then an MLP."""

    def __init__(self, d: int, n_heads: int, mlp_ratio: float, causal: bool, cross: bool) -> None:
        super().__init__()
        self.causal = causal
        self.norm_self = nn.LayerNorm(d)
        self.self_attn = Attention(d, n_heads)
        self.norm_cross = nn.LayerNorm(d) if cross else None
        self.cross_attn = Attention(d, n_heads) if cross else None
        self.norm_mlp = nn.LayerNorm(d)
        self.mlp = mlp(d, mlp_ratio)

    def forward(self, x: Tensor, memory: Tensor | None = None) -> Tensor:
        h = self.norm_self(x)
        x = x + self.self_attn(h, h, causal=self.causal)
        if self.cross_attn is not None:
            x = x + self.cross_attn(self.norm_cross(x), memory)
        return x + self.mlp(self.norm_mlp(x))


def init_weights(module: nn.Module) -> None:
    """GPT-2 style: N(0, 0.02) weights, zero biases (LayerNorms keep their defaults)."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)


@dataclass(frozen=True)
class DecoderConfig:
    """Size of an autoregressive reader (kept small: it is not part of the matched budget)."""

    d_model: int = 256
    n_layers: int = 2
    n_heads: int = 4
    mlp_ratio: float = 4.0


class TokenDecoder(nn.Module):
    """p(y_i | y_<i, memory): a causal transformer over tokens that cross-attends to a memory
    sequence (B, M, d_memory). Its token inputs and its read-out are tied to a fixed table
    (V, d_emb), passed to each call: input = table[y] W_in,
    logits = (h W_out) table^T / sqrt(d_emb) + b (O(1) at init for rows of norm sqrt(d_emb)).

    Teacher forcing starts from BOS and predicts every position of ids, so generation from BOS
    reproduces the training sequences' format (including a leading BOS if they have one)."""

    def __init__(self, vocab_size: int, d_emb: int, d_memory: int, memory_len: int,
                 max_len: int, cfg: DecoderConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.max_len = max_len
        self.tok_in = nn.Linear(d_emb, d, bias=False)
        self.pos = nn.Embedding(max_len, d)
        self.mem_in = nn.Linear(d_memory, d)
        self.mem_pos = nn.Embedding(memory_len, d)
        self.mem_norm = nn.LayerNorm(d)
        self.layers = nn.ModuleList(
            Layer(d, cfg.n_heads, cfg.mlp_ratio, causal=True, cross=True)
            for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, d_emb, bias=False)
        self.head_bias = nn.Parameter(torch.zeros(vocab_size))
        self.logit_scale = d_emb**-0.5
        init_weights(self)

    def memory(self, memory: Tensor) -> Tensor:
        """Project and position-tag a memory (B, M, d_memory) once per sequence."""
        m = self.mem_in(memory) + self.mem_pos.weight[: memory.shape[1]]
        return self.mem_norm(m)

    def hidden(self, prev_ids: Tensor, memory: Tensor, table: Tensor) -> Tensor:
        """(B, L, D) states that predict y_1..y_L from y_0..y_{L-1} = prev_ids and a projected
        memory."""
        L = prev_ids.shape[1]
        if L > self.max_len:
            raise ValueError(f"{L} positions exceed the decoder's max_len={self.max_len}")
        x = self.tok_in(table[prev_ids]) + self.pos.weight[:L]
        for layer in self.layers:
            x = layer(x, memory)
        return self.norm(x)

    def logits(self, h: Tensor, table: Tensor) -> Tensor:
        """(..., V) logits of states h (..., D), read out through the tied table."""
        return (self.head(h) @ table.T) * self.logit_scale + self.head_bias

    def loss(self, ids: Tensor, memory: Tensor, table: Tensor, bos_id: int) -> Tensor:
        """Teacher-forced cross-entropy of every token of ids (B, T) after a BOS start."""
        prev = torch.cat([torch.full_like(ids[:, :1], bos_id), ids[:, :-1]], dim=1)
        logits = self.logits(self.hidden(prev, self.memory(memory), table), table)
        return F.cross_entropy(logits.flatten(0, 1), ids.flatten())

    @torch.no_grad()
    def generate(self, memory: Tensor, length: int, table: Tensor, bos_id: int,
                 temperature: float, generator: torch.Generator) -> Tensor:
        """(n, length) ids decoded left to right from BOS; temperature <= 0 is greedy.
        The prefix is recomputed for every token (no KV cache: the reader is small)."""
        mem = self.memory(memory)
        out = torch.full((memory.shape[0], 1), bos_id, dtype=torch.long, device=memory.device)
        for _ in range(length):
            last = self.logits(self.hidden(out, mem, table)[:, -1], table).float()
            if temperature > 0:
                probs = torch.softmax(last / temperature, dim=-1)
                nxt = torch.multinomial(probs, 1, generator=generator)
            else:
                nxt = last.argmax(-1, keepdim=True)
            out = torch.cat([out, nxt], dim=1)
        return out[:, 1:]
