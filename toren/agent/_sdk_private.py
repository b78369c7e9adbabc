"""Every private name of `temporalio` that toren reaches into, gathered and checked here.

The SDK may rename or drop a private name in any release. So toren takes the SDK objects whose
private parts it uses from this module, and `USES` lists each use with a check that says, in
one sentence, what broke and where toren depends on it. `tests/test_sdk_private.py` runs one
test per use; CI runs it (with the core suite) on the newest `temporalio` too (`.ci/run`).

```python
from toren.agent._sdk_private import PydanticPayloadConverter, WorkflowStream, sandbox_runner
problems = {name: check() for name, check in USES.items() if check()}   # {} on a tested SDK
```

Each use, by the toren module that relies on it:

- `toren.connect._plugin`: a compiled-snippet cache for the sandbox
  (`workflow_sandbox._runner._Instance` and its `_run_code`,
  `globals_and_locals["__temporal_in_sandbox"]`, `InSandbox.instance`);
  parked runs let go of their last activation (`_WorkflowInstanceImpl._current_completion`,
  `._deployment_version_for_current_task`, `._workflow_input`).
- `toren.agent._converter`: shared type adapters
  (`PydanticJSONPlainPayloadConverter._to_json_options` and `._type_adapter`,
  `CompositePayloadConverter._set_converters`).
- `toren.workflows._stream_state`: a live stream that keeps its items as bytes
  (`WorkflowStream._publish_to_topic`, `._on_publish`, `._log`, `._on_poll`, `._validate_poll`,
  and the poll query toren's readers use).
- `toren.client._events`: rendering a run whose payloads went to the store
  (`DataConverter._transform_inbound_payload`).

The sandbox runner is imported on first use (`sandbox_runner`), so workflow code importing this
module loads no worker machinery.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter, PydanticPayloadConverter
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.converter import CompositePayloadConverter, DataConverter

if TYPE_CHECKING:
    from temporalio.worker.workflow_sandbox import _runner as sandbox_runner

__all__ = [
    "TESTED",
    "USES",
    "PydanticJSONPlainPayloadConverter",
    "PydanticPayloadConverter",
    "WorkflowStream",
    "sandbox_runner",
    "stream_log",
    "transform_inbound_payload",
]

TESTED = "1.35"
"""The `temporalio` minor versions these uses were checked on (pyproject pins `<` the next)."""

_RUNNER = "temporalio.worker.workflow_sandbox._runner"
_INSTANCE = "temporalio.worker._workflow_instance"


def __getattr__(name: str) -> Any:
    # `sandbox_runner` on first use: importing temporalio.worker is for workers, not workflows.
    if name == "sandbox_runner":
        return importlib.import_module(_RUNNER)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def stream_log(stream: WorkflowStream) -> list[Any] | None:
    """The stream's items (`WorkflowStream._log`), or None where the SDK keeps them elsewhere."""
    log = getattr(stream, "_log", None)
    return log if isinstance(log, list) else None


async def transform_inbound_payload(converter: DataConverter, payload: Payload) -> Payload:
    """`payload` as the converter's inbound step leaves it: from the store, through the codec.

    The SDK has no public per-payload form that keeps the payload (`decode` returns values).
    """
    result: Payload = await converter._transform_inbound_payload(payload)
    return result


# -- the checks -----------------------------------------------------------------------------


def _version() -> str:
    return str(importlib.metadata.version("temporalio"))


def _broke(what: str, used_by: str) -> str:
    return (
        f"temporalio {_version()}: {what}; {used_by} relies on it (toren was tested on "
        f"temporalio {TESTED}.x): update toren/agent/_sdk_private.py and that module, or install "
        f"temporalio~={TESTED}.0"
    )


def _source_has(module: str, *needles: str) -> list[str]:
    """Which of `needles` the source of `module` lacks (all, when it cannot be read)."""
    try:
        text = inspect.getsource(importlib.import_module(module))
    except (ImportError, OSError, TypeError):
        return list(needles)
    return [n for n in needles if n not in text]


def _method(owner: Any, name: str, params: list[str], used_by: str) -> str | None:
    method = getattr(owner, name, None)
    if not callable(method):
        return _broke(f"`{owner.__name__}.{name}` is gone", used_by)
    got = [p for p in inspect.signature(method).parameters if p != "self"]
    if got[: len(params)] != params:
        return _broke(
            f"`{owner.__name__}.{name}` now takes ({', '.join(got)}), not ({', '.join(params)})",
            used_by,
        )
    return None


