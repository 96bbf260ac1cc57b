import base64
import math

from dihal.document import Document

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


def test_report_renders_tables_images_and_escapes():
    r = Document("DiHAL <test>")
    r.h2("Geometry").p("a & b").table(
        [{"layer": 1, "S": 1.23456, "note": "x|y"}, {"layer": 2, "S": math.nan, "note": None}],
        ["layer", "S", "note"], ".3f").image(PNG, "a plot").pre("raw <text>")
    md = r.markdown()
    assert md.startswith("# DiHAL <test>")
    assert "| layer | S | note |" in md and "| 1 | 1.235 | x/y |" in md and "| 2 | n/a | n/a |" in md
    assert "data:image/png;base64," + base64.b64encode(PNG).decode() in md
    html = r.html()
    assert "<title>DiHAL &lt;test&gt;</title>" in html and "a &amp; b" in html
    assert "<td>1.235</td>" in html and "raw &lt;text&gt;" in html
    assert html.count("<img ") == 1 and html.rstrip().endswith("</html>")
