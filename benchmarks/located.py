"""What a per-layer benchmark reads from a Locate run (`python -m pipeline.main --stop-after
locate`) under $DIHAL_ARTIFACTS: the hidden-state dump's reader, the training token ids, the
extraction config the dump was made with, the loaded backbone and the sweep's default protocol.
Imported by the benchmark scripts beside it (`from located import located`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Located:
    reader: object
    train_ids: object
    extract: object
    backbone: object
    protocol: object


def located(backbone: str) -> Located:
    """The Locate run's inputs for `backbone`; a missing or damaged dump is refused by
    HiddenStates.require, naming the command that makes it."""
    from dihal.backbones import load_backbone
    from dihal.config import BridgeProtocol, ExtractConfig
    from storage import HiddenStates, Sequences
    from storage.layout import ArtifactLayout

    layout = ArtifactLayout(Path(os.environ.get("DIHAL_ARTIFACTS", ".dihal/artifacts")))
    states = HiddenStates(layout, backbone, None)
    dump = states.require()
    return Located(reader=states.reader(),
                   train_ids=Sequences(layout, backbone, None).token_ids()["train"],
                   extract=ExtractConfig(**dump.config),
                   backbone=load_backbone(backbone, cache_dir=layout.model_cache()),
                   protocol=BridgeProtocol())
