"""The report's cross-backbone tables for backbones materialised in different artifact roots
(each run of `make run BACKBONE=...` in its own clone, say):

    python scripts/cross_backbone.py ROOT [ROOT ...]     # each ROOT: a .dihal/artifacts folder

Every backbone of each root with a layer score and a bridgeability artifact is one line (its
artifacts are digest-checked first, as the report does); prints Markdown. Within one root the
report itself has these tables (section 5).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> None:
    from dihal.report.cross_backbone import cross_backbone_tables
    from dihal.report.document import Document
    from storage import ArtifactLayout, backbone_summary
    from storage.lineage import other_backbones

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("roots", nargs="+", help="artifact roots (.dihal/artifacts folders)")
    args = ap.parse_args(argv)
    summaries = []
    for root in args.roots:
        layout = ArtifactLayout(Path(root))
        found = other_backbones(layout, "")  # every backbone of this root
        if not found:
            print(f"{root}: no backbone with a layer score and bridgeability", file=sys.stderr)
        summaries += [backbone_summary(layout, b) for b in found]
    if not summaries:
        raise SystemExit("nothing to compare")
    main_rows, spearman = cross_backbone_tables(summaries)
    doc = Document("Across backbones")
    doc.table(main_rows, list(main_rows[0]))
    doc.p("Spearman against -val loss over the swept layers, 95 % bootstrap interval over layers; "
          "(above)/(below): the interval does not overlap depth's.")
    doc.table(spearman, list(spearman[0]))
    print(doc.markdown())


if __name__ == "__main__":
    main()
