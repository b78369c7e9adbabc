"""The run input check and the decision check on their own (pure workflow-side functions).

Fast, so mutation testing runs them on every mutant (`tests/mutation.md`);
`tests/test_run_input.py` and `tests/test_approvals.py` show the same rules on real runs.
"""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from toren.agent._schema import validate_args
from toren.workflows._approvals import (
    _duration,
    _short_time,
    decision_problem,
    json_type,
    unknown_signal_problem,
)
from toren.workflows._input import identifier_problem, parse_run_input


def problem(raw: Any) -> str:
    """The problem `parse_run_input` names (a `carry` needs a workflow: test_run_input.py)."""
    with pytest.raises(ApplicationError) as err:
        parse_run_input(raw)
    assert err.value.type == "InvalidRunInput" and err.value.non_retryable
    message = err.value.message
    prefix, suffix = "invalid AgentRun input: ", " (start it with a JSON object like "
    assert message.startswith(prefix) and suffix in message
    return message[len(prefix) : message.index(suffix)]


def test_a_valid_input_becomes_the_run_input() -> None:
    run = parse_run_input(
        {"agent": "support_2", "prompt": "hi", "arguments": {"a": 1},
         "messages": [{"role": "system", "content": None}, {"role": "tool"}],
         "attachments": ["att-1"], "user_id": "alice@example.com"}
    )  # fmt: skip
    assert (run.agent, run.prompt, run.arguments) == ("support_2", "hi", {"a": 1})
    assert run.messages == [{"role": "system", "content": None}, {"role": "tool"}]
    assert (run.attachments, run.user_id, run.carry) == (["att-1"], "alice@example.com", None)
    bare = parse_run_input({"agent": "a", "prompt": "", "carry": None})
    assert (bare.arguments, bare.messages, bare.attachments, bare.user_id) == (None,) * 4


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("x", "expected a JSON object, got a string"),
        ([], "expected a JSON object, got an array"),
        ({}, "missing key 'agent'; missing key 'prompt'"),
        ({"agent": "a"}, "missing key 'prompt'"),
        ({"agent": "a", "Prompt": "p"}, "unknown key 'Prompt'; did you mean 'prompt'?"),
        ({"agent": "a", "promt": "p"}, "unknown key 'promt'; did you mean 'prompt'?"),
        ({"agent": "a", "prompt": "p", "zzz": 1},
         "unknown key 'zzz' (keys: agent, prompt, arguments, messages, attachments, user_id)"),
        ({"agent": 5, "prompt": "p"}, "'agent' must be a string, got a number"),
        ({"agent": "a", "prompt": None}, "missing key 'prompt'"),
        ({"agent": "a", "prompt": False}, "'prompt' must be a string, got a boolean"),
        ({"agent": "Support", "prompt": "p"}, "'agent' 'Support' is not an agent name ([a-z][a-z0-9_]*)"),
        ({"agent": "9a", "prompt": "p"}, "'agent' '9a' is not an agent name ([a-z][a-z0-9_]*)"),
        ({"agent": "a-b", "prompt": "p"}, "'agent' 'a-b' is not an agent name ([a-z][a-z0-9_]*)"),
        ({"agent": "a", "prompt": "p", "arguments": []}, "'arguments' must be a JSON object, got an array"),
        ({"agent": "a", "prompt": "p", "messages": {}}, "'messages' must be a list of messages, got an object"),
        ({"agent": "a", "prompt": "p", "messages": [{"role": "user"}, 3]}, "'messages[1]' must be an object, got a number"),
        ({"agent": "a", "prompt": "p", "messages": [{"role": "bot"}]}, "'messages[0].role' must be one of user, assistant, tool, system"),
        ({"agent": "a", "prompt": "p", "messages": [{"role": "user", "content": 1}]}, "'messages[0].content' must be a string"),
        ({"agent": "a", "prompt": "p", "attachments": "x"}, "'attachments' must be a list of attachment ids (strings), got a string"),
        ({"agent": "a", "prompt": "p", "attachments": ["x", 1]}, "'attachments' must be a list of attachment ids (strings), got an array"),
        ({"agent": "a", "prompt": "p", "user_id": 7}, "'user_id' must be a string, got a number"),
        ({"agent": 1, "prompt": 2, "x": 3},
         "unknown key 'x' (keys: agent, prompt, arguments, messages, attachments, user_id); "
         "'agent' must be a string, got a number; 'prompt' must be a string, got a number"),
    ],
)  # fmt: skip
def test_each_wrong_input_is_named(raw: Any, expected: str) -> None:
    assert problem(raw) == expected


