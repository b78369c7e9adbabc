"""Errors as HTTP answers: `{"error": ..., "field": ...}` with a 4xx status that says why.

```python
raise WebError(404, "run 'x' not found", field="id")
```

`answer` maps what toren and Temporal raise to the status a client can act on: a wrong
argument is 400, an unknown run 404, a refused update (a call decided twice, a closed thread)
409; only Temporal (or the team's codec) being unreachable or missing is a 5xx. A decision
or a message the run took whose answer this server cannot decode is 202 `{"accepted": true}`.
"""

from __future__ import annotations

import logging

from pydantic import ValidationError
from starlette.responses import JSONResponse
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from toren.errors import (
    CodecServerError,
    RunError,
    TorenError,
    UndecodablePayloadError,
    UsageError,
)

__all__ = ["WebError", "answer", "error_response"]

log = logging.getLogger("toren.web")


class WebError(TorenError):
    """A request the API answers with an error status."""

    def __init__(self, status: int, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field


def error_response(
    status: int, message: str, field: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    """The JSON error body every failing request gets."""
    return JSONResponse({"error": message, "field": field}, status_code=status, headers=headers)


def _validation_field(err: ValidationError) -> tuple[str, str | None]:
    first = err.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or None
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in err.errors()
    )
    return problems, field


def answer(err: Exception) -> JSONResponse:
    """The error response for an exception a handler raised."""
    if isinstance(err, WebError):
        return error_response(err.status, err.message, err.field)
    if isinstance(err, UndecodablePayloadError) and err.accepted:
        # The decision or message took effect; only the run's answer is unreadable here.
        return JSONResponse({"accepted": True, "warning": str(err)}, status_code=202)
    if isinstance(err, (UndecodablePayloadError, CodecServerError)):
        # This server lacks (or cannot reach) the team's codec: its setting, not the request.
        log.warning("%s", err)
        return error_response(502, str(err))
    if isinstance(err, ValidationError):
        message, field = _validation_field(err)
        return error_response(422, message, field)
    if isinstance(err, UsageError):
        return error_response(400, str(err))
    if isinstance(err, WorkflowAlreadyStartedError):
        return error_response(409, f"{err.workflow_id!r} already exists", "id")
    if isinstance(err, WorkflowUpdateFailedError):
        cause = err.cause
        return error_response(409, f"refused: {getattr(cause, 'message', None) or cause}")
    if isinstance(err, RunError):
        # The message ran and its execution failed, or the thread had closed: a conflict with
        # the thread's state, not a malformed request.
        return JSONResponse({"error": str(err), "field": None, "kind": err.kind}, 409)
    if isinstance(err, WorkflowFailureError):
        return error_response(409, f"failed: {err.cause}")
    if isinstance(err, UnicodeError):
        return error_response(400, "text that is not valid UTF-8 (a lone surrogate?)")
    if isinstance(err, RPCError):
        if err.status == RPCStatusCode.NOT_FOUND:
            return error_response(404, f"not found: {err.message}", "id")
        if err.status == RPCStatusCode.INVALID_ARGUMENT:
            return error_response(400, f"Temporal refused: {err.message}")
        if err.status == RPCStatusCode.ALREADY_EXISTS:
            return error_response(409, f"already exists: {err.message}", "id")
        log.warning("Temporal error: %s", err.message)
        return error_response(502, f"Temporal said: {err.message}")
    raise err
