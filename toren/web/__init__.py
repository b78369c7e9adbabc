"""A stateless HTTP API over toren: start runs and threads, decide approvals, read and stream.

```
pip install 'toren[web]'
TOREN_WEB_TOKENS=s3cret toren serve --host 0.0.0.0 --port 8000
curl -H 'Authorization: Bearer s3cret' -d '{"agent": "support", "prompt": "Hi"}' URL/v1/runs
```

```python
from toren.web import create_app

app = create_app(client)        # any ASGI server; every answer comes from Temporal
```

Every request is answered from Temporal alone, so any number of replicas may serve it. The
OpenAPI document is at `/v1/openapi.json`. A client's side: imports `toren.client`,
`connect`, `agent` and `store`, never the worker's.
"""

from __future__ import annotations

try:
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as err:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        f"toren.web needs the web extra ({err.name} is missing): pip install 'toren[web]'",
        name=err.name,
    ) from err

from toren.web._app import create_app
from toren.web._auth import Token, parse_tokens
from toren.web._serve import serve

__all__ = ["Token", "create_app", "parse_tokens", "serve"]
