"""Every prompt fits: the run measures each prompt against the model's window and compacts.

Before each model call the run estimates the prompt: the `input_tokens` the provider reported
for the previous call plus what the model's view grew by since (characters / 4). Past
`context.compactAt` of the window it compacts down to about half the window, in one large
step so the provider's cached prefix is rebuilt rarely:

1. old large tool results are elided (cheapest; no model call) when that alone is enough;
2. else the older turns are folded into a summary the model writes in `toren.compact_context`,
   an activity of its own (retried and budgeted like any model call).

The system prompt and the last `context.keepLastMessages` messages stay verbatim, and a fold
ends only where a message is not a tool result, so a tool call and its result stay together.
The result is a plan (`toren.agent._context_plan`) that `call_model` renders; the transcript
stays append-only, so `messages` still pages every message. A provider's refusal for length
teaches the run the window and is answered by compacting and trying once more.

Workflow-side code: deterministic; its state is `RunState.compaction`, carried across
continue-as-new (per message: its size and role, never its text).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from toren.agent._context_plan import (
        COMPACT_ACTIVITY,
        ELIDED_NOTE,
        SUMMARY_MAX_TOKENS,
        SUMMARY_PREFIX,
        CompactInput,
        is_length_refusal,
        message_chars,
        refused_window,
    )
    from toren.agent._transcript import TranscriptRef
    from toren.agent._types import ModelCallResult, RunState
    from toren.workflows._budget import CHARS_PER_TOKEN, Budget
    from toren.workflows._model_activity import model_activity

__all__ = ["ContextWindow"]

TARGET_SHARE = 0.5
"""A compaction brings the prompt down to about this share of the window."""
ELIDE_MIN_CHARS = 2_000
"""Tool results at least this large may be elided."""
_NOTE_CHARS = len(ELIDED_NOTE) + 4
_SUMMARY_CHARS = len(SUMMARY_PREFIX) + 40


class Host(Protocol):
    """What the run (`AgentRun`, `AgentThread`) lends the window: its state and stream."""

    _run: RunState
    _transcript: TranscriptRef
    _budget: Budget

    def publish(self, type_: str, fields: dict[str, Any]) -> None:
        """Publish a live item."""


class ContextWindow:
    """The run's view of its context window: estimates, plans, compactions, refusals."""

    def __init__(self, host: Host) -> None:
        self._host = host
        self._lock = asyncio.Lock()
        """One compaction at a time: the `compact` update and a step's own."""
        self._sent_view = 0
        """Characters of the view the model call under way was shown."""

    # -- what the run asks ---------------------------------------------------------------------

    def _on(self) -> bool:
        # The recorded spec decides, so no patch is needed: a run recorded before compaction
        # has no `context` in its spec and replays without it (a patch marked every run's
        # history, and upserted `TemporalChangeVersion`: two events a run for nothing). A
        # `context.strategy` of the agent's own shapes the model's view on the worker instead.
        spec = self._host._run.spec
        return bool(spec and spec.context is not None and not spec.context.get("strategy"))

    @property
    def _state(self) -> dict[str, Any]:
        return self._host._run.compaction

    @property
    def _settings(self) -> dict[str, Any]:
        spec = self._host._run.spec
        return dict(spec.context or {}) if spec else {}

    async def before_call(self) -> dict[str, Any] | None:
        """Compact if the next prompt would pass the threshold; the plan for `call_model`."""
        if not self._on():
            return None
        async with self._lock:
            self._measure()
            window = self.window()
            if window and self.estimate() > self._settings.get("compact_at", 0.8) * window:
                await self._compact(window, force=False, instructions=None)
            self._sent_view = self._view_chars()
            return self._plan(for_call=True)

    def after_call(self, reply: ModelCallResult) -> None:
        """Remember what the provider counted for the prompt just sent."""
        if self._on():
            self._state["last_input"] = int(reply.usage.get("input_tokens", 0) or 0)
            self._state["last_view"] = self._sent_view

    async def refused(self, err: ActivityError, step: int) -> bool:
        """Whether a failed call was refused for length and is now compacted to try again.

        Once per step: a second refusal after compacting fails the call as before.
        """
        cause = err.cause
        kind = cause.type if isinstance(cause, ApplicationError) else None
        text = str(cause or err)
        if not self._on() or not is_length_refusal(kind, text):
            return False
        state = self._state
        if state.get("refused_step") == [self._host._run.execution, step]:
            return False
        state["refused_step"] = [self._host._run.execution, step]
        state["refusals"] = int(state.get("refusals", 0)) + 1
        # The prompt was too long, so the window is below this estimate of it (in the units
        # the run counts in), and below what the refusal names.
        learned = min(int(self.estimate() * 0.9), refused_window(text) or self.estimate())
        state["window"] = max(1_024, min(learned, int(state.get("window") or learned)))
        async with self._lock:
            await self._compact(self.window(), force=True, instructions=None)
        return True

    async def compact_now(self, instructions: str | None) -> dict[str, Any]:
        """Fold everything but the last messages now (the thread's `compact` update)."""
        if not self._on():
            return {"compacted": False, "reason": "this agent's runs do not compact"}
        async with self._lock:
            self._measure()
            return await self._compact(None, force=True, instructions=instructions)

    def window(self) -> int | None:
        """The model's window in tokens: agent.yaml or the known table, else learned."""
        known = [int(w) for w in (self._settings.get("window"), self._state.get("window")) if w]
        return min(known) if known else None

    def estimate(self, view_chars: int | None = None) -> int:
        """The next prompt's tokens: the last reported count plus the view's growth since."""
        chars = self._view_chars() if view_chars is None else view_chars
        last = int(self._state.get("last_input") or 0)
        if not last:
            return chars // CHARS_PER_TOKEN
        return max(0, last + (chars - int(self._state.get("last_view") or 0)) // CHARS_PER_TOKEN)

    # -- the plan ------------------------------------------------------------------------------

    def _measure(self) -> None:
        """Note the size and role of each message appended since the last measure."""
        state, transcript = self._state, self._host._transcript
        sizes: list[list[Any]] = state.setdefault("sizes", [])
        view = int(state.get("view", 0))
        for index in range(int(state.get("fold_end", 0)) + len(sizes), transcript.count):
            local = index - transcript.offset
            if local < 0:  # before this run and never measured (a run from before compaction)
                sizes.append([0, "?"])
                continue
            message = transcript.messages[local]
            sizes.append([message_chars(message), str(message.get("role", "?"))[:1]])
            view += sizes[-1][0]
        state["view"] = view  # kept as it grows: a step costs the same however long the thread

    def _view_chars(self, fold: int | None = None, elided: set[int] | None = None) -> int:
        """Characters of the model's view; with `fold` or `elided`, of that view instead."""
        state = self._state
        if fold is None and elided is None and "view" in state:
            return int(state["view"])
        first = int(state.get("fold_end", 0))
        fold = first if fold is None else fold
        elided = set(state.get("elided") or ()) if elided is None else elided
        chars = _SUMMARY_CHARS + len(state.get("summary") or "") if state.get("summary") else 0
        if fold != first:
            chars = _SUMMARY_CHARS + SUMMARY_MAX_TOKENS * CHARS_PER_TOKEN
        for offset, (size, _) in enumerate(state.get("sizes") or []):
            index = first + offset
            if index >= fold:
                chars += _NOTE_CHARS if index in elided else int(size)
        return chars

    def _plan(self, for_call: bool) -> dict[str, Any] | None:
        state = self._state
        if not state.get("summary") and not state.get("elided") and not state.get("note"):
            return None
        plan = {k: state[k] for k in ("fold_end", "summary", "elided") if state.get(k)}
        if for_call and state.get("note"):
            plan["compacted"] = state.pop("note")  # `toren events` shows it once
        return plan

    async def _compact(
        self, window: int | None, force: bool, instructions: str | None
    ) -> dict[str, Any]:
        state, transcript = self._state, self._host._transcript
        before = self.estimate()
        target = int(window * TARGET_SHARE) if window else 0
        first = int(state.get("fold_end", 0))
        keep_from = max(first, transcript.count - int(self._settings.get("keep_last", 6)))
        roles = {first + i: (int(size), role) for i, (size, role) in enumerate(state["sizes"])}
        elided = set(state.get("elided") or ())
        large = [
            i
            for i in range(first, keep_from)
            if roles[i][1] == "t" and roles[i][0] >= ELIDE_MIN_CHARS and i not in elided
        ]
        if window and not force:
            trial = set(elided)
            for index in large:  # oldest first, until about half the window
                trial.add(index)
                if self.estimate(self._view_chars(elided=trial)) <= target:
                    break
            threshold = self._settings.get("compact_at", 0.8) * window
            if self.estimate(self._view_chars(elided=trial)) <= threshold:
                state["elided"] = sorted(trial)
                return self._compacted(before, 0, "")
        fold = self._fold_end(first, keep_from, roles, target if window else 0, elided | set(large))
        if fold <= first:
            state["elided"] = sorted(elided | set(large))
            return self._compacted(before, 0, "")
        summary = await self._summarise(first, fold, instructions, window)
        state["summary"] = summary
        state["elided"] = sorted(i for i in elided | set(large) if i >= fold)
        state["sizes"] = state["sizes"][fold - first :]
        state["fold_end"] = fold
        return self._compacted(before, fold - first, summary)

    def _fold_end(
        self, first: int, keep_from: int, roles: dict[int, tuple[int, str]], target: int,
        elided: set[int],
    ) -> int:  # fmt: skip
        """Where the fold ends: the first turn start from which the rest fits the target.

        A turn starts at a user message (else at any message but a tool result); with no
        target (a `compact` by hand) as late as the last messages allow.
        """
        starts = [i for i in range(first + 1, keep_from + 1) if roles.get(i, (0, "t"))[1] != "t"]
        if not starts:
            return first
        users = [i for i in starts if roles.get(i, (0, ""))[1] == "u"]
        if not target:
            return (users or starts)[-1]
        for candidates in (users, starts):
            for index in candidates:
                if self.estimate(self._view_chars(fold=index, elided=elided)) <= target:
                    return index
        return starts[-1]  # as much as the last messages allow

    async def _summarise(
        self, start: int, end: int, instructions: str | None, window: int | None
    ) -> str:
        host = self._host
        run, transcript = host._run, host._transcript
        spec = run.spec
        assert spec is not None
        settings = self._settings
        reply = await model_activity(
            COMPACT_ACTIVITY,
            CompactInput(
                agent=spec.name,
                model=spec.model,
                **transcript.for_model_call(),
                start=start,
                end=end,
                step=run.step,
                previous_summary=str(self._state.get("summary") or ""),
                instructions=instructions or settings.get("summary_instructions"),
                # The summarising call must fit the window too: the newest part is kept.
                max_chars=int(window * CHARS_PER_TOKEN * TARGET_SHARE) if window else 400_000,
            ),
            spec,
            f"compact messages {start}-{end - 1} ({spec.model})",
        )
        spent = run.spent.get("last_prompt", 0)
        host._budget.after_call(spec, reply)  # paid for like any model call
        run.spent["last_prompt"] = spent  # the run's next prompt is not the summary's
        return str(reply.message.get("content") or "")

    def _compacted(self, before: int, folded: int, summary: str) -> dict[str, Any]:
        state = self._state
        state.pop("view", None)
        state["view"] = self._view_chars()
        state["compactions"] = int(state.get("compactions", 0)) + 1
        after = self.estimate()
        note = {
            "tokens_before": before,
            "tokens_after": after,
            "messages_folded": folded,
            "elided": len(state.get("elided") or ()),
            "summary": summary,
        }
        state["note"] = note
        self._host.publish("context_compacted", note)
        return {"compacted": True, **note}


def compact_instructions(request: tuple[Any, ...], busy: bool) -> str | None:
    """The `compact` update's optional instructions; why it is refused, as an error.

    Takes `{"instructions": "..."}` or nothing, and only at rest: a compaction mid-execution
    happens on its own before the next model call.
    """
    if busy:
        raise ApplicationError(
            "the thread is answering a message; compact it at rest (it compacts by itself "
            "before a prompt would pass the window)",
            type="ThreadBusy",
            non_retryable=True,
        )
    body = request[0] if request else None
    if body is None:
        return None
    instructions = body.get("instructions") if isinstance(body, dict) else body
    unknown = [k for k in body if k != "instructions"] if isinstance(body, dict) else []
    if unknown or (instructions is not None and not isinstance(instructions, str)):
        raise ApplicationError(
            'compact takes {"instructions": "..."} (optional), got ' + repr(body)[:200],
            type="InvalidCompact",
            non_retryable=True,
        )
    return instructions or None
