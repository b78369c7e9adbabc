"""Attachments: real PDF, DOCX and XLSX files parsed once into pages, and read_attachment."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from toren.agent._context import ToolContext
from toren.agent._tool import Tool
from toren.store import _attachments as attachments
from toren.store._attachments import MAX_BYTES, AttachmentError, AttachmentStore, attach
from toren.store._parsers import PAGE_CHARS, split_pages
from toren.worker.tools import _read_attachment as read_attachment


def make_pdf(pages: list[str]) -> bytes:
    """A minimal valid PDF with one Helvetica text stream per page, xref offsets computed."""

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
        stream = f"BT /F1 12 Tf 14 TL 72 720 Td {shown} ET" if text else ""
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


def make_docx() -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Quarterly report", level=1)
    document.add_paragraph("Revenue grew 12% over the quarter.")
    document.add_heading("Regions", level=2)
    table = document.add_table(rows=3, cols=3)
    for r, row in enumerate([["Region", "Q1", "Q2"], ["North", "10", "12"], ["South", "7", "9"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    merged = document.add_table(rows=1, cols=3)
    merged.cell(0, 0).merge(merged.cell(0, 1)).text = "Merged across two"
    merged.cell(0, 2).text = "single"
    document.add_paragraph("Outlook: steady.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def make_xlsx() -> bytes:
    import openpyxl  # type: ignore[import-untyped]

    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.title = "Orders"
    sheet.append(["id", "customer", "total", "placed"])
    sheet.append([1, "Ada, Countess", 149.5, dt.datetime(2024, 3, 1, 9, 30)])
    sheet.append([2, 'Grace "Amazing"', 35, None])
    other = workbook.create_sheet("Notes")
    other.append(["only", None, "sparse"])
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


@pytest.fixture
def store(tmp_path: Path) -> AttachmentStore:
    return AttachmentStore(tmp_path / "store")


def text_of(store: AttachmentStore, file_id: str) -> str:
    info = store.info(file_id)
    return "".join(store.page(file_id, n) for n in range(1, info.pages + 1))


# -- parsing --------------------------------------------------------------------------------


def test_pdf(store: AttachmentStore, tmp_path: Path) -> None:
    path = tmp_path / "report.pdf"
    path.write_bytes(make_pdf(["Hello from page one\nsecond line", "Page two (final)"]))
    info = attach(path, store=store)
    assert info.name == "report.pdf" and info.mime == "application/pdf"
    assert info.pages == 1 and info.size == path.stat().st_size
    text = text_of(store, info.id)
    assert text.startswith("[PDF page 1 of 2]\nHello from page one\nsecond line")
    assert "[PDF page 2 of 2]\nPage two (final)" in text


def test_pdf_without_text(store: AttachmentStore) -> None:
    info = store.attach(make_pdf([""]), name="scan.pdf")
    assert "no extractable text" in store.page(info.id, 1)


def test_damaged_pdf(store: AttachmentStore) -> None:
    with pytest.raises(AttachmentError, match="could not parse 'broken.pdf' as application/pdf"):
        store.attach(b"%PDF-1.4\nthis is not a pdf", name="broken.pdf")


def test_docx(store: AttachmentStore) -> None:
    info = store.attach(make_docx(), name="report.docx")
    assert info.mime.endswith("wordprocessingml.document")
    assert store.page(info.id, 1) == (
        "# Quarterly report\n\n"
        "Revenue grew 12% over the quarter.\n\n"
        "## Regions\n\n"
        "Region | Q1 | Q2\nNorth | 10 | 12\nSouth | 7 | 9\n\n"
        "Merged across two | single\n\n"
        "Outlook: steady."
    )


def test_xlsx(store: AttachmentStore) -> None:
    info = store.attach(make_xlsx(), name="orders.xlsx")
    assert info.mime.endswith("spreadsheetml.sheet")
    assert store.page(info.id, 1) == (
        "# Sheet: Orders\n"
        "id,customer,total,placed\n"
        '1,"Ada, Countess",149.5,2024-03-01T09:30:00\n'
        '2,"Grace ""Amazing""",35\n\n'
        "# Sheet: Notes\n"
        "only,,sparse"
    )