def test_identifiers() -> None:
    assert identifier_problem("'user_id'", "a" * 200) is None
    assert identifier_problem("'user_id'", "A1._:@=+-") is None
    for bad in ["", "-a", "a b", "a" * 201, "é"]:
        assert identifier_problem("'user_id'", bad) == (
            f"'user_id' {bad[:80]!r} is not an identifier (letters, digits and ._:@=+- only, "
            "starting with a letter or digit, at most 200 characters)"
        )
    assert identifier_problem("'user_id'", None) == "'user_id' must be a string, got null"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"call_id": "big", "by": "alice", "comment": "ok"}, None),
        ({"call_id": "big", "by": None}, None),
        ("big", "expected a JSON object, got a string"),
        ({"call_id": 1}, '"call_id" must be a string, got a number'),
        ({}, 'missing "call_id" (waiting: big, huge)'),
        ({"call_id": ""}, 'missing "call_id" (waiting: big, huge)'),
        ({"call_id": "old"}, "call 'old' was already decided"),
        ({"call_id": "nope"}, "unknown call_id 'nope' (waiting: big, huge)"),
        ({"call_id": "big", "by": 7}, '"by" must be a string'),
        ({"call_id": "big", "comment": ["x"]}, '"comment" must be a string'),
    ],
)
def test_each_wrong_decision_is_named(body: Any, expected: str | None) -> None:
    assert decision_problem(body, ["big", "huge"], {"old"}) == expected


def test_nothing_waiting_is_said() -> None:
    assert decision_problem({}, [], set()) == 'missing "call_id" (waiting: none)'
    assert decision_problem({"call_id": "x"}, [], set()) == "unknown call_id 'x' (waiting: none)"


def test_signal_names_and_value_types_read_well() -> None:
    assert unknown_signal_problem("aprove") == "unknown signal 'aprove'; did you mean 'approve'?"
    assert (
        unknown_signal_problem("nudge") == "unknown signal 'nudge' (signals: approve, deny, answer)"
    )
    values = [None, True, 1, 1.5, "s", [], {}, b"x"]
    expected = [
        "null",
        "a boolean",
        "a number",
        "a number",
        "a string",
        "an array",
        "an object",
        "bytes",
    ]
    assert [json_type(v) for v in values] == expected
    assert [_duration(s) for s in [30, 59.5, 60, 90, 3600, 5400, 86400, 90000, 172800]] == [
        "30s", "59.5s", "1m", "1.5m", "1h", "1.5h", "1d", "1.04167d", "2d",
    ]  # fmt: skip
    assert _duration(3601) == "60.0167m" and _duration(86460) == "24.0167h"
    assert _short_time("2026-12-02T12:41:51.250127+00:00") == "2026-12-02 12:41:51 UTC"
    assert _short_time("2026-12-02T12:41:51+02:00") == "2026-12-02 12:41:51"


def test_tool_arguments_are_checked_against_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {"text": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["text"],
    }
    assert validate_args(schema, {"text": "hi", "n": 2}) is None
    assert validate_args(schema, {"text": 5}) == "text: 5 is not of type 'string'"
    assert validate_args(schema, {}) == "'text' is a required property"
    assert validate_args(schema, {"text": 1, "n": "x"}) == (
        "n: 'x' is not of type 'integer'; text: 1 is not of type 'string'"
    )
    many = {"type": "object", "properties": {f"k{i}": {"type": "string"} for i in range(7)}}
    text = validate_args(many, {f"k{i}": i for i in range(7)})
    assert text is not None and text.endswith("k4: 4 is not of type 'string' (and 2 more)")
    assert text.count("is not of type") == 5
    long = {"type": "object", "properties": {"t": {"enum": ["a" * 3000]}}}
    cut = validate_args(long, {"t": "b"})
    assert cut is not None and len(cut) == 2001 and cut.endswith("…")


