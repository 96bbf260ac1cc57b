"""What the lineage check adds to reading an artifact: `require()` of each Locate artifact of a
made run (its digests and its lineage), and `check_lineage()` alone, the mean of 5 calls.

    python benchmarks/bench_lineage.py [--backbone smollm2] [--root .dihal/artifacts]
"""

from __future__ import annotations

import argparse
import time

from storage import ArtifactLayout, Geometry, HiddenStates, LayerScore, Sequences


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backbone", default="smollm2")
    ap.add_argument("--root", default=".dihal/artifacts")
    args = ap.parse_args()
    layout = ArtifactLayout(args.root)
    for kind in (Sequences, HiddenStates, Geometry, LayerScore):
        art = kind(layout, args.backbone)
        start = time.perf_counter()
        manifest = art.require()
        read = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(5):
            art.check_lineage(manifest)
        lineage = (time.perf_counter() - start) / 5
        print(f"{art.name}: require {read * 1000:.1f} ms, of which the lineage check "
              f"{lineage * 1000:.2f} ms ({len(manifest.upstream)} upstream, "
              f"{len(manifest.files)} files recorded)")


if __name__ == "__main__":
    main()
