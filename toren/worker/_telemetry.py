"""OpenTelemetry traces and metrics for model and tool calls, never emitted twice on replay.

Configured by the standard variables, or by passing a tracer provider to the worker:

```bash
OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318 toren worker examples/support
OTEL_TRACES_EXPORTER=console toren worker examples/support       # spans on stderr
```

```python
async with serve(client, ["examples/support"], tracer_provider=provider, meter_provider=meters):
    ...
```

The worker then installs Temporal's `TracingInterceptor` (workflow, activity and client spans,
linked across hosts through headers; on replay it creates no workflow spans) and toren adds a
span per model call (`chat <model>`) and per tool call (`execute_tool <tool>`) with the GenAI
semantic conventions. Both are made inside activities, which run once per attempt and never on
replay, so a replaying worker adds none. Prompts, replies and tool results stay out of spans
unless `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`, and then go through the
agent's redactor like everything else. Metrics: `gen_ai.client.token.usage` (histogram, by
`gen_ai.token.type`), `toren.tool.duration` (s), `toren.model.retries` and
`toren.approvals.requested` (counters).

Needs the `otel` extra (`pip install 'toren[otel]'`); without it, and without configuration,
every call here is a no-op.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

from toren.worker._redact import Redactor

__all__ = ["CAPTURE_VAR", "Telemetry", "providers_from_env"]

log = logging.getLogger("toren")

CAPTURE_VAR = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The GenAI conventions' opt-in for prompts, replies and tool results in spans."""
CONTENT_CHARS = 4000
"""How much content a span keeps when content capture is on."""


def providers_from_env(environ: Mapping[str, str] | None = None) -> tuple[Any, Any]:
    """A tracer provider and a meter provider from the `OTEL_*` variables, or `(None, None)`.

    Tracing is on when `OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT` is set or `OTEL_TRACES_EXPORTER`
    is `otlp` or `console` (and not `none`); metrics likewise with `OTEL_METRICS_EXPORTER`.

    Raises:
        ConfigError: it is asked for but the `otel` extra is not installed.
    """
    env = os.environ if environ is None else environ
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    traces = env.get("OTEL_TRACES_EXPORTER", "otlp" if endpoint else "").strip().lower()
    metrics_endpoint = env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    metrics = env.get("OTEL_METRICS_EXPORTER", "otlp" if metrics_endpoint else "").strip().lower()
    if traces not in ("otlp", "console") and metrics not in ("otlp", "console"):
        return None, None
    try:
        from opentelemetry.sdk.resources import Resource
    except ImportError:
        from toren.errors import ConfigError

        raise ConfigError(
            "OTEL_* variables ask for telemetry but OpenTelemetry is not installed: "
            "pip install 'toren[otel]' (or unset them)"
        ) from None
    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME", "toren-worker")})
    return _tracer_provider(traces, resource), _meter_provider(metrics, resource)


def _tracer_provider(kind: str, resource: Any) -> Any:
    if kind not in ("otlp", "console"):
        return None
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider(resource=resource)
    if kind == "console":
        exporter: Any = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()  # endpoint, headers, timeout: the OTEL_* variables
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _meter_provider(kind: str, resource: Any) -> Any:
    if kind not in ("otlp", "console"):
        return None
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        PeriodicExportingMetricReader,
    )

    if kind == "console":
        exporter: Any = ConsoleMetricExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        exporter = OTLPMetricExporter()
    return MeterProvider(
        resource=resource, metric_readers=[PeriodicExportingMetricReader(exporter)]
    )


