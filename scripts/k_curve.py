"""The sampler-steps question on the embedded SmolLM2: a small bridge at one layer, its sampler-steps curve under
both update rules (held-out hybrid NLL at each K, through dihal.replace.sampler_steps.sampler_steps_curve),
the control hybrids at the same layer (ridge, layer-drop, optionally the regression control)
on the same held-out sequences, and the FLOPs per generated token of each (dihal.evaluate.cost).

The hidden states are computed in memory (layers 0 and l only) from the embedded corpus; the
bridge is trained by the pipeline's own `train_layer` under `BridgeProtocol` defaults (one pass).

    .venv/bin/python scripts/k_curve.py [--layer 3] [--n-train 256] [--n-val 32] [--seq-len 64]
        [--epochs 1.0] [--threads 2] [--regression] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from dihal.backbones import load_backbone
from dihal.config import (
    SAMPLER_RULES,
    BridgeProtocol,
    CorpusConfig,
    ExtractConfig,
    SamplerCurveConfig,
    SequenceConfig,
)
from dihal.evaluate.cost import backbone_flop_model, ridge_map_flops, with_bridge
from dihal.locate.corpus import iter_documents, pack_sequences, resolve_shards
from dihal.replace.control_hybrids import (
    bridge_hybrid,
    fit_ridge,
    held_out_nll,
    layer_drop_hybrid,
    ridge_hybrid,
)
from dihal.replace.sampler_steps import choose_steps, sampler_steps_curve
from dihal.replace.stage import load_layer_data, restore_bridge, stored_pairs, train_layer


class MemoryStates:
    """The reader interface `train_layer` and `sampler_steps_curve` use, over hs[0] and
    hs[layer] computed here (no next-token reference: the backbone runs when measuring)."""

    splits = ("train", "val")

    def __init__(self, backbone, ids: dict[str, np.ndarray], layer: int, batch: int = 16):
        self.ids, self.n = ids, backbone.n_layers
        self.states: dict[tuple[str, int], np.ndarray] = {}
        for split, x in ids.items():
            e, h = [], []
            for lo in range(0, len(x), batch):
                a, b = backbone.lower_states(torch.as_tensor(x[lo : lo + batch]), layer)
                e.append(a.float().numpy())
                h.append(b.float().numpy())
            self.states[(split, 0)] = np.concatenate(e)
            self.states[(split, layer)] = np.concatenate(h)

    def n_layers(self) -> int:
        return self.n

    def layer(self, split: str, layer: int) -> np.ndarray:
        # a copy, as the store's reader returns: the pipeline standardises pairs in place
        return self.states[(split, layer)].copy()

    def input_ids(self, split: str) -> np.ndarray:
        return self.ids[split]

    def reference(self, split: str, n: int | None = None):
        return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layer", type=int, default=3)
    p.add_argument("--n-train", type=int, default=256)
    p.add_argument("--n-val", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--regression", action="store_true", help="also train the regression control")
    p.add_argument("--out", default=".dihal/k_curve")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()

    bb = load_backbone("smollm2", cache_dir=Path(".dihal/artifacts/cache/models"))
    ccfg = CorpusConfig()
    packed = pack_sequences(iter_documents(resolve_shards(ccfg), ccfg), bb.tokenizer,
                            SequenceConfig(seq_len=args.seq_len, n_train=args.n_train,
                                           n_val=args.n_val),
                            bos_id=bb.bos_id, eos_id=bb.eos_id)
    ids = {s: np.asarray(v.input_ids, dtype=np.int64) for s, v in packed.items()}
    reader = MemoryStates(bb, ids, args.layer)
    print(f"[{time.perf_counter() - t_start:.0f} s] states of layers 0 and {args.layer}: "
          f"{len(ids['train'])} train / {len(ids['val'])} val sequences of {args.seq_len} tokens",
          flush=True)

    protocol = BridgeProtocol(eval_sequences=args.n_val, epochs=args.epochs)
    trained = train_layer(bb, reader, args.layer, protocol, out / f"ckpt-l{args.layer}",
                          train_ids=ids["train"], extract=ExtractConfig())
    m = trained.metrics
    print(f"[{time.perf_counter() - t_start:.0f} s] bridge trained: {m.train_steps} steps, val loss "
          f"{m.val_loss:.4f}, hybrid NLL (K={protocol.sampler_steps}) {m.hybrid_nll:.4f}, backbone NLL "
          f"{m.backbone_nll:.4f}", flush=True)

    curve = sampler_steps_curve(bb, trained, reader, SamplerCurveConfig(
        steps=(1, 2, 4, 8, 16), n_samples=4, length=16, rules=SAMPLER_RULES),
        progress=lambda s: print(f"[{time.perf_counter() - t_start:.0f} s] {s}", flush=True))
    chosen = choose_steps(curve.rows)

    data = load_layer_data(reader, args.layer, protocol, stored_pairs(reader, "train", args.layer))
    ridge = fit_ridge(data.train, data.val)
    controls = {
        f"ridge (lam={ridge.lam:g}, held-out MSE {ridge.val_mse:.4f})":
            ridge_hybrid(bb, args.layer, ridge, data.cond_std, data.target_std, data.first_state),
        "layer-drop, BOS pinned": layer_drop_hybrid(bb, args.layer, data.first_state),
        "layer-drop": layer_drop_hybrid(bb, args.layer),
    }
    if args.regression:
        reg = train_layer(bb, reader, args.layer, protocol.__class__(
            **{**protocol.to_dict(), "sampler_steps": 1}), out / f"ckpt-reg-l{args.layer}",
            train_ids=ids["train"], extract=ExtractConfig(), regression=True)
        controls["regression control (K=1)"] = bridge_hybrid(bb, reg)
    control_rows = []
    for name, model in controls.items():
        r = held_out_nll(model, data.val_ids)
        control_rows.append({"model": name, **r})
        print(f"[{time.perf_counter() - t_start:.0f} s] {name}: hybrid NLL {r['hybrid_nll']:.4f}",
              flush=True)

    bridge = restore_bridge(trained)
    flops = with_bridge(backbone_flop_model(bb, 32), bridge["denoiser"], 32)
    d = bb.hidden_size
    print(f"\nSmolLM2, bridge at layer {args.layer} (BridgeProtocol defaults, {args.epochs} "
          f"epoch(s) over {args.n_train} x {args.seq_len} tokens; held-out: {args.n_val} "
          f"sequences); backbone NLL {m.backbone_nll:.4f}; total {time.perf_counter() - t_start:.0f} s")
    print("\n| rule | K | hybrid NLL | recon error | top-1 agreement | MFLOPs / token | x backbone |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for p in curve.rows:
        f = flops.hybrid(args.layer, p.sampler_steps)
        print(f"| {p.rule} | {p.sampler_steps} | {p.hybrid_nll:.4f} | {p.recon_error:.4f} | "
              f"{p.top1_agreement:.4f} | {f / 1e6:.1f} | {f / flops.backbone():.3f} |")
    print(f"\nchosen by held-out hybrid NLL: {chosen['rule']} rule, K = {chosen['sampler_steps']} "
          f"(NLL {chosen['hybrid_nll']:.4f})")
    print("\n| control at the same layer | hybrid NLL | top-1 agreement | MFLOPs / token |")
    print("|---|---:|---:|---:|")
    for r in control_rows:
        extra = ridge_map_flops(d, d) if r["model"].startswith("ridge") else 0.0
        steps = 1 if r["model"].startswith("regression") else 0
        f = flops.hybrid(args.layer, steps, extra)
        print(f"| {r['model']} | {r['hybrid_nll']:.4f} | {r['top1_agreement']:.4f} | {f / 1e6:.1f} |")
    print(f"| backbone | {m.backbone_nll:.4f} | 1 | {flops.backbone() / 1e6:.1f} |")
    print(f"\nbreak-even at layer {args.layer}: the hybrid is cheaper than the backbone for "
          f"K <= {flops.max_cheaper_steps(args.layer)} (one denoising step "
          f"{flops.denoiser_step_flops / 1e6:.2f} MFLOPs/token, one block "
          f"{flops.block_flops[0] / 1e6:.2f} MFLOPs/token)")
    (out / f"k_curve_l{args.layer}.json").write_text(json.dumps(
        {"curve": curve.rows, "chosen": chosen, "controls": control_rows,
         "args": vars(args)}, indent=1, default=float))


if __name__ == "__main__":
    main()
