"""One preset, resolved by one function for every door: the name a door gives, else
$DIHAL_PROFILE, else the instance's choice ($DAGSTER_HOME/dihal-preset), else the project's
(dihal.toml's `preset`), else cpu; a bad choice is refused naming where it came from."""

import pytest

from dihal.run import profiles
from dihal.run.profiles import resolve_preset


@pytest.fixture()
def place(tmp_path, monkeypatch):
    """An instance folder and a project file, neither choosing anything yet."""
    monkeypatch.delenv("DIHAL_PROFILE", raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "dihal.toml").write_text("[backbones]\n")
    monkeypatch.setenv("DIHAL_CONFIG", str(tmp_path / "dihal.toml"))
    return tmp_path


def test_the_preset_is_chosen_once_for_the_project_or_the_instance(place, monkeypatch):
    from pipeline.preset import choose

    assert resolve_preset().name == "cpu"
    (place / "my.json").write_text('{"geometry": {"n_tokens": 4096}}')
    (place / "dihal.toml").write_text('preset = "my.json"\n\n[backbones]\n')
    project = resolve_preset()
    assert project.name == str(place / "my.json")
    assert project.label == f"my.json@{profiles.content_digest(project.stages)}"
    assert project.stages == {"geometry": {"n_tokens": 4096}}
    (place / "my.json").write_text('{"geometry": {"n_tokens": 99}}')
    with pytest.raises(ValueError, match=r"preset .*my.json: geometry: GeometryConfig.n_anchors "
                       r"\(2048\) must be <= n_tokens \(99\)"):
        resolve_preset()
    (place / "my.json").write_text('{"geometry": {"n_tokens": 4096}}')
    assert project.source == str(place / "dihal.toml")
    written = choose("tiny")  # the instance's choice wins over the project's
    assert written == place / "home" / "dihal-preset"
    assert resolve_preset().name == "tiny" and resolve_preset().source == str(written)
    monkeypatch.setenv("DIHAL_PROFILE", "gpu")  # a process's own variable wins over both
    assert resolve_preset().name == "gpu"
    assert resolve_preset("cpu").name == "cpu"  # and a door that names one (--profile) wins


def test_the_tiny_preset_is_public_and_every_stage_config_accepts_it():
    tiny = resolve_preset("tiny")
    assert tiny.label == "tiny" and tiny.stages["bridge_sweep"]["d_model"] == 32
    assert set(tiny.stages) <= set(profiles.STAGE_CONFIGS)


@pytest.mark.parametrize(("toml", "says"), [
    ('preset = "tpu"\n', "unknown preset 'tpu' (from {toml}): give one of cpu, gpu, gpu-smollm2, "
                         "study, tiny or a .json file"),
    ('preset = 3\n', "{toml}: `preset` must be a preset name"),
    ('preset = "gone.json"\n', "preset file {dir}/gone.json (from {toml}): [Errno 2]"),
])
def test_a_bad_choice_names_where_it_came_from(place, toml, says):
    (place / "dihal.toml").write_text(toml)
    with pytest.raises(ValueError) as exc:
        resolve_preset()
    assert says.format(toml=place / "dihal.toml", dir=place) in str(exc.value)


def test_the_code_locations_defaults_and_preset_resource_follow_the_choice(place, tmp_path):
    """The code location (what the web UI's launchpad, `dagster asset materialize`, `dg` and
    the schedules run with) resolves the instance's choice when it loads."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from pipeline.preset import choose

    choose("tiny")
    root = Path(__file__).resolve().parents[2]
    probe = ("from assets.configs import GeometryRunConfig, PRESET; "
             "from pipeline.definitions import default_resources as d; import json; "
             "print(json.dumps([PRESET.name, GeometryRunConfig().n_tokens, d()['preset'].name]))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(root)}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == ["tiny", 64, "tiny"]


def test_two_json_presets_of_one_file_name_are_labelled_by_their_content(tmp_path):
    """The label enters every fingerprint and manifest: `a/p.json` and `b/p.json` with other
    seeds are two presets (before, both were `p.json`, and one driver's sweep trained on the
    other's dump); the same content in another folder, reformatted or with its keys in another
    order, is the same preset, so its artifacts are reused."""
    for folder, text in (("a", '{"sequences": {"seed": 1}}'), ("b", '{"sequences": {"seed": 2}}'),
                         ("c", '{ "sequences" : {\n  "seed": 1 } }\n')):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "p.json").write_text(text)
    a, b, c = (resolve_preset(str(tmp_path / f / "p.json")) for f in "abc")
    assert a.label != b.label
    assert a.label.startswith("p.json@") and b.label.startswith("p.json@")
    assert a.label == c.label and a.name != c.name
    assert len(a.label) == len("p.json@") + profiles.LABEL_DIGEST_CHARS
    assert resolve_preset("tiny").label == "tiny"  # a built-in preset keeps its name


@pytest.mark.parametrize("field, says", [
    ("steps", "has no fields ['steps'] (did you mean sampler_steps for steps?)"),  # a word of it
    ("epoch", "has no fields ['epoch'] (did you mean epochs for epoch?)"),  # a spelling
    ("zzz", "has no fields ['zzz']"),  # nothing near: no guess
])
def test_a_presets_unknown_field_is_refused_with_the_field_it_may_mean(tmp_path, field, says):
    import json

    path = tmp_path / "p.json"
    path.write_text(json.dumps({"bridge_sweep": {field: 8}}))
    with pytest.raises(ValueError) as err:
        resolve_preset(str(path))
    assert str(err.value).endswith(says), err.value
