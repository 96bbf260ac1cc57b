"""The base of every artifact kind: the protocol (identity, manifest, verification, reuse,
atomic write) and the display wrappers. One class per artifact kind. Each owns its directory, its file names, its manifest and its
atomic write, and reads back typed values (dihal.results). Nobody else spells a file name.

An artifact is a directory under the artifact root holding its files and ``manifest.json``
(written last, inside the same atomic swap: a directory with a manifest is complete). Kinds
that are built over a long, resumable computation (the hidden-state dump, trained bridges and
baselines) fill ``<dir>.partial`` first, stamped with the fingerprint it is being made for, and
swap it into place when done.

Metadata for display is returned as plain values plus the small `Plot`, `Table` and `FileLink`
wrappers below, so that this package needs no Dagster.
"""

from __future__ import annotations

import glob
import json
import shutil
import socket
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from dihal.atomic import (
    atomic_dir,
    atomic_write_text,
    replace_dir,
)
from dihal.errors import (
    CorruptArtifactError,
    MissingArtifactError,
    StaleArtifactError,
    UnsafePathError,
)
from dihal.generation_rows import Sample
from dihal.run.stages import CODE_VERSIONS, STAGES, asset_key, stage_of_kind
from storage.layout import ArtifactLayout
from storage.manifest import Manifest, check_files, digest_files, read_manifest, write_manifest
from storage.tables import write_table

DAMAGED = ".damaged"  # a reader found damage: re-make, never reuse
VERIFIED = ".verified"  # when the digests were last checked
# a `.verified` stamp up to this far ahead of the clock is this host's rounding or a small skew
CLOCK_SLACK_S = 60.0


def _runtime_warning(message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=3)


KINDS: list[type[Artifact]] = []  # every artifact kind with a stage, as the classes are made


def artifact_named(layout: ArtifactLayout, name: str, backbone: str | None) -> Artifact | None:
    """The artifact a manifest names among its upstream (`Artifact.name`: `<asset>` or
    `<asset>[<key>]`), in `layout`: first of `backbone` or shared (the corpus), then of another
    backbone (the report reads the others' results). None where no kind makes that asset."""
    asset, _, key = name.partition("[")
    key = key[:-1] if key else None
    for kind in KINDS:
        for b in dict.fromkeys((backbone, None)):
            if asset_key(kind.asset_stage(), b) == asset and kind.keyed == (key is not None):
                return kind(layout, b, key)
    # another backbone's: the longest stage that prefixes the name (bridge_sweep_x is never the
    # bridge of a backbone "sweep_x"), and only with the partitioning that stage has
    for kind in sorted(KINDS, key=lambda k: -len(k.asset_stage())):
        if asset.startswith(kind.asset_stage() + "_"):
            same = [k for k in KINDS if k.asset_stage() == kind.asset_stage()
                    and k.keyed == (key is not None)]
            return same[0](layout, asset[len(kind.asset_stage()) + 1:], key) if same else None
    return None


@dataclass(frozen=True)
class Plot:
    path: Path
    title: str


@dataclass(frozen=True)
class Table:
    rows: list[dict]
    columns: list[str]
    fmt: str = ".4g"


@dataclass(frozen=True)
class FileLink:
    path: Path


@dataclass(frozen=True)
class Markdown:
    text: str


