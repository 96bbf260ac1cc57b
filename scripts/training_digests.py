"""sha256 of the weights (and loss curves) of tiny trainings: the bridge and each baseline,
each trained once straight through and once interrupted and resumed from its checkpoints.

Used to show that a refactoring of the training loop, its checkpoints or the baselines leaves
trained weights bit-identical: run it before and after and compare the lines.

    PYTHONPATH=$PWD python scripts/training_digests.py [--out digests.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import torch

from dihal.bridge.data import BridgeData
from dihal.bridge.denoiser import build_denoiser
from dihal.bridge.process import BrownianBridge
from dihal.bridge.train import train_bridge
from dihal.compare.baselines import build_baseline
from dihal.compare.baselines.base import baseline_loss
from dihal.net_configs import DenoiserConfig, TrainConfig
from dihal.training import train_model

V, D, T, BOS, EOS = 50, 16, 8, 0, 1


def weights_digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, value in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(str(value.dtype).encode())
        h.update(value.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()
                 if value.dim() else value.detach().cpu().reshape(1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def curve_digest(result) -> str:
    return hashlib.sha256(json.dumps([[p.to_dict() for p in result.curve],
                                       [p.to_dict() for p in result.val_curve]], sort_keys=True)
                          .encode()).hexdigest()


def bridge_data(n_seq: int, seed: int) -> BridgeData:
    a = torch.linalg.qr(torch.randn(4, 4, generator=torch.Generator().manual_seed(123)))[0]
    c = torch.randn(n_seq, T, 4, generator=torch.Generator().manual_seed(seed))
    lengths = torch.randint(2, T + 1, (n_seq,), generator=torch.Generator().manual_seed(seed + 1))
    m = torch.arange(T)[None, :] < lengths[:, None]
    c = c * m[..., None]
    return BridgeData(c, c @ a, m)


def bridge_runs(tmp: Path) -> dict:
    cfg_d = DenoiserConfig(d_in=4, d_model=32, n_layers=2, n_heads=2, max_len=T, time_embed_dim=16)
    train, val = bridge_data(48, 1), bridge_data(16, 2)
    cfg = TrainConfig(lr=5e-3, batch_size=4, epochs=1.5, log_every=2, eval_every=4,
                      checkpoint_every=3, keep_checkpoints=2)
    out = {}
    whole = build_denoiser(cfg_d, 0)
    r = train_bridge(whole, train, val, BrownianBridge(), cfg, tmp / "bridge-whole")
    out["bridge"] = {"weights": weights_digest(whole), "curves": curve_digest(r), "steps": r.step}
    cut = build_denoiser(cfg_d, 0)
    train_bridge(cut, train, val, BrownianBridge(), cfg, tmp / "bridge-cut", stop_after=7)
    resumed = build_denoiser(cfg_d, 0)
    r = train_bridge(resumed, train, val, BrownianBridge(), cfg, tmp / "bridge-cut")
    out["bridge resumed"] = {"weights": weights_digest(resumed), "curves": curve_digest(r),
                             "steps": r.step, "resumed_from": r.resumed_from}
    bf16 = build_denoiser(cfg_d, 0)
    r = train_bridge(bf16, train, val, BrownianBridge(),
                     TrainConfig(**{**cfg.to_dict(), "mixed_precision": "bf16"}), tmp / "bf16")
    out["bridge bf16"] = {"weights": weights_digest(bf16), "curves": curve_digest(r), "steps": r.step}
    return out


def baseline(name: str):
    emb = torch.randn(V, D, generator=torch.Generator().manual_seed(0))
    target = build_denoiser(DenoiserConfig(d_in=D, d_model=32, n_layers=2, n_heads=2), 0).param_count()
    kwargs = {}
    if name == "diffusion-lm":
        from dihal.compare.baselines.diffusion_lm import DiffusionLMConfig
        kwargs["config"] = DiffusionLMConfig(embed_dim=D)
    elif name == "ld4lg":
        from dihal.compare.baselines.decoder import DecoderConfig
        from dihal.compare.baselines.ld4lg import LD4LGConfig
        kwargs["config"] = LD4LGConfig(n_latents=4, d_latent=16, d_ae=32, ae_heads=2,
                                       encoder_layers=1, resampler_layers=1,
                                       decoder=DecoderConfig(d_model=32, n_layers=1, n_heads=2))
        target = build_denoiser(DenoiserConfig(d_in=16, d_model=32, n_layers=2, n_heads=1),
                                0).param_count()
    elif name == "codar":
        from dihal.compare.baselines.codar import CoDARConfig
        from dihal.compare.baselines.decoder import DecoderConfig
        kwargs["config"] = CoDARConfig(decoder=DecoderConfig(d_model=32, n_layers=1, n_heads=2))
        target = build_denoiser(DenoiserConfig(d_in=D, d_model=32, n_layers=2, n_heads=1),
                                0).param_count()
    return build_baseline(name, embeddings=emb, seq_len=T, target_params=target, seed=3,
                          bos_id=BOS, eos_id=EOS, **kwargs)


def baseline_runs(tmp: Path) -> dict:
    patterns = torch.randint(2, V, (4, T - 1), generator=torch.Generator().manual_seed(1))
    ids = torch.cat([torch.full((32, 1), BOS), patterns[torch.arange(32) % 4]], dim=1)
    cfg = TrainConfig(lr=3e-3, batch_size=8, epochs=3.0, log_every=2, checkpoint_every=4,
                      keep_checkpoints=2)
    out = {}
    for name in ("diffusion-lm", "sed", "ld4lg", "codar"):
        model = baseline(name)
        protocol = {"baseline": name}
        r = train_model(model, baseline_loss(ids), len(ids), cfg, tmp / f"{name}-whole",
                        protocol=protocol)
        out[name] = {"weights": weights_digest(model), "curves": curve_digest(r), "steps": r.step}
        train_model(baseline(name), baseline_loss(ids), len(ids), cfg, tmp / f"{name}-cut",
                    protocol=protocol, stop_after=5)
        resumed = baseline(name)
        r = train_model(resumed, baseline_loss(ids), len(ids), cfg, tmp / f"{name}-cut",
                        protocol=protocol)
        out[f"{name} resumed"] = {"weights": weights_digest(resumed), "curves": curve_digest(r),
                                  "steps": r.step, "resumed_from": r.resumed_from}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the digests as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        digests = {**bridge_runs(Path(tmp)), **baseline_runs(Path(tmp))}
    for name, d in digests.items():
        print(f"{name:22s} weights {d['weights']}  curves {d['curves'][:16]}  steps {d['steps']}"
              + (f" (resumed from {d['resumed_from']})" if "resumed_from" in d else ""))
    if args.out:
        args.out.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
