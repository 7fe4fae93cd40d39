"""Approval cards, built from the stored call (tool name and arguments), never from the model's
words about it: `refund wants to run` / `refund(order: "5521", amount: 40)` / the time left.

Pure functions and models (no store): the CLI, the HTTP API, the session event log and the web
page all show the same card. Every text field is escaped for display (`safe_text`).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from pydantic import BaseModel

from .records import ApprovalStatus, ToolCallRecord
from .safe_text import arguments_view, terminal_text

# Approvals and questions wait without a deadline unless one is given (the seeds' default).
DEFAULT_APPROVAL_TIMEOUT_SECONDS: float | None = None


def parse_deadline(value: str) -> float | None:
    """A deadline in seconds from the command line: a positive number, or `none` (no deadline).
    ValueError, naming the value, otherwise."""
    text = value.strip().lower()
    if text == "none":
        return None
    try:
        seconds = float(text)
    except ValueError:
        raise ValueError(f"{value!r} is not a number of seconds or `none`") from None
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"{value!r}: a deadline must be a positive number of seconds, or `none`")
    return seconds
MAX_NAME_CHARS = 128


def approval_id(session_id: str, tool_call_id: str) -> str:
    """First 32 hex chars of SHA-256 over the session id and the tool call id.

    A NUL separates the two so ("a", "bc") and ("ab", "c") differ. The same call raised
    again after a restart gets the same id, so a decision sent across the restart lands.
    """
    digest = hashlib.sha256(f"{session_id}\0{tool_call_id}".encode()).hexdigest()
    return digest[:32]


def display_name(tool_name: str) -> str:
    """The upstream tool's own name (the gateway publishes `<server>__<tool>`), safe to show."""
    name = tool_name.split("__", 1)[1] if "__" in tool_name else tool_name
    return terminal_text(name, MAX_NAME_CHARS)


def call_summary(tool_name: str, arguments: dict[str, Any]) -> str:
    """`refund(order: "5521", amount: 40)`: each value as JSON, in the call's own order, escaped
    and cut (`safe_text.arguments_view`), so no key or value can change how the card reads."""
    return f"{display_name(tool_name)}({arguments_view(arguments)})"


CALL_TOOL = "call_tool"  # the gateway's discovery tool that calls another by name (docs/discovery.md)


def target_call(tool_name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The call a card shows: for the gateway's `call_tool` with `{"name": X, "arguments": A}`,
    the target X with A (that is what runs); any other call as it is."""
    if tool_name == CALL_TOOL:
        name, inner = arguments.get("name"), arguments.get("arguments", {})
        if isinstance(name, str) and name and isinstance(inner, dict):
            return name, inner
    return tool_name, arguments


def time_left(deadline: float | None, now: float) -> str | None:
    """`9m 58s left` before the deadline; None without one."""
    if deadline is None:
        return None
    seconds = max(0, int(deadline - now))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m left"
    return f"{minutes}m {secs:02d}s left" if minutes else f"{secs}s left"


class ApprovalCard(BaseModel):
    id: str
    title: str
    call: str
    tool: str
    effect: str
    session_id: str
    turn_id: str
    tool_call_id: str
    idempotency_key: str
    status: ApprovalStatus = ApprovalStatus.PENDING
    deadline: float | None = None
    seconds_left: float | None = None  # at the time the card was built
    buttons: tuple[str, str] = ("Allow", "Deny")

    @classmethod
    def for_call(
        cls,
        record: ToolCallRecord,
        status: ApprovalStatus = ApprovalStatus.PENDING,
        deadline: float | None = None,
        now: float | None = None,
        target_effect: str | None = None,
    ) -> "ApprovalCard":
        """The card shows the call that runs: through `call_tool`, its target (`target_call`).
        `target_effect`: the target's effect as the host knows it (a search_tools answer), shown
        instead of call_tool's own. Every text field is escaped for display: the model chose the tool name, the call id
        and the arguments, so none of them may carry control or invisible characters."""
        now = time.time() if now is None else now
        name, arguments = target_call(record.name, record.arguments)
        return cls(
            id=approval_id(record.session_id, record.id),
            title=f"{display_name(name)} wants to run",
            call=call_summary(name, arguments),
            tool=terminal_text(name, MAX_NAME_CHARS),
            effect=record.effect if target_effect is None or name == record.name else target_effect,
            session_id=terminal_text(record.session_id, MAX_NAME_CHARS),
            turn_id=record.turn_id,
            tool_call_id=terminal_text(record.id, MAX_NAME_CHARS),
            idempotency_key=terminal_text(record.idempotency_key, 3 * MAX_NAME_CHARS),
            status=status,
            deadline=deadline,
            seconds_left=None if deadline is None else max(0.0, round(deadline - now, 1)),
        )
