"""What verified reuse costs on the default run: digests written with the dump, sizes checked at
every reuse, chunk digests checked before each stage reads a layer.

    python benchmarks/bench_verify.py [artifact root] [run seconds]

Needs a materialised hidden_states_smollm2 (e.g. after `make run`). Times each primitive once on
the real store and adds them up for the reads the default run makes: geometry (val split, every
layer), the asset check finite_states (every chunk), 10 sweep partitions, the bridge at l* and
two full-training bridges (layers 0 and l, both splits each), plus the digest of the whole dump
when it is written. Prints seconds and, given the run's wall time, the fraction of it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from storage.manifest import check_files, digest_files  # noqa: E402
from storage.states import StateReader  # noqa: E402


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / ".dihal" / "artifacts")
    run_s = float(sys.argv[2]) if len(sys.argv) > 2 else None
    states = root / "smollm2" / "hidden_states"
    files, t_digest = timed(lambda: digest_files(states))
    size = sum(v[0] for v in files.values())
    _, t_sizes = timed(lambda: check_files(states, files, digests=False))
    _, t_open = timed(lambda: StateReader(states))  # every chunk there, full size

    def read_layers(pairs):
        reader = StateReader(states, files)
        for split, layer in pairs:
            reader._verify_layer(split, layer)

    n_layers = StateReader(states).n_layers()
    _, t_geometry = timed(lambda: read_layers([("val", ll) for ll in range(n_layers)]))
    _, t_bridge = timed(lambda: read_layers([(s, ll) for s in ("train", "val") for ll in (0, 5)]))
    _, t_all = timed(lambda: read_layers([(s, ll) for s in ("train", "val") for ll in range(n_layers)]))
    bridges = 10 + 1 + 2
    reuses = 14  # every asset of the run checks its own files' sizes when it is reused
    total = (t_digest + t_geometry + t_all + bridges * (t_bridge + t_open) + t_open
             + reuses * t_sizes)
    print(f"hidden-state store: {len(files)} files, {size / 2**30:.2f} GiB")
    print(f"digest at write       {t_digest:7.2f} s ({size / 2**20 / t_digest:.0f} MiB/s)")
    print(f"sizes check           {t_sizes:7.3f} s")
    print(f"open (chunk check)    {t_open:7.3f} s")
    print(f"geometry reads        {t_geometry:7.2f} s")
    print(f"one bridge's reads    {t_bridge:7.2f} s  x {bridges}")
    print(f"finite_states (all)   {t_all:7.2f} s")
    line = f"verification on the default run: {total:.1f} s"
    if run_s:
        line += f" of {run_s:.0f} s ({100 * total / run_s:.1f} %)"
    print(line)


if __name__ == "__main__":
    main()
