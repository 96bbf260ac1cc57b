"""The artifact kind of Report: the report as HTML (plots embedded) and as Markdown with its
plots as PNG files beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dihal.atomic import atomic_write_bytes, atomic_write_text
from dihal.results import ReportResult
from storage.artifacts.base import Artifact, FileLink
from storage.manifest import Manifest


class Report(Artifact):
    files = ("report.html", "report.md")

    @property
    def html(self) -> Path:
        return self.path("report.html")

    def markdown(self) -> str:
        return self.path("report.md").read_text()

    @staticmethod
    def figure_name(n: int) -> str:
        """The file beside report.md that holds its n-th plot (from 1)."""
        return f"figure_{n:02d}.png"

    def _write_files(self, directory: Path, result: ReportResult) -> None:
        atomic_write_text(directory / "report.html", result.html)
        atomic_write_text(directory / "report.md", result.markdown)
        for n, png in enumerate(result.figures, start=1):
            atomic_write_bytes(directory / self.figure_name(n), png)

    def metadata(self, manifest: Manifest) -> dict[str, Any]:
        return {"report": FileLink(self.path("report.html")),
                "report_md": FileLink(self.path("report.md"))}
