"""The console's static files: served without a token, only its own, locked down by CSP."""

from __future__ import annotations

import re

import httpx

from tests.conftest import ROOT
from toren.web import Token, create_app

CONSOLE = ROOT / "toren" / "web" / "console"


async def test_the_console_is_served_without_a_token_and_only_its_own_files() -> None:
    app = create_app(None, tokens=[Token("s3cret")])  # no Temporal needed for static files
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://toren") as http:
        page = await http.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        for src in re.findall(r'(?:src|href)="(/console/[^"]+)"', page.text):
            r = await http.get(src)
            assert r.status_code == 200 and r.headers["x-content-type-options"] == "nosniff"
        for name in ("app.js", "api.js", "ui.js", "runs.js", "threads.js"):
            assert (
                (await http.get(f"/console/{name}"))
                .headers["content-type"]
                .startswith("text/javascript")
            )
        for bad in ("/console/nope.js", "/console/..%2F_app.py", "/console/"):
            assert (await http.get(bad)).status_code == 404
        assert (await http.get("/v1/inbox")).status_code == 401  # the API still wants a token


def test_the_scripts_never_write_html_from_data() -> None:
    for script in CONSOLE.glob("*.js"):
        text = script.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert sink not in text, f"{script.name} uses {sink}"
