"""Every text the model sees about the fate of a tool call, in one place — and the texts of the
seeds' smaller rules (listing failures, the turn failure note, an abandoned task, session ids).

The loop, the gateway tool source and the built-in tools import these; no other module
words a tool call's fate, so what the model reads stays consistent and reviewable.
"""

from __future__ import annotations

import json
from typing import Any

# Python's json.dumps separators, so a result reads the same whichever model client asks.
_SEPARATORS = (", ", ": ")


def as_json(value: Any) -> str:
    return json.dumps(value, separators=_SEPARATORS, ensure_ascii=False)


def _whole(value: Any) -> Any:
    """Whole floats as integers (a `priority` of 1.0 is written 1), recursively."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(v) for v in value]
    return value


def sorted_json(value: Any) -> str:
    """A server's items as the mcp_* tools answer them: keys sorted, Python's separators."""
    return json.dumps(_whole(value), sort_keys=True, separators=_SEPARATORS, ensure_ascii=False)


OUTCOME_UNKNOWN = (
    "The outcome of this call is unknown: the request was sent, but no answer came back, so "
    "the write may have taken effect. Do not repeat this call unless the user asks you to; "
    "tell the user that it may or may not have happened."
)

NOT_RUN_PREFIX = "the tool did not run, so it is safe to call again"

# Why an attempt is interrupted (the detail inside a failed / outcome-unknown text).
TRANSPORT_CANCELLED = "the connection broke after the request was sent (the MCP client cancelled the exchange)"
HOST_STOPPED = "the host stopped before the answer came back"

APPROVAL_DENIED = "The tool call was not run: the user denied approval."
APPROVAL_DEADLINE_PASSED = "approval deadline passed"
QUESTION_DECLINED = "The user declined to answer."
QUESTION_DEADLINE_PASSED = "question deadline passed"
FORM_WITHOUT_MESSAGE = "A tool asks you to fill in a form."


def outcome_unknown(detail: str | None = None) -> str:
    return OUTCOME_UNKNOWN if not detail else f"{OUTCOME_UNKNOWN} ({detail})"


def no_answer(detail: str) -> str:
    """An attempt that was sent and got no readable answer."""
    return f"no answer after the request was sent ({detail})"


def rejected(detail: str) -> str:
    """The gateway (or the upstream) refused the call with outcome `rejected`."""
    detail = detail.strip()
    base = "The tool call was rejected and did not take effect"
    return f"{base}: {detail}" if detail else f"{base}."


def failed(detail: str) -> str:
    detail = detail.strip()
    return f"The tool call failed: {detail}" if detail else "The tool call failed."


def not_run(detail: str) -> str:
    """The call was never sent, so calling it again is safe."""
    return f"{NOT_RUN_PREFIX}: {detail}"


def skipped(previous_tool: str, previous_call_id: str) -> str:
    return (
        f"The tool call was not run: it was skipped because an earlier write of the same "
        f"response ({previous_tool}, call {previous_call_id}) did not succeed. Writes run one at "
        f"a time in your order, and a write after one that did not succeed is not run."
    )


def limit_reached(limit: int) -> str:
    return f"The tool call was not run: this turn reached its limit of {limit} model calls."


def approval_denied(reason: str | None = None) -> str:
    return APPROVAL_DENIED if not reason else f"{APPROVAL_DENIED} Reason: {reason}"


def unknown_tool(name: str) -> str:
    return f"The tool call failed: unknown tool {name}"


def invalid_arguments(name: str, reason: str) -> str:
    return f"The tool call was not run: invalid {name} arguments: {reason}"


def missing_result() -> str:
    """Pairs a stored call that has no final record (should not happen) with a safe text."""
    return OUTCOME_UNKNOWN


def question_answered(answer: str) -> str:
    return as_json({"status": "answered", "answer": answer})


def wait_completed(waited_seconds: int, reason: str) -> str:
    return as_json({"status": "completed", "waited_seconds": waited_seconds, "reason": reason})


def todos_updated(revision: int, task_count: int) -> str:
    return as_json({"status": "updated", "revision": revision, "task_count": task_count})


def todos_cleared(revision: int) -> str:
    return as_json({"status": "cleared", "revision": revision})


# Steering and cancellation -------------------------------------------------------------------

CANCELLED_BY_STEERING = (
    "The tool call was not run: the user sent a new message while this turn was running, so the "
    "calls that had not started were cancelled. Read the user's message and decide again."
)
CANCELLED_BY_TURN_CANCELLATION = "The tool call was not run: the user cancelled the turn."
# A restarted host sent a call's pending round of questions, and the gateway no longer knew its
# requestState: the call went again from the start, under its idempotency key.
ROUND_STATE_UNKNOWN = (
    "[The gateway no longer knew this call's pending round of questions (its requestState had "
    "expired or was unknown after a restart), so the call was sent again from the start under its "
    "idempotency key; the gateway's fence decided what ran.]"
)

TASK_ABANDONED = (
    f"{OUTCOME_UNKNOWN} (the user cancelled the turn while this call's long-running task was running; "
    "the task was asked to stop, but it may have done its work)"
)
READ_STOPPED_BY_CANCELLATION = "The tool call was stopped before it answered: the user cancelled the turn."


def turn_cancelled_reason(source: str, reason: str | None) -> str:
    """The turn's error text: who cancelled it, and why when they said."""
    base = f"cancelled by the user ({source})"
    return f"{base}: {reason.strip()}" if reason and reason.strip() else base


