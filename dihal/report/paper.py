"""The DiHAL paper's figures as data/paper_claims.json records them, with their source (the
paper as docs/method.md quotes it), read and checked: the report's section on the paper's
claims (dihal.report.claims) sets this run's numbers beside them. The figures live in the data
file, never in code; one the quoted text does not give is null there. Standard library only."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from dihal.errors import DihalError
from dihal.rows import TARGETS

PAPER_CLAIMS = Path(__file__).resolve().parents[2] / "data" / "paper_claims.json"


class PaperClaimsError(DihalError, ValueError):
    """data/paper_claims.json is missing, not JSON, or lacks a figure the report reads; the
    message names the file, the key and the fix."""


@dataclass(frozen=True)
class PaperBackbone:
    """One backbone of the paper: its l*, its decoder layers and parameters."""

    name: str
    l_star: int
    n_layers: int
    n_parameters: int

    @property
    def depth(self) -> Fraction:
        return Fraction(self.l_star, self.n_layers)


@dataclass(frozen=True)
class PaperClaims:
    """The paper's figures as data/paper_claims.json records them (see its `source`)."""

    source: str
    backbones: dict[str, PaperBackbone]
    train_tokens: int | None
    train_steps: int | None
    spearman_low: float
    spearman_high: float
    spearman_target: str
    spearman_backbones: list[str]
    generation_backbone: str
    baselines: dict[str, str]  # the paper's name -> the comparison's (dihal.registry.BASELINES)
    gen_ppl: dict[str, float]  # "dihal", "codar"
    diversity: dict[str, float]

    @property
    def near_embedding(self) -> Fraction:
        """The deepest l* the paper reports, as a share of its backbone's layers."""
        return max(b.depth for b in self.backbones.values())

    @property
    def gen_ppl_ratio(self) -> float:
        """CoDAR's Gen.PPL over DiHAL's in the paper: the gap its table shows."""
        return self.gen_ppl["codar"] / self.gen_ppl["dihal"]

    @property
    def diversity_ratio(self) -> float:
        return self.diversity["dihal"] / self.diversity["codar"]


def _at(d: Any, path: Path, *keys: str) -> Any:
    for i, k in enumerate(keys):
        if not isinstance(d, dict) or k not in d:
            raise PaperClaimsError(
                f"{path}: no key {'.'.join(keys[:i + 1])!r}; restore the file from the "
                "repository (git checkout data/paper_claims.json) or add the paper's figure")
        d = d[k]
    return d


def _number(d: Any, path: Path, *keys: str, nullable: bool = False) -> Any:
    v = _at(d, path, *keys)
    if v is None and nullable:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
        raise PaperClaimsError(f"{path}: {'.'.join(keys)} is {v!r}, not a positive number"
                               + (" or null" if nullable else "") + "; correct it from the "
                               "paper's figure")
    return v


def load_paper_claims(path: Path = PAPER_CLAIMS) -> PaperClaims:
    """The paper's figures from `path`, checked: every figure the section reads is there and
    is a positive number (the training budget may be null: not stated)."""
    try:
        d = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise PaperClaimsError(f"cannot read the paper's figures from {path} ({e}); restore "
                               "it from the repository (git checkout data/paper_claims.json)"
                               ) from e
    backbones = {k: PaperBackbone(str(_at(d, path, "backbones", k, "name")),
                                  *(int(_number(d, path, "backbones", k, f))
                                    for f in ("l_star", "n_layers", "n_parameters")))
                 for k in _at(d, path, "backbones")}
    claims = PaperClaims(
        source=str(_at(d, path, "source", "paper")), backbones=backbones,
        train_tokens=_number(d, path, "training", "train_tokens", nullable=True),
        train_steps=_number(d, path, "training", "steps", nullable=True),
        spearman_low=_number(d, path, "spearman", "low"),
        spearman_high=_number(d, path, "spearman", "high"),
        spearman_target=str(_at(d, path, "spearman", "target")),
        spearman_backbones=list(_at(d, path, "spearman", "backbones")),
        generation_backbone=str(_at(d, path, "generation", "backbone")),
        baselines=dict(_at(d, path, "generation", "baselines")),
        gen_ppl={k: _number(d, path, "generation", k, "gen_ppl") for k in ("dihal", "codar")},
        diversity={k: _number(d, path, "generation", k, "diversity")
                   for k in ("dihal", "codar")})
    unknown = {claims.generation_backbone, *claims.spearman_backbones} - set(backbones)
    if unknown or not backbones or "CoDAR" not in claims.baselines:
        raise PaperClaimsError(f"{path}: the generation and spearman entries name backbones "
                               f"{sorted(unknown)} not under backbones, or generation.baselines "
                               "lacks CoDAR; correct the file")
    if claims.spearman_target not in TARGETS:
        raise PaperClaimsError(f"{path}: spearman.target is {claims.spearman_target!r}, not a "
                               f"bridgeability target ({', '.join(TARGETS)}); correct the file")
    return claims
