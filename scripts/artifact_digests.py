"""Materialise the tiny world (the tests' tiny llama, a generated corpus, the tiny configs of
tests/tiny.py that tests/pipeline/test_compare_pipeline.py runs) into a work folder and print the sha256 of every artifact file, to show
that a refactoring leaves every artifact bit-identical:

    PYTHONPATH=$PWD python scripts/artifact_digests.py /tmp/digests > after.txt
    PYTHONPATH=$PWD python scripts/artifact_digests.py --batched /tmp/digests > batched.txt

--batched makes the sweep (both its assets) and the baselines each in ONE run over their
partition range, as a batched backfill's run does (assets._stage.partition_policy), instead of
one run per partition: the digests must be the same.

The folder is cleared first. Manifests record the paths of the model and the corpus, so compare
two runs made in the SAME folder (one after the other), e.g. with the code of the base commit
first (PYTHONPATH pointing at a `git worktree add` of it) and of the branch second.

One line per file: `<raw sha256>  <stable sha256>  <path>`. The two digests are equal except
where a file embeds wall-clock measurements, which legitimately differ between any two runs:
- manifests record the stages' durations and speeds in their info (BridgeMetrics.seconds,
  GeometryResult seconds, the dump's tokens_per_s, ms_per_token and latency_vs_backbone of
  every generation row, train_seconds of the baselines, the sampler curve's measure_seconds),
  and the digests of their own files (some of which hold those times);
- eval.parquet, comparison.parquet, full_training.parquet and the sampler curve.parquet hold
  the generation latency (ms_per_token, ms_per_step, latency_vs_backbone, seconds...);
- report.md quotes those times in its sentences and tables: its stable digest masks them, and
  report.html (rendered from the same document) takes report.md's;
- verdicts on those times vary with them: the eval's order of the times in K (`order_in_k`),
  and the claim that inference is slower than the backbone (its verdict and reason in the claims
  table, and the claims' tally, are masked);
- the model caches' folder-digests.json key each file's digest by its stat (size, mtime, ctime,
  inode): its stable digest keeps the digests by path.
For those the stable digest is taken with the timing fields removed (JSON keys, Parquet
columns) and, in a manifest's file record, with the stable digest of each recorded file that
holds times in place of its raw digest and size (the Parquet encoding of other numbers makes the
size vary too). An artifact's .verified marker (when its digests were last checked), the
`<artifact>.lock` files (the last writer's pid, host and start time) and the device leases
(.devices) are wall-clock records, not results, and are not listed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from pathlib import Path

TIMING = re.compile(r"seconds|ms_per_|tokens_per_s|latency|wall_s|elapsed_s|forward_s|"
                    r"_vs_backbone|time_over_flops|order_in_k")  # the last: a verdict on times
# the report's measured times: the prose around them, and its tables' columns of times
REPORT_TIMES = re.compile(r"\d[\d.,]*(?= m?s\b)|(?<=backbone's )\d[\d.]*|\d[\d.]*x(?= the backbone's "
                          r"time| in measured time| its measured time| at K =)|(?<=and )\d[\d.]*(?= at K =)|"
                          r"(?<=ms per token against )\d[\d.]*|"
                          r"(?<=rounds )[\d.]+-[\d.]+ against [\d.]+-[\d.]+|"
                          # verdicts on the times: faster or slower, the order in K
                          r"(?<=backbone's time: )(?:slower|faster|as fast)|"
                          r"(?<=time per token over K = )[\d, ]+: .*")
REPORT_TIME_COLUMNS = re.compile(r"ms|time|seconds|latency|tokens_per_s|vs backbone|round")
# the claim whose figures and verdict come from measured times: in its row of the claims table
# the times and the verdict with its reason are masked (its FLOPs are kept), and the claims'
# tally is masked (the claims' rows, which it counts, are compared one by one)
TIMED_CLAIM = "inference is slower than the backbone"
CLAIMS_TALLY = re.compile(r"\d+ (?:do not hold|does not hold|the design cannot decide|holds?|"
                          r"(?:are )?not measured)(?:, \d+ [^,.()]*?(?=,|\.| \())*"
                          r"(?: \((?:holding|undecided|not measured)[^)]*\))?")
CLAIM_VERDICT = re.compile(r"\| (holds|does not hold|the design cannot decide at this scale) \|[^|]*\|")
SWEEP_LAYERS = ("1", "2", "3")
BASELINES = ("diffusion-lm", "sed", "ld4lg", "codar")
# markers and folders that hold wall-clock times or host state, not results: when the digests
# were last checked, a reader's damage note, the device leases
WALL_CLOCK = {".verified", ".damaged", ".devices"}


def materialise(work: Path, batched: bool = False) -> Path:
    """Build the tiny model and corpus under `work` and materialise every asset of the tiny
    llama's graph; the artifact root."""
    import dagster as dg

    from pipeline.definitions import build_definitions
    from resources import BackboneResource, ComputeResource, JudgeResource, StorageResource
    from tests.tiny import MATCHED_PROTOCOL, TINY, TINY_RUN, build_model, make_docs

    (work / "corpus").mkdir(parents=True)
    shard = write_shard(work / "corpus" / "s0.json.gz", make_docs(120))  # the tests' corpus
    model = build_model(work / "model", "llama")
    root = work / "artifacts"
    defs = build_definitions(("llama",), n_layers={"llama": 4}, resources={
        "storage": StorageResource(root=str(root)),
        "backbones": BackboneResource(paths={"llama": str(model)}),
        "compute": ComputeResource(device="cpu", threads=1),
        "judge": JudgeResource(name=str(model)),
    })
    # the configs of tests/pipeline/test_compare_pipeline.py (a denoiser the baselines can match)
    ops = {**TINY_RUN, "corpus": {"config": {"paths": [str(shard)]}},
           "bridge_sweep_llama": {"config": MATCHED_PROTOCOL},
           "bridge_llama": {"config": {**MATCHED_PROTOCOL, "epochs": 2.0}},
           "eval_llama": {"config": TINY["eval"]}, "full_training_llama": {"config": TINY["eval"]},
           "sampler_steps_llama": {"config": {"steps": [1, 2, 4], "n_samples": 2, "length": 4}},
           "baseline_llama": {"config": {"n_samples": 4, "length": 8}}}
    inst = dg.DagsterInstance.ephemeral()

    def run(keys: list[str], partition: str | None = None, through: str | None = None) -> None:
        span = {} if through is None else {"dagster/asset_partition_range_start": partition,
                                           "dagster/asset_partition_range_end": through}
        res = dg.materialize(
            list(defs.assets) + list(defs.asset_checks), selection=keys,
            partition_key=None if through else partition, tags=span,
            instance=inst, resources=defs.resources, raise_on_error=False,
            run_config={"ops": {k: v for k, v in ops.items() if k in keys}})
        if not res.success:
            errors = [e.step_failure_data.error.to_string() for e in res.all_events
                      if e.event_type_value == "STEP_FAILURE"]
            raise SystemExit(f"materialising {keys} [{partition}] failed:\n" + "\n".join(errors))

    run(["corpus", "sequences_llama", "hidden_states_llama", "geometry_llama",
         "layer_score_llama"])
    if batched:
        run(["bridge_sweep_llama", "regression_sweep_llama"], SWEEP_LAYERS[0], SWEEP_LAYERS[-1])
    else:
        for layer in SWEEP_LAYERS:
            run(["bridge_sweep_llama"], layer)
        for layer in SWEEP_LAYERS:
            run(["regression_sweep_llama"], layer)
    run(["bridgeability_llama", "bridge_llama", "eval_llama", "sampler_steps_llama"])
    if batched:
        run(["baseline_llama"], BASELINES[0], BASELINES[-1])
    else:
        for name in BASELINES:
            run(["baseline_llama"], name)
    run(["comparison_llama", "full_training_llama", "report_llama"])
    return root