def _check_sandbox_instance() -> str | None:
    try:
        runner = importlib.import_module(_RUNNER)
    except ImportError:
        return _broke(f"module `{_RUNNER}` is gone", "toren.connect._plugin (compiled snippets)")
    if not inspect.isclass(getattr(runner, "_Instance", None)):
        return _broke(f"`{_RUNNER}._Instance` is gone", "toren.connect._plugin (_CompiledInstance)")
    return None


def _check_run_code() -> str | None:
    runner = importlib.import_module(_RUNNER)
    return _method(
        runner._Instance,
        "_run_code",
        ["code", "extra_globals"],
        "toren.connect._plugin (_run_code)",
    )


def _check_in_sandbox() -> str | None:
    missing = _source_has(_RUNNER, "self.globals_and_locals", "__temporal_in_sandbox")
    missing += _source_has("temporalio.worker.workflow_sandbox._in_sandbox", "self.instance =")
    if missing:
        return _broke(
            f"the sandbox no longer keeps {', '.join(missing)}",
            "toren.connect._plugin (direct context lookups, activation release)",
        )
    return None


def _check_instance_fields() -> str | None:
    fields = ("_current_completion", "_deployment_version_for_current_task", "_workflow_input")
    missing = _source_has(_INSTANCE, *(f"self.{f}" for f in fields))
    if missing:
        return _broke(
            f"the workflow instance no longer has {', '.join(missing)}",
            "toren.connect._plugin (_CompiledInstance.activate lets go of the last activation)",
        )
    return None


def _check_pydantic_fields() -> str | None:
    missing = _source_has(
        "temporalio.contrib.pydantic", "self._to_json_options", "self._type_adapter"
    )
    if missing:
        return _broke(
            f"PydanticJSONPlainPayloadConverter no longer sets {', '.join(missing)}",
            "toren.agent._converter (_SharedAdapters replaces its __init__)",
        )
    return None


def _check_set_converters() -> str | None:
    return _method(
        CompositePayloadConverter,
        "_set_converters",
        ["converters"],
        "toren.agent._converter (TorenPayloadConverter.__init__)",
    )


def _check_publish_to_topic() -> str | None:
    return _method(
        WorkflowStream,
        "_publish_to_topic",
        ["topic", "value"],
        "toren.workflows._stream_state (LiveStream)",
    )


def _check_on_publish() -> str | None:
    return _method(
        WorkflowStream, "_on_publish", ["payload"], "toren.workflows._stream_state (LiveStream)"
    )


def _check_on_poll() -> str | None:
    return _method(
        WorkflowStream, "_on_poll", ["payload"], "toren.workflows._stream_state (LiveStream)"
    )


def _check_validate_poll() -> str | None:
    return _method(
        WorkflowStream, "_validate_poll", ["_payload"], "toren.workflows._stream_state (LiveStream)"
    )


def _check_poll_query() -> str | None:
    missing = _source_has(WorkflowStream.__module__, "set_query_handler(_POLL")
    if missing:
        return _broke(
            "WorkflowStream no longer answers the `__temporal_workflow_stream_poll` query",
            "toren.client._stream_feed (every toren stream reader)",
        )
    return None


def _check_stream_log() -> str | None:
    missing = _source_has(WorkflowStream.__module__, "self._log")
    if missing:
        return _broke(
            "WorkflowStream no longer keeps its items in `_log` (they stay Payloads, unserialized)",
            "toren.workflows._stream_state (LiveStream._items)",
        )
    return None


def _check_transform_inbound() -> str | None:
    used_by = "toren.client._events (read_through)"
    problem = _method(DataConverter, "_transform_inbound_payload", ["payload"], used_by)
    method = getattr(DataConverter, "_transform_inbound_payload", None)
    if problem is None and not inspect.iscoroutinefunction(method):
        what = "`DataConverter._transform_inbound_payload` is no longer a coroutine"
        return _broke(what, used_by)
    return problem


USES: dict[str, Callable[[], str | None]] = {
    "sandbox _Instance": _check_sandbox_instance,
    "sandbox _Instance._run_code": _check_run_code,
    "sandbox globals_and_locals / InSandbox.instance": _check_in_sandbox,
    "workflow instance fields": _check_instance_fields,
    "pydantic converter _to_json_options / _type_adapter": _check_pydantic_fields,
    "CompositePayloadConverter._set_converters": _check_set_converters,
    "WorkflowStream._publish_to_topic": _check_publish_to_topic,
    "WorkflowStream._on_publish": _check_on_publish,
    "WorkflowStream._log": _check_stream_log,
    "WorkflowStream._on_poll": _check_on_poll,
    "WorkflowStream._validate_poll": _check_validate_poll,
    "the __temporal_workflow_stream_poll query": _check_poll_query,
    "DataConverter._transform_inbound_payload": _check_transform_inbound,
}
"""Each use of a private name → its check: None while it holds, else what broke and the fix."""
