"""The one way an asset is made: require upstream -> fingerprint -> reuse or call the stage ->
write through the artifact class -> MaterializeResult with metadata. Asset bodies hold wiring
only; the method is in `dihal`, the files in `storage`.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import math
import os
import socket
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import dagster as dg

from dihal.errors import DihalError, MissingArtifactError
from dihal.run.stages import CODE_VERSIONS, asset_key
from storage import (
    Artifact,
    Corpus,
    FileLink,
    Manifest,
    Markdown,
    Plot,
    Table,
    WorkArtifact,
    fingerprint,
)
from storage.manifest import canonical

RESOURCES = {"storage", "backbones", "compute", "judge", "preset"}
# A stage's step holds a whole device while it computes (StageRun.computing): on a Dask cluster it
# takes one unit of the workers' "device" resource (README: start each worker with
# --resources device=1, one worker per GPU), so two steps never share a GPU there either.
DEVICE_STEP_TAGS = {"dagster-dask/resource_requirements": '{"device": 1}'}
# The Dagster pool of every stage: at most its limit of runs of stages at once, whoever launched
# them (the web UI, a schedule, a backfill, a driver), each run holding one slot (dagster.yaml:
# granularity run, default limit 1; the driver sets the limit to its --workers, as
# `dagster instance concurrency set dihal N` does)
POOL = "dihal"


def partition_policy(partitions: dg.PartitionsDefinition) -> dg.BackfillPolicy:
    """How a backfill of a partitioned stage is cut into runs: at most ceil(partitions /
    workers) partitions a run ($DIHAL_WORKERS of this code location: the daemon's, which the
    driver that starts it sets to its --workers), so that `workers` runs share the work and each
    loads the backbone and the dump once for all its partitions; one run where workers is 1.
    Dagster cuts runs from contiguous partition ranges only: a backfill of layers 1,2,3,9,15
    makes runs of 1-3, 9 and 15 (each of 9 and 15 alone)."""
    from dihal.environment import workers

    n = len(partitions.get_partition_keys())
    per_run = max(1, math.ceil(n / workers()))
    return (dg.BackfillPolicy.single_run() if per_run >= n
            else dg.BackfillPolicy.multi_run(max_partitions_per_run=per_run))


def stage_asset(backbone: str | None, stage: str, deps: Iterable = (), *, name: str | None = None,
                partitions: dg.PartitionsDefinition | None = None, kinds: Iterable[str] = (),
                batched: bool = False):
    """dg.asset for one stage of one backbone's family, with the shared settings. `batched`
    (a partitioned stage whose body makes each of context.partition_keys, StageRun.
    each_partition): its backfills are cut into runs of several partitions
    (partition_policy). Every stage's runs share the pool POOL."""
    if batched and partitions is None:
        raise ValueError(f"stage {stage}: only a partitioned stage is batched")
    batched = {"backfill_policy": partition_policy(partitions)} if batched else {}
    with warnings.catch_warnings():  # backfill_policy is "beta" in Dagster 1.13: said once here
        warnings.simplefilter("ignore", dg.BetaWarning)
        make = dg.asset(name=name or asset_key(stage, backbone), deps=list(deps),
                        group_name=backbone or stage, partitions_def=partitions, kinds=set(kinds),
                        code_version=CODE_VERSIONS[stage], required_resource_keys=RESOURCES,
                        op_tags=DEVICE_STEP_TAGS, pool=POOL, **batched)

    def decorate(body: Callable) -> dg.AssetsDefinition:
        @functools.wraps(body)
        def clean(context: dg.AssetExecutionContext, *args: Any, **kwargs: Any) -> Any:
            """A DihalError raised outside `obtain` (a corpus refused while its shards are
            listed, weights refused while they are resolved) ends the step as a Failure
            with its message, as one inside does: no traceback."""
            try:
                return body(context, *args, **kwargs)
            except DihalError as exc:
                raise dg.Failure(description=f"{context.asset_key.to_user_string()}: {exc}"
                                 ) from exc

        return make(clean)

    return decorate


