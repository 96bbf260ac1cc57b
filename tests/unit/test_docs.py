"""Docs that cannot go stale: every file, folder and module that README.md and docs/ name
exists, and neither the code nor the docs point outside the repository."""

import importlib
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOPS = ("dihal", "storage", "assets", "pipeline", "resources", "tests", "benchmarks", "scripts",
        "data", "docs", ".ci")
PATH = re.compile(r"(?<![\w./<>-])((?:" + "|".join(re.escape(t) for t in TOPS)
                  + r")/[\w./*-]*[\w*/])")
MODULE = re.compile(r"(?<![\w./-])((?:dihal|storage|assets|pipeline|resources)(?:\.[A-Za-z_]\w*)+)")
# Names in the docs that look like paths but are not: Dagster run tags the driver sets
NOT_PATHS = {"dihal/driver", "dihal/backbone"}
OUTSIDE = re.compile(r"\bissues? [0-9]+\b|OFFLINE\.md|\.\./shared")


def docs() -> list[pathlib.Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def missing_paths(text: str, root: pathlib.Path) -> list[str]:
    """The project paths `text` names that do not exist under `root` (globs must match)."""
    out = []
    for m in PATH.finditer(text):
        p = m.group(1).rstrip(".")
        if p in NOT_PATHS:
            continue
        if not (list(root.glob(p)) if "*" in p else (root / p).exists()):
            out.append(p)
    return out


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def missing_modules(text: str, root: pathlib.Path) -> list[str]:
    """The dotted module paths (or module attributes) `text` names that do not import."""
    return [m.group(1).rstrip(".") for m in MODULE.finditer(text)
            if not (root / m.group(1).rstrip(".")).exists()  # a file such as dihal.toml
            and not _resolves(m.group(1).rstrip("."))]


def test_every_path_and_module_the_docs_name_exists():
    bad = {str(f.relative_to(ROOT)): missing_paths(f.read_text(), ROOT)
           + missing_modules(f.read_text(), ROOT) for f in docs()}
    assert {k: v for k, v in bad.items() if v} == {}


def test_the_check_finds_a_stale_path_and_module(tmp_path):
    (tmp_path / "dihal").mkdir()
    (tmp_path / "dihal" / "here.py").write_text("")
    text = ("see `dihal/here.py`, dihal/gone.py, dihal/*.py and dihal/none*.py; the module "
            "dihal.run.stages.asset_key, dihal.run.stages.no_such and dihal.no_module; the tag dihal/driver")
    assert missing_paths(text, tmp_path) == ["dihal/gone.py", "dihal/none*.py"]
    assert missing_modules(text, tmp_path) == ["dihal.run.stages.no_such", "dihal.no_module"]


def test_code_and_docs_point_nowhere_outside_the_repository():
    files = [*docs(), ROOT / "benchmarks" / "RESULTS.md", ROOT / "CHANGELOG.md", *(f for top in ("dihal", "storage", "assets", "pipeline", "resources",
                                      "benchmarks", "scripts", "tests")
                        for f in (ROOT / top).rglob("*.py")), ROOT / "Makefile"]
    bad = [f"{f.relative_to(ROOT)}:{i}" for f in files
           for i, line in enumerate(f.read_text().splitlines(), 1) if OUTSIDE.search(line)
           and f.name != "test_docs.py"]
    assert bad == []
