#!/usr/bin/env python3
"""Writes the parser test corpus with the tools people make such files with: python-docx for
DOCX, ebooklib for EPUB, fpdf2 for PDF. The files are committed under
operators/tests/fixtures/parse; run this again (deploy/install.sh's venv plus
`pip install python-docx==1.2.0 ebooklib==0.20 fpdf2==2.8.9`) to regenerate them:

    ~/.freshet/venv/bin/python deploy/make_test_documents.py operators/tests/fixtures/parse

`--bench DIR` writes larger files for `freshet-tools bench-parse --dir DIR` instead.
When LibreOffice is installed (Debian's libreoffice-writer-nogui), report.docx is also exported
to report-libreoffice.pdf, a PDF as an office suite writes it.
"""
import shutil
import subprocess
import sys
from pathlib import Path

import docx
from ebooklib import epub
from fpdf import FPDF
from PIL import Image


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


def write_epub(path: Path, ident: str, title: str, chapters, nav_in_spine: bool, head_titles: bool) -> None:
    """An EPUB of (title, body HTML) chapters, each opening with its title as <h1>."""
    book = epub.EpubBook()
    book.set_identifier(ident)
    book.set_title(title)
    book.set_language("en")
    items = []
    for i, (name, body) in enumerate(chapters, start=1):
        c = epub.EpubHtml(title=name, file_name=f"chap_{i}.xhtml", lang="en")
        head = f"<head><title>{name}</title></head>" if head_titles else ""
        c.content = f"<html>{head}<body><h1>{name}</h1>{body}</body></html>"
        book.add_item(c)
        items.append(c)
    book.toc = items
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = (["nav"] if nav_in_spine else []) + items
    epub.write_epub(str(path), book)


def book_epub(path: Path) -> None:
    chapters = [
        ("Source", "<p>Springs feed the upper river.</p><h2>Glaciers</h2><p>Meltwater adds flow in summer.</p>"),
        ("Course", "<p>The river meanders across the plain.</p>"),
        ("Mouth", "<p>The delta spreads sediment into the sea.</p>"),
    ]
    write_epub(path, "river-book-1", "The River Book", chapters, nav_in_spine=True, head_titles=True)


LEFT = [
    "The upper river gathers water from springs and melting snow on the high slopes.",
    "Its channel is narrow and steep, and the current carries coarse gravel downstream.",
    "Gauges on the upper reach report the level every fifteen minutes to the control room.",
]
RIGHT = [
    "The lower river spreads across a wide floodplain before it reaches the delta.",
    "There the current slows and fine silt settles, building new land each season.",
    "Boats on the lower reach follow channels that the harbour office marks with buoys.",
]


class Report(FPDF):
    """Running header and footer on every page, as office tools print them."""

    def header(self):
        self.set_font("Helvetica", size=9)
        self.cell(0, 8, "River Survey 2026 - Internal Draft", align="C")
        self.ln(12)

    def footer(self):
        self.set_y(-15)
        self.set_font("Helvetica", size=9)
        self.cell(0, 8, f"Page {self.page_no()} of {{nb}}", align="C")


def headers_pdf(path: Path) -> None:
    pdf = Report()
    pdf.set_title("River Survey")
    topics = [
        ("Introduction", "The survey measured flow along the whole river during the spring freshet."),
        ("Upper river", "Snowmelt raised the upper river first; its gauges peaked in early April."),
        ("Lower river", "The lower river peaked two weeks later, when the meltwater reached the plain."),
        ("Conclusions", "Sediment load followed discharge closely, as earlier surveys had found."),
    ]
    for title, body in topics:
        pdf.add_page()
        pdf.set_font("Helvetica", "B", size=20)
        pdf.cell(0, 12, title)
        pdf.ln(16)
        pdf.set_font("Helvetica", size=11)
        text = " ".join([body] * 3) + f" The measure- ment of {title.lower()} went on all season."
        pdf.multi_cell(0, 6, text.replace("measure- ment", "measure-\nment"))
    pdf.output(str(path))


def two_column_pdf(path: Path) -> None:
    pdf = Report()
    pdf.set_font("Helvetica", size=11)
    for page in range(2):
        pdf.add_page()
        top = pdf.get_y()
        for column, lines in ((10, LEFT), (110, RIGHT)):
            pdf.set_xy(column, top)
            for line in lines:
                pdf.set_x(column)
                pdf.multi_cell(90, 6, f"{('First', 'Second')[page]} page: {line}")
                pdf.ln(3)
    pdf.output(str(path))


