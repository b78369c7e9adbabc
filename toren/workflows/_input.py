"""The run's own input, checked in its first workflow task: it comes from any client.

`AgentRun` takes its input as raw JSON, so a wrong one fails the run at once with a
non-retryable error that names the key and the fix, instead of a workflow task that fails
to decode its arguments and retries forever. Deterministic, workflow-side code.
"""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from temporalio.converter import value_to_type

    from toren.agent._types import RunInput, RunState, ThreadCarry, ThreadInput
    from toren.workflows._agent_tools import tree_problems
    from toren.workflows._approvals import json_type

__all__ = [
    "ATTACHMENTS_NAMED",
    "InvalidRunInput",
    "StartInput",
    "identifier_problem",
    "one_raw_input",
    "json_type",
    "naming_attachments",
    "parse_run_input",
    "parse_thread_input",
]

_AGENT = re.compile(r"^[a-z][a-z0-9_]*$")
_KEYS = (
    "agent", "prompt", "arguments", "messages", "attachments", "user_id", "carry", "fork", "eval",
)  # fmt: skip
_FORK_KEYS = ("run_id", "step", "execution", "state", "workspace")
_EVAL_KEYS = ("run_id", "calls", "on_diverge")
_CALL_KEYS = ("tool", "args", "result", "is_error", "decision", "workspace")
ATTACHMENTS_NAMED = "toren-attachments-named"
"""The patch under which a message with attachments names their ids to the model."""
ON_DIVERGE = ("continue", "stop")
"""What an eval run does with a call its record cannot answer (`RunInput.eval`)."""
_VERSION = re.compile(r"^[0-9a-f]{64}$")
"""A workspace version id (`toren.store._workspace`)."""
_THREAD_KEYS = ("agent", "user_id", "arguments", "carry")
_IDENTIFIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@=+-]{0,199}$")
"""A user id or thread id: letters, digits and `._:@=+-`, up to 200 characters."""
_ROLES = ("user", "assistant", "tool", "system")
EXAMPLE = '{"agent": "support", "prompt": "Where is order A-1002?"}'


def InvalidRunInput(problem: str, workflow_type: str = "AgentRun") -> ApplicationError:  # noqa: N802
    """The non-retryable failure of a run whose input is wrong."""
    example = THREAD_EXAMPLE if workflow_type == "AgentThread" else EXAMPLE
    return ApplicationError(
        f"invalid {workflow_type} input: {problem} (start it with a JSON object like {example})",
        type="InvalidRunInput",
        non_retryable=True,
    )


THREAD_EXAMPLE = '{"agent": "support", "user_id": "alice"}'


F = TypeVar("F", bound=Callable[..., Any])


def one_raw_input(fn: F) -> F:
    """Declare `fn(self, *args: RawValue)` to Temporal as taking one `RawValue`.

    The SDK decodes a workflow's start arguments before any workflow code runs, and a failure
    there (JSON nested past the decoder's depth, bytes that are no JSON) or a count the
    signature does not take (none, two) fails the workflow task on every retry: the run hangs.
    Given one argument hint per argument it passes a `RawValue` through undecoded; given a
    different count it decodes them untyped and calls with them all. So `__init__` and `run`
    take `*args` (any count reaches them) and show Temporal one `RawValue` parameter (one
    argument stays undecoded); `StartInput` then decodes it where a failure can end the run.
    """
    self, args = inspect.signature(fn).parameters.values()
    shown = args.replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD)
    fn.__signature__ = inspect.signature(fn).replace(parameters=[self, shown])  # type: ignore[attr-defined]
    return fn