def test_the_failure_shows_an_input_that_works() -> None:
    run = problem_failure({"agent": 1, "prompt": "p", "messages": {}})
    assert run.message == (
        "invalid AgentRun input: 'agent' must be a string, got a number; 'messages' must be a "
        'list of messages, got an object (start it with a JSON object like {"agent": '
        '"support", "prompt": "Where is order A-1002?"})'
    )
    from toren.workflows._input import InvalidRunInput

    thread = InvalidRunInput("missing key 'agent'", "AgentThread")
    assert thread.message == (
        "invalid AgentThread input: missing key 'agent' (start it with a JSON object like "
        '{"agent": "support", "user_id": "alice"})'
    )


def problem_failure(raw: Any) -> ApplicationError:
    with pytest.raises(ApplicationError) as err:
        parse_run_input(raw)
    return err.value


def test_a_misspelt_key_counts_as_the_key_only_when_close() -> None:
    # Any case of a key is that key: no "missing" problem on top of the unknown one.
    assert problem({"agent": "a", "PROMPT": "p"}) == "unknown key 'PROMPT'; did you mean 'prompt'?"
    # "pro" is like "prompt" enough for a hint, not enough to stand in for it.
    assert problem({"agent": "a", "pro": "p"}) == (
        "unknown key 'pro'; did you mean 'prompt'?; missing key 'prompt'"
    )


def test_too_many_problems_are_counted_and_a_long_one_is_cut() -> None:
    def schema_of(n: int) -> dict[str, Any]:
        return {"type": "object", "properties": {f"k{i}": {"type": "string"} for i in range(n)}}

    five = validate_args(schema_of(5), {f"k{i}": i for i in range(5)})
    assert five is not None and "more)" not in five and five.count("is not of type") == 5
    six = validate_args(schema_of(6), {f"k{i}": i for i in range(6)})
    assert six is not None and six.endswith(" (and 1 more)")

    def enum_text(n: int) -> str | None:
        return validate_args(
            {"type": "object", "properties": {"t": {"enum": ["a" * n]}}}, {"t": "b"}
        )

    base = len(enum_text(0) or "")
    exact = enum_text(2000 - base)
    assert exact is not None and len(exact) == 2000 and not exact.endswith("…")
    over = enum_text(2001 - base)
    assert over is not None and len(over) == 2001 and over.endswith("…")


def test_unknown_arguments_are_named_with_the_allowed_ones() -> None:
    closed = {
        "type": "object",
        "properties": {"a": {}, "b": {}},
        "patternProperties": {"^x_": {}},
        "additionalProperties": False,
    }
    assert validate_args(closed, {"a": 1, "x_ok": 2}) is None
    assert validate_args(closed, {"ref": 1, "x_ok": 2}) == "unknown argument 'ref' (allowed: a, b)"
    assert validate_args(closed, {"r": 1, "s": 2}) == "unknown arguments 'r', 's' (allowed: a, b)"
    empty = {"type": "object", "additionalProperties": False}
    assert validate_args(empty, {"r": 1}) == "unknown argument 'r' (allowed: none)"
    # Another additionalProperties error keeps jsonschema's own words.
    typed = {"type": "object", "additionalProperties": {"type": "string"}}
    assert validate_args(typed, {"r": 1}) == "r: 1 is not of type 'string'"
    # A `false` subschema is not an additionalProperties error: jsonschema's words, no crash.
    never = {"type": "object", "properties": {"x": False}}
    assert validate_args(never, {"x": {"a": 1}}) == "False schema does not allow {'a': 1}"
    const = {"type": "object", "properties": {"x": {"const": False}}}
    assert validate_args(const, {"x": {"a": 1}}) == "x: False was expected"
