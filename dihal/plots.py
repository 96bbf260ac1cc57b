"""Plots of the stages as PNG bytes (matplotlib, Agg backend); storage writes them."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from dihal.proxies import NAMES, SCORE_FORMULA

if TYPE_CHECKING:
    from dihal.inputs import GeometryRow, ScoreRow


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(plt, fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def plot_proxies(rows: list[GeometryRow], title: str) -> bytes:
    """Each proxy (dihal.proxies) against layer, one line per normalisation (log scale)."""
    plt = _pyplot()
    norms = sorted({r.norm for r in rows})
    fig, axes = plt.subplots(1, len(NAMES), figsize=(13, 3.6))
    for ax, key in zip(axes, NAMES, strict=True):
        for norm in norms:
            pts = sorted((r.layer, getattr(r, key)) for r in rows if r.norm == norm)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=norm)
        ax.set_yscale("log")
        ax.set_xlabel("layer l")
        ax.set_title(key)
        ax.grid(alpha=0.3)
    axes[0].legend(title="normalisation")
    fig.suptitle(title)
    fig.tight_layout()
    return _png(plt, fig)


def plot_scores(score_rows: list[ScoreRow], selected: dict[str, int], title: str) -> bytes:
    """S_l against layer per normalisation, l* marked."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for norm in sorted(selected):
        pts = sorted((r.layer, r.S) for r in score_rows if r.norm == norm and r.candidate)
        (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=norm)
        best = dict(pts)[selected[norm]]
        ax.scatter([selected[norm]], [best], s=90, facecolors="none", edgecolors=line.get_color())
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xlabel("layer l")
    ax.set_ylabel(SCORE_FORMULA)
    ax.legend(title="normalisation (circle: l*)")
    ax.grid(alpha=0.3)
    ax.set_title(title)
    fig.tight_layout()
    return _png(plt, fig)


def plot_bridgeability(layer_rows: list[dict], score_rows: list[ScoreRow], title: str) -> bytes:
    """Per normalisation: S_l against validation loss of each swept layer (labelled by l),
    beside the depth control (l against validation loss)."""
    plt = _pyplot()
    norms = sorted({r.norm for r in score_rows})
    score = {(r.norm, r.layer): r.S for r in score_rows}
    rows = sorted(layer_rows, key=lambda r: r["layer"])
    fig, axes = plt.subplots(1, len(norms) + 1, figsize=(4 * (len(norms) + 1), 3.6), sharey=True)
    for ax, norm in zip(axes, [*norms, "depth"], strict=True):
        xs = [(-r["layer"] if norm == "depth" else score[(norm, r["layer"])]) for r in rows]
        ys = [r["val_loss"] for r in rows]
        ax.scatter(xs, ys, s=18)
        for x, y, r in zip(xs, ys, rows, strict=True):
            ax.annotate(str(r["layer"]), (x, y), fontsize=7, xytext=(2, 2), textcoords="offset points")
        ax.set_xlabel("-l (depth control)" if norm == "depth" else f"S_l ({norm})")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("bridge validation loss")
    fig.suptitle(title)
    fig.tight_layout()
    return _png(plt, fig)


def plot_quality_diversity(rows: list[dict], title: str) -> bytes:
    """Gen.PPL (log scale, lower is better) against diversity (higher is better), one point per
    model: the plot papers on diffusion language models compare with."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in rows:
        ax.scatter([r["diversity"]], [r["gen_ppl"]], s=40)
        ax.annotate(r["model"], (r["diversity"], r["gen_ppl"]), fontsize=8, xytext=(4, 3),
                    textcoords="offset points")
    ax.set_yscale("log")
    ax.set_xlabel("diversity (higher is better)")
    ax.set_ylabel("Gen.PPL (lower is better)")
    ax.grid(alpha=0.3)
    ax.set_title(title)
    fig.tight_layout()
    return _png(plt, fig)


def plot_cost_quality(points: list[dict], backbone: dict, title: str) -> bytes:
    """Held-out hybrid NLL (lower is better) against FLOPs per generated token, one point per
    swept layer and kind of replacement (`points`: {"kind", "layer", "flops", "nll"}; each kind
    a line over layers, annotated with l), and the backbone ({"flops", "nll"}) as a star:
    which layers are worth replacing at all."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for kind in dict.fromkeys(p["kind"] for p in points):
        mine = sorted((p for p in points if p["kind"] == kind), key=lambda p: p["layer"])
        ax.plot([p["flops"] / 1e6 for p in mine], [p["nll"] for p in mine], "o-", ms=4,
                label=kind)
        for p in mine:
            ax.annotate(f"l={p['layer']}", (p["flops"] / 1e6, p["nll"]), fontsize=7,
                        xytext=(3, 2), textcoords="offset points")
    ax.scatter([backbone["flops"] / 1e6], [backbone["nll"]], marker="*", s=120, color="k",
               label="backbone", zorder=3)
    return _finish(plt, fig, ax, title, "MFLOPs per generated token",
                   "held-out NLL (nats, lower is better)", legend_size=8)


def plot_frontier(points: list[dict], title: str) -> bytes:
    """Gen.PPL (log scale) against diversity across decoding temperatures: one line per model
    through its temperatures, each point labelled with T; a recipe without a temperature
    (deterministic rounding) as one marked point (`points`: dihal.evaluate.frontier.point)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, model in enumerate(dict.fromkeys(p["model"] for p in points)):
        mine = [p for p in points if p["model"] == model and p["gen_ppl"] is not None
                and p["diversity"] is not None]
        color = f"C{i % 10}"  # one colour per model (scatter and plot cycle apart)
        if not mine:
            continue
        if all(p["temperature"] is None for p in mine):
            ax.scatter([p["diversity"] for p in mine], [p["gen_ppl"] for p in mine], marker="D",
                       s=50, color=color, label=f"{model} (no temperature)", zorder=3)
            continue
        mine.sort(key=lambda p: p["temperature"])
        ax.plot([p["diversity"] for p in mine], [p["gen_ppl"] for p in mine], "o-", ms=4,
                color=color, label=model)
        for p in mine:
            ax.annotate(f"T={p['temperature']:g}", (p["diversity"], p["gen_ppl"]), fontsize=7,
                        xytext=(3, 2), textcoords="offset points")
    ax.set_yscale("log")
    return _finish(plt, fig, ax, title, "diversity (higher is better)",
                   "Gen.PPL (log scale, lower is better)", legend_size=7)


def _finish(plt, fig, ax, title: str, xlabel: str, ylabel: str, *, legend_size: int) -> bytes:
    """Axis labels, grid, legend and title of a plot with labelled series, as PNG bytes."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size)
    ax.set_title(title)
    fig.tight_layout()
    return _png(plt, fig)
