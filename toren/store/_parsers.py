"""Files to text, and text to pages: what the attachment store keeps of a file.

```python
mime = detect_type(data, "report.pdf")       # by extension, else by the bytes
pages = split_pages(extract_text(data, "report.pdf", mime))
```

PDF (pypdf), Word .docx (python-docx: paragraphs and tables), Excel .xlsx (openpyxl: each
sheet as `# Sheet: Name` and CSV rows) and text (markdown, CSV, JSON, YAML, HTML, logs...).
The parsers are imported when a file needs them; `pip install 'toren[files]'` adds them.
"""

from __future__ import annotations

import csv
import datetime as dt
import importlib
import io
import mimetypes
import re
import zipfile
from pathlib import Path
from typing import Any

from toren.errors import AttachmentError

__all__ = [
    "MAX_INFLATED_BYTES",
    "MAX_SHEET_ROWS",
    "MAX_TEXT_CHARS",
    "PAGE_CHARS",
    "detect_type",
    "extension_for",
    "extract_text",
    "split_pages",
]

PAGE_CHARS = 4_000
"""Target page size in characters; pages break at a paragraph or line near it."""

MAX_TEXT_CHARS = 20_000_000
"""Most extracted text kept from one file (5,000 pages): a 15 MB zip can expand a lot."""

MAX_INFLATED_BYTES = 128 * 1024 * 1024
"""Most bytes a .docx or .xlsx may inflate to, all its parts together, checked in the zip's
directory before any part is read: its parsers hold a part whole (python-docx as an XML tree
several times its size), so a 1.5 MB file inflating to 1.5 GB cost 2.4 GB of memory."""

MAX_SHEET_ROWS = 1_048_576
"""Most rows read from one .xlsx, all sheets together: Excel's own limit for one sheet. Reading
is row by row, about 50,000 rows a second: ten million small rows fit in 2.9 MB and took
minutes."""

_PDF = "application/pdf"
_DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
_XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"

_TYPES = {
    ".pdf": _PDF,
    ".docx": _DOCX,
    ".xlsx": _XLSX,
    ".xlsm": _XLSX,
    ".txt": "text/plain",
    ".text": "text/plain",
    ".log": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".csv": "text/csv",
    ".tsv": "text/tab-separated-values",
    ".json": "application/json",
    ".jsonl": "application/jsonl",
    ".ndjson": "application/jsonl",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".toml": "application/toml",
    ".xml": "application/xml",
    ".html": "text/html",
    ".htm": "text/html",
    ".ini": "text/plain",
    ".cfg": "text/plain",
    ".rst": "text/x-rst",
}
"""Extensions read by type; any other file is read as text if its bytes are UTF-8 text."""

_EXTENSIONS = {_PDF: ".pdf", _DOCX: ".docx", _XLSX: ".xlsx"}

_MIME = mimetypes.MimeTypes()
"""Python's built-in type table only: the system's mime.types would make errors vary by host."""

_SUPPORTED = "PDF, DOCX, XLSX and text (txt, md, csv, json, yaml, html, logs, ...)"


def extension_for(mime: str) -> str:
    """The extension to name unnamed bytes of type `mime` with (`.txt` for any text)."""
    return _EXTENSIONS.get(mime, ".txt")


def detect_type(data: bytes, name: str) -> str:
    """The type to parse `data` as: by `name`'s extension, else by the bytes.

    Raises:
        AttachmentError: neither a supported document nor UTF-8 text.
    """
    ext = Path(name).suffix.lower()
    if ext in _TYPES:
        return _TYPES[ext]
    # No name or an unknown extension: look at the bytes.
    if data.startswith(b"%PDF-"):
        return _PDF
    if data.startswith(b"PK\x03\x04"):
        try:
            names = set(zipfile.ZipFile(io.BytesIO(data)).namelist())
        except zipfile.BadZipFile:
            names = set()
        if "word/document.xml" in names:
            return _DOCX
        if "xl/workbook.xml" in names:
            return _XLSX
    guessed = _MIME.guess_type(name)[0] if name else None
    if _is_text(data):
        # Source code and config under any extension (.ts guesses as video/mp2t) is text.
        return guessed if guessed and guessed.startswith("text/") else "text/plain"
    kind = guessed or (f"{ext!r} files" if ext else "binary data")
    label = repr(name) if name else "the attachment"
    raise AttachmentError(
        f"unsupported file type {kind} for {label}; supported: {_SUPPORTED}. Convert it "
        "(e.g. .doc to .docx, .xls to .xlsx) or attach its text"
    )


def _is_text(data: bytes) -> bool:
    if b"\x00" in data[:8192]:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def extract_text(data: bytes, name: str, mime: str) -> str:
    """The text of `data`, parsed as `mime` (from `detect_type`).

    Raises:
        AttachmentError: the parser failed, is not installed, or the text is too long.
    """
    label = repr(name) if name else "the attachment"
    if mime in (_DOCX, _XLSX):
        _check_inflated(data, label)
    try:
        if mime == _PDF:
            text = _pdf_text(data, label)
        elif mime == _DOCX:
            text = _docx_text(data)
        elif mime == _XLSX:
            text = _xlsx_text(data, label)
        else:
            text = _plain_text(data)
    except AttachmentError:
        raise
    except ImportError as err:
        raise AttachmentError(
            f"reading {label} ({mime}) needs {err.name or 'a parser'}: pip install 'toren[files]'"
        ) from None
    except Exception as err:
        # Parsers raise all sorts on a damaged file; the message names the file and the cause.
        raise AttachmentError(
            f"could not parse {label} as {mime}: {type(err).__name__}: {err}; "
            "check the file opens in its usual program"
        ) from None
    if len(text) > MAX_TEXT_CHARS:
        raise AttachmentError(
            f"{label} holds {len(text):,} characters of text, over the {MAX_TEXT_CHARS:,} "
            "limit; split the file"
        )
    return text


