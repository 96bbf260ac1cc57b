"""Which backbone a bridge belongs to, by content, and the public API's refusals.

A bridge maps the embeddings of one backbone to its hidden states at layer l: on another
backbone's (another fine-tune, another quantisation, another model of the same width) it runs
and writes fluent-looking nonsense. So a hybrid records the backbone it was made on, and is
refused on any other, naming both. The record is what the backbone's revision says of its
content (dihal.backbones.resolve_weights): the embedded GGUF's sha256, a Hub commit, or a
local folder's content digest (dihal.identity.folder_revision) without the folder's path, so
the same weights copied to another machine or folder are the same backbone. The refusal is
dihal.errors.BackboneMismatchError.
"""

from __future__ import annotations

from typing import Any

from dihal.errors import BackboneMismatchError
from dihal.identity import revision_content


def backbone_identity(backbone) -> dict[str, Any]:
    """The record a saved hybrid keeps of its backbone (dihal.backbones.Backbone)."""
    cfg = backbone.model.config
    return {"name": backbone.spec.name, "hf_id": backbone.spec.hf_id,
            "revision": backbone.weights.revision,
            "content": revision_content(backbone.weights.revision),
            "architecture": type(backbone.model).__name__, "n_layers": backbone.n_layers,
            "hidden_size": backbone.hidden_size, "vocab_size": int(cfg.vocab_size)}


def describe(record: dict[str, Any]) -> str:
    """A backbone record in words: its name, model and revision."""
    hf = record.get("hf_id")
    return (f"{record.get('name')!r}" + (f" ({hf})" if hf and hf != record.get("name") else "")
            + f", revision {record.get('revision')}")


def check_backbone(backbone, recorded: dict[str, Any] | None, what: str) -> None:
    """Refuse (BackboneMismatchError, naming both) where `recorded` (a backbone_identity, or
    {"name", "revision"} from a bridge's hyper-parameters) is another backbone's content than
    `backbone`'s. A record without a revision (a bridge made by hand) is not checked."""
    if not recorded or recorded.get("revision") is None:
        return
    want = recorded.get("content") or revision_content(recorded["revision"])
    mine = backbone_identity(backbone)
    if want == mine["content"]:
        return
    raise BackboneMismatchError(
        f"{what} was made on backbone {describe(recorded)}, but it was given backbone "
        f"{describe(mine)}: their weights differ ({want} vs {mine['content']}), and a bridge "
        f"only fits the backbone whose hidden states it was trained on. Load it with backbone "
        f"{recorded.get('name')!r} as it was then (the same weights: point "
        f"DIHAL_{str(recorded.get('name')).upper()}_PATH or load_backbone's path at them), or "
        f"train a bridge for {mine['name']!r} (python -m pipeline.main --backbone "
        f"{mine['name']})."
    )
