"""The shape of the code base: a pure method package, storage that owns every file name, thin
assets, one error root, and README defaults that match the config dataclasses."""

import ast
import dataclasses
import inspect
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _imports(path: pathlib.Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
    return out


def test_dihal_imports_no_layer_above_it():
    bad = [(str(f.relative_to(ROOT)), m) for f in (ROOT / "dihal").rglob("*.py")
           for m in _imports(f) if m.split(".")[0] in ("dagster", "storage", "assets", "resources",
                                                       "pipeline")]
    assert bad == []


def test_the_method_imports_nothing_of_the_runs_operations():
    """dihal/run/ holds the run's operations (stages, presets, the pre-flight and capacity
    model, the study's estimates, devices, determinism, the science checks): it may import the
    method, and the method never imports it, so that the method's modules load without them.
    The report alone reads the presets, whose run it describes."""
    run = ROOT / "dihal" / "run"
    report = ROOT / "dihal" / "report"
    assert {f.stem for f in run.glob("*.py")} >= {"stages", "profiles", "preflight", "capacity",
                                                   "estimates", "devices", "determinism",
                                                   "checks"}
    bad = [(str(f.relative_to(ROOT)), m) for f in (ROOT / "dihal").rglob("*.py")
           if run not in f.parents for m in _imports(f)
           if m.startswith("dihal.run") and not (report in f.parents and m == "dihal.run.profiles")]
    assert bad == []


def test_storage_imports_only_the_leaf_modules_of_dihal():
    allowed = {"dihal.results", "dihal.rows", "dihal.run.stages", "dihal.atomic", "dihal.errors",
               "dihal.proxies", "dihal.inputs", "dihal.generation_inputs", "dihal.environment",
               "dihal.report.inputs",  # the report's inputs, read by storage.report_inputs
               "dihal.config",  # the configs' dataclasses (a protocol, read back typed)
               "dihal.net_configs",  # the denoiser's and the training loop's configs
               "dihal.generation_rows"}
    used = {m for f in (ROOT / "storage").rglob("*.py") for m in _imports(f) if m.startswith("dihal")}
    assert used and used <= allowed, used - allowed
    # and those leaves import nothing of the project but each other
    for leaf in allowed:
        mods = _imports(ROOT / (leaf.replace(".", "/") + ".py"))
        assert {m for m in mods if m.startswith(("dihal", "storage"))} <= allowed, leaf


def test_no_artifact_file_name_is_spelled_outside_storage():
    from storage import artifacts

    names = {n for cls in vars(artifacts).values() if isinstance(cls, type)
             and issubclass(cls, artifacts.Artifact) for n in getattr(cls, "files", ())}
    assert {"proxies.png", "bridge.safetensors", "samples.jsonl", "report.html"} <= names
    # the Zarr store is the hidden-states artifact's own module; the training checkpoint is the
    # trainer's own format (dihal.checkpoint)
    own = {*(ROOT / "storage" / "artifacts").glob("*.py"), ROOT / "storage" / "states.py",
           ROOT / "dihal" / "checkpoint.py"}
    hits = []
    for top in ("dihal", "assets", "pipeline", "resources", "storage"):
        for f in (ROOT / top).rglob("*.py"):
            if f in own:
                continue
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    hits += [(str(f.relative_to(ROOT)), n) for n in names if n in node.value]
    assert hits == []


def _module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_time_imports(tree: ast.Module, deferred: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """The imports a module runs when it is imported: at module level, in class bodies and in
    if/try blocks, but not under `if TYPE_CHECKING:` nor (unless `deferred`) in functions."""
    found, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo += node.orelse
        elif deferred or not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            todo += [c for c in ast.iter_child_nodes(node)
                     if isinstance(c, ast.stmt | ast.excepthandler)]
    return found


def _deferred_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The imports that run only when a function of the module is called."""
    now = {id(n) for n in _import_time_imports(tree)}
    return [n for n in _import_time_imports(tree, deferred=True) if id(n) not in now]


def import_graph(package: pathlib.Path, deferred: bool = False,
                 external: bool = False) -> dict[str, set[str]]:
    """module -> the modules of the package in directory `package` that importing it runs
    first (with `deferred`, also those its functions import when called; with `external`, also
    the top-level names of the other packages it imports). Importing a.b.c runs a.b's __init__
    too, unless the importer is inside a.b (then it is already running)."""
    modules = {_module_name(f, package.parent): f for f in package.rglob("*.py")}
    graph = {}
    for name, f in modules.items():
        is_pkg = f.name == "__init__.py"
        here = name if is_pkg else name.rpartition(".")[0]
        targets = set()
        for node in _import_time_imports(ast.parse(f.read_text()), deferred):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
                continue
            base = node.module or ""
            if node.level:
                base = ".".join(here.split(".")[: len(here.split(".")) - node.level + 1]
                                + ([base] if base else []))
            targets |= {base} | {f"{base}.{a.name}" for a in node.names}
        edges = set()
        for target in targets:
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                mod = ".".join(parts[:i])
                if mod in modules and mod != name and not (name + ".").startswith(mod + "."):
                    edges.add(mod)
            if external and parts[0] != package.name and target:
                edges.add(parts[0])
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `graph` (its modules in order, the first repeated last), or None."""
    state, stack = {}, []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_dihal_import_graph_has_no_cycle():
    graph = import_graph(ROOT / "dihal")
    assert {"dihal.training", "dihal.checkpoint", "dihal.bridge", "dihal.bridge.train"} <= set(graph)
    # the graph sees package __init__s and relative imports: the training loop's old cycle
    assert "dihal.checkpoint" in graph["dihal.training"]
    assert "dihal.bridge" in graph["dihal.replace.stage"] and "dihal.training" in graph["dihal.bridge.train"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))
    # nor one hidden behind an import inside a function: they count too, in every layer
    for layer in ("dihal", "storage", "assets", "pipeline"):
        graph = import_graph(ROOT / layer, deferred=True)
        assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))
    # nor one hidden behind a lazy module __getattr__ that imports on first use
    lazy = [str(f.relative_to(ROOT)) for f in (ROOT / "dihal").rglob("*.py")
            if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__"
                   for n in ast.parse(f.read_text()).body)]
    assert lazy == []


