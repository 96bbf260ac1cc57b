"""Backbones declared without code: dihal.toml's [backbones] table (or $DIHAL_CONFIG) and the
driver's --backbone <id or folder>. The layer count comes from config.json; the asset
families, jobs and schedule appear in the code location; bad entries and unsupported
families are refused naming the fix."""

import json

import pytest

import pipeline.main as driver
from dihal import registry
from dihal.errors import (
    BackboneDeclarationError,
    BackboneNotFoundError,
    UnknownBackboneError,
    UnsupportedArchitectureError,
)
from tests.tiny import build_model


@pytest.fixture(scope="module")
def mistral_dir(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("tiny-mistral"), "mistral", n_layers=6)


def test_the_projects_file_declares_nothing_and_parses():
    import tomllib

    assert tomllib.loads(registry.PROJECT_CONFIG.read_text()) == {"backbones": {}}


def test_a_declared_folder_gets_its_layer_count_from_config_json(config, mistral_dir):
    config(f'[backbones.mine]\nmodel = "{mistral_dir}"\njudge = "smollm2"\n'
           'state_dtype = "float32"\n')
    spec = registry.get_spec("mine")
    assert (spec.n_layers, spec.source, spec.hf_id) == (6, "folder", str(mistral_dir.resolve()))
    assert (spec.judge, spec.state_dtype, spec.revision) == ("smollm2", "float32", None)
    assert set(registry.all_backbones()) == {*registry.BACKBONES, "mine"}


def test_a_code_location_declaring_a_folder_loads_without_torch(config, mistral_dir):
    """Every code server, run and command loads the code location, declaring each model again:
    a folder's layer count is read from its config.json as JSON, not through transformers'
    config classes, which import torch (about 4 s of CPU)."""
    import os
    import subprocess
    import sys

    from tests.tiny import ROOT

    path = config(f'[backbones.mine]\nmodel = "{mistral_dir}"\n')
    script = ("import sys, pipeline.definitions as d; from dihal import registry; "
              "print(registry.get_spec('mine').n_layers, sorted(d.defs.resolve_job_def("
              "'sweep_mine').partitions_def.get_partition_keys(), key=int)[-1], "
              "'torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=300,
                         env={**os.environ, registry.CONFIG_ENV: str(path)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["6", "5", "False", "False"]


def test_a_relative_folder_is_read_from_the_files_folder(config, mistral_dir, monkeypatch):
    path = config(f'[backbones.rel]\nmodel = "{mistral_dir.name}"\n')
    path.rename(mistral_dir.parent / "dihal.toml")
    monkeypatch.setenv(registry.CONFIG_ENV, str(mistral_dir.parent / "dihal.toml"))
    assert registry.get_spec("rel").hf_id == str(mistral_dir.resolve())


def test_declared_backbones_appear_in_the_code_location(config, mistral_dir):
    from pipeline.definitions import build_definitions

    config(f'[backbones.mine]\nmodel = "{mistral_dir}"\n')
    defs = build_definitions()
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"sequences_mine", "layer_score_mine", "bridge_mine", "report_mine"} <= keys
    assert "layer_score_smollm2" in keys  # the built-in ones stay
    jobs = {j.name for j in defs.jobs}
    assert {"locate_mine", "sweep_mine", "bridge_eval_mine", "baselines_mine",
            "compare_mine"} <= jobs
    sweep = defs.resolve_job_def("sweep_mine")
    assert sweep.partitions_def.get_partition_keys() == [str(i) for i in range(1, 6)]
    assert "reevaluate_mine_nightly" in {s.name for s in defs.schedules}


@pytest.mark.parametrize(("entry", "says"), [
    ('model = "{m}"\nstate_dtype = "bfloat16"', "state_dtype 'bfloat16': give one of float16"),
    ('model = "{m}"\nlayers = 4', "unknown field(s) layers; the fields are model, revision"),
    ('judge = "smollm2"', "`model` (a Hugging Face id"),
    ('model = "{m}"\njudge = "bad"', "judge 'bad' is the backbone itself"),
    ('model = "{m}"\nrevision = "main"', "a revision applies to a Hugging Face id"),
])
def test_bad_entries_are_refused_naming_the_fix(config, mistral_dir, entry, says):
    config("[backbones.bad]\n" + entry.format(m=mistral_dir) + "\n")
    with pytest.raises(BackboneDeclarationError, match="backbone 'bad' declared in .*dihal.toml"
                       ) as err:
        registry.get_spec("bad")
    assert says in str(err.value)


def test_bad_names_and_files_are_refused(config, mistral_dir):
    config(f'[backbones.llama]\nmodel = "{mistral_dir}"\n')
    assert "'llama' is a built-in backbone" in str(registry.declaration_problems()["llama"])
    config(f'[backbones.My-Model]\nmodel = "{mistral_dir}"\n')
    with pytest.raises(BackboneDeclarationError, match="lower-case letters"):
        registry.get_spec("My-Model")
    config("[backbones\n")
    assert set(registry.all_backbones()) == set(registry.BACKBONES)  # the built-ins stay
    with pytest.raises(UnknownBackboneError, match="not valid TOML"):
        registry.get_spec("mine")


def test_one_bad_entry_leaves_the_others_in_the_code_location(config, mistral_dir, tmp_path):
    """A missing folder in one entry: the other declared backbone and the built-in ones stay
    in the code location (a warning names the bad one); asking for it gives its own error."""
    from pipeline.definitions import build_definitions

    config(f'[backbones.mine]\nmodel = "{mistral_dir}"\n\n'
           f'[backbones.gone]\nmodel = "{tmp_path / "no-such-folder"}"\n')
    with pytest.warns(UserWarning, match="left out of the code location: backbone 'gone' "
                                         r"declared in .*dihal.toml: no such folder"):
        defs = build_definitions()
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"layer_score_mine", "layer_score_smollm2", "bridge_llama"} <= keys
    assert not any(k.endswith("_gone") for k in keys)
    with pytest.raises(BackboneNotFoundError, match=f"no such folder {tmp_path}/no-such-folder"):
        registry.get_spec("gone")


