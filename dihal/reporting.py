"""The report of one backbone: read the finished artifacts, lay them out (dihal.report)."""

from __future__ import annotations

import json

from dihal.report import Report


def build_report(layout, backbone: str) -> Report:
    from storage import read_manifest
    from storage.tables import read_rows

    geo_dir, score_dir = layout.geometry(backbone), layout.layer_score(backbone)
    bness, cmp_ = read_manifest(layout.bridgeability(backbone)), read_manifest(layout.comparison(backbone))
    full, score = read_manifest(layout.full_training(backbone)), read_manifest(layout.layer_score(backbone))
    hs, seqs = read_manifest(layout.hidden_states(backbone)), read_manifest(layout.sequences(backbone))
    geo, br = read_manifest(geo_dir), read_manifest(layout.bridge(backbone))
    ev = read_manifest(layout.evaluation(backbone))
    bb = hs.info["backbone"]

    r = Report(f"DiHAL on {bb['hf_id']} ({backbone})")
    r.p(f"Backbone {bb['hf_id']} ({bb['architecture']}, {bb['n_layers']} layers, hidden "
        f"{bb['hidden_size']}), weights {bb['revision']}. Every number below was measured by the "
        "pipeline from the artifacts listed at the end; nothing is copied from the paper.")

    r.h2("1. Locate: geometry per layer")
    rows = read_rows(geo_dir / "geometry.parquet")
    srows = {(x["norm"], x["layer"]): x for x in read_rows(score_dir / "layer_score.parquet")}
    norms = sorted({x["norm"] for x in rows})
    table = []
    for layer in sorted({x["layer"] for x in rows}):
        row = {"layer": layer}
        for n in norms:
            g = next(x for x in rows if x["layer"] == layer and x["norm"] == n)
            row.update({f"m_curv[{n}]": g["m_curv"], f"m_mono[{n}]": g["m_mono"],
                        f"k_eff[{n}]": g["k_eff"], f"S[{n}]": srows[(n, layer)]["S"]})
        table.append(row)
    cols = ["layer"] + [f"{k}[{n}]" for n in norms for k in ("m_curv", "m_mono", "k_eff", "S")]
    r.p(f"{geo.config['n_tokens']} held-out tokens per layer (position 0 dropped), "
        f"{geo.config['n_anchors']} anchors, k = {geo.config['k_neighbors']}, "
        f"{geo.config['n_pairs']} pairs. k_eff is unchanged by a global rescaling, so it is the "
        "same under none and rms; standardize rescales each dimension and changes it.")
    r.table(table, cols, ".3g")
    r.image((geo_dir / "proxies.png").read_bytes(), "Proxies against layer, per normalisation")
    r.image((score_dir / "score.png").read_bytes(), "Layer score S_l and l* per normalisation")
    r.p(f"l* = {score.info['l_star']} under the primary normalisation "
        f"({score.config['primary_norm']}); by normalisation: {json.dumps(score.info['selected'])}. "
        f"Spearman(S_l, -l), how much the score is just depth: "
        f"{json.dumps({k: round(v, 3) for k, v in score.info['spearman_vs_depth'].items()})}.")

    r.h2("2. Does the score predict bridgeability?")
    layers = read_rows(layout.bridgeability(backbone) / "layers.parquet")
    sweep_cfg = read_manifest(layout.bridge_sweep(backbone, bness.info["oracle"])).config
    r.p(f"One bridge per swept layer ({bness.info['swept_layers']}) under one protocol: "
        f"{json.dumps(sweep_cfg)}. Oracle layer (lowest validation loss): {bness.info['oracle']}; "
        f"worst: {bness.info['worst']}; geometry l*: {bness.info['l_star']}.")
    r.table(layers, ["layer", "val_loss", "recon_error", "hybrid_nll", "backbone_nll",
                     "top1_agreement", "steps", "seconds"], ".4g")
    r.table(bness.info["spearman"], list(bness.info["spearman"][0]), ".3f")
    r.image((layout.bridgeability(backbone) / "scatter.png").read_bytes(),
            "S_l vs bridge validation loss per normalisation, and the depth control")

    r.h2("3. Generation: DiHAL, the backbone and the baselines at a matched budget")
    r.table(cmp_.info["rows"], ["model", "gen_ppl", "diversity", "repetition", "mean_length",
                                "denoiser_parameters", "train_tokens", "sampler_steps", "seq_len"], ".4g")
    if cmp_.info.get("missing"):
        r.p(f"Not run: {', '.join(cmp_.info['missing'])}.")
    r.p(f"Judge: {json.dumps(ev.info['judge'])}. Samples: {ev.config['n_samples']} x "
        f"{ev.config['length']} tokens, temperature {ev.config['temperature']}, seed "
        f"{ev.config['seed']}. Latency per generated token (cached decoding): "
        + "; ".join(f"{x['model']}: {x['ms_per_token']:.1f} ms ({x['latency_vs_backbone']:.2f}x)"
                    for x in ev.info["rows"]) + ".")

    r.h2("4. Full training: geometry-selected vs oracle vs worst layer")
    r.table(full.info["rows"], ["role", "layer", "val_loss", "recon_error", "hybrid_nll",
                                "top1_agreement", "gen_ppl", "diversity", "train_tokens"], ".4g")

    r.h2("5. Sample texts")
    samples = [json.loads(x) for x in (layout.evaluation(backbone) / "samples.jsonl").read_text().splitlines()]
    by_model: dict[str, list[str]] = {}
    for s in samples:
        by_model.setdefault(s["model"], []).append(s["text"])
    for row in cmp_.info["rows"]:
        if not row["model"].startswith(("DiHAL", "backbone")):
            m = read_manifest(layout.baseline(backbone, row["model"]))
            if m is not None:
                by_model[row["model"]] = m.info["samples"]
    text = "".join(f"== {model}\n" + "".join(f"- {t[:240]!r}\n" for t in texts[:4])
                   for model, texts in by_model.items())
    r.pre(text)

    r.h2("6. Configuration and budgets")
    r.pre(json.dumps({"sequences": seqs.config, "hidden_states": hs.config, "geometry": geo.config,
                      "layer_score": score.config, "bridge (full)": br.config,
                      "eval": ev.config, "artifacts": str(layout.root / backbone)}, indent=1))
    return r
