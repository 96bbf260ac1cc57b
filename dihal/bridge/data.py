"""Bridge training data: standardised (condition, target) sequence pairs."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True, eq=False)
class BridgeData:
    """Pairs (c, h_l) of whole sequences, both standardised per dimension.

    cond, target: (n_seq, T, d) float32. mask: optional (n_seq, T) bool, True on real tokens.
    Padding must be on the right: the denoiser is causal, so padded positions after the real
    ones never influence them, and the mask only has to keep them out of the loss.
    """

    cond: Tensor
    target: Tensor
    mask: Tensor | None = None

    def __post_init__(self) -> None:
        if self.cond.ndim != 3 or self.cond.shape != self.target.shape:
            raise ValueError(
                f"cond {tuple(self.cond.shape)} and target {tuple(self.target.shape)} "
                "must both be (n_seq, T, d)"
            )
        if self.cond.dtype != torch.float32 or self.target.dtype != torch.float32:
            raise ValueError(
                f"cond/target must be float32, got {self.cond.dtype}/{self.target.dtype}"
            )
        if self.mask is not None:
            if self.mask.shape != self.cond.shape[:2] or self.mask.dtype != torch.bool:
                raise ValueError(
                    f"mask must be bool {tuple(self.cond.shape[:2])}, "
                    f"got {self.mask.dtype} {tuple(self.mask.shape)}"
                )
        if self.cond.shape[0] < 1:
            raise ValueError("BridgeData needs at least one sequence")

    def __len__(self) -> int:
        return self.cond.shape[0]

    @property
    def seq_len(self) -> int:
        return self.cond.shape[1]

    @property
    def dim(self) -> int:
        return self.cond.shape[2]

    @property
    def n_tokens(self) -> int:
        return len(self) * self.seq_len if self.mask is None else int(self.mask.sum())

    @property
    def nbytes(self) -> int:
        mask = 0 if self.mask is None else self.mask.numel() * self.mask.element_size()
        return 2 * self.cond.numel() * self.cond.element_size() + mask

    @property
    def device(self) -> torch.device:
        return self.cond.device

    def to(self, device: torch.device | str) -> BridgeData:
        """The same pairs on `device` (self where they are there already)."""
        if self.cond.device == torch.device(device):
            return self
        mask = None if self.mask is None else self.mask.to(device)
        return BridgeData(self.cond.to(device), self.target.to(device), mask)

    def batch(
        self, index: Tensor | slice, device: torch.device | str | None = None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """(cond, target, mask) of the sequences `index`, moved to `device`. Pairs that live on
        the device are gathered there; the index is sent without waiting (from pinned memory,
        as the training loop's order is on a GPU)."""
        if isinstance(index, Tensor) and index.device != self.cond.device:
            index = index.to(self.cond.device, non_blocking=index.is_pinned())
        mask = None if self.mask is None else self.mask[index].to(device)
        return self.cond[index].to(device), self.target[index].to(device), mask


# The share of a GPU's free memory the training pairs may take there (the rest: the denoiser,
# its optimiser, a batch's activations, and whatever else the step holds)
PAIRS_SHARE = 0.5


def place_pairs(data: BridgeData, device: torch.device | str,
                free_bytes: int | None = None) -> tuple[BridgeData, str | None]:
    """(the pairs to train from, None) with the pairs moved to `device` where they fit in
    PAIRS_SHARE of its free memory (`free_bytes`; default: what the device reports), so that a
    step gathers its batch there; else (the pairs where they are, why they stay there: each
    step then copies its batch from the host)."""
    device = torch.device(device)
    if device.type == "cpu" or data.device == device:
        return data, None
    if free_bytes is None and device.type == "cuda":
        free_bytes = torch.cuda.mem_get_info(device)[0]
    if free_bytes is None or data.nbytes > PAIRS_SHARE * free_bytes:
        free = "unknown" if free_bytes is None else f"{free_bytes / 2**30:.2f} GiB"
        return data, (f"the training pairs ({data.nbytes / 2**30:.2f} GiB) stay on the "
                      f"{data.device.type}: they do not fit in {PAIRS_SHARE:.0%} of {device}'s "
                      f"free memory ({free}), so each step copies its batch from there")
    return data.to(device), None


@dataclass(frozen=True, eq=False)
class Standardizer:
    """Per-dimension standardisation x -> (x - mean) / std, and back."""

    mean: Tensor
    std: Tensor

    @classmethod
    def fit(
        cls, x: Tensor, mask: Tensor | None = None, eps: float = 1e-6, chunk: int = 256
    ) -> Standardizer:
        """Statistics over the (real) tokens of x (n, T, d), accumulated in float64 by chunks."""
        d = x.shape[-1]
        total = torch.zeros(d, dtype=torch.float64)
        total_sq = torch.zeros(d, dtype=torch.float64)
        count = 0
        for i in range(0, x.shape[0], chunk):
            xs = x[i : i + chunk].reshape(-1, d).to(torch.float64)
            if mask is not None:
                xs = xs[mask[i : i + chunk].reshape(-1)]
            total += xs.sum(0)
            total_sq += (xs * xs).sum(0)
            count += xs.shape[0]
        if count < 2:
            raise ValueError("need at least two tokens to standardise")
        mean = total / count
        var = (total_sq / count - mean * mean).clamp_min(0.0) * count / (count - 1)
        std = var.sqrt().clamp_min(eps)
        return cls(mean.to(torch.float32), std.to(torch.float32))

    def apply(self, x: Tensor) -> Tensor:
        return ((x - self.mean.to(x)) / self.std.to(x)).to(x.dtype)

    def apply_(self, x: Tensor) -> Tensor:
        """`apply` in place (the same values, no copy of a large x)."""
        return x.sub_(self.mean.to(x)).div_(self.std.to(x))

    def invert(self, z: Tensor) -> Tensor:
        return (z * self.std.to(z) + self.mean.to(z)).to(z.dtype)
