"""Capacity planning: the disk, host memory and GPU memory one backbone's run needs.

Nothing here allocates a model. Parameter counts come from the real transformers (and dihal)
modules built on PyTorch's meta device, so every count is exact; byte figures are counts times
bytes per element, also exact. Activation figures are estimates and are named so.

The storage design this models (the pipeline after the redesign):
- The hidden-state store keeps all N states hs[0..N-1] of the held-out split only:
  N x n_val x seq_len x d x 2 bytes (float16), plus the int32 input ids. No training states.
- The bridge of candidate layer l builds its training pairs (c = hs[0], h_l) in host memory,
  running the backbone's first l layers over the training sequences, as float32:
  2 x n_train x seq_len x d x 4 bytes. So disk does not grow as layers x training tokens.
- Per swept layer on disk: the bridge's weights (fp32 safetensors) plus small tables. Its 2
  training checkpoints (weights + AdamW's two moments = 3x the weights each) exist only while
  it trains: the finished artifact drops them (storage.WorkArtifact.write).
- Model weights on disk: bf16 safetensors (2 bytes/param); smollm2 ships as a GGUF that is
  dequantised into a float32 safetensors cache (4 bytes/param): the registry's
  BackboneSpec.disk_bytes_per_param.

This is the one model of these sizes: the pre-flight (dihal.run.preflight) sizes a run with the same
functions. Importing it brings no torch (the pre-flight is imported before any model is); the
functions that build a model on the meta device import it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from dihal import heap
from dihal.compare.baselines import build_baseline
from dihal.config import BridgeProtocol
from dihal.errors import DihalError, UnknownBackboneError
from dihal.registry import BACKBONES, BASELINES, get_spec, read_model_config
from dihal.run.profiles import PROFILES

if TYPE_CHECKING:
    import torch

# The published config.json files of the built-in backbones (BackboneSpec.config_file)
MODEL_CONFIGS = Path(__file__).resolve().parents[2] / "data" / "model_configs"
GIB = 2**30
# Two device layouts. A "24 GB" card shows 22.5-24 GiB; capping the weights at 22 GiB keeps
# headroom, and the balanced map puts at most ~8.4 GiB of an 8B model on each card, so at least
# ~14 GiB per card remain for the CUDA context (~1 GiB) and activations (the dump's: ~6.1 GiB
# at batch 64, dump_phase_bytes, on the card of the embedding, where the states are gathered). The 141 GB one is an H200 (it shows about 140 GiB); at 8B the
# difference does not matter: the weights take 15 GiB.
MAX_MEMORY = {
    "1x141GB": {0: "141GiB", "cpu": "128GiB"},
    "2x24GB": {0: "22GiB", 1: "22GiB", "cpu": "128GiB"},
}
TABLE_BYTES_PER_LAYER = 1_000_000  # estimate: a swept layer's curves, scores and state.json
SAMPLE_BYTES_PER_TOKEN = 8  # estimate: decoded text in samples.jsonl


class NotOnMetaError(DihalError):
    """A model meant to exist only on the meta device has a parameter on a real device."""


GPU = PROFILES["gpu"]


@dataclass(frozen=True)
class Workload:
    """One backbone's run at the GPU profile (every default is that profile)."""

    seq_len: int = GPU["sequences"].get("seq_len", 128)
    n_train: int = GPU["sequences"]["n_train"]  # 8192: 1,048,576 training tokens
    n_val: int = GPU["sequences"]["n_val"]  # 576: 73,728 held-out tokens (geometry samples 16,384)
    state_bytes: int = 2  # the store's float16
    extract_batch: int = GPU["hidden_states"]["batch_size"]  # sequences per forward (dump, pairs)
    # The profile's denoiser (d_model 272 x 4 blocks); only its in/out projections scale with the
    # backbone's d: 5.48M parameters at d = 576.
    bridge: BridgeProtocol = field(default_factory=lambda: BridgeProtocol(**GPU["bridge_sweep"]))
    checkpoints: int = 2  # BridgeProtocol.train_config keeps the newest 2 (bridge and baselines)
    n_eval: int = GPU["eval"]["n_samples"]  # 544 samples of 128 tokens per evaluated system
    n_baselines: int = len(BASELINES)  # each trained on the same n_train x seq_len tokens

    @property
    def train_tokens(self) -> int:
        return self.n_train * self.seq_len

    @property
    def val_tokens(self) -> int:
        return self.n_val * self.seq_len


