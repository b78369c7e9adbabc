"""The console: the static files of the browser app, served at `/` and `/console/{path}`.

Plain HTML, CSS and JavaScript modules shipped in the package (`toren/web/console/`): nothing
to build, nothing from a CDN. They hold no data and no secret, so they need no token; every
API call the app makes sends the token the person typed (kept in the tab's `sessionStorage`).
The Content-Security-Policy lets the page load only its own files and talk only to this
server, so text from a run can never run as script even if a view forgot to escape it.
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import Response

from toren.web._errors import error_response

__all__ = ["Console"]

TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class Console:
    """The app's files, read from the package once."""

    def __init__(self) -> None:
        folder = resources.files("toren.web") / "console"
        self._files = {
            entry.name: entry.read_bytes()
            for entry in folder.iterdir()
            if any(entry.name.endswith(suffix) for suffix in TYPES)
        }

    def _file(self, name: str) -> Response:
        content = self._files.get(name)
        if content is None:
            return error_response(404, f"no console file {name[:100]!r}", "path")
        media = TYPES[name[name.rfind(".") :]]
        return Response(content, media_type=media, headers=HEADERS)

    async def index(self, request: Request) -> Response:
        """`GET /`: the app's page."""
        return self._file("index.html")

    async def asset(self, request: Request) -> Response:
        """`GET /console/{path}`: one of the app's files (no folders, no other names)."""
        return self._file(request.path_params["path"])
