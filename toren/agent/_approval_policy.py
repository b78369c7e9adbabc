"""agent.yaml `approvals:`: who may decide a gated call, remembered grants, what expiry decides.

```yaml
approvals:
  approvers: [alice, bob]          # who may decide any gated call (absent: anyone)
  rules:
    - name: small-refunds          # recorded with every decision the rule makes
      tool: refund_order
      when: {amount: {lt: 200}}    # conditions on the call's arguments, all must hold
      approvers: [alice]           # who may decide the calls it matches
      remember: thread             # once approved, later matching calls go through: run | thread
      auto: deny                   # what the rule decides when the approval expires
      timeoutMin: 30               # this rule's approval timeout
```

Rules only shape calls that are gated already (the tool's `approval`); the first rule whose
tool and `when` match a call is its rule. The worker evaluates them, in the recorded
`toren.check_approval` local activity, so the run's history says which rule matched and a
deploy that changes a rule never changes a recorded decision.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from toren.agent._approval_types import ApprovalCheck
from toren.agent._config_blocks import Strict, matching

__all__ = ["ApprovalPolicy", "ApprovalRule", "apply_policy", "when_holds"]

OPERATORS = ("lt", "le", "gt", "ge", "eq", "ne", "in", "not_in")
"""What a `when` condition may compare with: `{amount: {lt: 200}}`; a plain value means `eq`."""

Approver = Annotated[
    str, matching(re.compile(r"^[A-Za-z0-9_.@+-]{1,100}$"), "must be a name like alice")
]

RuleName = Annotated[
    str, matching(re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$"), "must match [a-z0-9][a-z0-9_-]*")
]


class ApprovalRule(Strict):
    """One entry of `approvals.rules`."""

    name: RuleName
    tool: str
    """The tool whose gated calls it shapes (checked against the agent's tools)."""
    when: dict[str, Any] = Field(default_factory=dict)
    """Conditions on the call's arguments (a dotted path for nested ones); all must hold."""
    approvers: list[Approver] | None = None
    """Who may decide the calls it matches; absent: the agent's `approvers`."""
    remember: Literal["run", "thread"] | None = None
    """Once a person approves a matching call, later matching calls of the run (a thread: of
    the message's execution) or of the whole thread go through, recorded with this rule."""
    auto: Literal["approve", "deny"] = "deny"
    """What the rule decides when the approval expires."""
    timeout_min: float | None = Field(None, alias="timeoutMin", gt=0)
    """Minutes a matching call waits for a person; absent: the tool's or the agent's timeout."""

    @field_validator("when")
    @classmethod
    def _conditions(cls, when: dict[str, Any]) -> dict[str, Any]:
        for path, condition in when.items():
            if not isinstance(condition, dict):
                continue
            unknown = sorted(set(condition) - set(OPERATORS))
            if unknown or not condition:
                raise ValueError(
                    f"{path}: use one or more of {', '.join(OPERATORS)} "
                    f"(got {', '.join(unknown) or 'nothing'})"
                )
            for op in ("in", "not_in"):
                if op in condition and not isinstance(condition[op], list):
                    raise ValueError(f"{path}.{op} must be a list")
        return when


class ApprovalPolicy(Strict):
    """The `approvals:` block of agent.yaml."""

    approvers: list[Approver] | None = None
    """Who may decide any gated call no rule names approvers for; absent: anyone."""
    rules: list[ApprovalRule] = Field(default_factory=list)

    @model_validator(mode="after")
    def _names_unique(self) -> ApprovalPolicy:
        names = [r.name for r in self.rules]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"rule names must be unique: {', '.join(twice)}")
        return self

    def rule_for(self, tool: str, args: dict[str, Any]) -> ApprovalRule | None:
        """The first rule whose tool is `tool` and whose `when` holds for `args`."""
        return next((r for r in self.rules if r.tool == tool and when_holds(r.when, args)), None)


def apply_policy(
    policy: ApprovalPolicy, check: ApprovalCheck, args: dict[str, Any], grants: dict[str, str]
) -> ApprovalCheck:
    """`check` (a gated call's) shaped by `policy`: its rule, approvers, and a grant in force.

    A grant of the matching rule lets the call through (`gated` false, `granted_by` who gave
    it); a grant of another rule does nothing.
    """
    rule = policy.rule_for(check.tool, args)
    check.approvers = list(policy.approvers) if policy.approvers is not None else None
    if rule is None:
        return check
    check.rule = rule.name
    if rule.approvers is not None:
        check.approvers = list(rule.approvers)
    check.remember = rule.remember or ""
    check.auto = rule.auto if rule.auto != "deny" else ""
    check.timeout_s = rule.timeout_min * 60 if rule.timeout_min else None
    if rule.remember and rule.name in grants:
        check.gated = False
        check.granted_by = grants[rule.name]
        check.reason = f"rule {rule.name}: remembered approval by {grants[rule.name]}"
    return check


def when_holds(when: dict[str, Any], args: dict[str, Any]) -> bool:
    """Whether every condition of `when` holds for `args` (a missing argument: it does not)."""
    for path, condition in when.items():
        found, value = _lookup(args, path)
        if not found:
            return False
        tests = condition if isinstance(condition, dict) else {"eq": condition}
        if not all(_compare(op, value, expected) for op, expected in tests.items()):
            return False
    return True


def _lookup(args: Any, path: str) -> tuple[bool, Any]:
    value = args
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def _compare(op: str, value: Any, expected: Any) -> bool:
    try:
        if op == "eq":
            return bool(value == expected)
        if op == "ne":
            return bool(value != expected)
        if op == "in":
            return value in expected
        if op == "not_in":
            return value not in expected
        if isinstance(value, bool) or isinstance(expected, bool):
            return False  # `true < 2` holds in Python; in a policy it is a mistake
        if op == "lt":
            return bool(value < expected)
        if op == "le":
            return bool(value <= expected)
        if op == "gt":
            return bool(value > expected)
        if op == "ge":
            return bool(value >= expected)
    except TypeError:
        return False  # a string against a number: the condition does not hold
    return False