def test_the_cycle_finder_finds_a_cycle_through_a_package_init(tmp_path):
    """The check above can fail: the old shape (the loop imports dihal.bridge.checkpoint, whose
    package __init__ imports dihal.bridge.train, which imports the loop) is a cycle."""
    pkg = tmp_path / "pkg"
    (pkg / "bridge").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "training.py").write_text("from pkg.bridge.checkpoint import save\n")
    (pkg / "bridge" / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\nfrom .train import train\n"
        "if TYPE_CHECKING:\n    from pkg.report import x\n")
    (pkg / "bridge" / "checkpoint.py").write_text("import os\n")
    (pkg / "bridge" / "train.py").write_text(
        "from pkg.bridge import checkpoint\nimport pkg.training\n"
        "def late():\n    import pkg.report\n")
    (pkg / "report.py").write_text("import pkg.training\n")
    graph = import_graph(pkg)
    assert graph["pkg.bridge.train"] == {"pkg.bridge.checkpoint", "pkg.training"}
    assert graph["pkg.bridge"] == {"pkg.bridge.train"}  # not the TYPE_CHECKING import
    assert find_cycle(graph) == ["pkg.bridge", "pkg.bridge.train", "pkg.training", "pkg.bridge"]
    (pkg / "training.py").write_text("def save():\n    from pkg.bridge.checkpoint import save\n")
    assert find_cycle(import_graph(pkg)) is None
    # an import inside a function still closes the circle, and the full graph sees it
    assert "pkg.training" in find_cycle(import_graph(pkg, deferred=True))


# What a deferred import may keep out of its module's import time: the heavy packages.
HEAVY = {"torch", "transformers", "matplotlib", "datasets", "zarr", "numcodecs", "sklearn",
         "scipy", "safetensors", "mauve", "spacy", "faiss", "huggingface_hub", "gguf", "pyarrow",
         "accelerate", "dask", "distributed", "skdim"}


def _closure(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def unjustified_deferrals(package: pathlib.Path) -> list[str]:
    """`module -> target` for each import of the package's own modules made inside a function
    although it keeps no heavy package out of the module's import time (the target's
    import-time closure brings no heavy package that the module's does not already): such an
    import only hides an arrow, and belongs at the top of the module."""
    modules = {_module_name(f, package.parent): f for f in package.rglob("*.py")}
    now = import_graph(package, external=True)
    bad = []
    for name, f in modules.items():
        here_heavy = _closure(now, name) & HEAVY
        for node in _deferred_imports(ast.parse(f.read_text())):
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                             else node.module or "" for a in node.names])
            for target in (t for t in targets if t in modules and t != name):
                if not ((_closure(now, target) | {target}) & HEAVY) - here_heavy:
                    bad.append(f"{name} -> {target} (line {node.lineno})")
    return sorted(set(bad))


def test_imports_inside_functions_only_keep_heavy_packages_out_of_import_time():
    assert unjustified_deferrals(ROOT / "dihal") == []


