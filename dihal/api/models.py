"""The models of the public API (dihal.api): the backbone, DiHAL's hybrid and the control
hybrids behind the same calls, `generate` and `score`, so that one call compares them.

- `TextModel`: any of them; its core gives next-token logits step by step (`stepper`) and
  whole-sequence logits (`logits`), as dihal.replace.hybrid.Hybrid and the control hybrids of
  dihal.replace.control_hybrids do.
- `DihalHybrid`: DiHAL's hybrid of a trained bridge, sampled at any number of sampler steps K
  and with either sampler rule per call; saved to a folder and loaded elsewhere, refused on
  another backbone than its own (dihal.api.identity).
- `control_model`: the ridge or regression hybrid of a saved control (the pipeline's
  regression_sweep and full_regression artifacts hold them).

A prompt given as text is encoded as the pipeline's sequences are: the backbone's BOS, then
the text's tokens (no other special token); token ids are taken as given, with the BOS put
first where they do not start with it (the bridge pins position 0 to the BOS's state). Pure
compute, no Dagster.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import Tensor

from dihal.api.identity import check_backbone
from dihal.api.sampling import Generated, SamplingConfig, decode_prompts
from dihal.api.saved import read_saved, save_hybrid
from dihal.api.scoring import Scores, score_texts
from dihal.backbones import Backbone
from dihal.bridge.data import Standardizer
from dihal.bridge.sampler import DEFAULT_RULE, check_rule
from dihal.errors import ContextLengthError
from dihal.replace.control_hybrids import (
    BuiltBridge,
    RidgeMap,
    layer_drop_hybrid,
    ridge_hybrid,
)
from dihal.replace.hybrid import Stepper, backbone_stepper
from dihal.results import TrainedBridge

Prompt = str | Sequence[int] | Tensor
Progress = Callable[[str], None] | None


class BackboneCore:
    """The backbone itself, with the interface of a hybrid: `stepper` (its own KV cache) and
    `logits` of whole sequences."""

    def __init__(self, backbone: Backbone) -> None:
        self.backbone = backbone

    def stepper(self, cached: bool = True, seed: int = 0) -> Stepper:
        return backbone_stepper(self.backbone, cached)

    @torch.no_grad()
    def logits(self, input_ids: Tensor) -> Tensor:
        return self.backbone.model(input_ids=input_ids.to(self.backbone.device)).logits


def backbone_context(backbone: Backbone) -> int | None:
    """The positions the backbone takes (its config's max_position_embeddings), or None."""
    n = getattr(backbone.model.config, "max_position_embeddings", None)
    return int(n) if isinstance(n, int) else None


class TextModel:
    """One model of a comparison: `name`, its `backbone` (tokenizer, BOS, EOS, device) and its
    `core` (a stepper and whole-sequence logits). `context`: the positions it takes at most
    (None: no limit known), and why (`context_reason`), for the refusal of a longer prompt.
    `sampler`: the bridge sampler's settings behind its tokens ({} where it has none)."""

    def __init__(self, name: str, backbone: Backbone, core, *, context: int | None = None,
                 context_reason: str = "", sampler: dict | None = None) -> None:
        self.name, self.backbone, self.core = name, backbone, core
        self.sampler = dict(sampler or {})
        own = backbone_context(backbone)
        if context is None or (own is not None and own < context):
            context, context_reason = own, "the backbone's max_position_embeddings"
        self.context, self.context_reason = context, context_reason

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r} on {self.backbone.spec.name})"

    @property
    def tokenizer(self):
        return self.backbone.tokenizer

    def encode(self, prompt: Prompt) -> Tensor:
        """A prompt's token ids (P,): a text as BOS + its tokens; ids with the BOS put first."""
        bos = self.backbone.bos_id
        if isinstance(prompt, str):
            ids = [bos] + list(self.tokenizer.encode(prompt, add_special_tokens=False))
        else:
            ids = [int(t) for t in torch.as_tensor(prompt).reshape(-1).tolist()]
            if not ids or ids[0] != bos:
                ids = [bos] + ids
        vocab = int(self.backbone.model.config.vocab_size)
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"token ids {bad[:5]} are outside {self.backbone.spec.name}'s "
                             f"vocabulary (0..{vocab - 1})")
        return torch.tensor(ids, dtype=torch.long)

    def check_positions(self, n: int, what: str, fix: str) -> None:
        """Refuse (ContextLengthError) `n` positions where the model takes fewer."""
        if self.context is not None and n > self.context:
            raise ContextLengthError(
                f"{what}: {self.name} must take {n} positions, but it takes at most "
                f"{self.context} ({self.context_reason}): {fix}")

    def encode_prompts(self, prompts: Prompt | Sequence[Prompt],
                       max_new_tokens: int) -> list[Tensor]:
        """Each prompt's ids (encode), refused (ContextLengthError, naming the prompt, the
        lengths and the fix) where it and `max_new_tokens` new tokens do not fit the model (the
        last new token is never fed back)."""
        encoded = [self.encode(p) for p in as_prompt_list(prompts)]
        for i, ids in enumerate(encoded):
            fits = self.context - max_new_tokens + 1 if self.context is not None else 0
            self.check_positions(
                ids.numel() + max_new_tokens - 1,
                f"prompt {i} is {ids.numel()} tokens (BOS included), with max_new_tokens="
                f"{max_new_tokens}",
                f"shorten the prompt to at most {fits} tokens" if fits >= 1
                else f"lower max_new_tokens to at most {self.context}")
        return encoded

    @torch.no_grad()
    def logits(self, input_ids: Tensor) -> Tensor:
        """Next-token logits (B, T, V) of whole sequences (B, T)."""
        return self.core.logits(input_ids.to(self.backbone.device))

    def generate(self, prompts: Prompt | Sequence[Prompt], *, max_new_tokens: int = 32,
                 do_sample: bool = False, temperature: float = 1.0, top_p: float = 1.0,
                 seed: int = 0, stop_at_eos: bool = True, progress: Progress = None
                 ) -> Generated:
        """Continue each prompt (a text or token ids; one, or a list of them): greedy without
        `do_sample`, else sampled at `temperature` from the `top_p` nucleus with `seed`
        (dihal.api.sampling). Returns the ids and texts of the continuations and the time."""
        cfg = SamplingConfig(max_new_tokens, do_sample, temperature, top_p, seed, stop_at_eos)
        encoded = self.encode_prompts(prompts, max_new_tokens)
        new, seconds = decode_prompts(
            lambda seed_i: self.core.stepper(cached=True, seed=seed_i), encoded, cfg,
            eos_id=self.backbone.eos_id, device=self.backbone.device, progress=progress,
            label=f"{self.name}: ")
        texts = self.tokenizer.batch_decode(new, skip_special_tokens=True)
        return Generated(self.name, [p.tolist() for p in encoded], new, texts, seconds,
                         {"max_new_tokens": max_new_tokens, "do_sample": do_sample,
                          "temperature": temperature, "top_p": top_p, "seed": seed,
                          **self.sampler})

    def score(self, texts: str | Sequence[str], progress: Progress = None) -> Scores:
        """This model's per-token NLL and perplexity of `texts` (dihal.api.scoring)."""
        return score_texts(texts, [self], progress=progress)