@dataclass(frozen=True)
class MetaCount:
    n_params: int  # exact, from the model built on the meta device (tied weights counted once)
    weight_bytes_bf16: int  # exact: n_params x 2


@dataclass(frozen=True)
class DevicePlan:
    """Where a bf16 model's modules go under one max_memory: decoder layers and GiB per device."""

    max_memory: dict
    layers: dict  # device -> number of decoder layers placed there
    gib: dict  # device -> GiB of bf16 weights placed there
    spills: bool  # anything on "cpu" or "disk"


def stored_configs() -> tuple[str, ...]:
    """The built-in backbones whose published config.json is stored (BackboneSpec.config_file)."""
    return tuple(name for name, spec in BACKBONES.items() if spec.config_file is not None)


def load_model_config(backbone: str) -> dict:
    """The stored published config.json of a built-in backbone (its `_source` key kept)."""
    spec = BACKBONES.get(backbone)
    if spec is None or spec.config_file is None:
        raise UnknownBackboneError(
            f"no stored config.json for backbone {backbone!r}: {MODEL_CONFIGS} holds those of "
            f"{', '.join(stored_configs())}; backbone_config({backbone!r}) reads the model's "
            "own config.json instead")
    return json.loads((MODEL_CONFIGS / spec.config_file).read_text())


def backbone_config(name: str) -> tuple[dict, int]:
    """(config dict, disk bytes per parameter) of any backbone: the stored published config of
    a built-in one that has one (BackboneSpec.config_file), else the model's own config.json
    (a built-in one's Hugging Face id, or a model declared in dihal.toml or by --backbone),
    read without loading weights; its weights counted at BackboneSpec.disk_bytes_per_param
    (a declared model: bf16 safetensors, 2 bytes per parameter)."""
    spec = BACKBONES.get(name) or get_spec(name)  # UnknownBackboneError names the known ones
    if spec.config_file is not None:
        return load_model_config(name), spec.disk_bytes_per_param
    cfg = read_model_config(spec.hf_id, spec.revision, what=f"backbone {name!r}")
    return cfg.to_dict(), spec.disk_bytes_per_param


def _hf_config(config_dict: dict):
    from transformers import AutoConfig

    values = {k: v for k, v in config_dict.items() if not k.startswith("_")}
    return AutoConfig.for_model(values.pop("model_type"), **values)


def _check_on_meta(model: torch.nn.Module, what: str) -> None:
    real = [n for n, p in model.named_parameters() if p.device.type != "meta"]
    if real:
        raise NotOnMetaError(f"{what}: {len(real)} parameters are on a real device (first: "
                             f"{real[0]}); build it inside accelerate.init_empty_weights()")


@lru_cache(maxsize=8)
def _meta_model(config_json: str) -> torch.nn.Module:
    heap.import_model_libraries()
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    config = _hf_config(json.loads(config_json))
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.tie_weights()  # from_config under init_empty_weights leaves tied weights untied
    _check_on_meta(model, config.model_type)
    return model


def meta_model(config_dict: dict) -> torch.nn.Module:
    """The causal LM of `config_dict` in bf16 with every tensor on the meta device (cached)."""
    return _meta_model(json.dumps(config_dict, sort_keys=True))


def parameter_count_on_meta(config_dict: dict) -> MetaCount:
    """Exact parameter count of the model, and its weight bytes in bf16."""
    model = meta_model(config_dict)
    _check_on_meta(model, config_dict["model_type"])
    n = sum(p.numel() for p in model.parameters())
    return MetaCount(n_params=n, weight_bytes_bf16=2 * n)


def _device_of(module: str, device_map: dict):
    """The device of `module` under accelerate's map (the longest prefix that names it)."""
    keys = [k for k in device_map if k == "" or module == k or module.startswith(k + ".")]
    return device_map[max(keys, key=len)]


