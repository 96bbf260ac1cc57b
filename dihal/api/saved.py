"""A hybrid saved to a folder of its own, to be loaded elsewhere (dihal.api.DihalHybrid.save
and .load):

    <folder>/weights.safetensors   the bridge: denoiser weights, the two standardisations, the
                                   pinned BOS state (the tensors of dihal.results.TrainedBridge)
    <folder>/hybrid.json           its hyper-parameters (layer, protocol, denoiser config), the
                                   sampler it is sampled with (sampler_steps, rule, eta), its
                                   metrics, the backbone's identity by content (dihal.api.identity) and
                                   the sha256 of the weights file

The backbone itself is not copied: it is loaded where the hybrid is loaded, and refused there
unless its content is the one recorded. The folder is written whole under a temporary name and
swapped into place (dihal.atomic.atomic_dir); a folder that is not a saved hybrid is never
overwritten. The weights are read only once their sha256 matches the record.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dihal.api.identity import backbone_identity
from dihal.atomic import atomic_dir, atomic_write_json, file_sha256
from dihal.errors import SavedHybridError
from dihal.results import BridgeHparams, TrainedBridge
from dihal.rows import BridgeMetrics

FORMAT = "dihal-hybrid/2"  # 2: the sampler records its K as `sampler_steps` (1: `steps`)
WEIGHTS = "weights.safetensors"
CONFIG = "hybrid.json"


def is_saved_hybrid(folder: Path) -> bool:
    """Whether `folder` holds a config written by `save_hybrid` (of any format version)."""
    try:
        return str(json.loads((folder / CONFIG).read_text()).get("format", "")).startswith(
            "dihal-hybrid/")
    except (OSError, ValueError, AttributeError):
        return False


def save_hybrid(folder: Path | str, trained: TrainedBridge, backbone, *,
                sampler: dict[str, Any]) -> Path:
    """Write `trained` (a bridge of `backbone`) and its sampler settings to `folder`, replacing
    a hybrid saved there before; any other non-empty folder is refused (SavedHybridError)."""
    from safetensors.torch import save_file

    folder = Path(folder).expanduser()
    if folder.exists() and (not folder.is_dir() or (any(folder.iterdir())
                                                    and not is_saved_hybrid(folder))):
        raise SavedHybridError(
            f"{folder} exists and is not a saved hybrid (no {CONFIG} of format {FORMAT}): "
            "nothing is written over it. Save to a new folder, or to one a hybrid was saved in.")
    with atomic_dir(folder) as tmp:
        tensors = {k: v.detach().contiguous().cpu() for k, v in trained.tensors.items()}
        save_file(tensors, str(tmp / WEIGHTS), metadata={"format": FORMAT})
        atomic_write_json(tmp / CONFIG, {
            "format": FORMAT, "hparams": trained.hparams.to_dict(), "sampler": sampler,
            "metrics": trained.metrics.to_dict() if trained.metrics is not None else None,
            "backbone": backbone_identity(backbone),
            "files": {WEIGHTS: {"sha256": file_sha256(tmp / WEIGHTS),
                                "bytes": (tmp / WEIGHTS).stat().st_size}}})
    return folder


def saved_config(folder: Path | str) -> dict[str, Any]:
    """The config of the hybrid saved in `folder` (its weights not read); SavedHybridError
    naming the folder where it is not a saved hybrid of this format."""
    folder = Path(folder).expanduser()
    try:
        cfg = json.loads((folder / CONFIG).read_text())
    except FileNotFoundError:
        raise SavedHybridError(
            f"{folder} is not a saved hybrid: it has no {CONFIG}. Give the folder that "
            "DihalHybrid.save wrote.") from None
    except (OSError, ValueError) as exc:
        raise SavedHybridError(f"{folder / CONFIG} cannot be read ({exc}): save the hybrid "
                               "again.") from None
    if not isinstance(cfg, dict) or cfg.get("format") != FORMAT:
        got = cfg.get("format") if isinstance(cfg, dict) else None
        raise SavedHybridError(f"{folder / CONFIG} is of format {got!r}, not {FORMAT}: save the "
                               "hybrid again with this version of dihal.")
    return cfg


def read_saved(folder: Path | str) -> tuple[TrainedBridge, dict[str, Any]]:
    """(the bridge, the config) saved in `folder`, its weights checked against their sha256
    first; SavedHybridError naming the folder where it is not a saved hybrid or changed."""
    from safetensors.torch import load_file

    folder = Path(folder).expanduser()
    cfg = saved_config(folder)
    want = cfg.get("files", {}).get(WEIGHTS, {})
    path = folder / WEIGHTS
    if not path.is_file():
        raise SavedHybridError(f"{path} is missing: copy the whole folder, or save the hybrid "
                               "again.")
    if file_sha256(path) != want.get("sha256"):
        raise SavedHybridError(
            f"{path} is not the file that was saved ({path.stat().st_size} bytes, "
            f"{want.get('bytes')} saved; its sha256 differs): it changed or was cut short in a "
            "copy. Copy the folder again, or save the hybrid again.")
    metrics = cfg.get("metrics")
    trained = TrainedBridge(load_file(str(path)), BridgeHparams.from_dict(cfg["hparams"]),
                            BridgeMetrics(**metrics) if metrics else None)
    return trained, cfg