@pytest.mark.parametrize(
    ("name", "data", "mime", "text"),
    [
        ("notes.md", b"# Title\n\nbody\n", "text/markdown", "# Title\n\nbody\n"),
        ("t.csv", b"a,b\r\n1,2\r\n", "text/csv", "a,b\n1,2\n"),
        ("d.json", b'{"k": [1, 2]}', "application/json", '{"k": [1, 2]}'),
        ("bom.txt", "\ufeffcaf\u00e9".encode(), "text/plain", "caf\u00e9"),
        ("server.out", b"plain log line\n", "text/plain", "plain log line\n"),
        ("", b"no name, just text", "text/plain", "no name, just text"),
        ("app.ts", b"export const x = 1;\n", "text/plain", "export const x = 1;\n"),
        ("page.HTML", b"<p>hi</p>", "text/html", "<p>hi</p>"),
    ],
)
def test_text_types(store: AttachmentStore, name: str, data: bytes, mime: str, text: str) -> None:
    info = store.attach(data, name=name or None)
    assert info.mime == mime
    assert store.page(info.id, 1) == text


def test_bytes_without_a_name_are_typed_by_content(store: AttachmentStore) -> None:
    pdf = store.attach(make_pdf(["x"]))
    assert pdf.mime == "application/pdf" and pdf.name == f"{pdf.id}.pdf"
    assert store.attach(b"some text").name.endswith(".txt")
    assert store.attach(make_docx()).mime.endswith("wordprocessingml.document")
    assert store.attach(make_xlsx()).mime.endswith("spreadsheetml.sheet")


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("photo.png", b"\x89PNG\r\n\x1a\n\x00\x00", "unsupported file type image/png for 'photo.png'"),
        ("old.doc", b"\xd0\xcf\x11\xe0\x00\x01", "unsupported file type application/msword"),
        ("blob.bin", b"\x00\x01\x02", "unsupported file type application/octet-stream"),
        ("data.qqq", b"\xff\xfe\x00\x00", "unsupported file type '.qqq' files for 'data.qqq'"),
        ("", b"\x00\xff\x00", "unsupported file type binary data for the attachment"),
    ],
)  # fmt: skip
def test_unsupported_types(store: AttachmentStore, name: str, data: bytes, message: str) -> None:
    with pytest.raises(AttachmentError) as err:
        store.attach(data, name=name or None)
    assert message in str(err.value)
    assert "supported: PDF, DOCX, XLSX and text" in str(err.value)
    assert not store.root.exists() or not any(store.root.iterdir())


# -- pages ----------------------------------------------------------------------------------


def test_long_text_splits_at_paragraphs(store: AttachmentStore) -> None:
    paragraphs = [f"Paragraph {i}. " + "word " * (40 + i % 30) for i in range(200)]
    text = "\n\n".join(p.strip() for p in paragraphs)
    info = store.attach(text.encode(), name="long.txt")
    pages = [store.page(info.id, n) for n in range(1, info.pages + 1)]
    assert info.pages == len(pages) > 5
    assert "".join(pages) == text
    for page in pages[:-1]:
        assert PAGE_CHARS / 2 <= len(page) <= PAGE_CHARS
        assert page.endswith("\n\n")  # a paragraph boundary
        assert not page.startswith("\n")


