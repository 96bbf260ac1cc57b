import base64
import math

from dihal.report.document import Document

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


def test_anchored_sections_and_linked_sentences():
    r = Document("t").links([("l* is 3 <here>.", "locate")]).h2("1. Locate", "locate").h3("none")
    md, html = r.markdown(), r.html()
    assert "- l* is 3 <here>. ([evidence](#locate))" in md
    assert '<a id="locate"></a>\n\n## 1. Locate' in md and "### none" in md
    assert "<li>l* is 3 &lt;here&gt;. <a href='#locate'>evidence</a></li>" in html
    assert "<h2 id='locate'>1. Locate</h2>" in html and "<h3>none</h3>" in html
    assert Document("t").h2("plain").html().count("<h2>plain</h2>") == 1
