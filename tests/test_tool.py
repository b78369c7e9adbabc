"""define_tool: the contract's fields, their errors, and the schema the model sees."""

from __future__ import annotations

import functools
from enum import StrEnum
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from toren import ConfigError, ToolContext, define_tool
from toren.agent._schema import check_schema, validate_args


class Args(BaseModel):
    query: str = Field(description="what to look for")
    limit: int = 10


def handler(args: Any, ctx: ToolContext) -> str:
    return "ok"


def ctx() -> ToolContext:
    return ToolContext(env={}, idempotency_key="k", run_id="r", call_id="c", agent="a", tool="t")


def test_pydantic_input_becomes_json_schema() -> None:
    tool = define_tool(name="search", description="Search.", input=Args, handler=handler)
    assert tool.schema["type"] == "object"
    assert tool.schema["properties"]["query"]["description"] == "what to look for"
    assert tool.schema["required"] == ["query"]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("effects", "world", "effects must be one of"),
        ("idempotency", "sometimes", "idempotency must be one of"),
        ("approval", "maybe", "approval must be 'never', 'always' or a predicate"),
        ("timeout_ms", 0, "timeout_ms must be a positive integer"),
        ("max_attempts", -1, "max_attempts must be a positive integer"),
        ("max_attempts", 1.5, "max_attempts must be a positive integer"),
        ("name", "BadName", "must be snake_case"),
        ("input", 42, "expected a pydantic model class or a JSON Schema dict"),
    ],
)
def test_wrong_values_name_the_tool_and_field(field: str, value: Any, message: str) -> None:
    kwargs: dict[str, Any] = {"name": "refund", "description": "Refund.", "handler": handler}
    kwargs[field] = value
    with pytest.raises(ConfigError) as err:
        define_tool(**kwargs)
    text = str(err.value)
    assert message in text
    assert "refund" in text or field == "name"


def test_every_bad_field_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        define_tool(
            name="x",
            description="",
            effects="world",  # type: ignore[arg-type]
            idempotency="maybe",  # type: ignore[arg-type]
            handler=handler,
        )
    assert len(err.value.problems) == 3


def test_a_misspelled_keyword_is_named_with_the_closest() -> None:
    with pytest.raises(ConfigError) as err:
        define_tool(description="Echo.", timeout=5, effects="world", handler=handler)  # type: ignore[call-overload]
    assert len(err.value.problems) == 2
    assert ": unknown keyword 'timeout'; did you mean 'timeout_ms'?" in str(err.value)


def test_decorator_form() -> None:
    @define_tool(description="Echo.", input={"type": "object", "properties": {}})
    def echo(args: Any, ctx: ToolContext) -> str:
        return "hi"

    assert echo.name is None  # discovery names it after the file
    assert echo.handler is not None


def _nested(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        node = {"type": "object", "properties": {"child": node}}
    return node


def test_nesting_deeper_than_seven_is_refused() -> None:
    assert check_schema(_nested(7)) == []
    with pytest.raises(ConfigError, match="nested deeper than 7 levels"):
        define_tool(name="deep", description="Deep.", input=_nested(8), handler=handler)


def test_open_ended_additional_properties_is_refused() -> None:
    schema = {
        "type": "object",
        "properties": {"meta": {"type": "object", "additionalProperties": True}},
    }
    with pytest.raises(ConfigError, match="open-ended additionalProperties"):
        define_tool(name="open", description="Open.", input=schema, handler=handler)

    class Loose(BaseModel):
        meta: dict[str, Any]

    with pytest.raises(ConfigError, match="meta: open-ended additionalProperties"):
        define_tool(name="loose", description="Loose.", input=Loose, handler=handler)

    class Record(BaseModel):
        tags: dict[str, str]

    define_tool(name="record", description="A typed record is fine.", input=Record, handler=handler)


def test_invalid_json_schema_is_refused() -> None:
    with pytest.raises(ConfigError, match="not a valid JSON Schema"):
        define_tool(
            name="bad",
            description="Bad.",
            input={"type": "object", "properties": 3},
            handler=handler,
        )


def test_validate_args_reports_every_problem() -> None:
    tool = define_tool(name="search", description="Search.", input=Args, handler=handler)
    assert validate_args(tool.schema, {"query": "x"}) is None
    problem = validate_args(tool.schema, {"limit": "ten"})
    assert problem is not None
    assert "'query' is a required property" in problem
    assert "limit: 'ten' is not of type 'integer'" in problem


async def test_results_are_encoded_and_defaults_applied() -> None:
    seen: list[Any] = []

    def h(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        seen.append(args)
        return {"n": args["n"]}

    tool = define_tool(
        name="count",
        description="Count.",
        input={"type": "object", "properties": {"n": {"type": "integer", "default": 3}}},
        handler=h,
    )
    assert await tool.invoke({}, ctx()) == '{"n": 3}'

    async def ah(args: Args, ctx: ToolContext) -> str:
        return f"{args.query}:{args.limit}"

    tool2 = define_tool(name="a", description="Async.", input=Args, handler=ah)
    assert await tool2.invoke({"query": "q"}, ctx()) == "q:10"


def test_approval_predicate_sees_parsed_args() -> None:
    tool = define_tool(
        name="pay", description="Pay.", input=Args, approval=lambda a: a.limit > 5, handler=handler
    )
    assert tool.approval_kind == "predicate"
    assert tool.needs_approval({"query": "x", "limit": 6})
    assert not tool.needs_approval({"query": "x", "limit": 5})


class Color(StrEnum):
    RED = "red"
    BLUE = "blue"


class Inner(BaseModel):
    note: str | None = None


class EveryType(BaseModel):
    text: str
    number: float
    flag: bool
    nothing: None = None
    kind: Literal["a", "b"] = "a"
    color: Color = Color.RED
    maybe: int | None = None
    nullable: str | None
    tags: list[str] = []
    inner: Inner = Inner()
    counts: dict[str, int] = {}
    either: int | str = 0
    anything: Any = None


EVERY_TYPE_JSON = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "number": {"type": "number"},
        "flag": {"type": "boolean"},
        "nothing": {"type": "null"},
        "kind": {"const": "a"},
        "color": {"enum": ["red", "blue"]},
        "maybe": {"type": "integer"},
        "nullable": {"type": ["string", "null"]},
        "withdefault": {"type": "integer", "default": 3},
        "tags": {"type": "array", "items": {"type": "string"}},
        "inner": {"type": "object", "properties": {"note": {"type": "string"}}},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "anything": {},
    },
    "required": ["text", "number", "flag", "nullable"],
}