def test_split_pages_boundaries() -> None:
    assert split_pages("") == [""]
    assert split_pages("short") == ["short"]
    lines = "\n".join("x" * 99 for _ in range(100))  # line breaks only
    pages = split_pages(lines)
    assert "".join(pages) == lines and all(p.endswith("\n") for p in pages[:-1])
    assert all(len(p) <= PAGE_CHARS for p in pages)
    words = "word " * 3000  # spaces only
    assert all(p.endswith(" ") for p in split_pages(words)[:-1])
    solid = "y" * 10_000  # no boundary at all: hard cuts
    assert [len(p) for p in split_pages(solid)] == [4000, 4000, 2000]
    # A paragraph break in the first half of the window is not used: it would make tiny pages.
    early = "a" * 100 + "\n\n" + "b" * 5000
    assert len(split_pages(early)[0]) == 4000


# -- the store ------------------------------------------------------------------------------


def test_layout_and_meta(store: AttachmentStore) -> None:
    info = store.attach(b"x" * 9000, name="big.txt")
    folder = store.root / info.id
    assert sorted(p.name for p in (folder / "pages").iterdir()) == [
        "000001.txt",
        "000002.txt",
        "000003.txt",
    ]
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["id"] == info.id and meta["pages"] == 3 and meta["size"] == 9000
    assert meta["name"] == "big.txt" and meta["mime"] == "text/plain" and "created" in meta
    assert [p.name for p in store.root.iterdir()] == [info.id]  # no temporary directory left
    assert store.info(info.id) == info


