"""The results of benchmarks/gpu_profile.sh's run, as a Markdown section for RESULTS.md: the
driver's stage times (its "done ... in N s" lines), and what the artifacts hold (l*, the sweep's
Spearman table, Gen.PPL of DiHAL, the baselines and the backbone).

    python benchmarks/gpu_results.py DRIVER_LOG ARTIFACT_ROOT SECONDS GPU_NAME
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from storage import ArtifactLayout, Bridgeability, Comparison, HiddenStates, LayerScore


def main() -> None:
    log, root, seconds, gpu = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    layout, b = ArtifactLayout(root), "smollm2"
    lines = [f"\n## GPU profile on {gpu} ({time.strftime('%Y-%m-%d')}, "
             "`benchmarks/gpu_profile.sh run`)\n",
             f"The whole smollm2 chain at `--profile gpu` through Dagster took {seconds} s.\n",
             "| stage (job) | seconds |", "|---|---|"]
    for name, took in re.findall(r"^done (\S+).* in (\d+) s", log.read_text(), re.M):
        lines.append(f"| {name} | {took} |")
    states = HiddenStates(layout, b).require()
    score, bness = LayerScore(layout, b).require(), Bridgeability(layout, b).require()
    lines += ["", f"Dump: {states.info.get('tokens_per_s', float('nan')):.0f} tokens/s. "
              f"l* = {score.info['l_star']} (by normalisation {score.info['selected']}); "
              f"oracle {bness.info['oracle']}, worst {bness.info['worst']}.", ""]
    rows = bness.info["spearman"]
    cols = [c for c in rows[0] if c != "predictor"]
    lines += ["| predictor | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    lines += [f"| {r['predictor']} | " + " | ".join(
        f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |" for r in rows]
    lines += ["", "| model | Gen.PPL | diversity |", "|---|---|---|"]
    lines += [f"| {r['model']} | {r['gen_ppl']:.1f} | {r['diversity']:.3f} |"
              for r in Comparison(layout, b).require().info["rows"]]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
