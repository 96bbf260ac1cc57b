"""The public Python API of a trained DiHAL hybrid (docs/api.md): load it, prompt it, score
text with it, save it and load it elsewhere, and locate l* on a few texts; importable without
Dagster.

    from dihal.api import DihalHybrid, compare, locate
    hybrid = DihalHybrid(backbone, trained)                 # a loaded backbone, a TrainedBridge
    hybrid.generate("Once upon a time", max_new_tokens=32)  # greedy; do_sample=True, top_p=...
    hybrid.score(["some text"]).table()                     # per-token NLL, hybrid and backbone
    hybrid.save("my_hybrid"); DihalHybrid.load("my_hybrid", backbone)

What the pipeline made (the bridge at l*, a swept layer, the ridge control) is loaded by
pipeline.hybrids, which reads the artifact root; `python -m pipeline.generate` is the
command-line door.
"""

from dihal.api.compare import compare, side_by_side
from dihal.api.identity import backbone_identity
from dihal.api.locate import Located, locate
from dihal.api.models import DihalHybrid, TextModel, backbone_model, control_model
from dihal.api.sampling import Generated, SamplingConfig
from dihal.api.scoring import Scores, TextScore, score_texts
from dihal.backbones import load_backbone
from dihal.errors import BackboneMismatchError, ContextLengthError, SavedHybridError

__all__ = [
    "BackboneMismatchError", "ContextLengthError", "DihalHybrid", "Generated", "Located",
    "SamplingConfig", "SavedHybridError", "Scores", "TextModel", "TextScore",
    "backbone_identity", "backbone_model", "compare", "control_model", "load_backbone", "locate",
    "score_texts", "side_by_side",
]