def write_shard(path: Path, docs: list[dict]) -> Path:
    """tests.tiny.write_shard with the gzip header's time fixed (0): the corpus records the
    shard's digest, which every fingerprint downstream includes."""
    import gzip

    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as fh:
        fh.write("".join(json.dumps(d) + "\n" for d in docs).encode("utf-8"))
    return path


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _untimed(obj):
    """`obj` (JSON) without the keys that hold wall-clock measurements, at any depth."""
    if isinstance(obj, dict):
        return {k: _untimed(v) for k, v in obj.items() if not TIMING.search(str(k))}
    if isinstance(obj, list):
        return [_untimed(v) for v in obj]
    return obj


def stable_digest(path: Path, timed: dict[Path, str]) -> str:
    """The file's sha256 with its timing fields removed (Parquet columns, JSON keys; for a
    manifest, its record of each file in `timed` (files that hold times -> their stable digest)
    by that file's stable digest)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        times = [c for c in table.column_names if TIMING.search(c)]
        if not times:
            return _sha(path.read_bytes())
        rows = table.drop(times).to_pylist()
        return _sha(json.dumps(rows, sort_keys=True, default=repr).encode())
    if path.name == "report.md":
        return _sha(_report_untimed(path.read_text()).encode())
    if path.name == "report.html":  # rendered from the same document as report.md
        return _sha(b"html of " + _report_untimed((path.parent / "report.md").read_text()).encode())
    if path.name == "folder-digests.json":  # the digests by path, without the stat keys
        files = json.loads(path.read_text())["files"]
        return _sha(json.dumps({f: sorted(by_stat.values()) for f, by_stat in files.items()},
                               sort_keys=True).encode())
    if path.name == "manifest.json":
        raw = json.loads(path.read_text())
        files = {rel: ["size varies with the times", timed[path.parent / rel]]
                 if path.parent / rel in timed else record
                 for rel, record in raw.get("files", {}).items()}
        # its digest of its own content varies with the times as the content does
        raw = {**_untimed({k: v for k, v in raw.items() if k not in ("files", "self_sha256")}),
               "files": files}
        return _sha(json.dumps(raw, sort_keys=True).encode())
    return _sha(path.read_bytes())


def _report_untimed(text: str) -> str:
    """The Markdown report with its measured times masked: the numbers in the sentences that
    quote them, and the cells of the table columns that hold them."""
    out, masked = [], set()
    for line in text.splitlines():
        line = CLAIMS_TALLY.sub("#", line)
        if line.startswith("|"):
            cells = line.strip("|").split("|")
            if set(line) <= set("|-: "):
                pass
            elif not any(c.strip().replace(".", "").isdigit() for c in cells):
                # a header, or a row of prose cells (the claims table), which may quote times
                masked = {i for i, c in enumerate(cells) if REPORT_TIME_COLUMNS.search(c)}
                line = REPORT_TIMES.sub("#", line)
            else:  # a cell of prose may quote times too (the claims table's latency row)
                line = "|".join("#" if i in masked else REPORT_TIMES.sub("#", c)
                                for i, c in enumerate(cells))
            if TIMED_CLAIM in line:  # its verdict and why, which follow the rounds
                line = CLAIM_VERDICT.sub("#", line)
        else:
            masked = set()
            line = REPORT_TIMES.sub("#", line)
        out.append(line)
    return "\n".join(out)


def digests(root: Path) -> list[tuple[str, str, str]]:
    """(raw, stable, path relative to root) of every artifact file, manifests last (they
    record the others)."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix != ".lock"
                   and not set(p.relative_to(root).parts) & WALL_CLOCK)
    raw = {f: _sha(f.read_bytes()) for f in files}
    timed: dict[Path, str] = {}  # the files that hold times -> their stable digest
    for f in sorted(files, key=lambda p: p.name == "manifest.json"):
        if (stable := stable_digest(f, timed)) != raw[f]:
            timed[f] = stable
    return [(raw[f], timed.get(f, raw[f]), f.relative_to(root).as_posix()) for f in files]


def main(argv: list[str]) -> None:
    batched = "--batched" in argv
    argv = [a for a in argv if a != "--batched"]
    if len(argv) != 1:
        raise SystemExit("usage: artifact_digests.py [--batched] WORK_FOLDER (cleared, then "
                         "filled)")
    work = Path(argv[0]).resolve()
    if work.exists():
        shutil.rmtree(work)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch

    torch.set_num_threads(1)
    root = materialise(work, batched)
    for raw, stable, rel in digests(root):
        print(f"{raw}  {stable}  {rel}")


if __name__ == "__main__":
    main(sys.argv[1:])