class Telemetry:
    """What a worker's activities record: spans and metrics, or nothing when not configured."""

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.capture = os.environ.get(CAPTURE_VAR, "").strip().lower() in ("1", "true", "yes")
        self._tracer = tracer_provider.get_tracer("toren") if tracer_provider else None
        self._instruments: dict[str, Any] = {}
        if meter_provider is not None:
            meter = meter_provider.get_meter("toren")
            self._instruments = {
                "tokens": meter.create_histogram(
                    "gen_ai.client.token.usage", unit="{token}", description="Tokens per call"
                ),
                "tool": meter.create_histogram(
                    "toren.tool.duration", unit="s", description="Tool call attempt duration"
                ),
                "retries": meter.create_counter(
                    "toren.model.retries", description="Model call attempts after the first"
                ),
                "approvals": meter.create_counter(
                    "toren.approvals.requested", description="Tool calls that waited for a person"
                ),
            }

    def flush(self) -> None:
        """Export what is buffered (a worker calls it as it shuts down)."""
        for provider in (self.tracer_provider, self.meter_provider):
            flush = getattr(provider, "force_flush", None)
            if flush is not None:
                flush()

    @property
    def enabled(self) -> bool:
        """Whether anything is recorded."""
        return self._tracer is not None or bool(self._instruments)

    def interceptors(self) -> list[Any]:
        """Temporal's tracing interceptor for workers and clients, when tracing is on."""
        if self._tracer is None:
            return []
        from temporalio.contrib.opentelemetry import TracingInterceptor

        return [TracingInterceptor(self._tracer)]

    @contextlib.contextmanager
    def model_call(
        self, agent: str, model: str, run_id: str, step: int, attempt: int, max_tokens: int
    ) -> Iterator[CallSpan]:
        """A span for one attempt of a model call; `CallSpan.finish` adds what it returned."""
        provider, _, name = model.partition("/")
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": name or model,
            "gen_ai.request.max_tokens": max_tokens,
            "toren.agent": agent,
            "toren.run_id": run_id,
            "toren.step": step,
            "toren.attempt": attempt,
        }
        if attempt > 1 and "retries" in self._instruments:
            self._instruments["retries"].add(1, {"toren.agent": agent})
        with self._span(f"chat {name or model}", attributes) as span:
            yield CallSpan(self, span, {"toren.agent": agent, "gen_ai.request.model": name})

    @contextlib.contextmanager
    def tool_call(
        self, agent: str, tool: str, call_id: str, run_id: str, attempt: int
    ) -> Iterator[CallSpan]:
        """A span for one attempt of a tool call."""
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": call_id,
            "toren.agent": agent,
            "toren.run_id": run_id,
            "toren.attempt": attempt,
        }
        started = time.monotonic()
        try:
            with self._span(f"execute_tool {tool}", attributes) as span:
                yield CallSpan(self, span, {"toren.agent": agent, "gen_ai.tool.name": tool})
        finally:
            if "tool" in self._instruments:
                self._instruments["tool"].record(
                    time.monotonic() - started, {"toren.agent": agent, "gen_ai.tool.name": tool}
                )

    def approval_requested(self, agent: str, tool: str) -> None:
        """Count a call that waits for a person."""
        if "approvals" in self._instruments:
            self._instruments["approvals"].add(1, {"toren.agent": agent, "gen_ai.tool.name": tool})

    @contextlib.contextmanager
    def _span(self, name: str, attributes: dict[str, Any]) -> Iterator[Any]:
        if self._tracer is None:
            yield None
            return
        from opentelemetry.trace import SpanKind

        kind = (
            SpanKind.CLIENT if attributes["gen_ai.operation.name"] == "chat" else SpanKind.INTERNAL
        )
        # No exception is recorded as is: its message may hold a secret (see CallSpan.failed).
        with self._tracer.start_as_current_span(
            name,
            kind=kind,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield span


class CallSpan:
    """The span of one call attempt (or nothing), and what may be added to it."""

    def __init__(self, telemetry: Telemetry, span: Any, labels: dict[str, Any]) -> None:
        self._telemetry = telemetry
        self._span = span
        self._labels = labels

    def usage(self, usage: Mapping[str, int], finish_reason: str = "") -> None:
        """Record a model reply's token usage."""
        histogram = self._telemetry._instruments.get("tokens")
        for key, kind in (("input_tokens", "input"), ("output_tokens", "output")):
            if key in usage:
                if self._span is not None:
                    self._span.set_attribute(f"gen_ai.usage.{key}", int(usage[key]))
                if histogram is not None:
                    histogram.record(int(usage[key]), {**self._labels, "gen_ai.token.type": kind})
        if finish_reason and self._span is not None:
            self._span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])

    def content(self, key: str, text: str, redactor: Redactor) -> None:
        """Add content (a reply, a tool result) only when capture is on, redacted."""
        if self._span is not None and self._telemetry.capture:
            self._span.set_attribute(key, redactor.text(text)[:CONTENT_CHARS])

    def failed(self, message: str, redactor: Redactor) -> None:
        """Mark the attempt failed with a redacted message (never the raw exception)."""
        if self._span is None:
            return
        from opentelemetry.trace import Status, StatusCode

        self._span.set_status(Status(StatusCode.ERROR, redactor.text(message)[:500]))

    def error_result(self, is_error: bool) -> None:
        """Mark whether a tool call's result is an error the model sees."""
        if self._span is not None:
            self._span.set_attribute("toren.tool.is_error", is_error)