class StageRun:
    """What an asset body works with: the artifacts of its backbone, the loaded models (once
    per run), and `produce`/`obtain`, the reuse-or-compute protocol."""

    def __init__(self, context: dg.AssetExecutionContext, backbone: str | None):
        self.context, self.backbone = context, backbone
        self.resources = context.resources
        self.layout = self.resources.storage.layout()
        self._models: dict[str, Any] = {}
        self._device: str | None = None  # the device this step holds while it computes
        self._required: dict[Any, Manifest] = {}  # upstream manifests checked in this step

    def log(self, msg: str) -> None:
        self.context.log.info(msg)

    def warn(self, msg: str) -> None:
        """A warning in the run's event log (a damaged checkpoint's fallback, with its reason)."""
        self.context.log.warning(msg)

    def throttled(self, every: float = 5.0) -> Callable[[str], None]:
        """log, at most once every `every` seconds (progress of long loops)."""
        last = [0.0]

        def emit(msg: str) -> None:
            if time.monotonic() - last[0] >= every:
                last[0] = time.monotonic()
                self.log(msg)

        return emit

    @property
    def partitions(self) -> list[str]:
        """This step's partition keys: one, or the range of a batched backfill's run."""
        return list(self.context.partition_keys)

    def each_partition(self, one: Callable[[str], tuple[Artifact, Manifest, bool]]
                       ) -> dg.MaterializeResult:
        """one(key) -> (artifact, manifest, cached) for each partition key of this step, in
        turn, reported as one materialization per partition with that partition's own
        metadata. A single partition's errors pass through as they are. In a batched run a
        partition that fails does not stop the others: they are made and written, recorded as
        materialised (one event each), and the step then fails naming the failed partitions
        and why; retrying those re-makes only them (the others are reused)."""
        keys = self.partitions
        if len(keys) == 1:
            return materialize_result(*one(keys[0]))
        done: dict[str, dg.MaterializeResult] = {}
        failed: dict[str, str] = {}
        for key in keys:
            try:
                done[key] = materialize_result(*one(key))
            except Exception as exc:  # noqa: BLE001 (the others go on; named below)
                failed[key] = (exc.description if isinstance(exc, dg.Failure) and exc.description
                               else f"{type(exc).__name__}: {exc}")
                self.context.log.error(f"partition {key} failed, the others go on: "
                                       f"{failed[key]}")
        name = self.context.asset_key.to_user_string()
        if failed:
            for key, res in done.items():
                self.context.log_event(dg.AssetMaterialization(
                    asset_key=self.context.asset_key, partition=key, metadata=res.metadata))
            raise dg.Failure(description=(
                f"{name}: partition(s) {', '.join(failed)} failed, "
                f"{len(done)} of this run's {len(keys)} made and recorded; materialise the "
                "failed ones again (the others are reused):\n"
                + "\n".join(f"{k}: {why}" for k, why in failed.items())))
        for key, res in done.items():
            self.context.add_asset_metadata(res.metadata, partition_key=key)
        # one data version for every partition of the run (Dagster's output carries one): the
        # digest of each partition's fingerprint, so that it changes where any of them does
        joined = ";".join(f"{k}={r.data_version.value}" for k, r in done.items())
        return dg.MaterializeResult(data_version=dg.DataVersion(
            hashlib.sha256(joined.encode()).hexdigest()))

    # artifacts and models -----------------------------------------------------------------
    def art(self, kind: type[Artifact], key: str | int | None = None) -> Artifact:
        return kind(self.layout, None if kind is Corpus else self.backbone, key)

    def require(self, *artifacts: Artifact) -> list[Manifest]:
        """The manifests of finished upstream artifacts, or a Failure naming the command. Each
        is checked (digests included) once per step, however often the step asks for it."""
        try:
            for a in artifacts:
                if a.directory not in self._required:
                    self._required[a.directory] = a.require()
        except MissingArtifactError as exc:  # the backbone's weights first, where they lack
            raise dg.Failure(description=self.weights_first(self.with_run_config(str(exc)))
                             ) from exc
        except DihalError as exc:
            raise dg.Failure(description=self.with_run_config(str(exc))) from exc
        return [self._required[a.directory] for a in artifacts]

    def weights_first(self, missing: str) -> str:
        """`missing` (an upstream to materialise), after what would stop that command: a Hub
        backbone whose weights are not on this host (found without loading anything), so
        that one command reaches the actionable message."""
        from dihal.registry import get_spec

        if self.backbone is None or get_spec(self.backbone).source not in ("hub", "folder"):
            return missing  # the embedded backbones come from PyPI packages
        try:
            self.resources.backbones.resolve(self.backbone, self.layout)
        except DihalError as exc:
            return f"{exc} Then: {missing}"
        return missing

    def device(self) -> str:
        return self._device or self.resources.compute.resolved_device()

    def model(self):
        """The backbone, loaded once per run."""
        if "backbone" not in self._models:
            self._models["backbone"] = self.resources.backbones.load(
                self.backbone, self.layout, self.resources.compute, self.device())
        return self._models["backbone"]

    def judge_identity(self) -> str:
        """The judge of this backbone's samples as the fingerprints of the artifacts it scores
        hold it (its name; and its revision by content where no PyPI package fixes it)."""
        return self.resources.judge.identity(self.backbone, self.layout)

    def judge(self):
        if "judge" not in self._models:
            self._models["judge"] = self.resources.judge.load(
                self.backbone, self.layout, self.resources.compute, self.device())
        return self._models["judge"]

    def computing(self, compute: Callable[[], Any]) -> Any:
        """compute(), holding a device of this host's (no other step uses it meanwhile); a
        stage that obtains other artifacts inside its compute (full training) keeps its own."""
        if self._device is not None:
            return compute()
        with self.resources.compute.lease(self.layout.root / ".devices", log=self.log) as slot:
            self._device = slot.device
            threads = f" with {slot.threads} threads" if slot.device == "cpu" else ""
            self.log(f"computing on {slot.device}{threads} (host {socket.gethostname()}, "
                     f"pid {os.getpid()})")
            try:
                with warnings.catch_warnings(record=True) as caught:  # the usual filters
                    return compute()
            finally:
                self._device = None
                _pass_on_warnings(caught, self.context.log)

    # the protocol ---------------------------------------------------------------------------
    def obtain(self, artifact: Artifact, config: Any, upstream: Iterable[Artifact],
               compute: Callable[[], Any], **extra: Any) -> tuple[Manifest, bool]:
        """Reuse `artifact` if it was made from this fingerprint (config, code version, upstream
        fingerprints, extra) and is intact, else compute the result and write it, holding the
        artifact's one-writer lock. Damage is repaired (partially where the kind can), never
        reused. Returns (manifest, cached)."""
        upstream = list(upstream)
        manifests = self.require(*upstream)
        preset = self.preset_label()
        mixed = self.upstream_presets(artifact, upstream, manifests, preset)
        ups = {a.name: m.fingerprint for a, m in zip(upstream, manifests, strict=True)}
        fp = fingerprint(artifact.stage, CODE_VERSIONS[artifact.stage], config, ups,
                         {**extra, "preset": preset})
        every = self.resources.storage.verify_every_hours * 3600
        if (m := artifact.reuse(fp, digests=not artifact.verified_within(every, self.warn))) is not None:
            if m.code_version:  # else: stamped below, under the lock
                return m, True
        try:
            with artifact.lock():
                # another run made it meanwhile, or (unstamped) it was made before the code
                # versions were recorded
                if (m := artifact.reuse(fp)) is not None:
                    return artifact.stamp_version(m), True
                if artifact.damage:
                    self.context.log.warning(f"{artifact.name} is damaged ({'; '.join(artifact.damage[:5])}): "
                                             "making it again")
                    artifact.repair(fp, self.log)
                if isinstance(artifact, WorkArtifact):
                    artifact.claim(fp, self.log)
                result = self.computing(lambda: self.checked(artifact, config, compute))
                refuse_invalid(result, config)  # nothing invalid is recorded as done
                m = Manifest(stage=artifact.stage, backbone=self.backbone, fingerprint=fp,
                             code_version=CODE_VERSIONS[artifact.stage],
                             config=canonical(config), upstream=ups,
                             info={**result.info(), "metadata": result.metadata(),
                                   "preset": preset, **({"upstream_presets": mixed} if mixed
                                                        else {})})
                return artifact.write(m, result), False
        except DihalError as exc:
            raise dg.Failure(description=self.with_run_config(f"{artifact.name}: {exc}")) from exc
        except OSError as exc:
            raise dg.Failure(description=self.with_run_config(os_error_message(artifact, exc))
                             ) from exc

    def checked(self, artifact: Artifact, config: Any, compute: Callable[[], Any]) -> Any:
        """compute(), after the pre-flight's checks of a heavy stage on this host and the
        device it holds (dihal.run.preflight.stage_refusals: the dump's disk and GPU memory, a
        bridge's host memory, disk and GPU memory, the backbone's positions), and the
        sequences' length against the backbone's positions before they are made, whichever
        door launched the run."""
        from dihal.config import BridgeProtocol, ExtractConfig, SequenceConfig

        kind = ("dump" if isinstance(config, ExtractConfig) else
                "training" if isinstance(config, BridgeProtocol) else None)
        if kind is not None and self.backbone is not None:
            self._preflight(kind, artifact, config)
        if isinstance(config, SequenceConfig) and self.backbone is not None:
            self._positions(artifact, config)
        return compute()

    def _positions(self, artifact: Artifact, seq: Any) -> None:
        """The sequences' length against the backbone's max_position_embeddings, read from
        its config.json before a document is tokenised (dihal.run.preflight.check_positions)."""
        from dihal.run.preflight import PreflightError, read_max_positions, require_positions

        folder = self.resources.backbones.resolve(self.backbone, self.layout).path
        try:
            require_positions(self.backbone, read_max_positions(folder), seq)
        except PreflightError as exc:
            raise dg.Failure(description=f"{artifact.name}: {exc}") from None

    def _preflight(self, kind: str, artifact: Artifact, config: Any) -> None:
        from dihal.config import BridgeProtocol, ExtractConfig, SequenceConfig
        from dihal.run.preflight import PreflightError, model_facts, require_stage
        from storage import HiddenStates, Sequences

        def of(cls, art):
            return cls(**{k: tuple(v) if isinstance(v, list) else v
                          for k, v in art.manifest().config.items()})

        extract = config if kind == "dump" else of(ExtractConfig, self.art(HiddenStates))
        protocol = config if kind == "training" else BridgeProtocol()
        facts = model_facts(self.model(), self.device(), workers=self.resources.compute.workers,
                            swept_layers=1, root=self.layout.root)
        try:
            require_stage(kind, facts, of(SequenceConfig, self.art(Sequences)), extract, protocol)
        except PreflightError as exc:
            raise dg.Failure(description=f"{artifact.name}: {exc}") from None

    def preset_label(self) -> str:
        """The label of this run's preset (the preset resource), recorded in what it makes."""
        if "preset" not in self._models:
            try:
                self._models["preset"] = self.resources.preset.preset().label
            except ValueError as exc:
                raise dg.Failure(description=str(exc)) from exc
        return self._models["preset"]

    def upstream_presets(self, artifact: Artifact, upstream: list[Artifact],
                         manifests: list[Manifest], preset: str) -> dict[str, str]:
        """{upstream: its preset} of the upstream artifacts made under another preset that the
        preset resource's reuse_from allows (or that predate recorded presets: "unrecorded");
        any other is refused with the command that remakes it under this run's preset."""
        allowed, mixed = set(self.resources.preset.reuse_from), {}
        for a, m in zip(upstream, manifests, strict=True):
            made = m.info.get("preset")
            if made == preset:
                continue
            if made is None or made in allowed:
                mixed[a.name] = made or "unrecorded"
                continue
            raise dg.Failure(description=(
                f"{artifact.name}: its upstream {a.name} was made under preset {made!r}, this "
                f"run's preset is {preset!r}{_same_file(made, preset)}; presets are never mixed "
                f"silently. Remake it under {preset!r}: {self.remake_command(a)}; then this "
                "asset. Or read it knowingly: "
                f"give the preset resource reuse_from [\"{made}\"] (run config: resources: "
                "preset: config: reuse_from), and the materialization names it."))
        return mixed

    def remake_command(self, upstream: Artifact) -> str:
        """The command that remakes `upstream` (and what it needs) under this run's preset: the
        driver command that launched the run, else `dagster asset materialize` of the upstream
        asset with the preset named (the code location's defaults are that preset's)."""
        if command := self.context.run.tags.get("dihal/command"):
            return f"`{command}` (the driver command that launched this run)"
        import shlex

        name = self.resources.preset.name or self.preset_label()
        return (f"`DIHAL_PROFILE={shlex.quote(name)} {upstream.command()}`")

    def with_run_config(self, text: str) -> str:
        """An error `text` whose fix is to materialise an upstream asset, with how to do it
        under this run's preset: the driver command that launched the run (it carries its
        config), else the preset to give that command (the upstream's config is the preset's;
        this run's own config is not the upstream's)."""
        run = self.context.run
        if "materiali" not in text.lower():
            return text
        if command := run.tags.get("dihal/command"):
            return (f"{text} [This run was launched by `{command}` (profile "
                    f"{run.tags.get('dihal/profile', '?')}): run that again to repair it under the "
                    "same run config (the command above uses the code location's defaults).]")
        try:
            name, label = self.resources.preset.name, self.preset_label()
        except dg.Failure:
            return text
        import shlex

        return (f"{text} [This run's preset is {label!r}: run that command as "
                f"`DIHAL_PROFILE={shlex.quote(name)} dagster asset materialize ...` so that the "
                "upstream is made with that preset's config.]")

    def produce(self, artifact: Artifact, config: Any, upstream: Iterable[Artifact],
                compute: Callable[[], Any], **extra: Any) -> dg.MaterializeResult:
        """`obtain`, reported to Dagster with the artifact's metadata."""
        return materialize_result(*self.made(artifact, config, upstream, compute, **extra))

    def made(self, artifact: Artifact, config: Any, upstream: Iterable[Artifact],
             compute: Callable[[], Any], **extra: Any) -> tuple[Artifact, Manifest, bool]:
        """`obtain`, with its artifact: what each_partition reports for one partition."""
        m, cached = self.obtain(artifact, config, list(upstream), compute, **extra)
        return artifact, m, cached


