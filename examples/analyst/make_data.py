"""Build the analyst example's data: `data/sales.db`, `data/board_report.pdf`, `data/targets.xlsx`.

The files are committed; this script is how they were made, and makes the same bytes again
(fixed timestamps everywhere), so their attachment ids (a hash of the bytes) stay those
`mock_script.yaml` reads. Needs `openpyxl` (`pip install 'toren[files]'`).

    python examples/analyst/make_data.py [OUT_DIR]     # default: data/ beside this file
"""

from __future__ import annotations

import datetime as dt
import io
import sqlite3
import sys
import zipfile
from pathlib import Path

SALES = [  # region, quarter, product, units, revenue
    ("EU", "2024-Q2", "city", 1200, 1_080_000),
    ("EU", "2024-Q2", "cargo", 300, 450_000),
    ("EU", "2024-Q3", "city", 1450, 1_305_000),
    ("EU", "2024-Q3", "cargo", 410, 615_000),
    ("US", "2024-Q2", "city", 500, 475_000),
    ("US", "2024-Q3", "city", 520, 494_000),
    ("US", "2024-Q3", "cargo", 90, 144_000),
]
TARGETS = [  # region, quarter, target revenue
    ("EU", "2024-Q2", 1_600_000),
    ("EU", "2024-Q3", 1_800_000),
    ("US", "2024-Q2", 500_000),
    ("US", "2024-Q3", 700_000),
]
REPORT = [
    "Board report, Q3 2024\n"
    "Targets for each region and quarter are in targets.xlsx.\n"
    "EU: cargo bikes launched in Germany in July; city bikes steady.\n"
    "US: the dealer network shrank from 40 to 31 shops in August.",
    "Outlook\n"
    "Q4 targets stay as planned. A region more than 5% under target\n"
    "gets a recovery plan at the next board meeting.",
]
FIXED = dt.datetime(2024, 10, 1, 9, 0, 0)


def make_db(path: Path) -> None:
    path.unlink(missing_ok=True)
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE sales (region TEXT, quarter TEXT, product TEXT, units INTEGER,"
            " revenue INTEGER)"
        )
        db.executemany("INSERT INTO sales VALUES (?, ?, ?, ?, ?)", SALES)
    db.close()


def make_pdf(pages: list[str]) -> bytes:
    """A minimal valid PDF, one Helvetica text stream per page (as tests/test_attachments.py)."""

    def escape(line: str) -> str:
        return line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages)))
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    for i, text in enumerate(pages):
        shown = " ".join(f"({escape(line)}) Tj T*" for line in text.split("\n"))
        stream = f"BT /F1 12 Tf 14 TL 72 720 Td {shown} ET"
        objects.append(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {5 + 2 * i} 0 R >>"
        )
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
    ).encode()
    return out


def make_xlsx() -> bytes:
    import openpyxl  # type: ignore[import-untyped]

    workbook = openpyxl.Workbook()
    workbook.properties.creator = "toren examples"
    workbook.properties.created = FIXED
    sheet = workbook.active
    sheet.title = "Targets"
    sheet.append(["region", "quarter", "target_revenue"])
    for row in TARGETS:
        sheet.append(list(row))
    raw = io.BytesIO()
    workbook.save(raw)
    # openpyxl stamps the save time into docProps/core.xml and each zip entry: rewrite both.
    out = io.BytesIO()
    with zipfile.ZipFile(raw) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "docProps/core.xml":
                data = _fixed_modified(data)
            dst.writestr(zipfile.ZipInfo(item.filename, FIXED.timetuple()[:6]), data)
    return out.getvalue()


def _fixed_modified(core: bytes) -> bytes:
    text = core.decode()
    start = text.index("<dcterms:modified")
    start = text.index(">", start) + 1
    end = text.index("</dcterms:modified>", start)
    return (text[:start] + FIXED.strftime("%Y-%m-%dT%H:%M:%SZ") + text[end:]).encode()


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    make_db(out / "sales.db")
    (out / "board_report.pdf").write_bytes(make_pdf(REPORT))
    (out / "targets.xlsx").write_bytes(make_xlsx())
    print(f"wrote {out / 'sales.db'}, {out / 'board_report.pdf'}, {out / 'targets.xlsx'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "data")
