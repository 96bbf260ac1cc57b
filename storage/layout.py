"""Where every artifact lives. Deterministic paths: downstream stages find upstream ones here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ArtifactLayout:
    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root).expanduser().resolve())

    # shared
    def corpus(self) -> Path:
        return self.root / "corpus"

    def model_cache(self) -> Path:
        return self.root / "cache" / "models"

    # per backbone
    def stage(self, stage: str, backbone: str) -> Path:
        return self.root / backbone / stage

    def sequences(self, backbone: str) -> Path:
        return self.stage("sequences", backbone)

    def hidden_states(self, backbone: str) -> Path:
        return self.stage("hidden_states", backbone)

    def hidden_states_partial(self, backbone: str) -> Path:
        """The in-progress dump; it becomes ``hidden_states`` when every batch is written."""
        return self.stage("hidden_states.partial", backbone)

    def geometry(self, backbone: str) -> Path:
        return self.stage("geometry", backbone)

    def layer_score(self, backbone: str) -> Path:
        return self.stage("layer_score", backbone)

    def bridge_sweep(self, backbone: str, layer: int) -> Path:
        return self.stage("bridge_sweep", backbone) / f"layer_{layer:03d}"

    def bridgeability(self, backbone: str) -> Path:
        return self.stage("bridgeability", backbone)

    def bridge(self, backbone: str) -> Path:
        return self.stage("bridge", backbone)

    def evaluation(self, backbone: str) -> Path:
        return self.stage("eval", backbone)

    def judge_cache(self) -> Path:
        return self.root / "cache" / "judges"

    def baseline(self, backbone: str, name: str) -> Path:
        return self.stage("baseline", backbone) / name

    def comparison(self, backbone: str) -> Path:
        return self.stage("comparison", backbone)

    def full_training(self, backbone: str) -> Path:
        return self.stage("full_training", backbone)

    def report(self, backbone: str) -> Path:
        return self.stage("report", backbone)

    def full_training_bridge(self, backbone: str, layer: int) -> Path:
        return self.stage("full_training_bridges", backbone) / f"layer_{layer:03d}"
