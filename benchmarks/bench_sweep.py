"""Sequential vs parallel bridge sweep on this machine, measured in one run.

From one finished Locate (the artifacts of `make run`, or of `python -m pipeline.main
--stop-after locate`), the default sweep runs twice through the driver (named jobs, the Dagster
daemon, one backfill): with 1 worker, then with --workers. Each gets its own copy of the Locate
artifacts and its own Dagster instance. The bridge weights of the two are compared byte for
byte. Appends the result to benchmarks/RESULTS.md.

    . ./env.sh && python benchmarks/bench_sweep.py --workers 2
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCATE = ["sequences", "hidden_states", "geometry", "layer_score"]


def _copy_locate(source: Path, target: Path, backbone: str) -> None:
    target.mkdir(parents=True)
    shutil.copytree(source / "corpus", target / "corpus")
    for stage in LOCATE:
        shutil.copytree(source / backbone / stage, target / backbone / stage)
    (target / "cache").symlink_to((source / "cache").resolve())  # the model cache, read only


def _sweep(root: Path, home: Path, backbone: str, workers: int, extra: list[str]) -> dict:
    home.mkdir(parents=True)
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "DIHAL_ARTIFACTS": str(root),
           "PYTHONUNBUFFERED": "1"}
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "pipeline.main", "--backbone", backbone,
                          "--stop-after", "sweep", "--workers", str(workers), *extra],
                         cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    (home / "driver.log").write_text(out.stdout + out.stderr)
    if out.returncode:
        raise SystemExit(f"the sweep with {workers} worker(s) failed:\n{out.stderr[-3000:]}")
    sweep = re.search(r"done sweep_\S+ \(backfill \S+\) in (\d+) s", out.stdout)
    weights = {p.parent.name: hashlib.sha256(p.read_bytes()).hexdigest()
               for p in sorted((root / backbone / "bridge_sweep").glob("layer_*/bridge.safetensors"))}
    return {"wall": wall, "sweep": float(sweep.group(1)), "weights": weights}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--source", type=Path,
                    default=Path(os.environ.get("DIHAL_ARTIFACTS", ROOT / ".dihal/artifacts")))
    ap.add_argument("--backbone", default="smollm2")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--layers", help="as the driver's --layers (default: its default sweep)")
    ap.add_argument("--keep", type=Path, help="keep the two artifact roots here")
    args = ap.parse_args()
    if not (args.source / args.backbone / "layer_score").exists():
        raise SystemExit(f"no finished Locate under {args.source}: run `make run` or `python -m "
                         "pipeline.main --stop-after locate` first")
    extra = ["--layers", args.layers] if args.layers else []
    work = Path(tempfile.mkdtemp(prefix="bench-sweep-", dir=args.keep))
    runs = {}
    for workers in (1, args.workers):
        root = work / f"artifacts-{workers}"
        _copy_locate(args.source, root, args.backbone)
        print(f"sweep with {workers} worker(s)...", flush=True)
        runs[workers] = _sweep(root, work / f"dagster-{workers}", args.backbone, workers, extra)
        print(f"  {runs[workers]['sweep']:.0f} s (driver wall {runs[workers]['wall']:.0f} s)")
    seq, par = runs[1], runs[args.workers]
    same = seq["weights"] == par["weights"] and len(seq["weights"]) > 0
    lines = [
        f"\n## Parallel sweep on the CPU ({time.strftime('%Y-%m-%d')}, `python "
        f"benchmarks/bench_sweep.py --workers {args.workers}`)\n",
        f"{os.cpu_count()} cores; backbone {args.backbone}; layers "
        f"{', '.join(k.removeprefix('layer_').lstrip('0') for k in seq['weights'])}; each sweep through "
        "the driver (named jobs, the daemon, one backfill), from copies of one Locate.\n",
        "| workers | sweep backfill (s) | driver wall (s) |",
        "|---|---|---|",
        f"| 1 | {seq['sweep']:.0f} | {seq['wall']:.0f} |",
        f"| {args.workers} | {par['sweep']:.0f} | {par['wall']:.0f} |",
        "",
        f"Parallel / sequential sweep time: {par['sweep'] / seq['sweep']:.2f}. Bridge weights "
        f"({len(seq['weights'])} layers) byte-identical: {'yes' if same else 'NO'}.",
    ]
    with open(ROOT / "benchmarks" / "RESULTS.md", "a") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    if not same:
        raise SystemExit("the parallel sweep's weights differ from the sequential sweep's")


if __name__ == "__main__":
    main()