def test_a_missing_folder_given_to_the_driver_is_no_such_folder(config, tmp_path, capsys,
                                                                 calls):
    with pytest.raises(SystemExit) as exit_:
        driver.main(["--backbone", str(tmp_path / "abs" / "missing" / "folder")])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_.value.code == 2 and calls == []
    assert f"--backbone {tmp_path}/abs/missing/folder: no such folder" in err
    assert "hf download" not in err


@pytest.mark.parametrize("layers", [0, -3, 1, None])
def test_a_declared_model_with_too_few_layers_is_refused_naming_its_config(config, tmp_path,
                                                                            mistral_dir, layers):
    import shutil

    folder = tmp_path / "few"
    shutil.copytree(mistral_dir, folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": layers}))
    config(f'[backbones.few]\nmodel = "{folder}"\n')
    with pytest.raises(BackboneDeclarationError, match=rf"num_hidden_layers {layers!r}; .*at "
                                                       "least 2: fix the model's config.json"):
        registry.get_spec("few")


def test_a_malformed_local_config_json_is_named_not_downloaded(config, tmp_path, mistral_dir,
                                                                capsys, calls):
    import shutil

    folder = tmp_path / "broken"
    shutil.copytree(mistral_dir, folder)
    (folder / "config.json").write_text('{"model_type": "mistral", ')
    config(f'[backbones.broken]\nmodel = "{folder}"\n')
    with pytest.raises(BackboneDeclarationError) as err:
        registry.get_spec("broken")
    assert f"{folder}/config.json is not valid JSON" in str(err.value)
    assert "hf download" not in str(err.value)
    config("[backbones]\n")
    with pytest.raises(SystemExit):  # the driver given the folder itself says the same
        driver.main(["--backbone", str(folder)])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "config.json is not valid JSON" in last and "hf download" not in last


def test_an_unsupported_family_is_refused_naming_the_supported(config, tmp_path):
    folder = build_model(tmp_path / "gpt2", "gpt2")
    config(f'[backbones.old]\nmodel = "{folder}"\n')
    with pytest.raises(UnsupportedArchitectureError,
                       match=r"model_type 'gpt2' is not supported \(GPT-2 .*Mistral \(mistral\)"):
        registry.get_spec("old")
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "model_type": "made_up_lm"}))
    registry._declared.cache_clear()
    with pytest.raises(UnsupportedArchitectureError, match="'made_up_lm' is not supported"):
        registry.get_spec("old")