def scanned_pdf(path: Path, work: Path) -> None:
    img = work / "scan.png"
    Image.new("L", (400, 300), color=200).save(img)
    pdf = FPDF()
    pdf.add_page()
    pdf.image(str(img), x=10, y=10, w=150)
    pdf.output(str(path))
    img.unlink()


def encrypted_pdf(path: Path) -> None:
    pdf = FPDF()
    pdf.set_encryption(owner_password="owner", user_password="secret")
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)
    pdf.cell(0, 10, "Nothing to read without the password.")
    pdf.output(str(path))


WORDS = (
    "river delta sediment flow basin channel estuary tide marsh gauge levee meander watershed "
    "spring discharge freshet current floodplain silt erosion snowmelt reach harbour survey"
).split()


def sentence(i: int, n: int = 14) -> str:
    words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(n)]
    return " ".join(words).capitalize() + "."


def bench_corpus(out: Path) -> None:
    """Larger files for `freshet-tools bench-parse` (not committed): a 40-page PDF in two
    columns with headings, running headers and footers; a 300-paragraph DOCX with headings and
    tables; a 20-chapter EPUB; a 2,000-row CSV."""
    pdf = Report()
    for page in range(40):
        pdf.add_page()
        pdf.set_font("Helvetica", "B", size=18)
        pdf.cell(0, 10, f"Section {page + 1}")
        pdf.ln(14)
        pdf.set_font("Helvetica", size=10)
        top = pdf.get_y()
        for column in (10, 110):
            pdf.set_xy(column, top)
            for p in range(6):
                pdf.set_x(column)
                pdf.multi_cell(90, 5, " ".join(sentence(page * 50 + column + p * 5 + k) for k in range(4)))
                pdf.ln(2)
    pdf.output(str(out / "bench.pdf"))
    d = docx.Document()
    for i in range(300):
        if i % 20 == 0:
            d.add_heading(f"Part {i // 20 + 1}", level=1)
        if i % 50 == 25:
            t = d.add_table(rows=6, cols=3)
            for r in range(6):
                for c in range(3):
                    t.cell(r, c).text = WORDS[(i + r * 3 + c) % len(WORDS)]
        d.add_paragraph(" ".join(sentence(i * 5 + k) for k in range(5)))
    d.save(out / "bench.docx")
    chapters = [
        (f"Chapter {c + 1}", "".join(f"<p>{' '.join(sentence(c * 40 + p * 4 + k) for k in range(4))}</p>" for p in range(30)))
        for c in range(20)
    ]
    write_epub(out / "bench.epub", "bench-book", "Bench Book", chapters, nav_in_spine=False, head_titles=False)
    rows = ["site,reach,flow,note"] + [f"site {i},{WORDS[i % len(WORDS)]},{i * 0.7:.1f},{sentence(i, 6)}" for i in range(2000)]
    (out / "bench.csv").write_text("\n".join(rows) + "\n")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--bench":
        out = Path(sys.argv[2])
        out.mkdir(parents=True, exist_ok=True)
        bench_corpus(out)
        print(f"wrote the parse benchmark corpus to {out}")
        return
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    report_docx(out / "report.docx")
    empty_docx(out / "empty.docx")
    book_epub(out / "book.epub")
    whole = (out / "report.docx").read_bytes()
    (out / "truncated.docx").write_bytes(whole[: len(whole) // 2])
    headers_pdf(out / "headers.pdf")
    two_column_pdf(out / "two-column.pdf")
    scanned_pdf(out / "scanned.pdf", out)
    encrypted_pdf(out / "encrypted.pdf")
    if shutil.which("soffice"):
        subprocess.run(
            ["soffice", "--headless", "--convert-to", "pdf", "--outdir", str(out), str(out / "report.docx")],
            check=True,
            capture_output=True,
        )
        (out / "report.pdf").rename(out / "report-libreoffice.pdf")
    whole = (out / "headers.pdf").read_bytes()
    (out / "truncated.pdf").write_bytes(whole[: len(whole) // 2])
    print(f"wrote the parser corpus to {out}")


if __name__ == "__main__":
    main()