class Artifact:
    """Base of every kind. `stage` is the manifest's stage and the asset's name prefix: the
    stage of dihal.run.stages whose `kind` is the class's name (set here, on subclassing), or one
    the class names itself (a second kind of a stage: FullTrainingBridge)."""

    stage: ClassVar[str]
    files: ClassVar[tuple[str, ...]] = ()
    keyed: ClassVar[bool] = False  # a partition of its asset: its name carries `[key]`

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "stage" not in cls.__dict__:
            if (stage := stage_of_kind(cls.__name__)) is not None:
                cls.stage = stage
        elif cls.stage not in STAGES:
            raise TypeError(f"{cls.__name__}.stage = {cls.stage!r} is not a stage of "
                            f"dihal.run.stages.STAGES ({sorted(STAGES)}): add it there")
        if "stage" in cls.__dict__ or "under" in cls.__dict__:
            KINDS.append(cls)

    @classmethod
    def asset_stage(cls) -> str:
        """The stage whose asset makes this kind (`under`, for a kind made under another's)."""
        return getattr(cls, "under", None) or cls.stage

    def __init__(self, layout: ArtifactLayout | Path | str, backbone: str | None = None,
                 key: str | int | None = None):
        self.layout = layout if isinstance(layout, ArtifactLayout) else ArtifactLayout(layout)
        self.backbone, self.key = backbone, key

    # identity ------------------------------------------------------------------------------
    @property
    def directory(self) -> Path:
        return self.layout.stage(self.stage, self.backbone)

    @property
    def asset(self) -> str:
        """The Dagster asset that makes it (without partition)."""
        return asset_key(self.stage, self.backbone)

    @property
    def name(self) -> str:
        """How a downstream manifest names it among its upstream artifacts."""
        return self.asset if self.key is None else f"{self.asset}[{self.key}]"

    def command(self) -> str:
        part = f" --partition {self.key}" if self.key is not None else ""
        return f"dagster asset materialize --select '*{self.asset}'{part}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name} at {self.directory})"

    # manifest and verification -------------------------------------------------------------
    def manifest(self) -> Manifest | None:
        return read_manifest(self.directory)

    def verify(self, manifest: Manifest, *, digests: bool) -> list[str]:
        """What is wrong with the files on disk against the manifest's record (sizes always,
        content with `digests`; the files `always_digested` names, content always): empty when
        the artifact is intact."""
        if (self.directory / DAMAGED).exists():
            found = (self.directory / DAMAGED).read_text().strip().splitlines()
            more = f" (+{len(found) - 5} more)" if len(found) > 5 else ""
            return [f"marked damaged by a reader: {'; '.join(found[:5])}{more}"]
        if self.files and not manifest.files:
            return ["no file digests recorded (made by an older version of dihal)"]
        problems = [f"{name}: missing from the record" for name in self.files
                    if not any(k == name or k.startswith(name + "/") for k in manifest.files)]
        small = {k: v for k, v in manifest.files.items() if not digests and self.always_digested(k)}
        return (problems + check_files(self.directory, manifest.files, digests=digests)
                + check_files(self.directory, small, digests=True))

    def always_digested(self, rel: str) -> bool:
        """Whether file `rel` is checked against its digest on every reuse, even when the last
        full check is recent (a kind whose reader checks only part of its data: its metadata)."""
        return False

    def mark_damaged(self, problems: list[str]) -> None:
        """Record that a reader (or a blocking check) found damage, one problem a line, so that
        the artifact is re-made (or repaired: `damaged_files`), never reused."""
        if self.directory.is_dir():
            atomic_write_text(self.directory / DAMAGED, "".join(f"{p}\n" for p in problems))

    def damaged_files(self, manifest: Manifest) -> list[str]:
        """The recorded files that the damage marker names (a problem line `<file>: ...`)."""
        try:
            lines = (self.directory / DAMAGED).read_text().splitlines()
        except FileNotFoundError:
            return []
        return sorted({rel for line in lines if (rel := line.split(": ", 1)[0]) in manifest.files})

    def stamp_verified(self) -> None:
        atomic_write_text(self.directory / VERIFIED, f"{time.time():.0f}\n")

    def verified_within(self, seconds: float, warn: Callable[[str], None] | None = None) -> bool:
        """Were the digests checked (or written) less than `seconds` ago? A stamp from the
        future (another host's clock ahead of this one's, or this clock set back) is stale:
        `warn` (default: a RuntimeWarning) is told, naming both clocks."""
        path = self.directory / VERIFIED
        try:
            stamp = float(path.read_text())
        except (FileNotFoundError, ValueError):
            return False
        now = time.time()
        if stamp > now + CLOCK_SLACK_S:
            (warn or _runtime_warning)(
                f"{path} says the digests of {self.name} were checked at "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(stamp))}, "
                f"{stamp - now:.0f} s after this host's clock ({socket.gethostname()}: "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(now))}): the clock of the "
                "host that wrote it, or this one, is wrong. The stamp is taken as stale and every "
                "digest is checked now; set both clocks right (NTP) to skip these checks again.")
            return False
        return now - stamp < seconds

    def require(self) -> Manifest:
        """The manifest of a finished, intact artifact (digests checked: a downstream stage is
        about to read it), or an error naming the command that makes or repairs it."""
        m = self.manifest()
        if m is None:
            raise MissingArtifactError(
                f"upstream asset {self.name} has not been materialised (nothing at "
                f"{self.directory}). Run: {self.command()}")
        if problems := self.verify(m, digests=self._digests_on_require):
            self.mark_damaged(problems)
            raise CorruptArtifactError(
                f"upstream asset {self.name} at {self.directory} is damaged: "
                f"{'; '.join(problems[:5])}. Materialise it again ({self.command()}): "
                "a damaged artifact is re-made, never reused.")
        self.check_version(m)
        self.check_lineage(m)
        return m

    def check_version(self, manifest: Manifest) -> None:
        """Refuse (StaleArtifactError, naming it and the command) an artifact made by another
        code version of its stage than this dihal's: its files may lack or mean otherwise what
        today's readers take from them, so it is stale and is not read."""
        want = CODE_VERSIONS[self.stage]
        if manifest.code_version == want:
            return
        made = (f"version {manifest.code_version} of stage {self.stage}" if manifest.code_version
                else f"a dihal that did not record the version of stage {self.stage}")
        raise StaleArtifactError(
            f"{self.name} at {self.directory} was made by {made}; this dihal's is version "
            f"{want} (CHANGELOG.md says what changed): it is stale and is not read. "
            f"Materialise it again: {self.command()}")

    def stamp_version(self, manifest: Manifest) -> Manifest:
        """`manifest` with its stage's code version recorded, its manifest.json rewritten where
        it was written before the versions were recorded. Called only on an artifact its own
        stage has just found current: its fingerprint, which holds the code version, is this
        dihal's, so the version is too (the caller holds the artifact's lock)."""
        if manifest.code_version:
            return manifest
        manifest = replace(manifest, code_version=CODE_VERSIONS[self.stage])
        write_manifest(self.directory, manifest)
        return manifest

    def check_lineage(self, manifest: Manifest, checked: set | None = None) -> None:
        """Refuse (StaleArtifactError, naming it and the command) where an upstream this
        artifact was made from, anywhere up its chain, has been made again since from other
        inputs (another config, another model): what was made from the old one is not read as
        if it belonged to the new chain. An upstream removed since (and not made again) leaves
        nothing to tell apart and is passed over."""
        checked = set() if checked is None else checked
        for name, fp in sorted(manifest.upstream.items()):
            up = artifact_named(self.layout, name, self.backbone)
            if up is None or up.directory in checked:
                continue
            current = up.manifest()
            if current is None:
                continue
            if current.fingerprint != fp:
                raise StaleArtifactError(
                    f"{self.name} at {self.directory} was made from {name} as it was then "
                    f"(fingerprint {fp[:12]}), and {name} has been made again since from other "
                    f"inputs (now {current.fingerprint[:12]}): {self.name} is stale and is not "
                    f"read. Materialise it again: {self.command()}")
            checked.add(up.directory)
            up.check_lineage(current, checked)

    _digests_on_require: ClassVar[bool] = True

    def reuse(self, fp: str, *, digests: bool = True) -> Manifest | None:
        """The existing artifact if it was made from exactly this fingerprint and is intact
        (sizes always, content with `digests`); `self.damage` says why it is not."""
        self.damage: list[str] = []
        try:
            self.check_links()  # nothing is read (or stamped) through a link
            m = self.manifest()
        except (CorruptArtifactError, UnsafePathError) as exc:
            self.damage = [str(exc)]
            return None
        if m is None or m.fingerprint != fp:
            return None
        if problems := self.verify(m, digests=digests):
            self.damage = problems
            return None
        if digests:
            self.stamp_verified()
        return m

    def path(self, name: str) -> Path:
        """The path of one of this artifact's own files."""
        if name not in self.files:
            raise KeyError(f"{type(self).__name__} has no file {name!r}; it has {self.files}")
        return self.directory / name

    def repair(self, fp: str, log=None) -> bool:
        """Prepare a partial re-make of a damaged artifact; False: it is made again whole."""
        return False

    def lock(self):
        """The one-writer lock of this artifact (storage.locks), refused (UnsafePathError,
        naming it) where a symbolic link stands between the artifact root and what is written:
        the folder, its lock, its work folder."""
        from storage.locks import artifact_lock

        self.check_links()
        return artifact_lock(self.directory, self.name)

    def check_links(self) -> None:
        """Refuse (UnsafePathError, naming it) a symbolic link between the artifact root and
        this artifact's folder, its lock or its work folder."""
        from storage.locks import check_no_links, lock_path

        work = getattr(self, "workdir", None)
        check_no_links(self.layout.root, self.directory, lock_path(self.directory),
                       *([work] if work is not None else []))

    # writing -------------------------------------------------------------------------------
    def write(self, manifest: Manifest, result: Any) -> Manifest:
        """Write the result's files and the manifest (with every file's size and digest),
        swapped into place in one step."""
        self.clear_leftovers()
        with atomic_dir(self.directory) as tmp:
            self._write_files(tmp, result)
            manifest = replace(manifest, files=digest_files(tmp))
            write_manifest(tmp, manifest)
            atomic_write_text(tmp / VERIFIED, f"{time.time():.0f}\n")
        return manifest

    def clear_leftovers(self) -> None:
        """Remove what a writer of this artifact killed mid-write (SIGKILL, the OOM killer, a
        power cut) left beside its folder: the temporary folder it was filling
        (`.<name>.*.tmp`) and the old folder set aside by a swap cut between its two renames
        (`.<name>.old`). Called by `write`, under the artifact's one-writer lock: no live
        writer owns them. A link there is removed, never followed."""
        d = self.directory
        for p in [*d.parent.glob(f".{glob.escape(d.name)}.*.tmp"), d.with_name(f".{d.name}.old")]:
            if p.is_symlink() or p.is_file():
                p.unlink()
            elif p.is_dir():
                shutil.rmtree(p)

    def _write_files(self, directory: Path, result: Any) -> None:
        pass

    # display -------------------------------------------------------------------------------
    def metadata(self, manifest: Manifest) -> dict[str, Any]:
        """What the UI shows for this artifact: the manifest's key numbers, plus plots/tables."""
        return dict(manifest.info.get("metadata", {}))