class StartInput:
    """The one JSON value a workflow was started with, or why it has none.

    Read in `__init__` (handlers may run before `run`), checked in `run`. Never raises: a
    wrong start ends the run with `InvalidRunInput` from `run`.
    """

    def __init__(self, args: Sequence[Any]) -> None:
        self.value: Any = None
        """The decoded input (`None` when there is a problem)."""
        self.problem: str | None = None
        """Why there is no input to check, or `None`."""
        if len(args) != 1:
            self.problem = f"expected one JSON object as the only input, got {len(args)} inputs"
            return
        (arg,) = args
        if not isinstance(arg, RawValue):  # a test or caller passing a value in process
            self.value = arg
            return
        try:
            self.value = workflow.payload_converter().from_payload(arg.payload)
        except Exception as err:
            first = str(err).strip().splitlines()
            reason = (first[1] if len(first) > 1 else first[0]).strip()[:200] if first else ""
            self.problem = f"the input is no JSON toren can read ({reason or type(err).__name__})"

    def check(self, workflow_type: str) -> Any:
        """The decoded input.

        Raises:
            ApplicationError: `InvalidRunInput` when the start gave no one readable value.
        """
        if self.problem is not None:
            raise InvalidRunInput(self.problem, workflow_type)
        return self.value


def identifier_problem(what: str, value: Any) -> str | None:
    """Why `value` is not a valid user or thread id, or `None`."""
    if not isinstance(value, str):
        return f"{what} must be a string, got {json_type(value)}"
    if not _IDENTIFIER.match(value):
        return (
            f"{what} {value[:80]!r} is not an identifier (letters, digits and ._:@=+- only, "
            "starting with a letter or digit, at most 200 characters)"
        )
    return None


def parse_thread_input(raw: Any) -> ThreadInput:
    """Check `raw` (an `AgentThread`'s start input) and the thread id, and build the input.

    Raises:
        ApplicationError: `InvalidRunInput`, naming every wrong key at once.
    """
    if not isinstance(raw, dict):
        raise InvalidRunInput(f"expected a JSON object, got {json_type(raw)}", "AgentThread")
    problems = [_unknown(str(k), _THREAD_KEYS) for k in _foreign(raw, _THREAD_KEYS)]
    thread_id = identifier_problem("the thread id (workflow id)", workflow.info().workflow_id)
    if thread_id:
        problems.append(thread_id)
    agent = raw.get("agent")
    if agent is None:
        problems.append("missing key 'agent'")
    elif not isinstance(agent, str) or not _AGENT.match(agent):
        problems.append(f"'agent' {agent!r} is not an agent name ([a-z][a-z0-9_]*)")
    user_id = raw.get("user_id")
    if user_id is not None and (problem := identifier_problem("'user_id'", user_id)):
        problems.append(problem)
    arguments = raw.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        problems.append(f"'arguments' must be a JSON object, got {json_type(arguments)}")
    carry = _carried(raw, ThreadCarry, "thread", problems)
    if problems:
        raise InvalidRunInput("; ".join(problems), "AgentThread")
    return ThreadInput(agent=str(agent), user_id=user_id, arguments=arguments, carry=carry)