def device_maps(config_dict: dict) -> dict[str, DevicePlan]:
    """Where `device_map="auto"` puts the bf16 model under each of MAX_MEMORY's layouts.

    As transformers does for "auto": accelerate's get_balanced_memory spreads the weights evenly
    over the GPUs, then infer_auto_device_map places whole decoder layers (never split: the
    model's _no_split_modules). Placement only: activations need the headroom left per card.
    """
    import torch
    from accelerate.utils import compute_module_sizes, get_balanced_memory, infer_auto_device_map

    model = meta_model(config_dict)
    no_split = list(model._no_split_modules)
    sizes = compute_module_sizes(model, dtype=torch.bfloat16)
    decoder_layers = model.get_decoder().layers
    prefix = next(name for name, mod in model.named_modules() if mod is decoder_layers)
    layer_names = [f"{prefix}.{i}" for i in range(len(decoder_layers))]
    quiet = logging.getLogger("accelerate.utils.modeling")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "Device 0 is not available": planning needs no GPU
    try:
        plans = {}
        for name, max_memory in MAX_MEMORY.items():
            balanced = get_balanced_memory(model, dict(max_memory), no_split, torch.bfloat16)
            dmap = infer_auto_device_map(model, max_memory=balanced,
                                         no_split_module_classes=no_split, dtype=torch.bfloat16)
            devices = list(max_memory) + ["disk"]
            layers = {d: sum(_device_of(n, dmap) == d for n in layer_names) for d in devices}
            gib = {d: sum(sizes[k] for k, v in dmap.items() if v == d) / GIB for d in devices}
            plans[name] = DevicePlan(max_memory, layers, gib, spills=gib["cpu"] + gib["disk"] > 0)
    finally:
        quiet.setLevel(level)
    return plans


@lru_cache(maxsize=8)
def denoiser_parameters(d_in: int, bridge: BridgeProtocol, seq_len: int) -> int:
    """Exact parameter count of the bridge denoiser over states of size d_in (built on meta)."""
    import torch

    from dihal.bridge.denoiser import CausalDenoiser, denoiser_config_of

    with torch.device("meta"):
        net = CausalDenoiser(denoiser_config_of(bridge, d_in, seq_len))
    _check_on_meta(net, "bridge denoiser")
    return net.param_count()


@lru_cache(maxsize=16)
def baseline_parameters(name: str, vocab: int, d: int, target: int, seq_len: int,
                        bos_id: int) -> tuple[int, int]:
    """(saved, trained) parameter counts of a baseline built on meta at the bridge's budget."""
    import torch

    with torch.device("meta"):
        model = build_baseline(name, embeddings=torch.empty(vocab, d), seq_len=seq_len,
                               target_params=target, seed=0, bos_id=bos_id, eos_id=bos_id)
    _check_on_meta(model, name)
    saved = sum(t.numel() for t in model.state_dict().values())
    return saved, sum(p.numel() for p in model.parameters() if p.requires_grad)


def training_disk_bytes(saved: int, trained: int, checkpoints: int) -> int:
    """fp32 weights on disk + `checkpoints` x (weights + AdamW's two moments)."""
    return 4 * saved + checkpoints * 4 * (saved + 2 * trained)


def state_store_bytes(n_layers: int, tokens: int, hidden: int, state_bytes: int) -> int:
    """Exact: the hidden-state store of `tokens` tokens: `n_layers` states of each, of
    `state_bytes` per value (float16: 2, float32: 4), and their int32 input ids."""
    return n_layers * tokens * hidden * state_bytes + tokens * 4


def pair_bytes(tokens: int, hidden: int) -> int:
    """Exact: one bridge's training pairs (c, h_l) over `tokens` training tokens in host
    memory as float32."""
    return 2 * tokens * hidden * 4


def forward_activation_bytes(hidden: int, intermediate: int, kept: int, w: Workload,
                             dtype_bytes: int = 2) -> int:
    """Estimate of a forward pass over one batch: `kept` hidden states per token held across
    blocks (the output_hidden_states tuple, or states a hook took), a block's residual stream
    and normed input, one MLP's three intermediate tensors (gate, up, their product) and
    RMSNorm's two float32 temporaries. Not counted: attention scores (SDPA does not
    materialise them on GPU) and the KV cache (DiHAL's forward passes run without one)."""
    per_token = (kept + 2) * hidden * dtype_bytes + 3 * intermediate * dtype_bytes + 2 * hidden * 4
    return w.extract_batch * w.seq_len * per_token