class WorkArtifact(Artifact):
    """An artifact made in a resumable work directory, stamped with its fingerprint."""

    STAMP: ClassVar[str] = "FINGERPRINT"

    @property
    def workdir(self) -> Path:
        return self.directory.with_name(self.directory.name + ".partial")

    def claim(self, fp: str, log=None) -> Path:
        """The work directory for fingerprint `fp`: kept (to resume) if it was started for the
        same fingerprint, cleared if another config left it there."""
        work, stamp = self.workdir, self.workdir / self.STAMP
        if work.exists() and (not stamp.exists() or stamp.read_text().strip() != fp):
            if log:
                log(f"discarding {work}: it was started under another config")
            shutil.rmtree(work)
        if stamp.exists() and log:
            log(f"resuming from {work}")
        work.mkdir(parents=True, exist_ok=True)
        atomic_write_text(stamp, fp)
        return work

    def write(self, manifest: Manifest, result: Any) -> Manifest:
        """Write the result into the (claimed) work directory, then swap it into place; the
        training checkpoints it was resumed from are dropped (the result supersedes them)."""
        work = self.workdir
        self.clear_leftovers()
        if not (work / self.STAMP).exists():
            self.claim(manifest.fingerprint)
        self._write_files(work, result)
        shutil.rmtree(work / "checkpoints", ignore_errors=True)
        (work / self.STAMP).unlink()
        manifest = replace(manifest, files=digest_files(work))
        write_manifest(work, manifest)
        atomic_write_text(work / VERIFIED, f"{time.time():.0f}\n")
        replace_dir(work, self.directory)
        return manifest



