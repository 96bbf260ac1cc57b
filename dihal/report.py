"""The report stage: lay out the finished results of one backbone (rendered by dihal.document).
Its inputs are gathered by the caller (the Dagster layer reads them through storage)."""

from __future__ import annotations

import json

from dihal.document import Document
from dihal.results import ReportInputs, ReportResult


def build_report(x: ReportInputs) -> ReportResult:
    bb, score, bness = x.backbone_info, x.score, x.bridgeability
    geo_cfg, ev_cfg = x.configs["geometry"], x.configs["eval"]
    r = Document(f"DiHAL on {bb['hf_id']} ({x.backbone})")
    r.p(f"Backbone {bb['hf_id']} ({bb['architecture']}, {bb['n_layers']} layers, hidden "
        f"{bb['hidden_size']}), weights {bb['revision']}. Every number below was measured by the "
        "pipeline from the artifacts listed at the end; nothing is copied from the paper.")

    r.h2("1. Locate: geometry per layer")
    srows = {(s["norm"], s["layer"]): s for s in x.score_rows}
    norms = sorted({g["norm"] for g in x.geometry_rows})
    geo = {(g["norm"], g["layer"]): g for g in x.geometry_rows}
    table = [{"layer": layer, **{f"{k}[{n}]": (geo[(n, layer)][k] if k != "S" else srows[(n, layer)]["S"])
                                 for n in norms for k in ("m_curv", "m_mono", "k_eff", "S")}}
             for layer in sorted({g["layer"] for g in x.geometry_rows})]
    cols = ["layer"] + [f"{k}[{n}]" for n in norms for k in ("m_curv", "m_mono", "k_eff", "S")]
    r.p(f"{geo_cfg['n_tokens']} held-out tokens per layer (position 0 dropped), "
        f"{geo_cfg['n_anchors']} anchors, k = {geo_cfg['k_neighbors']}, "
        f"{geo_cfg['n_pairs']} pairs. k_eff is unchanged by a global rescaling, so it is the "
        "same under none and rms; standardize rescales each dimension and changes it.")
    r.table(table, cols, ".3g")
    r.image(x.plots["proxies"], "Proxies against layer, per normalisation")
    r.image(x.plots["score"], "Layer score S_l and l* per normalisation")
    r.p(f"l* = {score['l_star']} under the primary normalisation "
        f"({x.configs['layer_score']['primary_norm']}); by normalisation: "
        f"{json.dumps(score['selected'])}. Spearman(S_l, -l), how much the score is just depth: "
        f"{json.dumps({k: round(v, 3) for k, v in score['spearman_vs_depth'].items()})}.")

    r.h2("2. Does the score predict bridgeability?")
    r.p(f"One bridge per swept layer ({bness['swept_layers']}) under one protocol: "
        f"{json.dumps(x.sweep_protocol)}. Oracle layer (lowest validation loss): "
        f"{bness['oracle']}; worst: {bness['worst']}; geometry l*: {bness['l_star']}.")
    r.table(x.sweep_layers, ["layer", "val_loss", "recon_error", "hybrid_nll", "backbone_nll",
                             "top1_agreement", "steps", "seconds"], ".4g")
    r.table(bness["spearman"], list(bness["spearman"][0]), ".3f")
    r.image(x.plots["scatter"], "S_l vs bridge validation loss per normalisation, and the depth control")

    r.h2("3. Generation: DiHAL, the backbone and the baselines at a matched budget")
    cmp_ = x.comparison
    r.table(cmp_["rows"], ["model", "gen_ppl", "diversity", "repetition", "mean_length",
                           "denoiser_parameters", "train_tokens", "sampler_steps", "seq_len"], ".4g")
    if cmp_.get("missing"):
        r.p(f"Not run: {', '.join(cmp_['missing'])}.")
    r.p(f"Judge: {json.dumps(x.evaluation['judge'])}. Samples: {ev_cfg['n_samples']} x "
        f"{ev_cfg['length']} tokens, temperature {ev_cfg['temperature']}, seed "
        f"{ev_cfg['seed']}. Latency per generated token (cached decoding): "
        + "; ".join(f"{e['model']}: {e['ms_per_token']:.1f} ms ({e['latency_vs_backbone']:.2f}x)"
                    for e in x.evaluation["rows"]) + ".")

    r.h2("4. Full training: geometry-selected vs oracle vs worst layer")
    r.table(x.full_training, ["role", "layer", "val_loss", "recon_error", "hybrid_nll",
                              "top1_agreement", "gen_ppl", "diversity", "train_tokens"], ".4g")

    r.h2("5. Sample texts")
    r.pre("".join(f"== {model}\n" + "".join(f"- {t[:240]!r}\n" for t in texts[:4])
                  for model, texts in x.samples.items()))

    r.h2("6. Configuration and budgets")
    r.pre(json.dumps({**x.configs, "artifacts": x.artifacts}, indent=1))
    return ReportResult(html=r.html(), markdown=r.markdown())
