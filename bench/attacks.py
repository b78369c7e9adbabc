"""Issue 30's small-input memory attacks, each in a fresh process: what it gets and what it costs.

```bash
python -m bench.attacks            # this checkout's toren
PYTHONPATH=/tmp/main python -m bench.attacks   # another toren (e.g. `git archive` of main)
```

Prints one line per attack: the outcome (the error's first words, or "no error") and the
process's peak RSS (`VmHWM`) and wall time. The hostile files are built here, streamed, in this
process; each attack runs in its own interpreter so one's peak does not hide another's.
Figures vary by machine; tests assert the refusals, never these numbers.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

_XLSX_PARTS = {
    "[Content_Types].xml": (
        '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/'
        'package/2006/content-types"><Default Extension="rels" ContentType="application/'
        'vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType='
        '"application/xml"/><Override PartName="/xl/workbook.xml" ContentType="application/'
        'vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/><Override PartName='
        '"/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-'
        'officedocument.spreadsheetml.worksheet+xml"/></Types>'
    ),
    "_rels/.rels": (
        '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.'
        'openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://'
        'schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target='
        '"xl/workbook.xml"/></Relationships>'
    ),
    "xl/workbook.xml": (
        '<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="http://schemas.openxmlformats.'
        'org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/'
        'officeDocument/2006/relationships"><sheets><sheet name="Rows" sheetId="1" r:id="rId1"/>'
        "</sheets></workbook>"
    ),
    "xl/_rels/workbook.xml.rels": (
        '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.'
        'openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://'
        'schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target='
        '"worksheets/sheet1.xml"/></Relationships>'
    ),
}


def _deflated(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def xlsx_of_rows(rows: int) -> bytes:
    """A valid .xlsx whose one sheet has `rows` rows of one number, streamed into the zip."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compresslevel=9) as z:
        for name, text in _XLSX_PARTS.items():
            z.writestr(_deflated(name), text)
        with z.open(_deflated("xl/worksheets/sheet1.xml"), "w", force_zip64=True) as f:
            f.write(
                b'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="http://schemas.'
                b'openxmlformats.org/spreadsheetml/2006/main"><sheetData>'
            )
            chunk = []
            for i in range(1, rows + 1):
                # Row and cell references are optional; without them the part compresses as
                # the attack's did (ten million rows in 2.9 MB).
                chunk.append(f"<row><c><v>{i % 10}</v></c></row>")
                if len(chunk) == 100_000:
                    f.write("".join(chunk).encode())
                    chunk = []
            f.write("".join(chunk).encode() + b"</sheetData></worksheet>")
    return out.getvalue()


def docx_inflating_to(size: int) -> bytes:
    """A valid .docx whose document.xml inflates to about `size` bytes (blanks between tags)."""
    import docx

    document = docx.Document()
    document.add_paragraph("A small report.")
    plain = io.BytesIO()
    document.save(plain)
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(plain.getvalue())) as src,
        zipfile.ZipFile(out, "w", compresslevel=9) as dst,
    ):
        for info in src.infolist():
            old = src.read(info)
            with dst.open(_deflated(info.filename), "w", force_zip64=True) as f:
                if info.filename != "word/document.xml":
                    f.write(old)
                    continue
                head, tail = old.split(b"</w:body>")
                f.write(head)
                block = b" " * (1 << 20)
                for _ in range(size >> 20):
                    f.write(block)
                f.write(b"</w:body>" + tail)
    return out.getvalue()


# Each runs in a fresh interpreter: `python -c CHILD kind path`.
CHILD = r"""
import json, sys, time
kind, path = sys.argv[1], sys.argv[2]
began = time.monotonic()
outcome = "no error"
try:
    if kind == "sqlite":
        from toren.worker.tools._sql_query._sqlite import run_sqlite
        from pathlib import Path
        result = run_sqlite(Path(path), "SELECT zeroblob(500000000) AS b", 100, 60_000)
        outcome = "no error: " + json.dumps(result)[:80]
    else:
        from toren.store._parsers import detect_type, extract_text
        data = open(path, "rb").read()
        name = "attack." + kind
        text = extract_text(data, name, detect_type(data, name))
        outcome = f"no error: {len(text):,} characters of text"
except Exception as err:
    outcome = f"{type(err).__name__}: {err}"
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]
print(json.dumps({"outcome": outcome, "peak_mb": int(hwm) // 1024,
                  "seconds": round(time.monotonic() - began, 1)}))
"""


def attack(kind: str, path: Path, timeout: float) -> dict[str, object]:
    """Run one attack in a fresh interpreter; its outcome, peak RSS and time."""
    began = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, kind, str(path)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=path.parent,  # not this checkout: PYTHONPATH picks the toren measured
            env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", os.getcwd())},
        )
    except subprocess.TimeoutExpired:
        return {"outcome": f"still running after {timeout:g} s (killed)", "peak_mb": "?",
                "seconds": round(time.monotonic() - began, 1)}  # fmt: skip
    if done.returncode != 0:
        return {"outcome": f"crashed: {done.stderr.strip()[-200:]}", "peak_mb": "?", "seconds": 0}
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    """Build the files, run each attack, print a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docx-mb", type=int, default=1536, help="document.xml inflated size")
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows of the .xlsx")
    parser.add_argument("--timeout", type=float, default=200, help="seconds per attack")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="toren-attacks-") as tmp:
        root = Path(tmp)
        import sqlite3

        sqlite3.connect(root / "db.sqlite").execute("CREATE TABLE t(x)").connection.commit()
        (root / "a.docx").write_bytes(docx_inflating_to(args.docx_mb << 20))
        (root / "a.xlsx").write_bytes(xlsx_of_rows(args.rows))
        # Under the inflated-size limit: read row by row, stopping at MAX_SHEET_ROWS.
        (root / "b.xlsx").write_bytes(xlsx_of_rows(args.rows // 4))
        cases = [
            ("sqlite", root / "db.sqlite", "SELECT zeroblob(500000000) via sql_query"),
            ("docx", root / "a.docx", f"{(root / 'a.docx').stat().st_size / 1e6:.1f} MB .docx, "
             f"document.xml inflating to {args.docx_mb} MB"),
            ("xlsx", root / "a.xlsx", f"{(root / 'a.xlsx').stat().st_size / 1e6:.1f} MB .xlsx, "
             f"{args.rows:,} rows"),
            ("xlsx", root / "b.xlsx", f"{(root / 'b.xlsx').stat().st_size / 1e6:.1f} MB .xlsx, "
             f"{args.rows // 4:,} rows"),
        ]  # fmt: skip
        print("| attack | outcome | peak RSS (MB) | seconds |\n|---|---|---|---|")
        for kind, path, label in cases:
            got = attack(kind, path, args.timeout)
            outcome = str(got["outcome"]).replace("|", "/")[:160]
            print(f"| {label} | {outcome} | {got['peak_mb']} | {got['seconds']} |", flush=True)


if __name__ == "__main__":
    main()
