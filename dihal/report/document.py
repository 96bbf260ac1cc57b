"""A report from a list of blocks, rendered to HTML with the plots embedded (base64: one file
carries everything a reader needs) and to Markdown whose plots are PNG files beside it (so it
renders on a code host and reads as text), named by the caller's `figure_name`."""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Document:
    title: str
    blocks: list[tuple] = field(default_factory=list)

    def h2(self, text: str, anchor: str | None = None) -> Document:
        """A section heading; `anchor` names it, for links (`links`) to point at."""
        self.blocks.append(("h2", text, anchor))
        return self

    def h3(self, text: str) -> Document:
        self.blocks.append(("h3", text))
        return self

    def links(self, items: list[tuple[str, str]], label: str = "evidence") -> Document:
        """A list of sentences, each followed by a link to the section `anchor` that shows
        its evidence: [(sentence, anchor)]."""
        self.blocks.append(("links", items, label))
        return self

    def p(self, text: str) -> Document:
        self.blocks.append(("p", text))
        return self

    def table(self, rows: list[dict], columns: list[str] | None = None, fmt: str = ".4g") -> Document:
        columns = columns or (list(rows[0]) if rows else [])
        self.blocks.append(("table", rows, columns, fmt))
        return self

    def image(self, png: bytes, caption: str) -> Document:
        self.blocks.append(("img", png, caption))
        return self

    def pre(self, text: str) -> Document:
        self.blocks.append(("pre", text))
        return self

    # ------------------------------------------------------------------ rendering

    @staticmethod
    def _cell(v, fmt: str) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "n/a"
        if isinstance(v, float):
            return format(v, fmt)
        return str(v)

    def figures(self) -> list[bytes]:
        """The plots, in the order the Markdown numbers them (from 1)."""
        return [b[1] for b in self.blocks if b[0] == "img"]

    def markdown(self, figure_name: Callable[[int], str] | None = None) -> str:
        """The Markdown; its n-th plot (from 1) links to the file `figure_name(n)` beside it,
        or without `figure_name` is embedded as a data URI."""
        out, figure = [f"# {self.title}", ""], 0
        for b in self.blocks:
            kind = b[0]
            if kind == "h2":
                out += ([f'<a id="{b[2]}"></a>', ""] if b[2] else []) + [f"## {b[1]}", ""]
            elif kind == "h3":
                out += [f"### {b[1]}", ""]
            elif kind == "links":
                out += [f"- {text} ([{b[2]}](#{anchor}))" for text, anchor in b[1]] + [""]
            elif kind == "p":
                out += [b[1], ""]
            elif kind == "table":
                _, rows, cols, fmt = b
                out.append("| " + " | ".join(cols) + " |")
                out.append("|" + "---|" * len(cols))
                for r in rows:
                    out.append("| " + " | ".join(self._cell(r.get(c), fmt).replace("|", "/")
                                                 for c in cols) + " |")
                out.append("")
            elif kind == "img":
                figure += 1
                src = (figure_name(figure) if figure_name else
                       "data:image/png;base64," + base64.b64encode(b[1]).decode("ascii"))
                out += [f"![{b[2]}]({src})", "", f"*{b[2]}*", ""]
            elif kind == "pre":
                out += ["```", b[1], "```", ""]
        return "\n".join(out)

    def html(self) -> str:
        e = html.escape
        out = ["<!doctype html><html><head><meta charset='utf-8'>", f"<title>{e(self.title)}</title>",
               "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
               "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;"
               "padding:3px 8px;text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}"
               "pre{background:#f6f6f6;padding:1em;overflow:auto;white-space:pre-wrap}"
               "img{max-width:100%}</style></head><body>", f"<h1>{e(self.title)}</h1>"]
        for b in self.blocks:
            kind = b[0]
            if kind == "h2":
                out.append(f"<h2 id='{e(b[2])}'>{e(b[1])}</h2>" if b[2] else f"<h2>{e(b[1])}</h2>")
            elif kind == "h3":
                out.append(f"<h3>{e(b[1])}</h3>")
            elif kind == "links":
                out.append("<ul>" + "".join(f"<li>{e(text)} <a href='#{e(anchor)}'>{e(b[2])}</a></li>"
                                            for text, anchor in b[1]) + "</ul>")
            elif kind == "p":
                out.append(f"<p>{e(b[1])}</p>")
            elif kind == "table":
                _, rows, cols, fmt = b
                out.append("<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in cols) + "</tr>")
                for r in rows:
                    out.append("<tr>" + "".join(f"<td>{e(self._cell(r.get(c), fmt))}</td>"
                                                for c in cols) + "</tr>")
                out.append("</table>")
            elif kind == "img":
                data = base64.b64encode(b[1]).decode("ascii")
                out.append(f"<figure><img src='data:image/png;base64,{data}' alt='{e(b[2])}'>"
                           f"<figcaption>{e(b[2])}</figcaption></figure>")
            elif kind == "pre":
                out.append(f"<pre>{e(b[1])}</pre>")
        out.append("</body></html>")
        return "\n".join(out)
