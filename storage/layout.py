"""Where artifacts live: one root, a folder per backbone and stage, caches beside them.
The artifact classes (storage.artifacts) own everything below a stage's folder."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dihal.atomic import atomic_write_json
from dihal.errors import UnsafePathError
from storage.locks import check_no_links

MODEL_RECORD = "model.json"  # in a backbone's folder: {"model": the folder or id it was made from}


@dataclass(frozen=True)
class ArtifactLayout:
    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root).expanduser().resolve())

    def stage(self, stage: str, backbone: str | None) -> Path:
        if backbone is not None:
            check_folder_name(backbone, "backbone name")
        return self.root / backbone / stage if backbone else self.root / stage

    def recorded_model(self, backbone: str) -> str | None:
        """The model (a resolved folder or a Hugging Face id) whose artifacts the driver made
        under the name `backbone` (MODEL_RECORD in its folder); None where none is recorded."""
        check_folder_name(backbone, "backbone name")
        path = self.root / backbone / MODEL_RECORD
        try:
            model = json.loads(path.read_text()).get("model")
        except (OSError, ValueError, AttributeError):
            return None  # none, or unreadable: the name is not known to be another model's
        return model if isinstance(model, str) else None

    def record_model(self, backbone: str, model: str) -> None:
        """Record that the artifacts under the name `backbone` are made from `model`, so that
        another folder or id given to the driver with the same last part gets another name."""
        check_folder_name(backbone, "backbone name")
        path = self.root / backbone / MODEL_RECORD
        check_no_links(self.root, path)
        if self.recorded_model(backbone) != model:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(path, {"model": model})

    def model_cache(self) -> Path:
        return self.root / "cache" / "models"

    def judge_cache(self) -> Path:
        return self.root / "cache" / "judges"


def check_folder_name(name: str, what: str) -> None:
    """Refuse a name that cannot be one folder of the artifact root: empty, `.` or `..`, a
    path separator, whitespace or a control character (a trailing newline included)."""
    bad = [c for c in name if c in "/\\" or c.isspace() or not c.isprintable()]
    if not name or name in (".", "..") or bad:
        raise UnsafePathError(
            f"the {what} {name!r} cannot name a folder of the artifact root"
            + (f" (it holds {', '.join(sorted({repr(c) for c in bad}))})" if bad else "")
            + ": use lower-case letters, digits and _ (e.g. smollm2)")
