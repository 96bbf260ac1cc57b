"""The shape of the code base: a pure method package, storage that owns every file name, thin
assets, one error root, and README defaults that match the config dataclasses."""

import ast
import dataclasses
import inspect
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


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


def test_storage_imports_only_the_leaf_modules_of_dihal():
    allowed = {"dihal.results", "dihal.rows", "dihal.stages", "dihal.atomic", "dihal.errors"}
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
    # trainer's own format (dihal.bridge.checkpoint)
    own = {*(ROOT / "storage" / "artifacts").glob("*.py"), ROOT / "storage" / "states.py",
           ROOT / "dihal" / "bridge" / "checkpoint.py"}
    hits = []
    for top in ("dihal", "assets", "pipeline", "resources", "storage"):
        for f in (ROOT / top).rglob("*.py"):
            if f in own:
                continue
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    hits += [(str(f.relative_to(ROOT)), n) for n in names if n in node.value]
    assert hits == []


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
    import dihal.baselines.base
    import dihal.errors
    import dihal.judge
    import dihal.training
    from dihal.errors import DihalError

    errors = [obj for mod in (dihal.errors, dihal.baselines.base, dihal.judge, dihal.training)
              for _, obj in inspect.getmembers(mod, inspect.isclass)
              if issubclass(obj, Exception) and obj.__module__.startswith("dihal")]
    assert len(errors) >= 8
    assert [e.__name__ for e in errors if not issubclass(e, DihalError)] == []


def test_one_list_of_backbones_and_of_baselines():
    from dagster import StaticPartitionsDefinition

    from dihal.baselines import VERSIONS
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


# README "Run config per asset": which dataclass each bullet documents
README_SECTIONS = {
    "corpus": "CorpusConfig", "sequences_<b>": "SequenceConfig", "hidden_states_<b>": "ExtractConfig",
    "geometry_<b>": "GeometryConfig", "layer_score_<b>": "LayerScoreConfig",
    "bridge_sweep_<b>": "BridgeProtocol", "eval_<b>": "EvalConfig", "baseline_<b>": "BaselineRunConfig",
    "sampler_steps_<b>": "SamplerCurveConfig",
}


def test_readme_defaults_match_the_config_dataclasses():
    from dihal import config

    text = (ROOT / "README.md").read_text()
    section = text[text.index("Run config per asset"):text.index("### Real backbones")]
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
    """dihal.stages names every stage once: its artifact kind carries that stage, the code
    versions, profiles' stages, run configs and asset keys come from the same table."""
    from assets._stage import CODE_VERSIONS
    from assets.configs import RUN_CONFIGS
    from dihal import config
    from dihal.profiles import STAGE_CONFIGS
    from dihal.stages import STAGES, asset_key
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
    with pytest.raises(TypeError, match="not a stage of dihal.stages"):
        type("Stray", (artifacts.Artifact,), {"stage": "no_such_stage"})