def refuse_invalid(result: Any, config: Any) -> None:
    """An InvalidOutputError where a stage's result breaks what its config promises (a result
    kind with a `problems(config)` method lists what): checked before its manifest is
    written, so that nothing invalid is ever recorded as done."""
    from dihal.errors import InvalidOutputError

    check = getattr(result, "problems", None)
    if check is not None and (found := check(config)):
        raise InvalidOutputError(f"not recorded: {'; '.join(found[:5])}")


def _same_file(made: str, preset: str) -> str:
    """Why two preset labels of one JSON file name differ, in words ("" where the names do)."""
    if made.split("@")[0] != preset.split("@")[0]:
        return ""
    if "@" in made:
        return " (a preset file of this name with other content: another file, or this one edited)"
    return " (the label of a JSON preset carries its content's digest since this was made)"


def _pass_on_warnings(caught: list, log) -> None:
    """The warnings a stage's compute raised: ours (a checkpoint fallback's reason, ...) go to
    the run's event log, which the driver prints; a library's are shown as Python would."""
    import sysconfig

    libraries = ("site-packages", "dist-packages", sysconfig.get_paths()["stdlib"])
    for w in caught:
        if any(part in w.filename for part in libraries):
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
        else:
            log.warning(f"{w.category.__name__}: {w.message}")