def test_an_import_deferred_for_nothing_is_found(tmp_path):
    """The check above can fail: a module that already imports torch defers an import of a
    torch-free module (hidden arrow), while a torch-free module deferring a torch module is fine."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "leaf.py").write_text("import json\n")
    (pkg / "model.py").write_text("import torch\ndef f():\n    from pkg import leaf\n")
    (pkg / "config.py").write_text("def g():\n    from pkg.model import f\n")
    assert unjustified_deferrals(pkg) == ["pkg.model -> pkg.leaf (line 3)"]


def test_no_baseline_recipe_borrows_from_another():
    """What the baselines share lives in shared modules (base, common, decoder, schedules), and
    every recipe's `build` is the one shared construction."""
    import importlib

    from dihal.compare.baselines import common
    from dihal.registry import BASELINE_SPECS

    recipes = {f"dihal.compare.baselines.{spec.module}" for spec in BASELINE_SPECS.values()}
    assert len(recipes) == 4
    borrowed = [(r, m) for r in sorted(recipes)
                for m in _imports(ROOT / (r.replace(".", "/") + ".py")) if m in recipes]
    assert borrowed == []
    for r in recipes:
        build = importlib.import_module(r).build
        assert build.func is common.build and build.args[0].__module__ == r


def test_asset_bodies_are_short_wiring():
    """Every asset function stays within 25 lines and does no arithmetic of its own."""
    long, arithmetic = [], []
    for f in (ROOT / "assets").glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                    "asset" in ast.unparse(d).split("(")[0] for d in node.decorator_list):
                n = node.end_lineno - node.lineno + 1
                if n > 25:
                    long.append(f"{f.name}:{node.name} ({n} lines)")
                ops = [o for o in ast.walk(node) if isinstance(o, ast.BinOp)
                       and isinstance(o.op, ast.Add | ast.Sub | ast.Mult | ast.Div | ast.FloorDiv)
                       and not (isinstance(o.op, ast.Add) and isinstance(o.left, ast.List))]
                if ops:
                    arithmetic.append(f"{f.name}:{node.name}: {[ast.unparse(o) for o in ops]}")
    assert long == [] and arithmetic == []


def test_one_error_root():
    import dihal.compare.baselines.base
    import dihal.errors
    import dihal.evaluate.judge
    import dihal.training
    from dihal.errors import DihalError

    errors = [obj for mod in (dihal.errors, dihal.compare.baselines.base, dihal.evaluate.judge, dihal.training)
              for _, obj in inspect.getmembers(mod, inspect.isclass)
              if issubclass(obj, Exception) and obj.__module__.startswith("dihal")]
    assert len(errors) >= 8
    assert [e.__name__ for e in errors if not issubclass(e, DihalError)] == []


def test_one_list_of_backbones_and_of_baselines():
    from dagster import StaticPartitionsDefinition

    from dihal.compare.baselines import VERSIONS
    from dihal.registry import BACKBONES, BASELINES
    from pipeline.definitions import defs

    groups = {a.group_names_by_key[k] for a in defs.assets if hasattr(a, "group_names_by_key")
              for k in a.keys}
    assert set(BACKBONES) <= groups
    base = next(a for a in defs.assets if hasattr(a, "keys")
                and any(k.to_user_string() == "baseline_smollm2" for k in a.keys))
    assert isinstance(base.partitions_def, StaticPartitionsDefinition)
    assert tuple(base.partitions_def.get_partition_keys()) == BASELINES
    assert tuple(VERSIONS) == BASELINES


# docs/configuration.md "Run config per asset": which dataclass each bullet documents
README_SECTIONS = {
    "corpus": "CorpusConfig", "sequences_<b>": "SequenceConfig", "hidden_states_<b>": "ExtractConfig",
    "geometry_<b>": "GeometryConfig", "layer_score_<b>": "LayerScoreConfig",
    "bridge_sweep_<b>": "BridgeProtocol", "eval_<b>": "EvalConfig", "baseline_<b>": "BaselineRunConfig",
    "sampler_steps_<b>": "SamplerCurveConfig", "budget_<b>": "BudgetConfig",
    "budget_generation_<b>": "BudgetGenerationConfig",
}


def test_readme_defaults_match_the_config_dataclasses():
    from dihal import config

    text = (ROOT / "docs" / "configuration.md").read_text()
    section = text[text.index("Run config per asset"):text.index("\n## ", text.index("Run config per asset"))]
    bullets = re.split(r"\n- ", section)[1:]
    checked = 0
    for bullet in bullets:
        asset = re.match(r"`([^`]+)`", bullet).group(1)
        cls = getattr(config, README_SECTIONS[asset])
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        for name, value in re.findall(r"`(\w+)` (-?[\d.]+(?:e-?\d+)?)\b", bullet):
            if name in defaults:
                assert float(value) == pytest.approx(float(defaults[name])), (asset, name, value)
                checked += 1
        for value in re.findall(r"default `(\w+)`", bullet):
            assert defaults["primary_norm"] == value
            checked += 1
    assert checked >= 25


