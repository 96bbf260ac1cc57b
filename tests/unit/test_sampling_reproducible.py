"""The same eval config gives the same samples and scores in any fresh process on one machine:
whatever PYTHONHASHSEED, whatever the global torch/Python/NumPy RNGs went through
before; with another torch thread count, or torch's CPU kernels capped at another instruction
set, the same samples, and scores equal to 1e-6 (the device lease fixes the thread count per
worker count, so a rerun of one config gets the same one; each row records threads and kernels).
A different seed gives different samples.

Each run is a fresh interpreter (this file run as a script) that builds a bridge in code for the
tiny Llama, scores with the tiny Llama as judge, and prints what `evaluate_generation` returned.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYER = 2
# eta = 0 (the default: the deterministic bridge sampler, tokens from the seeded uniforms) and
# eta > 0 (bridge noise from the per-batch generators as well); batch_size < n_samples so that
# more than one batch, and so more than one noise generator, is used.
CONFIGS = [dict(n_samples=6, length=10, batch_size=4, eta=eta) for eta in (0.0, 0.5)]


def _run(model_dir: Path, cache_dir: Path, *, hash_seed: int, disturb: int,
         threads: int, kernels: str | None = None) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("ATEN_CPU_CAPABILITY", None)
    if kernels:  # torch's CPU kernels capped at this instruction set
        env["ATEN_CPU_CAPABILITY"] = kernels
    out = subprocess.run(
        [sys.executable, __file__, str(model_dir), str(cache_dir), str(disturb), str(threads)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_same_config_same_samples_in_fresh_processes(tiny_llama_dir, tmp_path):
    a = _run(tiny_llama_dir, tmp_path / "a", hash_seed=0, disturb=0, threads=1)
    b = _run(tiny_llama_dir, tmp_path / "b", hash_seed=12345, disturb=7, threads=1)
    assert sorted(a) == ["0", "1"] and all(len(a[s]) == len(CONFIGS) for s in a)
    assert a == b  # texts token for token, and every metric to the last bit
    # another thread count: float sums in another order round the last bits differently (CPU
    # kernels split their work by thread). On this tiny model the texts stay the same and the
    # scores agree to 1e-6; on SmolLM2 the logits move enough to flip an occasional sampled
    # token (2 of 64 backbone samples of 64 tokens differ between 1 and 2 threads), which is
    # why each row records its thread count. The same holds for the vector instructions of
    # torch's kernels (AVX-512 against AVX2 moved 2 of 64 SmolLM2 backbone samples, and DiHAL's
    # Gen.PPL from 779.8 to 894.8, between two machines): each row records them too. Run c
    # also caps the kernels at the baseline ("default") instruction set.
    c = _run(tiny_llama_dir, tmp_path / "c", hash_seed=0, disturb=0, threads=2, kernels="default")
    import torch

    here = torch.backends.cpu.get_cpu_capability()
    for seed in a:
        for x, y in zip(a[seed], c[seed], strict=True):
            assert x["threads"] == [1, 1] and y["threads"] == [2, 2]
            assert x["kernels"] == [here] * 2 and y["kernels"] == ["DEFAULT"] * 2
            assert x["texts"] == y["texts"]
            for role, metrics in x["metrics"].items():
                for key, value in metrics.items():
                    want, got = float.fromhex(value), float.fromhex(y["metrics"][role][key])
                    assert got == pytest.approx(want, rel=1e-6), (seed, role, key)

    for seed0, seed1 in zip(a["0"], a["1"], strict=True):  # another seed, other samples
        for model in ("dihal", "backbone"):
            assert seed0["texts"][model] != seed1["texts"][model]


# ---------------------------------------------------------------- the fresh process


def _disturb(k: int) -> None:
    """Leave the global RNGs somewhere else than a fresh interpreter has them."""
    import random

    import numpy as np
    import torch

    torch.manual_seed(1000 + k)
    torch.rand(k)
    random.seed(k)
    np.random.seed(k)


def _bridge(backbone, seed: int = 0):
    """A TrainedBridge as the bridge stage saves one: a denoiser with random weights (a fresh
    one has a zero output layer), standardisers fitted on random sequences, BOS pinned."""
    import torch

    from dihal.bridge.data import Standardizer
    from dihal.config import BridgeProtocol
    from dihal.net_configs import DenoiserConfig
    from dihal.results import BridgeHparams, TrainedBridge
    from tests.tiny import randomised_denoiser

    cfg = DenoiserConfig(d_in=backbone.hidden_size, d_model=32, n_layers=2, n_heads=4,
                         max_len=32, time_embed_dim=16)
    denoiser = randomised_denoiser(cfg, seed)
    ids = torch.randint(4, len(backbone.tokenizer), (4, 16),
                        generator=torch.Generator().manual_seed(seed))
    ids[:, 0] = backbone.bos_id
    hs = backbone.hidden_states(ids)
    cond, target = Standardizer.fit(hs[0]), Standardizer.fit(hs[LAYER])
    tensors = {f"denoiser.{k}": v.detach().clone() for k, v in denoiser.state_dict().items()}
    tensors.update({"cond_std.mean": cond.mean, "cond_std.std": cond.std,
                    "target_std.mean": target.mean, "target_std.std": target.std,
                    "first_state": hs[LAYER][0, 0].clone()})
    hparams = BridgeHparams(LAYER, BridgeProtocol(sigma=1.0, sampler_steps=4),
                            denoiser_config=cfg)
    return TrainedBridge(tensors, hparams)


def main(model_dir: str, cache_dir: str, disturb: str, threads: str) -> None:
    import torch

    torch.set_num_threads(int(threads))
    if int(disturb):
        _disturb(int(disturb))
    from dihal.backbones import load_backbone
    from dihal.config import EvalConfig
    from dihal.evaluate.generation import evaluate_generation
    from dihal.evaluate.judge import load_judge
    from dihal.replace.control_hybrids import BuiltBridge

    backbone = load_backbone("llama", path=model_dir, cache_dir=Path(cache_dir))
    judge = load_judge(model_dir, cache_dir=Path(cache_dir))
    trained = _bridge(backbone)
    if int(disturb):
        _disturb(int(disturb) + 1)  # between loading and sampling, too
    results = {}
    for seed in (0, 1):
        results[str(seed)] = []
        for cfg in CONFIGS:
            res = evaluate_generation(BuiltBridge.of(backbone, trained), judge,
                                      EvalConfig(seed=seed, **cfg))
            rows = [r.to_dict() for r in res.rows]
            results[str(seed)].append({
                "texts": {r["role"]: [s.text for s in res.samples if s.model == r["model"]]
                          for r in rows},
                # float.hex: equal only when equal to the last bit
                "metrics": {r["role"]: {k: float(r[k]).hex() for k in
                                        ("gen_ppl", "judge_tokens", "diversity", "mean_length")}
                            for r in rows},
                "threads": [r["cpu_threads"] for r in rows],
                "kernels": [r["cpu_kernels"] for r in rows],
            })
    print(json.dumps(results))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main(*sys.argv[1:])