# torch.isfinite is composite on every device: (x == x) * (x.abs() != inf) holds a bool, the
# float32 abs(), a bool and their product at once: 7 bytes per float32 element
ISFINITE_BYTES = 1 + 4 + 1 + 1


def dump_phase_bytes(n_layers: int, hidden: int, intermediate: int, vocab: int, w: Workload,
                     dtype_bytes: int = 2, store_bytes: int | None = None,
                     reference: bool = True) -> dict[str, int]:
    """Device bytes beyond the weights that one batch of the dump holds at each phase of
    dihal.locate.extract.extract_hidden_states, with backbone states of `dtype_bytes` (2: bf16 on GPU,
    4: float32 on CPU) stored as `store_bytes` (default: the Workload's). All N states of the
    batch are held at once, in the backbone's dtype and in float32, so the peak is after the
    forward pass, not in it. (The forward-only estimate gave 17.4 GiB at Llama-3.1-8B, where
    about 24 GiB was measured. The overflow check then ran torch.isfinite and abs() over all N
    layers at once, 11 bytes per state element in all, 26.0 GiB by this count; it now checks
    one layer at a time: 21.0 GiB.)

    - forward: the decoder's tuple of N+1 states (the newest one the residual stream) and one
      block's temporaries (forward_activation_bytes: an estimate)
    - stack: the tuple and its stacked copy of N states (2N+1)
    - reference: the stacked states, the final-normed states, and one sequence's logits with
      their float32 copy and log-softmax (held-out split only)
    - float: the stacked states and their float32 copy (none where they are float32)
    - check: the float32 states, one layer's isfinite temporaries (ISFINITE_BYTES)
    - store: the float32 states and their copy in the storage dtype, before it goes to the host
    With `reference` (the held-out split: every batch of the GPU profile's dump) the
    final-normed states stay alive through every phase after the forward pass. Exact element
    counts: tests/unit/test_capacity.py measures the same peak on the CPU allocator; the CUDA context
    and the allocator's rounding are not counted.
    """
    sb = w.state_bytes if store_bytes is None else store_bytes
    one = w.extract_batch * w.seq_len * hidden  # one state of the batch (B, T, d)
    states = n_layers * one
    final = one * dtype_bytes if reference else 0
    f32 = states * 4
    logits = w.seq_len * vocab * (dtype_bytes + 4 + 4) if reference else 0
    return {
        "forward": forward_activation_bytes(hidden, intermediate, n_layers, w, dtype_bytes),
        "stack": (2 * n_layers + 1) * one * dtype_bytes,
        "reference": states * dtype_bytes + final + logits,
        "float": (states * dtype_bytes if dtype_bytes < 4 else 0) + f32 + final,
        "check": f32 + one * ISFINITE_BYTES + final,
        "store": f32 + (states * sb if sb < 4 else 0) + final,
    }


def pair_phase_bytes(hidden: int, intermediate: int, w: Workload,
                     dtype_bytes: int = 2, store_bytes: int | None = None) -> dict[str, int]:
    """Device bytes beyond the weights of one batch of dihal.locate.extract.layer_pairs, phase by phase
    (the same at every layer): its forward pass (hs[0], kept by a hook, and the state being
    built; estimate); then (c, h) in the backbone's dtype,
    their float32 copies (none where they are float32) and the stack of the two; one state's
    isfinite temporaries; one state's copy in the storage dtype."""
    sb = w.state_bytes if store_bytes is None else store_bytes
    one = w.extract_batch * w.seq_len * hidden
    pair = 2 * one
    floats = pair * 4 if dtype_bytes < 4 else 0
    return {
        "forward": forward_activation_bytes(hidden, intermediate, 2, w, dtype_bytes),
        "stack": pair * dtype_bytes + floats + pair * 4,
        "check": pair * dtype_bytes + pair * 4 + one * ISFINITE_BYTES,
        "store": pair * dtype_bytes + pair * 4 + one * (sb if sb < 4 else 0),
    }