def _check_inflated(data: bytes, label: str) -> None:
    """Refuse a zip whose parts inflate past `MAX_INFLATED_BYTES`, reading only its directory.

    The sizes a zip declares bound what `zipfile` inflates (it stops at the declared size and
    fails the CRC), so a part cannot lie its way past this check.
    """
    try:
        infos = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except zipfile.BadZipFile:
        return  # the parser names the damage
    inflated = sum(info.file_size for info in infos)
    if inflated > MAX_INFLATED_BYTES:
        largest = max(infos, key=lambda info: info.file_size)
        raise AttachmentError(
            f"{label} inflates to {inflated:,} bytes ({largest.filename!r} alone "
            f"{largest.file_size:,}) from {len(data):,}, over the {MAX_INFLATED_BYTES:,}-byte "
            "limit for a document's parts (MAX_INFLATED_BYTES); split the file or attach its "
            "text"
        )


def _too_long(label: str, chars: int) -> AttachmentError:
    return AttachmentError(
        f"{label} holds more than {chars:,} characters of text, over the {MAX_TEXT_CHARS:,} "
        "limit (MAX_TEXT_CHARS); split the file"
    )


def _plain_text(data: bytes) -> str:
    # utf-8-sig drops a BOM; other encodings keep their text with replacement characters.
    return data.decode("utf-8-sig", errors="replace").replace("\r\n", "\n")


def _pdf_text(data: bytes, label: str) -> str:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted and not reader.decrypt(""):
        raise AttachmentError(f"{label} is password-protected; attach an unlocked copy")
    texts = [(page.extract_text() or "").strip() for page in reader.pages]
    if not any(texts):
        return (
            f"[{label} has no extractable text: it is probably scanned images, and OCR is not "
            "supported]"
        )
    if len(texts) == 1:
        return texts[0]
    # Mark the PDF's own pages so the model can cite them.
    return "\n\n".join(
        f"[PDF page {n} of {len(texts)}]\n{text}" for n, text in enumerate(texts, start=1)
    )


def _docx_text(data: bytes) -> str:
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    document = docx.Document(io.BytesIO(data))
    blocks: list[str] = []
    for item in document.iter_inner_content():
        if isinstance(item, Paragraph):
            text = item.text.strip()
            if not text:
                continue
            style = (item.style.name if item.style is not None else "") or ""
            level = _heading_level(style)
            blocks.append(f"{'#' * level} {text}" if level else text)
        elif isinstance(item, Table):
            blocks.append(_table_text(item))
    return "\n\n".join(b for b in blocks if b)


def _heading_level(style: str) -> int:
    if style == "Title":
        return 1
    match = re.fullmatch(r"Heading (\d)", style)
    return int(match.group(1)) if match else 0


def _table_text(table: Any) -> str:
    rows = []
    for row in table.rows:
        cells: list[str] = []
        last: Any = None
        for cell in row.cells:
            # A merged cell appears once per grid column it spans; keep it once.
            if cell._tc is last:
                continue
            last = cell._tc
            cells.append(" ".join(cell.text.split()))
        rows.append(" | ".join(cells))
    return "\n".join(rows)


def _xlsx_text(data: bytes, label: str) -> str:
    # openpyxl ships no type information; imported by name so strict typing stays quiet.
    openpyxl = importlib.import_module("openpyxl")
    workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        sheets = []
        used = rows_read = 0
        for sheet in workbook.worksheets:
            out = io.StringIO()
            writer = csv.writer(out, lineterminator="\n")
            blank = 0  # empty rows seen since the last row with a value, written only before one
            # Row by row (read-only mode streams the sheet), stopping at the text limit: ten
            # million rows read whole took minutes and gigabytes before the limit was checked.
            for values in sheet.iter_rows(values_only=True):
                rows_read += 1
                if rows_read > MAX_SHEET_ROWS:
                    raise AttachmentError(
                        f"{label} has more than {MAX_SHEET_ROWS:,} rows (MAX_SHEET_ROWS, Excel's "
                        "own limit for a sheet); split the file or export the rows you need"
                    )
                row = [_cell(v) for v in values]
                while row and not row[-1]:
                    row.pop()
                if not row:
                    blank += 1  # read-only mode reports the sheet's formatted extent
                    continue
                out.write("\n" * blank)
                blank = 0
                writer.writerow(row)
                if used + out.tell() > MAX_TEXT_CHARS:
                    raise _too_long(label, MAX_TEXT_CHARS)
            used += out.tell()
            sheets.append(f"# Sheet: {sheet.title}\n{out.getvalue()}".rstrip("\n"))
        return "\n\n".join(sheets)
    finally:
        workbook.close()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def split_pages(text: str, size: int = PAGE_CHARS) -> list[str]:
    """Split `text` into pages of at most `size` characters, at natural boundaries.

    A page ends at the last paragraph break (blank line) in its second half, else the last line
    break, else the last space, else exactly at `size`. Joining the pages gives `text` back.

    Args:
        text: The whole extracted text.
        size: The most characters per page.

    Returns:
        The pages; one empty page for empty text.
    """
    pages: list[str] = []
    start = 0
    while len(text) - start > size:
        window = text[start : start + size]
        floor = size // 2
        cut = -1
        for sep in ("\n\n", "\n", " "):
            at = window.rfind(sep, floor)
            if at != -1:
                cut = at + len(sep)
                break
        if cut == -1:
            cut = size
        pages.append(text[start : start + cut])
        start += cut
    pages.append(text[start:])
    return pages if text else [""]