def test_a_hub_id_missing_offline_says_how_to_get_its_config(config, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config('[backbones.far]\nmodel = "nobody-here/no-such-model-xyz"\n')
    with pytest.raises(BackboneNotFoundError, match="hf download nobody-here/no-such-model-xyz "
                                                    "--include config.json"):
        registry.get_spec("far")


def test_the_driver_declares_a_folder_given_as_backbone(config, mistral_dir, monkeypatch):
    config("[backbones]\n")
    name, why = registry.declare_model(str(mistral_dir))
    assert name == registry.name_for(str(mistral_dir)) == mistral_dir.name.lower().replace("-", "_")
    assert why == f"--backbone {mistral_dir} runs as backbone {name} (the folder's name)"
    assert json.loads(registry.os.environ[registry.DECLARED_ENV]) == [
        {"name": name, "model": str(mistral_dir.resolve())}]
    assert registry.get_spec(name).n_layers == 6
    assert registry.declare_model("smollm2") == ("smollm2", None)
    assert registry.name_for("HuggingFaceTB/SmolLM2-360M") == "smollm2_360m"


def test_the_driver_checks_layers_against_the_declared_folder(config, mistral_dir, capsys,
                                                               monkeypatch):
    config("[backbones]\n")
    monkeypatch.setattr(driver.dg.DagsterInstance, "get", staticmethod(lambda: 1 / 0))
    with pytest.raises(SystemExit) as exit_:
        driver.main(["--backbone", str(mistral_dir), "--layers", "6"])
    assert exit_.value.code == 2
    name = registry.name_for(str(mistral_dir))
    assert (f"--layers 6: 6 out of range: {name} has 6 layers, the candidate layers are 1..5"
            in capsys.readouterr().err)


def test_the_driver_refuses_an_unsupported_folder_before_any_work(config, tmp_path, capsys,
                                                                  monkeypatch):
    config("[backbones]\n")
    monkeypatch.setattr(driver.dg.DagsterInstance, "get", staticmethod(lambda: 1 / 0))
    folder = build_model(tmp_path / "neox", "gpt_neox")
    with pytest.raises(SystemExit) as exit_:
        driver.main(["--backbone", str(folder)])
    assert exit_.value.code == 2
    assert "model_type 'gpt_neox' is not supported" in capsys.readouterr().err


def test_unknown_name_lists_declared_ones_too(config, mistral_dir):
    config(f'[backbones.mine]\nmodel = "{mistral_dir}"\n')
    with pytest.raises(UnknownBackboneError, match=r"known backbones are \[.*'mine'.*\]"):
        registry.get_spec("nope")


def test_capacity_is_computed_for_a_declared_backbone(config, mistral_dir):
    from dihal.run.capacity import backbone_config, capacity_rows, parameter_count_on_meta

    config(f'[backbones.mine]\nmodel = "{mistral_dir}"\n')
    cfg, disk_bytes = backbone_config("mine")
    assert (cfg["model_type"], cfg["num_hidden_layers"], disk_bytes) == ("mistral", 6, 2)
    from transformers import AutoModelForCausalLM

    real = AutoModelForCausalLM.from_pretrained(str(mistral_dir))
    n = sum(p.numel() for p in real.parameters())
    assert parameter_count_on_meta(cfg).n_params == n
    rows = capacity_rows(cfg, disk_bytes)
    assert rows["disk: model weights"] == pytest.approx(2 * n / 2**30)


def test_a_folder_given_to_the_driver_is_refused_where_a_daemon_already_runs(
        config, mistral_dir, capsys, monkeypatch, tmp_path):
    """A running daemon's code location never saw the --backbone declaration: refused before
    any run is submitted, naming dihal.toml."""
    import pipeline.daemon
    import pipeline.launch

    config("[backbones]\n")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    monkeypatch.setattr(pipeline.daemon, "open_instance", lambda: "instance")
    monkeypatch.setattr(pipeline.daemon, "daemon_alive", lambda instance: instance == "instance")
    monkeypatch.setattr(pipeline.launch, "launcher", lambda *a: 1 / 0)
    monkeypatch.setattr(driver, "_preflight", lambda args, layers: None)  # not its subject
    with pytest.raises(SystemExit) as exit_:
        driver.main(["--backbone", str(mistral_dir), "--layers", "1,2,3",
                     "--skip-bridgeability"])
    assert exit_.value.code == 2
    assert "a Dagster daemon is already running" in capsys.readouterr().err


def test_a_declared_backbone_can_judge_another(config, mistral_dir, tmp_path):
    from dihal.evaluate.judge import resolve_judge
    from dihal.identity import folder_digest

    config(f'[backbones.mine]\nmodel = "{mistral_dir}"\n')
    w = resolve_judge("mine", cache_dir=tmp_path)
    assert w.path == mistral_dir.resolve()
    assert w.revision == f"local:{mistral_dir.resolve()}@sha256={folder_digest(mistral_dir)[:16]}"


@pytest.fixture()
def drive(config, monkeypatch, tmp_path, capsys):
    """The driver up to its chain, nothing launched: every check, the name it runs under and
    what it prints. run(*argv) -> (exit status or None, the args it would drive, stdout,
    stderr). The artifact root is the test's own."""
    import pipeline.daemon
    import pipeline.launch
    from storage import ArtifactLayout

    config("[backbones]\n")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(pipeline.daemon, "open_instance", lambda: "instance")
    monkeypatch.setattr(pipeline.daemon, "daemon_alive", lambda instance: False)
    monkeypatch.setattr(driver, "_preflight", lambda args, layers: None)  # not its subject
    monkeypatch.setattr(driver, "artifact_layout", lambda: ArtifactLayout(tmp_path / "root"),
                        raising=False)
    driven = []
    monkeypatch.setattr(driver, "_drive", lambda instance, args, *rest: driven.append(args))

    def run(*argv):
        driven.clear()
        try:
            driver.main([*argv, "--layers", "1,2", "--skip-bridgeability"])
            code = None
        except SystemExit as exc:
            code = exc.code
        out = capsys.readouterr()
        return code, (driven[0] if driven else None), out.out, out.err

    return run


@pytest.mark.parametrize("folder", ["SmolLM2", "gemma3", "llama"])
def test_a_folder_named_like_a_built_in_backbone_runs_itself_under_its_own_name(
        drive, tmp_path, folder):
    """Before: `--backbone /models/SmolLM2` (a 3-layer model) ran the embedded 30-layer
    SmolLM2-135M, a folder named gemma3 the built-in Gemma 3 270M, one named llama failed on
    Llama-3.1-8B's weights. Now the name is made unique (a hash of the folder's path) and the
    driver says which name it runs under and why."""
    model = build_model(tmp_path / folder, "llama", n_layers=3)
    taken = folder.lower()
    code, args, out, _ = drive("--backbone", str(model))
    assert code is None and args.backbone != taken
    assert args.backbone == registry.suffixed_name(taken, str(model.resolve()))
    spec = registry.get_spec(args.backbone)
    assert (spec.hf_id, spec.n_layers, spec.source) == (str(model.resolve()), 3, "folder")
    built_in = registry.BACKBONES[taken]
    assert (f"[dihal] --backbone {model} runs as backbone {args.backbone}, not {taken}: {taken} "
            f"is the built-in {built_in.hf_id} ({built_in.n_layers} layers). The suffix is a "
            "hash of the folder's path: this folder keeps this name.") in out
    again = drive("--backbone", str(model))[1]  # the same folder: the same name, every time
    assert again.backbone == args.backbone


def test_two_folders_of_one_name_never_share_a_name_or_an_artifact_folder(drive, tmp_path,
                                                                          monkeypatch):
    """/a/mine then /b/mine: in one process (the second declared while the first is), and in
    two driver runs one after another (the artifact root records which model made `mine`),
    the second runs under mine_<hash>; the first keeps `mine`. A folder that dihal.toml
    declares runs under the name declared for it."""
    a = build_model(tmp_path / "a" / "mine", "llama", n_layers=3)
    b = build_model(tmp_path / "b" / "mine", "llama", n_layers=4)
    # two driver runs, each a new process: $DIHAL_BACKBONE_MODELS starts empty
    code, args, said, _ = drive("--backbone", str(a))
    assert (code, args.backbone) == (None, "mine")
    monkeypatch.setenv(registry.DECLARED_ENV, "[]")
    code, args, out, _ = drive("--backbone", str(b))
    assert code is None and args.backbone != "mine"
    assert f"[dihal] --backbone {a} runs as backbone mine (the folder's name)" in said
    second = registry.suffixed_name("mine", str(b.resolve()))
    assert args.backbone == second and registry.get_spec(second).n_layers == 4
    assert (f"runs as backbone {second}, not mine: the artifacts of backbone mine were made "
            f"from {a.resolve()}") in out
    monkeypatch.setenv(registry.DECLARED_ENV, "[]")
    assert drive("--backbone", str(a))[1].backbone == "mine"
    from storage import ArtifactLayout

    root = ArtifactLayout(tmp_path / "root")  # each artifact folder records its own model
    assert (root.recorded_model("mine"), root.recorded_model(second)) == (
        str(a.resolve()), str(b.resolve()))
    # one process: the second declared while the first is
    monkeypatch.setenv(registry.DECLARED_ENV, "[]")
    assert registry.declare_model(str(a))[0] == "mine"
    name, why = registry.declare_model(str(b))
    assert name == second and f"not mine: mine is declared for {a.resolve()}" in why
    assert (registry.get_spec("mine").n_layers, registry.get_spec(second).n_layers) == (3, 4)
    (tmp_path / "dihal.toml").write_text(f'[backbones.mine]\nmodel = "{b}"\n')
    monkeypatch.setenv(registry.DECLARED_ENV, "[]")
    name, why = registry.declare_model(str(b))  # not declared twice: dihal.toml's entry is it
    assert name == "mine" and "declared for it in" in why
    assert registry.declaration_problems() == {} and registry.get_spec("mine").n_layers == 4


def test_a_dihal_toml_entry_shadowing_the_built_in_asked_for_is_refused_by_the_driver(
        drive, mistral_dir, tmp_path):
    """`[backbones.smollm2]` in dihal.toml and `--backbone smollm2`: before, the code location
    warned of the entry and the driver ran the built-in SmolLM2 without a word. Now the
    driver refuses before any work, naming the entry and the fix."""
    (tmp_path / "dihal.toml").write_text(f'[backbones.smollm2]\nmodel = "{mistral_dir}"\n')
    code, args, _, err = drive("--backbone", "smollm2")
    assert (code, args) == (2, None)
    last = err.strip().splitlines()[-1]
    assert (f"--backbone smollm2: backbone 'smollm2' declared in {tmp_path / 'dihal.toml'}: "
            "'smollm2' is a built-in backbone") in last
    assert ("Nothing is run: smollm2 would be the built-in HuggingFaceTB/SmolLM2-135M-Instruct "
            "(30 layers), not that entry's model. Rename the entry ([backbones.my_smollm2]) and "
            "give --backbone my_smollm2") in last
    assert drive("--backbone", "llama")[0] is None  # another built-in name: no entry, it runs