def dump_peak_bytes(config_dict: dict, w: Workload | None = None, dtype_bytes: int = 2,
                    store_bytes: int | None = None) -> int:
    """Peak device memory of the dump for any model dims: the weights in the backbone's dtype
    plus the largest phase of dump_phase_bytes. Llama-3.1-8B at the GPU profile (bf16, batch
    64 x 128): 14.96 GiB of weights + 6.06 GiB = 21.02 GiB."""
    w = w or Workload()
    count = parameter_count_on_meta(config_dict)
    phases = dump_phase_bytes(config_dict["num_hidden_layers"], config_dict["hidden_size"],
                              config_dict["intermediate_size"], config_dict["vocab_size"], w,
                              dtype_bytes, store_bytes)
    return count.n_params * dtype_bytes + max(phases.values())


def bridge_training_bytes(hidden: int, n_params: int, w: Workload) -> int:
    """Denoiser weights + gradients + AdamW moments (16 bytes/param, exact), a batch of pairs
    (exact) and the denoiser's activations (estimate: 16 d_model-wide fp32 tensors per block)."""
    b = w.bridge
    batch_tokens = b.batch_size * w.seq_len
    return (16 * n_params + batch_tokens * hidden * 2 * 4
            + batch_tokens * b.n_layers * b.d_model * 16 * 4)


def capacity_rows(config_dict: dict, disk_bytes_per_param: int = 2,
                  w: Workload | None = None) -> dict[str, float]:
    """Row name -> GiB for one backbone: disk, host memory peak, GPU memory."""
    w = w or Workload()
    n_layers, hidden = config_dict["num_hidden_layers"], config_dict["hidden_size"]
    inter, vocab = config_dict["intermediate_size"], config_dict["vocab_size"]
    count = parameter_count_on_meta(config_dict)
    bridge_n = denoiser_parameters(hidden, w.bridge, w.seq_len)
    bos = config_dict.get("bos_token_id") or 0

    weights_disk = count.n_params * disk_bytes_per_param
    store = state_store_bytes(n_layers, w.val_tokens, hidden, w.state_bytes)
    per_layer = training_disk_bytes(bridge_n, bridge_n, 0) + TABLE_BYTES_PER_LAYER
    sweep = (n_layers - 1) * per_layer
    in_flight = training_disk_bytes(bridge_n, bridge_n, w.checkpoints) - 4 * bridge_n
    baselines = sum(training_disk_bytes(*baseline_parameters(
        name, vocab, hidden, bridge_n, w.seq_len, bos), 0)
        for name in BASELINES[:w.n_baselines])
    samples = (1 + w.n_baselines) * w.n_eval * w.seq_len * SAMPLE_BYTES_PER_TOKEN
    pairs = pair_bytes(w.train_tokens, hidden)
    gpu_weights = count.weight_bytes_bf16
    rows = {
        "disk: model weights": weights_disk,
        "disk: hidden-state store (held-out, all N layers)": store,
        "disk: sweep bridges (all N-1 candidate layers)": sweep,
        "disk: baselines": baselines,
        "disk: eval samples (estimate)": samples,
        "disk: total": weights_disk + store + sweep + baselines + samples,
        "disk: checkpoints of one bridge while it trains (x steps at once)": in_flight,
        "host: bridge training pairs (fp32)": pairs,
        "host: model weights, if loaded on host": weights_disk,
        "host: peak (pairs + weights)": pairs + weights_disk,
        "GPU: extraction forward (bf16 weights + est. activations)":
            gpu_weights + max(dump_phase_bytes(n_layers, hidden, inter, vocab, w).values()),
        "GPU: pair-building forward (bf16 weights + est. activations)":
            gpu_weights + max(pair_phase_bytes(hidden, inter, w).values()),
        "GPU: bridge training (denoiser + AdamW + batch + est. activations)":
            bridge_training_bytes(hidden, bridge_n, w),
    }
    return {k: v / GIB for k, v in rows.items()}