def test_each_stage_is_named_once_and_the_rest_derives_from_it():
    """dihal.run.stages names every stage once: its artifact kind carries that stage, the code
    versions, profiles' stages, run configs and asset keys come from the same table."""
    from assets._stage import CODE_VERSIONS
    from assets.configs import RUN_CONFIGS
    from dihal import config
    from dihal.run.profiles import STAGE_CONFIGS
    from dihal.run.stages import STAGES, asset_key
    from storage import artifacts

    for name, s in STAGES.items():
        kind = getattr(artifacts, s.kind)
        assert kind.stage == name and CODE_VERSIONS[name] == s.code_version, name
        assert kind(ROOT, "b").asset == asset_key(name, "b") == f"{name}_b"
        if s.config:
            assert STAGE_CONFIGS[name] is getattr(config, s.config)
            assert RUN_CONFIGS[name].__name__ == s.run_config
            assert RUN_CONFIGS[name].dihal_class is getattr(config, s.config)
    assert set(STAGE_CONFIGS) == set(RUN_CONFIGS) == {n for n, s in STAGES.items() if s.config}
    with pytest.raises(KeyError, match="unknown stage"):
        asset_key("no_such_stage", "b")
    with pytest.raises(TypeError, match="not a stage of dihal.run.stages"):
        type("Stray", (artifacts.Artifact,), {"stage": "no_such_stage"})


def private_imports(roots: list[pathlib.Path]) -> list[str]:
    """`file:line module.name` for every private name (one leading underscore) imported from
    another module of the project: a name another module needs is public where it is owned."""
    ours = {r.name for r in roots}
    bad = []
    for root in roots:
        for f in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ours:
                    bad += [f"{f.relative_to(root.parent)}:{node.lineno} {node.module}.{a.name}"
                            for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")]
    return bad


def test_no_private_name_crosses_a_module_boundary():
    roots = [ROOT / top for top in ("dihal", "storage", "assets", "pipeline", "resources")]
    assert private_imports(roots) == []


def test_a_private_import_is_found(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("def _helper():\n    pass\n")
    (pkg / "b.py").write_text("from pkg.a import _helper\nfrom pkg.a import __doc__\n")
    assert private_imports([pkg]) == ["pkg/b.py:1 pkg.a._helper"]


def test_every_baseline_recipe_keeps_the_one_declared_contract():
    """The baseline contract is declared once (dihal.compare.baselines.base.Baseline): every
    recipe's class has each of its methods with the same parameters, temperature included."""
    import importlib

    from dihal.compare.baselines.base import Baseline
    from dihal.registry import BASELINE_SPECS

    wanted = {name: list(inspect.signature(fn).parameters) for name, fn in vars(Baseline).items()
              if inspect.isfunction(fn) and not name.startswith("_")}
    assert {"denoiser_parameters", "loss", "native_temperature", "sample"} <= set(wanted)
    for spec in BASELINE_SPECS.values():
        recipe = importlib.import_module(f"dihal.compare.baselines.{spec.module}").build.args[0]
        got = {name: list(inspect.signature(getattr(recipe, name)).parameters) for name in wanted}
        assert got == wanted, spec.module


TIERS = ("unit", "pipeline", "faults")  # tests/<tier>/test_*.py, each with its make target


def _is_test_module(name: str) -> bool:
    """A dotted module name of a test module (tests/**/test_*.py) or a conftest."""
    parts = name.split(".")
    return parts[0] == "tests" and parts[-1].startswith("test_") or parts[-1] == "conftest"


def test_module_imports(root: pathlib.Path) -> list[str]:
    """'<file>: <module>' for each import (at any depth, inside functions too) of a test module
    or a conftest by a file under root's tests/, scripts/ or benchmarks/. Their shared helpers
    live in tests/tiny.py, their fixtures in a conftest.py, which pytest loads itself."""
    bad = []
    for top in ("tests", "scripts", "benchmarks"):
        for f in sorted((root / top).rglob("*.py")):
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                else:
                    continue
                bad += [f"{f.relative_to(root)}: {n}" for n in names if _is_test_module(n)]
    return sorted(bad)


test_module_imports.__test__ = False  # a helper, not a test


def test_no_test_module_imports_another():
    assert test_module_imports(ROOT) == []


def test_an_import_of_a_test_module_is_found(tmp_path):
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "tests" / "tiny.py").write_text("HELPER = 1\n")
    (tmp_path / "tests" / "unit" / "test_a.py").write_text(
        "from tests.tiny import HELPER\n\ndef test_a():\n    from tests.unit.test_b import x\n")
    (tmp_path / "tests" / "unit" / "test_c.py").write_text(
        "from tests.faults.conftest import make_world\nfrom tests.unit import test_b\n")
    (tmp_path / "scripts" / "digests.py").write_text("import tests.pipeline.test_d as d\n")
    assert test_module_imports(tmp_path) == [
        "scripts/digests.py: tests.pipeline.test_d",
        "tests/unit/test_a.py: tests.unit.test_b",
        "tests/unit/test_c.py: tests.faults.conftest",
        "tests/unit/test_c.py: tests.unit.test_b"]


def misplaced_tests(root: pathlib.Path) -> list[str]:
    """Test modules outside the tiers' folders (tests/unit, tests/pipeline, tests/faults)."""
    return sorted(str(f.relative_to(root)) for f in (root / "tests").rglob("test_*.py")
                  if f.relative_to(root / "tests").parts[0] not in TIERS)


def test_every_test_module_is_in_a_tier():
    assert misplaced_tests(ROOT) == []
    assert all(any((ROOT / "tests" / t).glob("test_*.py")) for t in TIERS)


def test_each_tier_has_its_make_target_and_make_test_runs_them_all():
    recipes = dict(re.findall(r"^([\w-]+):.*\n\t(.*)$", (ROOT / "Makefile").read_text(), re.M))
    for tier in TIERS:
        assert recipes[f"test-{tier}"].endswith(f"python -m pytest $(XDIST) tests/{tier}"), tier
    # the README's and CI's command: the whole suite, no path or marker narrowing it
    assert recipes["test"].endswith("python -m pytest $(XDIST)")
    # and pytest's own testpaths reach every tier
    import tomllib

    paths = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"][
        "testpaths"]
    assert all(any(f"tests/{tier}".startswith(p.rstrip("/")) for p in paths) for tier in TIERS)