def preview(by_model: dict[str, list[str]], n: int = 5) -> str:
    """Markdown: the first samples of each model."""
    return "\n\n".join(f"**{model}**\n\n" + "\n".join(
        f"{i + 1}. {json.dumps(t[:300])}" for i, t in enumerate(texts[:n]))
        for model, texts in by_model.items())


def samples_table(samples: list[Sample], n: int = 4, chars: int = 160) -> str:
    """Markdown: a table with one column per model and a row per sample index (the first `n`),
    so that the models' samples drawn with the same seed and uniforms sit side by side; each
    cell cut to `chars` characters, its newlines shown as " / " and its pipes escaped."""
    models = list(dict.fromkeys(s.model for s in samples))
    texts = {(s.model, s.index): s.text for s in samples}
    indices = sorted({s.index for s in samples})[:n]

    def cell(text: str | None) -> str:
        if text is None:
            return ""
        text = " / ".join(line.strip() for line in text.splitlines() if line.strip())
        text = text if len(text) <= chars else text[: chars - 1] + "\u2026"
        return (text or "(empty)").replace("|", "\\|")

    head = "| sample | " + " | ".join(m.replace("|", "\\|") for m in models) + " |"
    rule = "|---|" + "---|" * len(models)
    rows = [f"| {i + 1} | " + " | ".join(cell(texts.get((m, i))) for m in models) + " |"
            for i in indices]
    return "\n".join([head, rule, *rows])


class RowsArtifact(Artifact):
    """An artifact that is one table of rows (`result.rows`), shown in the UI with `columns`."""

    columns: ClassVar[list[str]] = []

    def _write_files(self, directory: Path, result: Any) -> None:
        write_table(directory / self.files[0], result.rows)

    def metadata(self, manifest: Manifest) -> dict[str, Any]:
        return {**super().metadata(manifest), "table": Table(manifest.info["rows"], self.columns)}
