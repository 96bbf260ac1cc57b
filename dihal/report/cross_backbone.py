"""The report's cross-backbone section: every backbone materialised in the artifact root."""

from __future__ import annotations

from dihal.inputs import BackboneSummary
from dihal.report.common import BACKBONES, interval
from dihal.report.document import Document
from dihal.report.inputs import ReportInputs
from dihal.rows import ABOVE, BELOW


def cross_backbone_tables(summaries: list[BackboneSummary]) -> tuple[list[dict], list[dict]]:
    """The cross-backbone tables from one summary per materialised backbone (storage's
    backbone_summary: its l* per normalisation, bridgeability info, evaluation rows or None,
    judge): (one row per backbone: l* per normalisation, oracle, worst, hybrid and backbone
    Gen.PPL with the judge; one row per predictor: its Spearman vs -val loss on each backbone,
    with the interval and its standing against depth)."""
    return _backbone_lines(summaries), _predictor_lines(summaries)


def _backbone_lines(summaries: list[BackboneSummary]) -> list[dict]:
    norms = sorted({n for s in summaries for n in s.selected})
    main = []
    for s in summaries:
        gen = s.by_role()
        main.append({
            "backbone": s.backbone, **{f"l* ({n})": s.selected.get(n, "") for n in norms},
            "oracle": s.oracle, "worst": s.worst, "swept layers": len(s.swept_layers),
            "hybrid Gen.PPL [95 %]": gen["dihal"].gen_ppl.text() if "dihal" in gen
            else "not evaluated",
            "backbone Gen.PPL [95 %]": (gen["backbone"].gen_ppl.text() if "backbone" in gen
                                        else "not evaluated"),
            "judge": s.judge or "",
        })
    return main


def _predictor_lines(summaries: list[BackboneSummary]) -> list[dict]:
    typed = {s.backbone: {r.predictor: r for r in s.spearman} for s in summaries}
    predictors = list(dict.fromkeys(p for rows in typed.values() for p in rows))
    spearman = []
    for p in predictors:
        row = {"predictor": p}
        for b, rows in typed.items():
            got = rows[p].of() if p in rows else None
            cell = interval(got) if p in rows else "not computed"
            standing = got.vs_depth if got else ""
            row[b] = f"{cell} ({standing})" if standing in (ABOVE, BELOW) else cell
        spearman.append(row)
    return spearman


def cross_backbone_section(r: Document, x: ReportInputs) -> None:
    r.h2("5. Across backbones", BACKBONES)
    names = [s.backbone for s in x.backbones]
    if not names:
        r.p("No backbone summaries were given.")
        return
    r.p(f"Every backbone whose layer score and bridgeability are materialised in this artifact "
        f"root: {', '.join(names)}. Each backbone's samples are scored by its own judge (never itself). Spearman against "
        "-val loss with its 95 % interval over layers; (above)/(below) where the paired "
        "difference from depth's Spearman says so (Holm-corrected, section 2).")
    main, spearman = cross_backbone_tables(x.backbones)
    r.table(main, list(main[0]))
    r.table(spearman, list(spearman[0]))
    if len(names) == 1:
        r.p(f"Only {names[0]} has been materialised here; materialise another backbone (for "
            f"example `python -m pipeline.main --backbone {another_backbone(names[0])}`) and "
            "this report again to compare them.")


def another_backbone(name: str) -> str:
    """An embedded backbone other than `name`, to suggest beside it (both run offline)."""
    return "smollm2" if name == "gemma3" else "gemma3"