def test_the_seeds_argument_types_work_in_both_forms() -> None:
    args = {
        "text": "t", "number": 1.5, "flag": True, "nothing": None, "kind": "a", "color": "blue",
        "maybe": 2, "nullable": None, "tags": ["x"], "inner": {"note": "n"}, "counts": {"a": 1},
        "either": "s", "anything": {"free": [1, "json"]},
    }  # fmt: skip
    for input in (EveryType, EVERY_TYPE_JSON):
        tool = define_tool(name="every", description="All types.", input=input, handler=handler)
        assert validate_args(tool.schema, args) is None, input
        bad = validate_args(tool.schema, {**args, "color": "green", "counts": {"a": "x"}})
        assert bad is not None and "'green' is not one of" in bad and "counts.a" in bad
    parsed = define_tool(name="e", description="d", input=EveryType, handler=handler).parse_args(
        args
    )
    assert parsed.color is Color.BLUE and parsed.counts == {"a": 1}


def test_pydantic_nesting_beyond_seven_is_refused() -> None:
    from pydantic import create_model

    model: type[BaseModel] = create_model("L0", leaf=(str, ...))
    for i in range(1, 8):
        model = create_model(f"L{i}", child=(model, ...))
    with pytest.raises(ConfigError, match="nested deeper than 7 levels"):
        define_tool(name="deep", description="Deep.", input=model, handler=handler)


class Address(BaseModel):
    city: str


class Order(BaseModel):
    order_id: str
    ship_to: Address
    items: list[Address] = []


def test_derived_schemas_refuse_made_up_arguments() -> None:
    # The recorded llama.cpp run: a small model added `ref` and `denied_by` to a refund.
    tool = define_tool(name="order", description="Order.", input=Order, handler=handler)
    assert tool.schema["additionalProperties"] is False
    assert tool.schema["$defs"]["Address"]["additionalProperties"] is False
    ok = {"order_id": "A-1", "ship_to": {"city": "Oslo"}}
    assert validate_args(tool.schema, ok) is None
    problem = validate_args(tool.schema, {**ok, "ref": "x", "denied_by": "y"})
    assert problem == "unknown arguments 'ref', 'denied_by' (allowed: order_id, ship_to, items)"
    nested = validate_args(tool.schema, {**ok, "items": [{"city": "Rome", "zip": "00100"}]})
    assert nested == "items.0: unknown argument 'zip' (allowed: city)"


def test_a_json_schema_dict_keeps_its_own_choice() -> None:
    open_schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    tool = define_tool(name="open", description="Open.", input=open_schema, handler=handler)
    assert "additionalProperties" not in tool.schema
    assert validate_args(tool.schema, {"q": "x", "extra": 1}) is None


async def _runs_code(args: Any, ctx: ToolContext) -> str:
    return str((await ctx.run_code("def main():\n    return 1\n")).result)


def _opens_workspace(args: Any, ctx: ToolContext) -> str:
    def inner() -> Any:
        return ctx.workspace()

    return str(inner)


class _Calls:
    def __call__(self, args: Any, ctx: ToolContext) -> str:
        return str(ctx.run_code)


def test_a_tool_works_in_the_workspace_when_declared_or_its_handler_names_it() -> None:
    def tool(handler: Any, **kw: Any) -> Any:
        return define_tool(description="t", handler=handler, **kw)

    assert tool(_runs_code).in_workspace
    assert tool(_opens_workspace).in_workspace  # through a function defined in it
    assert tool(functools.partial(_runs_code)).in_workspace
    assert tool(_Calls()).in_workspace
    assert tool(lambda a, c: "x", effects="sandbox").in_workspace
    assert not tool(lambda a, c: c.idempotency_key).in_workspace
