"""Where artifacts live: one root, a folder per backbone and stage, caches beside them.
The artifact classes (storage.artifacts) own everything below a stage's folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dihal.errors import UnsafePathError


@dataclass(frozen=True)
class ArtifactLayout:
    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root).expanduser().resolve())

    def stage(self, stage: str, backbone: str | None) -> Path:
        if backbone is not None:
            check_folder_name(backbone, "backbone name")
        return self.root / backbone / stage if backbone else self.root / stage

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
