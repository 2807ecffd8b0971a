#!/usr/bin/env python3
"""Writes the parser test corpus with the tools people make such files with: python-docx for
DOCX, ebooklib for EPUB. The files are committed under operators/tests/fixtures/parse; run this
again (deploy/install.sh's venv plus `pip install python-docx==1.2.0 ebooklib==0.20`) to
regenerate them:

    ~/.freshet/venv/bin/python deploy/make_test_documents.py operators/tests/fixtures/parse
"""
import sys
from pathlib import Path

import docx
from ebooklib import epub


def report_docx(path: Path) -> None:
    d = docx.Document()
    d.core_properties.title = "Quarterly River Report"
    d.add_paragraph("Quarterly River Report", style="Title")
    d.add_heading("Introduction", level=1)
    d.add_paragraph("The river rose in spring & fell in autumn; gauges <read> daily.")
    d.add_heading("Methods", level=2)
    d.add_paragraph("Flow was measured at three sites.")
    d.add_paragraph("Upstream gauge", style="List Bullet")
    d.add_paragraph("Calibrated weekly", style="List Bullet 2")
    d.add_paragraph("Downstream gauge", style="List Bullet")
    d.add_heading("Results", level=2)
    t = d.add_table(rows=3, cols=2)
    for r, (a, b) in enumerate([("Site", "Flow m3/s"), ("Upstream", "12.5"), ("Delta | mouth", "40.1")]):
        t.cell(r, 0).text = a
        t.cell(r, 1).text = b
    d.add_heading("Seasonal detail", level=3)
    d.add_paragraph("Peaks followed snowmelt by two weeks.")
    d.add_heading("Conclusion", level=1)
    d.add_paragraph("Sediment load tracks discharge.")
    d.save(path)


def empty_docx(path: Path) -> None:
    d = docx.Document()
    d.add_paragraph("")
    d.save(path)


def book_epub(path: Path) -> None:
    book = epub.EpubBook()
    book.set_identifier("river-book-1")
    book.set_title("The River Book")
    book.set_language("en")
    chapters = []
    for i, (title, body) in enumerate(
        [
            ("Source", "<p>Springs feed the upper river.</p><h2>Glaciers</h2><p>Meltwater adds flow in summer.</p>"),
            ("Course", "<p>The river meanders across the plain.</p>"),
            ("Mouth", "<p>The delta spreads sediment into the sea.</p>"),
        ],
        start=1,
    ):
        c = epub.EpubHtml(title=title, file_name=f"chap_{i}.xhtml", lang="en")
        c.content = f"<html><head><title>{title}</title></head><body><h1>{title}</h1>{body}</body></html>"
        book.add_item(c)
        chapters.append(c)
    book.toc = chapters
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav"] + chapters
    epub.write_epub(str(path), book)


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    report_docx(out / "report.docx")
    empty_docx(out / "empty.docx")
    book_epub(out / "book.epub")
    whole = (out / "report.docx").read_bytes()
    (out / "truncated.docx").write_bytes(whole[: len(whole) // 2])
    print(f"wrote the parser corpus to {out}")


if __name__ == "__main__":
    main()