def os_error_message(artifact: Artifact, exc: OSError) -> str:
    import errno

    what = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
            errno.EACCES: "permission denied", errno.EROFS: "the file system is read-only"}
    cause = what.get(exc.errno, exc.strerror or type(exc).__name__)
    return (f"{artifact.name}: {cause} ({exc.filename or artifact.directory}). Free space or fix "
            f"the permissions under {artifact.layout.root}, then materialise it again: completed "
            "artifacts, finished batches and training checkpoints are kept.")


def materialize_result(artifact: Artifact, manifest: Manifest, cached: bool) -> dg.MaterializeResult:
    meta: dict[str, Any] = {"path": dg.MetadataValue.path(str(artifact.directory)),
                            "fingerprint": manifest.fingerprint[:16], "cached": cached,
                            "preset": manifest.info.get("preset", "unrecorded")}
    if mixed := manifest.info.get("upstream_presets"):
        meta["upstream_presets"] = dg.MetadataValue.json(mixed)
    for k, v in artifact.metadata(manifest).items():
        meta[k] = _metadata_value(v)
    return dg.MaterializeResult(metadata=meta, data_version=dg.DataVersion(manifest.fingerprint))


def _metadata_value(v: Any) -> Any:
    if isinstance(v, Plot):  # a PNG in Markdown, so that it shows in the web UI
        b64 = base64.b64encode(v.path.read_bytes()).decode("ascii")
        return dg.MetadataValue.md(f"**{v.title}**\n\n![{v.title}](data:image/png;base64,{b64})")
    if isinstance(v, Table):  # a native table: rendered inline, with a typed schema
        return dg.MetadataValue.table(
            records=[dg.TableRecord({c: _cell(r.get(c)) for c in v.columns}) for r in v.rows],
            schema=dg.TableSchema(columns=[dg.TableColumn(c, _column_type(v.rows, c))
                                           for c in v.columns]))
    if isinstance(v, FileLink):
        return dg.MetadataValue.path(str(v.path))
    if isinstance(v, dict | list):
        return dg.MetadataValue.json(v)
    if isinstance(v, Markdown):
        return dg.MetadataValue.md(v.text)
    return v


def _cell(x: Any) -> Any:
    if x is None or isinstance(x, bool | int | str):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    return str(x)


def _column_type(rows: list[dict], column: str) -> str:
    kinds = {type(r.get(column)) for r in rows} - {type(None)}
    if kinds <= {bool} and kinds:
        return "bool"
    if kinds <= {int}:
        return "int" if kinds else "string"
    return "float" if kinds <= {int, float} else "string"