def test_a_test_module_outside_the_tiers_is_found(tmp_path):
    for rel in ("tests/test_top.py", "tests/unit/test_ok.py", "tests/other/test_x.py",
                "tests/tiny.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert misplaced_tests(tmp_path) == ["tests/other/test_x.py", "tests/test_top.py"]


def pipeline_work_in_unit_tests(folder: pathlib.Path) -> list[str]:
    """'<file>: <call>' for each Dagster materialisation, tiny world or run of the driver
    (`main` of pipeline.main) in the test modules under `folder`: the unit tier's tests are
    pure (those belong in tests/pipeline)."""
    worlds = {"materialize", "execute_in_process", "make_world", "copy_world", "tiny_definitions"}
    bad = []
    for f in sorted(folder.rglob("test_*.py")):
        tree = ast.parse(f.read_text())
        drivers = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                   for a in node.names if a.name == "pipeline.main" and a.asname}
        drivers |= {a.asname or a.name for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module == "pipeline"
                    for a in node.names if a.name == "main"}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            owner = getattr(fn.value, "id", "") if isinstance(fn, ast.Attribute) else ""
            if name in worlds or (name == "main" and owner in drivers):
                bad.append(f"{f.name}: {owner + '.' if owner else ''}{name}")
    return sorted(bad)


def test_unit_tests_materialise_nothing_and_run_no_driver():
    assert pipeline_work_in_unit_tests(ROOT / "tests" / "unit") == []


def test_a_materialisation_or_driver_run_in_a_unit_test_is_found(tmp_path):
    (tmp_path / "test_a.py").write_text(
        "import dagster as dg\nimport pipeline.main as driver\n\n"
        "def test_a(defs):\n    dg.materialize(defs, selection=['corpus'])\n"
        "    driver.main(['--stop-after', 'locate'])\n    driver.build_parser()\n")
    (tmp_path / "test_b.py").write_text(
        "from pipeline import main\nfrom tests.tiny import make_world\n\n"
        "def test_b(tmp_path, job):\n    make_world(tmp_path, tmp_path).materialize(['corpus'])\n"
        "    job.execute_in_process()\n    main.build_parser()\n")
    assert pipeline_work_in_unit_tests(tmp_path) == [
        "test_a.py: dg.materialize", "test_a.py: driver.main", "test_b.py: job.execute_in_process",
        "test_b.py: make_world", "test_b.py: materialize"]