def turn_failed_note(error: str) -> str:
    """Stored at the end of a failed turn whose tool calls have results (the seeds' turn failure note)."""
    return (
        f"[Dex] This turn failed ({error}). The tool calls above ran with the results shown; do not "
        "repeat them unless the user asks you to."
    )


def turn_cancelled_note(reason: str) -> str:
    """Stored at the end of a cancelled turn, so a later model call knows what happened."""
    return f"[Dex] This turn was {reason}. Calls that had not started were not run."


# Plans ------------------------------------------------------------------------------------------

PLANNING_ONLY = "The tool call was not run: a planning turn can only call write_todos."


def plan_approved(revision: int) -> str:
    return (
        f"[Dex] The user approved plan revision {revision}. Execute it and keep the task statuses "
        "current with write_todos."
    )


# Turn continuation and spend limits ---------------------------------------------------------------

def continuation_limit(limit: int) -> str:
    return f"the turn reached its limit of {limit} consecutive continuations without a tool call"


def spend_limit(scope: str, used: str, limit: str) -> str:
    """`spend limit reached: this turn used 1,200 tokens of its 1,000-token limit`."""
    return f"spend limit reached: this {scope} used {used} of its {limit} limit"


# Compaction ---------------------------------------------------------------------------------------

CONTEXT_SUMMARY_HEADER = "[Dex] Summary of the earlier conversation:"


# Listing the gateway's tools -------------------------------------------------------------------------

def listing_failed(detail: str) -> str:
    """The warning when the gateway's tools could not be listed for a model call."""
    return f"the gateway's tools are not offered in this model call: {detail}"


def listing_timed_out(seconds: float) -> str:
    return f"listing them took longer than {seconds:g} s"


# Session ids (Collie's id rule) --------------------------------------------------------------------

SESSION_ID_EMPTY = "a session id cannot be empty"


def session_id_too_long(shown: str, size: int, limit: int) -> str:
    return f"session id {shown} is {size} bytes long; at most {limit} are allowed"


def session_id_forbidden(shown: str, char: str) -> str:
    return f"session id {shown} contains {char!r}; a session id cannot contain /, ? or #"


def session_id_whitespace(shown: str) -> str:
    return f"session id {shown} contains whitespace"


def session_id_control(shown: str, code: int) -> str:
    return f"session id {shown} contains a control or invisible character (U+{code:04X})"
