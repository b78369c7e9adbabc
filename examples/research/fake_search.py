"""A local stand-in for Tavily's search API, for running the research example without a key.

    python examples/research/fake_search.py 8765 &
    export TAVILY_API_KEY=fake TAVILY_BASE_URL=http://127.0.0.1:8765

It answers every `POST /search` with the same two results, shaped as Tavily's are, and checks
what the `web_search` built-in sends: a bearer key and a JSON body with a `query`. A test starts
it in-process with `start()`.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

RESULTS: dict[str, Any] = {
    "answer": "About 5.1 million e-bikes were sold in the EU in 2024.",
    "results": [
        {
            "title": "E-bike market report 2024",
            "url": "https://bike-industry.example/reports/2024",
            "content": "EU e-bike sales reached 5.1 million units in 2024, up 4% on 2023; "
            "cargo bikes grew fastest.",
            "score": 0.91,
        },
        {
            "title": "Cycling statistics: sales by country",
            "url": "https://stats.example/cycling/2024",
            "content": "Germany bought 2.1 million e-bikes in 2024, the Netherlands 0.9 million.",
            "score": 0.84,
        },
    ],
}
QUERIES: list[str] = []
"""Every query the server was asked, in order (for tests)."""


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802  (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path != "/search":
            self._send(404, {"detail": {"error": f"no such path {self.path}"}})
        elif not self.headers.get("Authorization", "").startswith("Bearer "):
            self._send(401, {"detail": {"error": "missing bearer key"}})
        elif not isinstance(body.get("query"), str):
            self._send(400, {"detail": {"error": "query is required"}})
        else:
            QUERIES.append(body["query"])
            self._send(200, {"query": body["query"], **RESULTS})

    def _send(self, status: int, data: dict[str, Any]) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def start(port: int = 0) -> ThreadingHTTPServer:
    """Serve on 127.0.0.1:`port` (0: a free one) in a daemon thread; `.shutdown()` stops it."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


if __name__ == "__main__":
    server = ThreadingHTTPServer(
        ("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 8765), _Handler
    )
    print(f"fake search on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()
