"""How the workflow calls a model activity: its timeouts, its heartbeat and its retry policy.

`toren.call_model` (a step of the run, `_model_step`) and `toren.compact_context` (a summary of
older turns, `_context_window`) are both model calls: agent.yaml's `modelRetry` retries them,
and a worker that dies mid-call is noticed in seconds, not at the 5-minute timeout.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from toren.agent._spec import AgentSpec, ModelRetry
    from toren.agent._types import ModelCallResult

__all__ = ["MODEL_TIMEOUT", "model_activity", "retry_policy"]

MODEL_TIMEOUT = timedelta(minutes=5)
"""Start-to-close of one model attempt (the provider's own HTTP timeout ends it sooner)."""


async def model_activity(name: str, input: Any, spec: AgentSpec, summary: str) -> ModelCallResult:
    """Run the model activity `name` with `input` under the agent's model retry policy."""
    reply: ModelCallResult = await workflow.execute_activity(
        name,
        input,
        result_type=ModelCallResult,
        start_to_close_timeout=MODEL_TIMEOUT,
        heartbeat_timeout=spec.heartbeat_timeout(MODEL_TIMEOUT),
        retry_policy=retry_policy(spec.model_retry),
        summary=summary,
    )
    return reply


def retry_policy(retry: ModelRetry) -> RetryPolicy:
    """The model call's retry policy: agent.yaml `modelRetry`, backoff doubling each time."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=retry.initial_interval_s),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=retry.max_interval_s),
        maximum_attempts=retry.max_attempts,
    )
