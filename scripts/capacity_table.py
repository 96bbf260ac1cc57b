"""Print the capacity plan of the GPU profile as Markdown: disk, host memory and GPU memory per
backbone, the device maps of the 8B models, and their exact parameter counts.

    .venv/bin/python scripts/capacity_table.py
    .venv/bin/python scripts/capacity_table.py mistral7b   # declared backbones (dihal.toml)

Every model is built on PyTorch's meta device: nothing is allocated, nothing is downloaded
(the configs are data/model_configs/*.json). It takes about 10 s, mostly imports; peak RSS
about 0.4 GB (/usr/bin/time -v).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dihal.registry import BACKBONES  # noqa: E402
from dihal.run.capacity import (  # noqa: E402
    Workload,
    backbone_config,
    capacity_rows,
    denoiser_parameters,
    device_maps,
    load_model_config,
    parameter_count_on_meta,
    stored_configs,
)

TITLES = {"smollm2": "SmolLM2-135M", "llama": "Llama-3.1-8B", "qwen": "Qwen3-8B"}


def declared(names: list[str]) -> None:
    """The capacity rows of the named backbones (built-in or declared), from their configs."""
    w = Workload()
    rows = {}
    for b in names:
        config, disk_bytes = backbone_config(b)
        rows[b] = capacity_rows(config, disk_bytes, w)
        count = parameter_count_on_meta(config)
        print(f"{b}: {config['model_type']}, {config['num_hidden_layers']} layers, hidden "
              f"{config['hidden_size']}, {count.n_params:,} parameters (meta device)")
    print("\n| GiB at the GPU profile | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for name in rows[names[0]]:
        print(f"| {name} | " + " | ".join(f"{rows[b][name]:.3f}" for b in names) + " |")


def main() -> None:
    if sys.argv[1:]:
        return declared(sys.argv[1:])
    w = Workload()
    configs = {b: load_model_config(b) for b in stored_configs()}
    rows = {b: capacity_rows(c, BACKBONES[b].disk_bytes_per_param, w) for b, c in configs.items()}

    print(f"## Capacity of the GPU profile (GiB = 2^30 bytes)\n\n"
          f"seq_len {w.seq_len}; {w.n_train} training sequences ({w.train_tokens:,} tokens); "
          f"{w.n_val} held-out sequences ({w.val_tokens:,} tokens); states float16; "
          f"bridge d_model {w.bridge.d_model} x {w.bridge.n_layers} blocks, batch "
          f"{w.bridge.batch_size}; forward batch {w.extract_batch}; {w.n_baselines} baselines; "
          f"{w.n_eval} eval samples.\n")
    print("| | " + " | ".join(TITLES[b] for b in configs) + " |")
    print("|---|" + "---:|" * len(configs))
    for name in rows["llama"]:
        print(f"| {name} | " + " | ".join(f"{rows[b][name]:.2f}" for b in configs) + " |")

    print("\n## Exact parameter counts (meta device)\n")
    print("| model | parameters | bf16 weights (bytes) | bridge denoiser parameters |")
    print("|---|---:|---:|---:|")
    for b, c in configs.items():
        count = parameter_count_on_meta(c)
        bridge = denoiser_parameters(c["hidden_size"], w.bridge, w.seq_len)
        print(f"| {TITLES[b]} | {count.n_params:,} | {count.weight_bytes_bf16:,} | {bridge:,} |")

    print("\n## Device maps (bf16, device_map=\"auto\": balanced over the GPUs)\n")
    print("| model | layout | max_memory | decoder layers per device | GiB per device | "
          "spills to cpu/disk |")
    print("|---|---|---|---|---|---|")
    for b in ("llama", "qwen"):
        for layout, plan in device_maps(configs[b]).items():
            used = [d for d in plan.gib if plan.gib[d] > 0]
            layers = ", ".join(f"{d}: {plan.layers[d]}" for d in used)
            gib = ", ".join(f"{d}: {plan.gib[d]:.2f}" for d in used)
            print(f"| {TITLES[b]} | {layout} | {plan.max_memory} | {layers} | {gib} | "
                  f"{'yes' if plan.spills else 'no'} |")


if __name__ == "__main__":
    main()
