"""Compare two artifact trees made by scripts/artifact_digests.py (copies of its work folder,
one per code version, made in the same folder one after the other) and print every value that
differs, after renaming keys in the first: the proof that a change which renames a stored field
changes nothing else.

    PYTHONPATH=$PWD:$PWD/scripts python scripts/artifact_diff.py BEFORE AFTER \\
        --rename protocol:steps=sampler_steps --rename metrics:steps=train_steps

A rename `KIND:OLD=NEW` applies to every JSON object (and Parquet table) that holds OLD and the
marker key of KIND (protocol: `eval_sequences`; metrics: `resumed_from_step`; any: every
object). Only the files whose stable digests (scripts/artifact_digests.py: wall-clock times
masked) differ are compared: JSON files and Parquet tables value by value without their timing
fields (a path per difference, NaN equal to NaN), report.md line by line with its times masked,
other files byte by byte. The differences left are printed by file; fingerprints, upstream
fingerprints, a manifest's digest of itself and its records of its files (size, sha256) differ
wherever a renamed key is hashed, and are counted apart.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
from pathlib import Path

from artifact_digests import _report_untimed, _untimed, digests

MARKERS = {"protocol": "eval_sequences", "metrics": "resumed_from_step", "any": None}
# the manifest fields that hash content: they differ wherever a hashed value was renamed
HASHED = ("/fingerprint", "/upstream", "/self_sha256", "/files/")


def renamed(obj, renames: list[tuple[str | None, str, str]]):
    if isinstance(obj, dict):
        out = {k: renamed(v, renames) for k, v in obj.items()}
        for marker, old, new in renames:
            if old in out and (marker is None or marker in out):
                out = {(new if k == old else k): v for k, v in out.items()}
        return out
    if isinstance(obj, list):
        return [renamed(v, renames) for v in obj]
    return obj


def differences(a, b, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}/{k}: only in {'first' if k in a else 'second'}"
               for k in sorted(set(a) ^ set(b))]
        for k in sorted(set(a) & set(b)):
            out += differences(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    return [] if a == b or nan else [f"{path}: {str(a)[:80]!r} -> {str(b)[:80]!r}"]


def table(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def compare(first: Path, second: Path, renames) -> dict[str, list[str]]:
    stable = [{path: s for _, s, path in digests(root)} for root in (first, second)]
    out: dict[str, list[str]] = {}
    for rel in sorted(set(stable[0]) | set(stable[1])):
        if rel not in stable[0] or rel not in stable[1]:
            out[rel] = [f"only in {'first' if rel in stable[0] else 'second'}"]
            continue
        if stable[0][rel] == stable[1][rel]:
            continue
        a, b = first / rel, second / rel
        if a.suffix == ".json":
            diffs = differences(_untimed(renamed(json.loads(a.read_text()), renames)),
                                _untimed(json.loads(b.read_text())))
        elif a.suffix == ".parquet":
            diffs = differences(_untimed(renamed(table(a), renames)), _untimed(table(b)))
        elif a.name in ("report.md", "report.html"):
            a, b = a.with_name("report.md"), b.with_name("report.md")
            diffs = [line for line in difflib.unified_diff(
                _report_untimed(a.read_text()).splitlines(),
                _report_untimed(b.read_text()).splitlines(), lineterm="", n=0)
                if line[:1] in "+-" and line[:3] not in ("+++", "---")]
        else:
            diffs = ["content differs"]
        if diffs:
            out[rel] = diffs
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("first", type=Path)
    ap.add_argument("second", type=Path)
    ap.add_argument("--rename", action="append", default=[], metavar="KIND:OLD=NEW")
    args = ap.parse_args()
    renames = []
    for r in args.rename:
        kind, _, pair = r.partition(":")
        old, _, new = pair.partition("=")
        if kind not in MARKERS or not old or not new:
            ap.error(f"--rename {r}: give KIND:OLD=NEW with KIND one of {', '.join(MARKERS)}")
        renames.append((MARKERS[kind], old, new))
    found = compare(args.first, args.second, renames)
    hashed = 0
    for rel, diffs in found.items():
        left = [d for d in diffs if not any(d.startswith(h) for h in HASHED)]
        hashed += len(diffs) - len(left)
        if left:
            print(f"{rel}:")
            for d in left:
                print(f"  {d}")
    print(f"{len(found)} files differ after the renames; {hashed} differences are hashes "
          "(fingerprints, upstream fingerprints, file digests and sizes)")


if __name__ == "__main__":
    main()