def as_prompt_list(prompts: Prompt | Sequence[Prompt]) -> list[Prompt]:
    """One prompt (a text, a list of ids, a 1-D tensor) as a list of one; a list of texts or of
    id lists, or a 2-D tensor, as it is."""
    if isinstance(prompts, str):
        return [prompts]
    if isinstance(prompts, Tensor):
        return [prompts] if prompts.ndim <= 1 else list(prompts)
    prompts = list(prompts)
    if not prompts:
        raise ValueError("generate needs at least one prompt")
    if all(isinstance(p, numbers.Integral) for p in prompts):
        return [prompts]
    return prompts


def backbone_model(backbone: Backbone) -> TextModel:
    """The backbone as a TextModel: the autoregressive reference, sampled like the hybrid."""
    return TextModel("backbone", backbone, BackboneCore(backbone))


def check_steps(sampler_steps: int | None) -> int | None:
    """`sampler_steps` (the bridge sampler's K) where it is None or an int >= 1, else a
    ValueError."""
    k = sampler_steps
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"sampler_steps must be an int >= 1 (the bridge sampler's K), got {k!r}")
    return k


def first_state_of(trained: TrainedBridge, backbone: Backbone) -> Tensor | None:
    first = trained.tensors.get("first_state")
    return first.to(backbone.device) if first is not None else None