def parse_run_input(raw: Any) -> RunInput:
    """Check `raw` (the decoded JSON the run was started with) and build its `RunInput`.

    Raises:
        ApplicationError: `InvalidRunInput`, naming every wrong key at once.
    """
    if not isinstance(raw, dict):
        raise InvalidRunInput(f"expected a JSON object, got {json_type(raw)}")
    problems = [_unknown(str(k), _KEYS) for k in _foreign(raw, _KEYS)]
    agent, prompt = raw.get("agent"), raw.get("prompt")
    for key, value in (("agent", agent), ("prompt", prompt)):
        if value is None and not any(_same(k, key) for k in raw if k != key):
            problems.append(f"missing key {key!r}")
        elif value is not None and not isinstance(value, str):
            problems.append(f"{key!r} must be a string, got {json_type(value)}")
    if isinstance(agent, str) and not _AGENT.match(agent):
        problems.append(f"'agent' {agent!r} is not an agent name ([a-z][a-z0-9_]*)")
    arguments = raw.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        problems.append(f"'arguments' must be a JSON object, got {json_type(arguments)}")
    messages = raw.get("messages")
    if messages is not None:
        problems += _message_problems(messages)
    attachments = raw.get("attachments")
    if attachments is not None and (
        not isinstance(attachments, list) or not all(isinstance(a, str) for a in attachments)
    ):
        problems.append(
            f"'attachments' must be a list of attachment ids (strings), got "
            f"{json_type(attachments)}"
        )
    user_id = raw.get("user_id")
    if user_id is not None and (problem := identifier_problem("'user_id'", user_id)):
        problems.append(problem)
    carry = _carried(raw, RunState, "run", problems)
    fork = raw.get("fork")
    if fork is not None:
        problems += _fork_problems(fork)
    replay = raw.get("eval")
    if replay is not None:
        problems += _eval_problems(replay)
        if fork is not None:
            problems.append("'eval' and 'fork' together: an eval re-runs a run from its start")
    if problems:
        raise InvalidRunInput("; ".join(problems))
    return RunInput(
        agent=str(agent),
        prompt=str(prompt),
        arguments=arguments,
        messages=messages,
        attachments=attachments,
        user_id=user_id,
        carry=carry,
        fork=fork,
        eval=replay,
    )


def _fork_problems(fork: Any) -> list[str]:
    """Why `fork` (`RunInput.fork`) is not where a fork starts from, naming each wrong key."""
    if not isinstance(fork, dict):
        return [f"'fork' must be a JSON object, got {json_type(fork)}"]
    problems = [f"'fork': {_unknown(str(k), _FORK_KEYS)}" for k in fork if k not in _FORK_KEYS]
    run_id = fork.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        problems.append(f"'fork.run_id' must be the source run's id, got {json_type(run_id)}")
    for key in ("step", "execution"):
        value = fork.get(key)
        if (value is not None or key == "step") and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            problems.append(f"'fork.{key}' must be a whole number from 1, got {value!r}")
    state = fork.get("state")
    if state is not None and not isinstance(state, dict):
        problems.append(f"'fork.state' must be a JSON object, got {json_type(state)}")
    workspace = fork.get("workspace")
    if workspace is not None and not (isinstance(workspace, str) and _VERSION.match(workspace)):
        problems.append(f"'fork.workspace' must be a workspace version id, got {workspace!r}")
    return problems


def _eval_problems(replay: Any) -> list[str]:
    """Why `replay` (`RunInput.eval`) is not a recorded run to answer calls from."""
    if not isinstance(replay, dict):
        return [f"'eval' must be a JSON object, got {json_type(replay)}"]
    problems = [f"'eval': {_unknown(str(k), _EVAL_KEYS)}" for k in replay if k not in _EVAL_KEYS]
    run_id = replay.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        problems.append(f"'eval.run_id' must be the recorded run's id, got {json_type(run_id)}")
    on_diverge = replay.get("on_diverge", "continue")
    if on_diverge not in ON_DIVERGE:
        problems.append(
            f"'eval.on_diverge' must be one of {', '.join(ON_DIVERGE)}, got {on_diverge!r}"
        )
    calls = replay.get("calls")
    if not isinstance(calls, list):
        return [*problems, f"'eval.calls' must be a list of recorded calls, got {json_type(calls)}"]
    for i, call in enumerate(calls):
        where = f"'eval.calls[{i}]"
        if not isinstance(call, dict):
            problems.append(f"{where}' must be an object, got {json_type(call)}")
            continue
        problems += [
            f"{where}': {_unknown(str(k), _CALL_KEYS)}" for k in call if k not in _CALL_KEYS
        ]
        for key, valid, what in (
            ("tool", isinstance(call.get("tool"), str), "a tool name"),
            ("args", isinstance(call.get("args"), dict), "a JSON object"),
            ("result", isinstance(call.get("result"), str), "a string"),
            ("is_error", isinstance(call.get("is_error", False), bool), "true or false"),
        ):
            if not valid:
                problems.append(f"{where}.{key}' must be {what}, got {json_type(call.get(key))}")
        decision = call.get("decision")
        if decision is not None and not (
            isinstance(decision, dict) and isinstance(decision.get("approved"), bool)
        ):
            problems.append(f"{where}.decision' must be an object with 'approved' true or false")
        workspace = call.get("workspace")
        if workspace is not None and not (isinstance(workspace, str) and _VERSION.match(workspace)):
            problems.append(f"{where}.workspace' must be a workspace version id, got {workspace!r}")
        if len(problems) > 10:
            break  # one line, not one per recorded call
    return problems


