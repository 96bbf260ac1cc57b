"""The GPU profile's code paths rehearsed on the CPU: the tiny model through the
definitions, end to end, with what the gpu profile changes (a bf16 backbone, store_train false,
bf16 autocast for the bridges and the baselines, an explicit device string, the pre-flight);
it must make the same artifacts as the CPU default."""

import json
import shutil
from argparse import Namespace
from pathlib import Path

import dagster as dg

from dihal.run.profiles import PROFILES
from pipeline.definitions import build_definitions
from resources import BackboneResource, ComputeResource, JudgeResource, StorageResource
from tests.tiny import PROTOCOL, TINY

SWEPT = ["1", "2", "3"]
BASELINE = "sed"
CHAIN = [["corpus", "sequences_llama", "hidden_states_llama", "geometry_llama", "layer_score_llama"],
         *[(["bridge_sweep_llama", "regression_sweep_llama"], layer) for layer in SWEPT],
         ["bridgeability_llama", "bridge_llama", "eval_llama", "sampler_steps_llama"],
         (["baseline_llama"], BASELINE),
         ["comparison_llama", "full_training_llama", "report_llama"]]


def _profile(gpu: bool, shard: Path) -> dict:
    """The tiny sizes; with `gpu`, every setting the gpu profile changes besides the sizes."""
    stages = {**json.loads(json.dumps(TINY)), "corpus": {"paths": [str(shard)]}}
    stages["eval"] = {**stages["eval"], "length": 4}
    if gpu:
        assert PROFILES["gpu"]["hidden_states"]["store_train"] is False
        stages["hidden_states"] = {**stages["hidden_states"], "store_train": False}
        for stage in ("bridge_sweep", "bridge"):  # "auto" is bf16 on a GPU: forced here
            stages[stage] = {**stages[stage], "mixed_precision": "bf16"}
    return stages


def _ops(profile: dict) -> dict:
    stage_of = {"sequences_llama": "sequences", "hidden_states_llama": "hidden_states",
                "geometry_llama": "geometry", "bridge_sweep_llama": "bridge_sweep",
                "bridge_llama": "bridge", "eval_llama": "eval", "full_training_llama": "eval",
                "sampler_steps_llama": "sampler_steps", "baseline_llama": "baseline",
                "corpus": "corpus"}
    return {op: {"config": profile[stage]} for op, stage in stage_of.items()}


def _artifacts(root: Path) -> dict[str, list[str]]:
    """Each artifact directory (relative) -> the names of its files (not inside a Zarr)."""
    out = {}
    for manifest in root.rglob("manifest.json"):
        d = manifest.parent
        out[str(d.relative_to(root))] = sorted(p.name for p in d.iterdir()
                                               if p.is_file() and not p.name.endswith(".lock"))
    return out


def _run_chain(tmp: Path, model: Path, shard: Path, gpu: bool,
               made: Path | None = None) -> tuple[Path, dict]:
    """The chain under the CPU defaults or the gpu profile's paths; from a copy of the
    artifacts `made` (what it finds made there is reused)."""
    root = tmp / ("gpu" if gpu else "cpu")
    if made is not None:
        shutil.copytree(made, root)
    res = {"storage": StorageResource(root=str(root)),
           "backbones": BackboneResource(paths={"llama": str(model)}),
           # the explicit device string a GPU host's lease gives ("cuda:0" there), and the
           # backbone in bf16 as the compute resource's "auto" loads it on a GPU
           "compute": ComputeResource(device="cpu", threads=1,
                                      dtype="bfloat16" if gpu else "auto"),
           "judge": JudgeResource(name=str(model))}
    defs = build_definitions(("llama",), n_layers={"llama": 4}, resources=res)
    profile = _profile(gpu, shard)
    if gpu:  # the driver's pre-flight on this profile, with these resources
        from dihal.run.preflight import require
        from pipeline.preflight import gather

        path = tmp / "gpu-profile.json"
        path.write_text(json.dumps(profile))
        args = Namespace(profile=str(path), backbone="llama", workers=1, module="unused")
        facts, seq, extract, protocol = gather(args, [1, 2, 3], resources=res)
        assert facts.first_batch_max_abs is not None and facts.doc_lengths["train"]
        require(facts, seq, extract, protocol)
    inst = dg.DagsterInstance.ephemeral()
    for step in CHAIN:
        keys, partition = step if isinstance(step, tuple) else (step, None)
        ops = {k: v for k, v in _ops(profile).items() if k in keys}
        result = dg.materialize(list(defs.assets) + list(defs.asset_checks), selection=keys,
                                partition_key=partition, instance=inst, resources=defs.resources,
                                run_config={"ops": ops}, raise_on_error=False)
        errors = [e.step_failure_data.error.to_string() for e in result.all_events
                  if e.event_type_value == "STEP_FAILURE"]
        assert result.success, (gpu, keys, errors)
    return root, _artifacts(root)


def test_the_gpu_profile_paths_make_the_cpu_defaults_artifacts(tmp_path, tiny_llama_dir,
                                                              swept_world):
    # the CPU defaults' chain from the session's swept world (its Locate and sweep bridges
    # were made under these configs, on this corpus); the gpu paths' chain from nothing
    shard = swept_world.shard
    cpu_root, cpu = _run_chain(tmp_path, tiny_llama_dir, shard, gpu=False,
                               made=swept_world.root)
    gpu_root, gpu = _run_chain(tmp_path, tiny_llama_dir, shard, gpu=True)
    for made in ("layer_score", *(f"bridge_sweep/layer_{int(ll):03d}" for ll in SWEPT)):
        manifest = Path("llama", made, "manifest.json")  # found made, not made again
        assert (cpu_root / manifest).read_bytes() == (swept_world.root / manifest).read_bytes()
    assert gpu == cpu and len(cpu) >= 14, sorted(cpu)
    from storage import read_manifest

    # the gpu paths ran: the dump has no training split, the bridges trained under bf16 autocast
    states = read_manifest(gpu_root / "llama" / "hidden_states")
    assert states.config["store_train"] is False
    bridge = read_manifest(gpu_root / "llama" / "bridge")
    assert bridge.config["mixed_precision"] == "bf16"
    assert read_manifest(cpu_root / "llama" / "bridge").config["mixed_precision"] == "auto"
    assert PROTOCOL["d_model"] == bridge.config["d_model"]
