"""The artifact kind of Report: the report as HTML and Markdown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dihal.atomic import atomic_write_text
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

    def _write_files(self, directory: Path, result: ReportResult) -> None:
        atomic_write_text(directory / "report.html", result.html)
        atomic_write_text(directory / "report.md", result.markdown)

    def metadata(self, manifest: Manifest) -> dict[str, Any]:
        return {"report": FileLink(self.path("report.html")),
                "report_md": FileLink(self.path("report.md"))}
