"""Shape of the Dagster layer of a checkout: asset body sizes, factory sizes, the places that
build a Manifest, and the import graph between the top-level packages (with cycles).

    python scripts/layer_stats.py [checkout]            # default: this one
    git worktree add /tmp/old <rev> && python scripts/layer_stats.py /tmp/old
"""

from __future__ import annotations

import ast
import statistics
import sys
from pathlib import Path

PACKAGES = ("dihal", "storage", "assets", "resources", "pipeline")


def _is_asset(fn: ast.FunctionDef) -> bool:
    return any("asset" in ast.unparse(d).split("(")[0] for d in fn.decorator_list)


def stats(root: Path) -> dict:
    bodies, factories, manifests = [], {}, []
    graph: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for top in PACKAGES:
        for f in sorted((root / top).rglob("*.py")):
            tree = ast.parse(f.read_text())
            rel = str(f.relative_to(root))
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef):
                    n = node.end_lineno - node.lineno + 1
                    if top == "assets" and _is_asset(node):
                        bodies.append(n)
                    if top == "assets" and any(isinstance(c, ast.FunctionDef) and _is_asset(c)
                                               for c in ast.walk(node) if c is not node):
                        factories[node.name] = n
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Manifest":
                    manifests.append(f"{rel}:{node.lineno}")
                mods = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                        [node.module] if isinstance(node, ast.ImportFrom) and node.module
                        and node.level == 0 else [])
                for m in mods:
                    dst = m.split(".")[0]
                    if dst in PACKAGES and dst != top:
                        graph[top].add(dst)
    cycles = sorted({tuple(sorted((a, b))) for a in graph for b in graph[a] if a in graph[b]})
    return {"asset_bodies": len(bodies), "body_lines_max": max(bodies),
            "body_lines_mean": round(statistics.mean(bodies), 1), "factory_lines": factories,
            "manifest_constructions": len(manifests), "manifest_sites": manifests,
            "imports": {k: sorted(v) for k, v in graph.items()}, "cycles": cycles}


if __name__ == "__main__":
    for k, v in stats(Path(sys.argv[1] if len(sys.argv) > 1 else ".")).items():
        print(f"{k}: {v}")
