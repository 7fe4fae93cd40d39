"""Live checks of an MCP server against the Dex conventions (SPEC section 9).

`run_checks` lists every tool of a connected server and reports, per tool and per rule,
whether its declarations are valid and what a Dex client makes of it; with `allow_writes`
it also calls each declared write (without a key, twice with one fresh key, and with that
key and other arguments) and checks the answers. Talking MCP is behind the small
`ToolServer` protocol so the rules stay independent of transports.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any, Protocol

from ..protocol import Arguments, JsonObject
from .effects import Classification, listed_tool_classification
from .keys import APPROVAL_KEY, APPROVAL_RECOMMENDED, DECLARABLE_EFFECTS, EFFECT_KEY, IDEMPOTENCY_KEY, OUTCOME_KEY
from .keys import Effect, Outcome
from .outcomes import attempts_for

EXAMPLE_STRING = "dex-check"


class Rule(StrEnum):
    LISTING = "tools listed"
    EFFECT_VALUE = "effect value"
    APPROVAL_VALUE = "approval value"
    KEY_REQUIRED = "refused without key"
    REPLAY = "same key, same answer"
    KEY_BOUND = "key bound to arguments"
    OUTCOME = "outcome well-formed"
    WRITES = "write checks"


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"  # not counted: not applicable, or writes not allowed


@dataclass(frozen=True)
class RuleResult:
    tool: str | None  # None: a server-wide rule (listing)
    rule: Rule
    status: Status
    detail: str

    @property
    def message(self) -> str:
        """One line that names the tool and the rule, for people and logs."""
        where = f"tool {self.tool!r}" if self.tool else "server"
        return f"{where}: {self.rule.value}: {self.detail}"

    def to_json(self) -> JsonObject:
        return {"tool": self.tool, "rule": self.rule.value, "status": self.status.value, "detail": self.detail}


@dataclass(frozen=True)
class ListedTool:
    """A tool as listed: `meta` is its `_meta`, `annotations` camelCase wire hints."""

    name: str
    input_schema: Mapping[str, Any]
    meta: Mapping[str, Any] | None = None
    annotations: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class CallAnswer:
    """What one tools/call produced: a result, a JSON-RPC error, or a broken transport."""

    result: Mapping[str, Any] | None = None  # wire CallToolResult (content, isError, _meta, ...)
    error: Mapping[str, Any] | None = None  # wire ErrorData (code, message, data)
    failure: str | None = None  # the call got no answer (connection closed, timeout, ...)

    @property
    def meta(self) -> Mapping[str, Any]:
        if self.result is not None:
            return self.result.get("_meta") or {}
        data = (self.error or {}).get("data")
        return (data.get("_meta") or {}) if isinstance(data, Mapping) else {}

    @property
    def outcome(self) -> Any:
        return self.meta.get(OUTCOME_KEY)

    @property
    def is_error(self) -> bool:
        return self.error is not None or bool((self.result or {}).get("isError"))

    def summary(self) -> str:
        if self.failure is not None:
            return f"no answer ({self.failure})"
        if self.error is not None:
            return f"JSON-RPC error {self.error.get('code')}: {self.error.get('message')}"
        texts = [b.get("text", "") for b in (self.result or {}).get("content") or [] if b.get("type") == "text"]
        text = " ".join(texts).strip() or "(no text)"
        shown = text if len(text) <= 80 else text[:77] + "..."
        return f"{'isError ' if self.is_error else ''}result {shown!r}"

    def comparable(self) -> Any:
        """The parts a replay must repeat: everything but `_meta` keys other than the outcome."""
        if self.error is not None:
            data = self.error.get("data")
            return ("error", self.error.get("code"), self.error.get("message"), _only_outcome(data))
        result = self.result or {}
        return ("result", _canonical(result.get("content")), _canonical(result.get("structuredContent")),
                bool(result.get("isError")), self.outcome)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _only_outcome(data: Any) -> Any:
    if isinstance(data, Mapping) and isinstance(data.get("_meta"), Mapping):
        rest = {k: v for k, v in data.items() if k != "_meta"}
        return _canonical({**rest, "_meta": {OUTCOME_KEY: data["_meta"].get(OUTCOME_KEY)}})
    return _canonical(data)


class ToolServer(Protocol):
    async def list_tools(self) -> list[ListedTool]: ...

    async def call_tool(self, name: str, arguments: Arguments, key: str | None) -> CallAnswer: ...


@dataclass(frozen=True)
class ToolReport:
    tool: ListedTool
    classification: Classification
    rules: list[RuleResult]

    @property
    def attempts(self) -> str:
        if self.classification.effect.resendable:
            return f"retried, up to {attempts_for(self.classification.effect)} attempts with the same key"
        return "single attempt"

    @property
    def source(self) -> str:
        """Where the effect comes from, as a Dex client sees it."""
        if self.classification.declared:
            return "declared"
        if self.classification.effect is Effect.UNCLASSIFIED:
            return "no usable declaration or annotation"
        return "from annotations"

    def client_view(self) -> str:
        c = self.classification
        approval = "asks approval" if c.requires_approval else "no approval"
        return f"{c.effect.value} ({self.source}), {approval}, {self.attempts}"

    def to_json(self) -> JsonObject:
        meta = self.tool.meta or {}
        c = self.classification
        return {
            "name": self.tool.name,
            "declared": {"effect": meta.get(EFFECT_KEY), "approval": meta.get(APPROVAL_KEY)},
            "annotations": dict(self.tool.annotations or {}),
            "client": {"effect": c.effect.value, "declared": c.declared, "source": self.source, "requires_approval": c.requires_approval,
                       "attempts": attempts_for(c.effect), "warnings": list(c.warnings)},
            "rules": [r.to_json() for r in self.rules],
        }


@dataclass
class CheckReport:
    target: str
    allow_writes: bool
    tools: list[ToolReport] = field(default_factory=list)
    server_rules: list[RuleResult] = field(default_factory=list)

    @property
    def results(self) -> list[RuleResult]:
        return self.server_rules + [r for t in self.tools for r in t.rules]

    @property
    def passed(self) -> int:
        return sum(1 for r in self.results if r.status is Status.PASS)

    @property
    def failed(self) -> int:
        return sum(1 for r in self.results if r.status is Status.FAIL)

    @property
    def failures(self) -> list[RuleResult]:
        return [r for r in self.results if r.status is Status.FAIL]

    def to_json(self) -> JsonObject:
        return {"target": self.target, "allow_writes": self.allow_writes,
                "server_rules": [r.to_json() for r in self.server_rules],
                "tools": [t.to_json() for t in self.tools], "passed": self.passed, "failed": self.failed}


# ---------------------------------------------------------------------------------------------
# Arguments from an inputSchema


def example_value(schema: Any) -> Any:
    """A minimal value valid for simple JSON Schemas: enum/const/default first, then by type."""
    if not isinstance(schema, Mapping):
        return EXAMPLE_STRING
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for combinator in ("anyOf", "oneOf", "allOf"):
        if schema.get(combinator):
            return example_value(schema[combinator][0])
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "string":
        return EXAMPLE_STRING.ljust(int(schema.get("minLength", 0)), "x")
    if kind in ("integer", "number"):
        value = max(1, schema.get("minimum", 1), schema.get("exclusiveMinimum", 0) + 1)
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return False
    if kind == "array":
        return [example_value(schema.get("items")) for _ in range(int(schema.get("minItems", 0)))]
    if kind == "object" or "properties" in schema:
        return example_arguments(schema)
    if kind == "null":
        return None
    return EXAMPLE_STRING


def example_arguments(schema: Mapping[str, Any]) -> Arguments:
    """Required properties only, each with `example_value`."""
    properties = schema.get("properties") or {}
    return {name: example_value(properties.get(name)) for name in schema.get("required") or []}


def _other_value(schema: Any, current: Any) -> tuple[bool, Any]:
    """(True, a different valid value) when the schema allows one."""
    if not isinstance(schema, Mapping) or "const" in schema:
        return False, None
    if schema.get("enum"):
        others = [v for v in schema["enum"] if v != current]
        return (True, others[0]) if others else (False, None)
    if isinstance(current, bool):
        return True, not current
    if isinstance(current, (int, float)):
        return True, current + 1
    if isinstance(current, str):
        return True, current + "-2"
    return False, None


def variant_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> Arguments | None:
    """`arguments` with one value changed (or one optional property added); None when impossible."""
    properties = schema.get("properties") or {}
    for name, value in arguments.items():
        ok, other = _other_value(properties.get(name), value)
        if ok:
            return {**arguments, name: other}
    for name, prop in properties.items():
        if name not in arguments:
            return {**arguments, name: example_value(prop)}
    return None


# ---------------------------------------------------------------------------------------------
# The rules


def declaration_rules(tool: ListedTool) -> list[RuleResult]:
    meta = tool.meta or {}
    rules = []
    if EFFECT_KEY not in meta:
        rules.append(RuleResult(tool.name, Rule.EFFECT_VALUE, Status.PASS, "not declared"))
    elif isinstance(meta[EFFECT_KEY], str) and meta[EFFECT_KEY] in DECLARABLE_EFFECTS:
        rules.append(RuleResult(tool.name, Rule.EFFECT_VALUE, Status.PASS, meta[EFFECT_KEY]))
    else:
        rules.append(RuleResult(
            tool.name, Rule.EFFECT_VALUE, Status.FAIL,
            f"{EFFECT_KEY} is {meta[EFFECT_KEY]!r}, not one of {', '.join(sorted(DECLARABLE_EFFECTS))}; "
            "a Dex client ignores it and the annotations and treats the tool as unclassified"))
    if APPROVAL_KEY not in meta:
        rules.append(RuleResult(tool.name, Rule.APPROVAL_VALUE, Status.PASS, "not declared"))
    elif meta[APPROVAL_KEY] == APPROVAL_RECOMMENDED:
        detail = APPROVAL_RECOMMENDED if EFFECT_KEY in meta else f"{APPROVAL_RECOMMENDED} (ignored: no effect key)"
        rules.append(RuleResult(tool.name, Rule.APPROVAL_VALUE, Status.PASS, detail))
    else:
        rules.append(RuleResult(
            tool.name, Rule.APPROVAL_VALUE, Status.FAIL,
            f"{APPROVAL_KEY} is {meta[APPROVAL_KEY]!r}, the only value is {APPROVAL_RECOMMENDED!r}; "
            "a Dex client fails closed and asks for approval"))
    return rules


def is_declared_write(tool: ListedTool) -> bool:
    c = listed_tool_classification(tool.meta)
    return c.declared and c.effect.is_write


def _refused(answer: CallAnswer) -> tuple[bool, str]:
    if answer.failure is not None:
        return False, f"the call got {answer.summary()}"
    if not answer.is_error:
        return False, f"it ran: {answer.summary()}"
    if answer.outcome != Outcome.REJECTED:
        return False, f"refused without {OUTCOME_KEY}: {Outcome.REJECTED.value} ({answer.summary()})"
    return True, answer.summary()


def outcome_problems(answer: CallAnswer) -> list[str]:
    if OUTCOME_KEY not in answer.meta:
        return []
    value = answer.outcome
    if value not in (Outcome.UNKNOWN.value, Outcome.REJECTED.value):
        return [f"{OUTCOME_KEY} is {value!r}, not 'unknown' or 'rejected' ({answer.summary()})"]
    if answer.result is not None and answer.result.get("isError") is not True:
        return [f"{OUTCOME_KEY}: {value} with isError false; a client that knows no conventions reads it as a "
                "success"]
    return []


async def write_rules(server: ToolServer, tool: ListedTool, run_id: str) -> list[RuleResult]:
    """Exercise one declared write; every call here may execute it."""
    name = tool.name
    arguments = example_arguments(tool.input_schema)
    answers: list[CallAnswer] = []
    rules: list[RuleResult] = []

    keyless = await server.call_tool(name, arguments, None)
    answers.append(keyless)
    ok, detail = _refused(keyless)
    rules.append(RuleResult(name, Rule.KEY_REQUIRED, Status.PASS if ok else Status.FAIL,
                            detail if ok else f"a call without {IDEMPOTENCY_KEY} must be refused, but {detail}"))

    key = f"dex-check/{run_id}/{name}"
    first = await server.call_tool(name, arguments, key)
    answers.append(first)
    if first.failure is not None:
        rules.append(RuleResult(name, Rule.REPLAY, Status.FAIL, f"the first call with a key got {first.summary()}"))
        rules.append(RuleResult(name, Rule.KEY_BOUND, Status.SKIP, "no first answer to bind the key to"))
    else:
        again = await server.call_tool(name, arguments, key)
        answers.append(again)
        if again.comparable() == first.comparable():
            rules.append(RuleResult(name, Rule.REPLAY, Status.PASS, first.summary()))
        else:
            rules.append(RuleResult(name, Rule.REPLAY, Status.FAIL,
                                    f"a retry with the same key answered {again.summary()}, "
                                    f"the first call {first.summary()}"))
        other = variant_arguments(tool.input_schema, arguments)
        if other is None:
            rules.append(RuleResult(name, Rule.KEY_BOUND, Status.SKIP, "the tool takes no arguments to vary"))
        else:
            reused = await server.call_tool(name, other, key)
            answers.append(reused)
            ok, detail = _refused(reused)
            rules.append(RuleResult(name, Rule.KEY_BOUND, Status.PASS if ok else Status.FAIL,
                                    detail if ok else f"the same key with other arguments must be refused, but {detail}"))

    problems = list(dict.fromkeys(p for a in answers for p in outcome_problems(a)))  # each problem once
    seen = sorted({str(a.outcome) for a in answers if OUTCOME_KEY in a.meta})
    rules.append(RuleResult(name, Rule.OUTCOME, Status.FAIL if problems else Status.PASS,
                            "; ".join(problems) if problems else (f"seen: {', '.join(seen)}" if seen else "none sent")))
    return rules


def select_tools(tools: Sequence[ListedTool], only: Sequence[str], skip: Sequence[str]) -> list[ListedTool]:
    def matches(name: str, patterns: Sequence[str]) -> bool:
        return any(fnmatchcase(name, p) for p in patterns)

    return [t for t in tools if (not only or matches(t.name, only)) and not matches(t.name, skip)]


async def run_checks(
    server: ToolServer,
    target: str,
    *,
    allow_writes: bool = False,
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
    progress: Callable[[str], None] = lambda _line: None,
) -> CheckReport:
    report = CheckReport(target=target, allow_writes=allow_writes)
    progress(f"listing tools of {target}")
    try:
        listed = await server.list_tools()
    except Exception as error:  # any failure to list is this rule's failure, reported, not raised
        report.server_rules.append(RuleResult(None, Rule.LISTING, Status.FAIL, f"tools/list failed: {error}"))
        return report
    names = [t.name for t in listed]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    report.server_rules.append(RuleResult(
        None, Rule.LISTING, Status.FAIL if duplicates else Status.PASS,
        f"duplicate tool names: {', '.join(duplicates)}" if duplicates else f"{len(listed)} tools"))

    tools = select_tools(listed, only, skip)
    run_id = uuid.uuid4().hex[:12]  # fresh keys per run: a second run must not hit the first one's fences
    for index, tool in enumerate(tools, 1):
        progress(f"[{index}/{len(tools)}] {tool.name}")
        rules = declaration_rules(tool)
        if is_declared_write(tool):
            if allow_writes:
                rules += await write_rules(server, tool, run_id)
            else:
                rules.append(RuleResult(tool.name, Rule.WRITES, Status.SKIP,
                                        "declared write not called; pass --allow-writes to exercise it"))
        report.tools.append(ToolReport(tool, listed_tool_classification(tool.meta, tool.annotations), rules))
    return report
