"""Ending or continuing a turn: an application hook, as the seed's `decideTurnContinuation`.

The hook is a Python callable named in the host's configuration (`--continuation-hook
module:function`, `AgentConfig.continuation_hook`). It is called at the end of each iteration
(one model call and the tool calls it asked for) with a `ContinuationContext` and returns
`"end"`, `"default"`, or `ContinueTurn(message)`, directly or awaitable:

| The iteration            | "end"                          | ContinueTurn(message)                          | "default" / no hook        |
| ------------------------ | ------------------------------ | ---------------------------------------------- | -------------------------- |
| The model called tools   | the turn completes, no model call | the message follows the tool results        | the model gets the results |
| The model answered       | the turn completes             | answer and message stored, the model is called again | the turn completes   |

At most `MAX_CONSECUTIVE_CONTINUATIONS` (8) continuations in a row may follow answers without
tools (a tool call resets the count); the next one fails the turn with its answer stored. Each
continued call counts toward the turn's model-call limit. A hook that raises or returns anything
else (a blank message included) fails the turn. Keep it free of side effects: after a crash the
host asks it again for the same iteration.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..domain.records import ToolCallRecord
from ..models.base import ToolCall

MAX_CONSECUTIVE_CONTINUATIONS = 8


@dataclass(frozen=True)
class ContinueTurn:
    message: str


@dataclass(frozen=True)
class ToolResult:
    tool_call_id: str
    tool_name: str
    status: str
    text: str


@dataclass(frozen=True)
class ContinuationContext:
    session_id: str
    turn_id: str
    session_settings: dict[str, Any]
    model_text: str
    model_tool_calls: list[ToolCall]
    # Empty when the model answered without tools.
    tool_results: list[ToolResult] = field(default_factory=list)


Decision = Literal["end", "default"] | ContinueTurn
Hook = Callable[[ContinuationContext], Decision | Awaitable[Decision]]


class ContinuationError(Exception):
    """The hook raised or returned something that is not a decision; the turn fails."""


def results_of(calls: list[ToolCallRecord]) -> list[ToolResult]:
    return [ToolResult(c.id, c.name, c.status.value, c.result_text or "") for c in calls]


def load_hook(spec: str) -> Hook:
    """`package.module:function`; ValueError (one line) when it cannot be loaded."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"continuation hook {spec!r}: expected module:function")
    try:
        hook = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"continuation hook {spec!r} cannot be loaded: {exc}") from None
    if not callable(hook):
        raise ValueError(f"continuation hook {spec!r} is not callable")
    return hook  # type: ignore[no-any-return]


async def decide(hook: Hook | None, context: ContinuationContext) -> Decision:
    if hook is None:
        return "default"
    try:
        decision = hook(context)
        if inspect.isawaitable(decision):
            decision = await decision
    except Exception as exc:  # noqa: BLE001 - the application's code: any failure fails the turn, told in one line
        raise ContinuationError(f"the turn continuation hook failed: {type(exc).__name__}: {exc}") from exc
    if decision in ("end", "default"):
        return decision
    if isinstance(decision, ContinueTurn) and isinstance(decision.message, str) and decision.message.strip():
        return decision
    raise ContinuationError(f"the turn continuation hook returned {decision!r:.100}: expected 'end', 'default' or ContinueTurn(message)")