def test_same_content_same_id_parsed_once(
    store: AttachmentStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    data = make_docx()
    calls: list[str] = []
    real = attachments.extract_text

    def counting(data: bytes, name: str, mime: str) -> str:
        calls.append(name)
        return real(data, name, mime)

    monkeypatch.setattr(attachments, "extract_text", counting)
    first = store.attach(data, name="a.docx")
    (tmp_path / "copy.docx").write_bytes(data)
    second = attach(tmp_path / "copy.docx", store=store)
    assert first == second
    assert first.id == "att_" + hashlib.sha256(data).hexdigest()[:16]
    assert calls == ["a.docx"]
    assert len(list(store.root.iterdir())) == 1
    assert store.attach(data + b" ", name="a.docx").id != first.id


def test_15_mb_limit(store: AttachmentStore, tmp_path: Path) -> None:
    with pytest.raises(AttachmentError) as err:
        store.attach(b"x" * (MAX_BYTES + 1), name="huge.txt")
    assert str(err.value) == (
        "'huge.txt' is 15.0 MB; attachments are limited to 15 MB: split the file or attach "
        "an excerpt"
    )
    path = tmp_path / "huge.pdf"
    with path.open("wb") as f:
        f.truncate(MAX_BYTES + 1024 * 1024)  # sparse: nothing is really written
    with pytest.raises(AttachmentError, match=r"'huge.pdf' is 16.0 MB; .* limited to 15 MB"):
        attach(path, store=store)


def test_missing_file(store: AttachmentStore, tmp_path: Path) -> None:
    with pytest.raises(AttachmentError, match="not found; check the path"):
        attach(tmp_path / "nope.pdf", store=store)


def test_store_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TOREN_ATTACHMENTS", raising=False)
    monkeypatch.delenv("TOREN_STORE", raising=False)
    info = attach(b"in the cwd", name="a.txt")
    assert (tmp_path / ".toren" / "attachments" / info.id / "meta.json").is_file()
    monkeypatch.setenv("TOREN_STORE", str(tmp_path / "shared"))
    info = attach(b"in the store", name="s.txt")
    assert (tmp_path / "shared" / "attachments" / info.id / "meta.json").is_file()
    # The older setting, a directory for attachments alone, wins when it is set.
    monkeypatch.setenv("TOREN_ATTACHMENTS", str(tmp_path / "elsewhere"))
    info = attach(b"from the env", name="b.txt")
    assert (tmp_path / "elsewhere" / info.id / "meta.json").is_file()


def test_unknown_and_malformed_ids(store: AttachmentStore) -> None:
    with pytest.raises(AttachmentError, match="'att_0000000000000000' is not in the store"):
        store.info("att_0000000000000000")
    for bad in ("../../etc/passwd", "att_../../x", "att_ABCDEF0123456789", ""):
        with pytest.raises(AttachmentError, match="is not an attachment id"):
            store.page(bad, 1)


# -- read_attachment ------------------------------------------------------------------------


def make_tool() -> Tool:
    return read_attachment.tool


TOOL = make_tool()


def ctx(store: AttachmentStore, *ids: str) -> ToolContext:
    return ToolContext(
        env={"TOREN_ATTACHMENTS": str(store.root)},
        idempotency_key="k",
        run_id="r",
        call_id="c",
        agent="a",
        tool="read_attachment",
        attachments=ids,
    )


async def read(store: AttachmentStore, args: dict[str, Any], *ids: str) -> Any:
    return json.loads(await TOOL.invoke(args, ctx(store, *ids)))


def test_contract() -> None:
    assert TOOL.name == "read_attachment"
    assert (TOOL.effects, TOOL.idempotency, TOOL.approval) == ("none", "none", "never")
    assert TOOL.timeout_ms and TOOL.max_attempts
    assert TOOL.schema["required"] == ["file_id"]
    assert TOOL.schema["properties"]["page"]["minimum"] == 1


async def test_read_pages(store: AttachmentStore) -> None:
    info = store.attach(("alpha " * 600 + "\n\n" + "beta " * 600).encode(), name="ab.txt")
    first = await read(store, {"file_id": info.id}, info.id)
    assert first["name"] == "ab.txt" and first["page"] == 1 and first["of"] == info.pages == 2
    assert first["text"].startswith("alpha")
    second = await read(store, {"file_id": info.id, "page": 2}, info.id)
    assert second["text"].startswith("beta") and second["of"] == 2


async def test_read_xlsx_through_the_tool(store: AttachmentStore) -> None:
    info = store.attach(make_xlsx(), name="orders.xlsx")
    out = await read(store, {"file_id": info.id}, "att_1111111111111111", info.id)
    assert out["text"].startswith("# Sheet: Orders\nid,customer,total,placed\n")


async def test_page_out_of_range(store: AttachmentStore) -> None:
    info = store.attach(b"x" * 9000, name="three.txt")
    with pytest.raises(AttachmentError) as err:
        await read(store, {"file_id": info.id, "page": 9}, info.id)
    assert str(err.value) == f"page 9 out of range: {info.id} has 3 pages; ask for page 1 to 3"
    with pytest.raises(ValidationError):
        await read(store, {"file_id": info.id, "page": 0}, info.id)


async def test_id_not_attached_to_the_run(store: AttachmentStore) -> None:
    mine = store.attach(b"mine", name="mine.txt")
    other = store.attach(b"someone else's", name="other.txt")
    with pytest.raises(AttachmentError) as err:
        await read(store, {"file_id": other.id}, mine.id)
    assert str(err.value) == (
        f"attachment {other.id!r} is not attached to this run (attached: {mine.id}); "
        "use one of the listed ids"
    )
    with pytest.raises(AttachmentError, match=r"not attached to this run \(attached: none\)"):
        await read(store, {"file_id": mine.id})


async def test_unknown_id(store: AttachmentStore) -> None:
    missing = "att_0123456789abcdef"
    with pytest.raises(AttachmentError, match=f"'{missing}' is not in the store"):
        await read(store, {"file_id": missing}, missing)
    # Even a run that lists a path-like id cannot make the tool read outside the store.
    (store.root.parent / "secret.txt").write_text("secret")
    with pytest.raises(AttachmentError, match="is not an attachment id"):
        await read(store, {"file_id": "../secret.txt"}, "../secret.txt")


async def test_default_store_is_the_worker_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOREN_ATTACHMENTS", str(tmp_path / "worker-store"))
    info = attach(b"worker side", name="w.txt")
    ctx_without_env = ToolContext(
        env={}, idempotency_key="k", run_id="r", call_id="c", agent="a", tool="read_attachment",
        attachments=(info.id,),
    )  # fmt: skip
    out = json.loads(await TOOL.invoke({"file_id": info.id}, ctx_without_env))
    assert out["text"] == "worker side"
    assert os.environ["TOREN_ATTACHMENTS"].endswith("worker-store")


# -- hostile documents ----------------------------------------------------------------------


def _rezip(data: bytes, part: str, write: Any) -> bytes:
    """`data` (a zip) with `part` rewritten by `write(old_bytes, stream)`, deflated, streamed."""
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            old = src.read(info)
            entry = zipfile.ZipInfo(info.filename, info.date_time)
            entry.compress_type = zipfile.ZIP_DEFLATED
            with dst.open(entry, "w", force_zip64=True) as stream:
                if info.filename == part:
                    write(old, stream)
                else:
                    stream.write(old)
    return out.getvalue()


def test_a_docx_that_inflates_past_the_limit_is_refused_unread(store: AttachmentStore) -> None:
    """A valid .docx of a few hundred KB whose document.xml inflates to 200 MB (the attack:
    1.5 MB to 1.5 GB, 2.4 GB of memory) is refused from the zip's directory alone."""

    def pad(old: bytes, stream: Any) -> None:
        head, tail = old.split(b"</w:body>")
        stream.write(head)
        for _ in range(200):
            stream.write(b" " * (1 << 20))  # whitespace between elements: still valid XML
        stream.write(b"</w:body>" + tail)

    original = make_docx()
    bomb = _rezip(original, "word/document.xml", pad)
    assert len(bomb) < 2 << 20
    with pytest.raises(AttachmentError) as err:
        store.attach(bomb, name="bomb.docx")
    message = str(err.value)
    assert message.startswith("'bomb.docx' inflates to 210,")
    assert "('word/document.xml' alone 209," in message
    assert "over the 134,217,728-byte limit for a document's parts (MAX_INFLATED_BYTES)" in message
    assert store.attach(original, name="fine.docx").pages == 1


def test_an_xlsx_stops_at_the_text_limit_while_reading(
    store: AttachmentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows are read one at a time and reading ends at the text limit (the attack: ten million
    rows, 2.9 MB, read whole for over 150 s and 1 GB before the limit was checked)."""
    import openpyxl

    from toren.store import _parsers

    monkeypatch.setattr(_parsers, "MAX_TEXT_CHARS", 50_000)
    workbook = openpyxl.Workbook(write_only=True)
    sheet = workbook.create_sheet("Rows")
    for i in range(5_000):
        sheet.append([i, "x" * 100])
    out = io.BytesIO()
    workbook.save(out)
    with pytest.raises(AttachmentError) as err:
        store.attach(out.getvalue(), name="rows.xlsx")
    assert str(err.value) == (
        "'rows.xlsx' holds more than 50,000 characters of text, over the 50,000 limit "
        "(MAX_TEXT_CHARS); split the file"
    )


def test_an_xlsx_stops_at_excels_row_limit(
    store: AttachmentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows compress to nothing (ten million in 2.9 MB): reading stops past MAX_SHEET_ROWS."""
    import openpyxl

    from toren.store import _parsers

    monkeypatch.setattr(_parsers, "MAX_SHEET_ROWS", 1_000)
    workbook = openpyxl.Workbook(write_only=True)
    for name in ("A", "B"):
        sheet = workbook.create_sheet(name)
        for i in range(600):
            sheet.append([i])
    out = io.BytesIO()
    workbook.save(out)
    with pytest.raises(AttachmentError) as err:
        store.attach(out.getvalue(), name="rows.xlsx")
    assert str(err.value) == (
        "'rows.xlsx' has more than 1,000 rows (MAX_SHEET_ROWS, Excel's own limit for a sheet); "
        "split the file or export the rows you need"
    )