class DihalHybrid(TextModel):
    """DiHAL's hybrid: `backbone` with layers 0..l-1 replaced by the bridge `trained`
    (dihal.results.TrainedBridge), sampled with K = `sampler_steps` (default: its training
    protocol's K) under `rule` (default: dihal.bridge.sampler.DEFAULT_RULE), deterministic
    sampler noise (eta 0) unless `eta` says otherwise. `generate` and `score` take
    `sampler_steps` and `rule` per call: the hybrid is made once per (K, rule) and kept."""

    def __init__(self, backbone: Backbone, trained: TrainedBridge, *,
                 sampler_steps: int | None = None, rule: str | None = None,
                 eta: float = 0.0) -> None:
        objective = trained.hparams.objective
        if objective == "ridge":
            raise ValueError("this is a ridge control, not a bridge: load it with "
                             "dihal.api.control_model")
        check_backbone(backbone, {"name": trained.hparams.backbone,
                                  "revision": trained.hparams.revision},
                       f"the bridge of layer {trained.layer}")
        self.backbone, self.trained, self.eta = backbone, trained, float(eta)
        self.regression = objective == "regression"
        self.sampler_steps = 1 if self.regression else int(
            check_steps(sampler_steps) or trained.hparams.protocol.sampler_steps)
        self.rule = check_rule(rule or DEFAULT_RULE, self.eta)
        self._built = BuiltBridge.of(backbone, trained)  # restored once, sampled at any K
        self._cores: dict[tuple[int, str], object] = {}
        core = self.core_at(self.sampler_steps, self.rule)
        super().__init__(self.name_at(self.sampler_steps, self.rule), backbone, core,
                         context=core.max_len,
                         context_reason="its bridge's denoiser was built for sequences of this "
                                        "length, the ones it was trained on",
                         sampler={"sampler_steps": self.sampler_steps, "rule": self.rule,
                                  "eta": self.eta})

    @property
    def layer(self) -> int:
        return self.trained.layer

    def name_at(self, sampler_steps: int, rule: str) -> str:
        if self.regression:
            return f"regression (l={self.layer})"
        return f"DiHAL (l={self.layer}, K={sampler_steps}" + (f" {rule}" if rule != DEFAULT_RULE
                                                              else "") + ")"

    def core_at(self, sampler_steps: int, rule: str):
        """The hybrid sampled with K = `sampler_steps` under `rule` (made once, then kept)."""
        key = (sampler_steps, rule)
        if key not in self._cores:
            self._cores[key] = self._built.hybrid(sampler_steps=sampler_steps, rule=rule,
                                                  eta=self.eta)
        return self._cores[key]

    def at(self, sampler_steps: int | None = None, rule: str | None = None) -> TextModel:
        """This hybrid sampled with K = `sampler_steps` under `rule` (None: its own) as a model
        of its own."""
        k = check_steps(sampler_steps) or self.sampler_steps
        rule = check_rule(rule or self.rule, self.eta)
        if self.regression and k != 1:
            raise ValueError(f"{self.name} predicts h_l in one step: sampler_steps must be 1, "
                             f"got {k}")
        if (k, rule) == (self.sampler_steps, self.rule):
            return self
        return TextModel(self.name_at(k, rule), self.backbone, self.core_at(k, rule),
                         context=self.context, context_reason=self.context_reason,
                         sampler={"sampler_steps": k, "rule": rule, "eta": self.eta})

    def generate(self, prompts: Prompt | Sequence[Prompt], *, sampler_steps: int | None = None,
                 rule: str | None = None, **kwargs) -> Generated:
        """TextModel.generate with the hybrid sampled at K = `sampler_steps` under `rule`
        (None: its own)."""
        return TextModel.generate(self.at(sampler_steps, rule), prompts, **kwargs)

    def score(self, texts: str | Sequence[str], progress: Progress = None, *,
              sampler_steps: int | None = None, rule: str | None = None) -> Scores:
        """The per-token NLL and perplexity of `texts` under the hybrid (at K = `sampler_steps`,
        `rule`) and under its backbone, side by side."""
        return score_texts(texts, [self.at(sampler_steps, rule), self.backbone_model()],
                           progress=progress)

    def backbone_model(self) -> TextModel:
        """The backbone, behind the same calls."""
        return backbone_model(self.backbone)

    def layer_drop(self) -> TextModel:
        """The layer-drop control at this layer: hs[0] fed straight to block l, BOS pinned."""
        core = layer_drop_hybrid(self.backbone, self.layer, first_state_of(self.trained,
                                                                           self.backbone))
        return TextModel(f"layer-drop (l={self.layer})", self.backbone, core)

    def save(self, folder: Path | str) -> Path:
        """Save the bridge, its settings and the backbone's identity to `folder`
        (dihal.api.saved); the backbone itself is not copied."""
        return save_hybrid(folder, self.trained, self.backbone, sampler=self.sampler)

    @classmethod
    def load(cls, folder: Path | str, backbone: Backbone, *, sampler_steps: int | None = None,
             rule: str | None = None) -> DihalHybrid:
        """The hybrid saved in `folder`, on `backbone`: refused (BackboneMismatchError, naming
        both) unless it is the backbone the hybrid was saved with, by content."""
        trained, cfg = read_saved(folder)
        check_backbone(backbone, cfg["backbone"], f"the hybrid saved in {Path(folder)}")
        sampler = cfg.get("sampler", {})
        return cls(backbone, trained,
                   sampler_steps=sampler_steps or sampler.get("sampler_steps"),
                   rule=rule or sampler.get("rule"), eta=sampler.get("eta", 0.0))


def control_model(backbone: Backbone, trained: TrainedBridge) -> TextModel:
    """The control hybrid of a saved control of layer l: the ridge map hs[0] -> h_l (objective
    "ridge", the pipeline's regression_sweep) or the regression network sampled in one step
    (objective "regression", the eval's full-budget regression control)."""
    objective = trained.hparams.objective
    layer = trained.layer
    check_backbone(backbone, {"name": trained.hparams.backbone,
                              "revision": trained.hparams.revision},
                   f"the {objective} control of layer {layer}")
    if objective == "regression":
        return DihalHybrid(backbone, trained)
    if objective != "ridge":
        raise ValueError(f"the saved model of layer {layer} has objective {objective!r}, not a "
                         "control's ('ridge' or 'regression'): a bridge is a DihalHybrid")
    t = trained.tensors
    ridge = RidgeMap(t["ridge.weight"].float(), t["ridge.bias"].float(),
                     float(trained.hparams.ridge_lambda))
    core = ridge_hybrid(backbone, layer, ridge, Standardizer(t["cond_std.mean"], t["cond_std.std"]),
                        Standardizer(t["target_std.mean"], t["target_std.std"]),
                        first_state_of(trained, backbone))
    return TextModel(f"ridge (l={layer})", backbone, core)
