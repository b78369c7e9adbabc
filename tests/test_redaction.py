"""The one redaction function: every form of a secret a value can carry into history."""

from __future__ import annotations

import json
from urllib.parse import quote

from toren._redact import MARKER, Redactor


def test_every_form_of_a_secret_is_redacted() -> None:
    value = 'pa"ss\\wörd/+ 1'
    redactor = Redactor([value, "abc"])
    assert redactor.secrets == (value,)  # too short to redact: "abc"
    for text in [
        value,
        json.dumps({"v": value}),
        json.dumps({"v": value}, ensure_ascii=False),
        json.dumps(json.dumps({"v": value})),
        repr({"v": value}),
        f"https://h/?k={quote(value, safe='')}",
    ]:
        assert value not in redactor.text(text)
        assert MARKER in redactor.text(text)
    url = "postgresql://agent:s%40cret-pw@db/shop"
    assert (
        Redactor([url]).text("auth failed for s@cret-pw at db") == f"auth failed for {MARKER} at db"
    )
    assert redactor.value({value: [value, 1, (value,)]}) == {MARKER: [MARKER, 1, (MARKER,)]}