C = TypeVar("C", RunState, ThreadCarry)


def _carried(raw: dict[str, Any], state: type[C], what: str, problems: list[str]) -> C | None:
    """The state a `what` ("run" or "thread") carried over continue-as-new, if it may have one.

    Only a run that continued as new takes carried state; a wrong one is added to `problems`.
    """
    if raw.get("carry") is None:
        return None
    tree = tree_problems(raw["carry"]) if state is RunState else None
    if tree is not None and not workflow.info().continued_run_id:
        # A new agent-tool child: its parent's tree is the one carry it may bring.
        problems += tree
        return None if tree else RunState(tree=raw["carry"]["tree"])  # type: ignore[return-value]
    if not workflow.info().continued_run_id:
        problems.append(
            f"'carry' is set by toren when a {what} continues as new; a new {what} may not "
            "bring one (remove it)"
        )
        return None
    try:
        carried: C = value_to_type(state, raw["carry"], [])
    except Exception as err:
        problems.append(f"'carry' is not a {what}'s state: {err}")
        return None
    return carried


def _message_problems(messages: Any) -> list[str]:
    if not isinstance(messages, list):
        return [f"'messages' must be a list of messages, got {json_type(messages)}"]
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return [f"'messages[{i}]' must be an object, got {json_type(message)}"]
        if message.get("role") not in _ROLES:
            return [f"'messages[{i}].role' must be one of {', '.join(_ROLES)}"]
        if "content" in message and not isinstance(message["content"], str | None):
            return [f"'messages[{i}].content' must be a string"]
    return []


def _same(a: str, b: str) -> bool:
    return a.lower() == b.lower() or bool(difflib.get_close_matches(a, [b], n=1, cutoff=0.75))


def _foreign(raw: dict[str, Any], keys: tuple[str, ...]) -> list[Any]:
    """The keys of `raw` not in `keys` that make a wrong input.

    An input toren wrote itself, continuing a run as new, may come from a newer release whose
    input has a key this one does not know (old and new workers share a queue during an
    upgrade): that key is ignored, as every decoder of toren's wire types ignores fields it does
    not know. A person's or a client's input is checked strictly.
    """
    if raw.get("carry") is not None and workflow.info().continued_run_id:
        return []
    return [k for k in raw if k not in keys]


_WRITTEN_BY_TOREN = ("carry", "fork", "eval")
"""Start keys only toren writes (continue-as-new, `toren fork`, `toren eval`): not suggested."""


def _unknown(key: str, keys: tuple[str, ...]) -> str:
    offered = tuple(k for k in keys if k not in _WRITTEN_BY_TOREN)
    close = [k for k in offered if k == key.lower()] or difflib.get_close_matches(key, offered, n=1)
    shown = list(offered)
    hint = f"; did you mean {close[0]!r}?" if close else f" (keys: {', '.join(shown)})"
    return f"unknown key {key!r}{hint}"


def naming_attachments(content: str, attachments: Sequence[str] | None) -> str:
    """A user message's text with the ids of the files attached to it named for the model.

    `read_attachment` takes an id, and the model has no other way to learn which ones the run
    holds Under the `ATTACHMENTS_NAMED` patch: histories recorded before it sent the text alone, and
    replay them so.
    """
    if not attachments or not workflow.patched(ATTACHMENTS_NAMED):
        return content
    return f"{content}\n\n(files attached to this message: {', '.join(attachments)})"
