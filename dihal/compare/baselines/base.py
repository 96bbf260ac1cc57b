"""What every continuous-diffusion baseline shares (docs/method.md §5): the matched budget, its
check, the interface, and its loss as the shared training loop takes it
(`dihal.training.train_model`: the bridge's order, optimiser, schedule, budget and checks).

A baseline is an nn.Module that keeps the `Baseline` contract below. Training one:
    train_model(model, baseline_loss(ids), len(ids), cfg, ckpt_dir, protocol={"baseline": name})
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor, nn

from dihal.errors import DihalError
from dihal.generation_rows import Budget


class BudgetMismatchError(DihalError):
    pass


def check_budget(reference: Budget, candidate: Budget, name: str, param_tol: float = 0.10) -> None:
    """Raise BudgetMismatchError unless `candidate` matches `reference`: parameters within
    +-param_tol, training tokens, sampler steps and sequence length exactly."""
    problems = []
    rel = abs(candidate.denoiser_parameters - reference.denoiser_parameters) / reference.denoiser_parameters
    if rel > param_tol:
        problems.append(f"denoiser parameters {candidate.denoiser_parameters:,} vs "
                        f"{reference.denoiser_parameters:,} ({rel:+.1%}, allowed +-{param_tol:.0%})")
    for field in ("train_tokens", "sampler_steps", "seq_len"):
        a, b = getattr(reference, field), getattr(candidate, field)
        if a != b:
            problems.append(f"{field} {b:,} vs {a:,}")
    if problems:
        raise BudgetMismatchError(
            f"{name} is not at DiHAL's budget: " + "; ".join(problems)
            + ". Change the baseline's size or training config so the comparison is fair.")


class Baseline(Protocol):
    """What the comparison needs of a baseline recipe; every recipe keeps it whole."""

    name: str

    def denoiser_parameters(self) -> int:
        """The parameters of the network run at every sampler step (matched to DiHAL's bridge
        denoiser, +-10 %); token embedding tables and read-out heads tied to them are not
        counted."""

    def loss(self, ids: Tensor, generator: torch.Generator) -> Tensor:
        """The scalar training loss of a batch of token ids (B, T)."""

    def native_temperature(self) -> float | None:
        """The temperature the recipe's decoder samples at by default (its config's), or None
        for a recipe that rounds deterministically and has no temperature."""

    def sample(self, n: int, length: int, steps: int, generator: torch.Generator,
               temperature: float | None = None) -> Tensor:
        """(n, length) valid token ids after `steps` sampler steps; `temperature` the decoder's
        (None: its native one). A recipe whose native_temperature() is None refuses any other
        than None."""


def no_temperature(name: str, temperature: float | None) -> None:
    """For a recipe without a decoder temperature: refuse one, naming the recipe."""
    if temperature is not None:
        raise ValueError(f"{name} rounds deterministically and has no decoding temperature; "
                         f"got temperature={temperature} (pass None)")


def baseline_loss(ids: Tensor):
    """The training loop's loss for a baseline over `ids` (n_seq, T): `model.loss` on the batch's
    sequences with the step's generator, a mean already (counted as one term)."""

    def loss_terms(
        model: nn.Module, indices: Tensor, generator: torch.Generator, device: torch.device
    ) -> tuple[Tensor, float]:
        return model.loss(ids[indices].to(device), generator), 1.0

    return loss_terms
