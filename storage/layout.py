"""Where artifacts live: one root, a folder per backbone and stage, caches beside them.
The artifact classes (storage.artifacts) own everything below a stage's folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ArtifactLayout:
    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root).expanduser().resolve())

    def stage(self, stage: str, backbone: str | None) -> Path:
        return self.root / backbone / stage if backbone else self.root / stage

    def model_cache(self) -> Path:
        return self.root / "cache" / "models"

    def judge_cache(self) -> Path:
        return self.root / "cache" / "judges"
