"""Every text the model sees about the fate of a tool call, in one place.

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


OUTCOME_UNKNOWN = (
    "The outcome of this call is unknown: the request was sent, but no answer came back, so "
    "the write may have taken effect. Do not repeat this call unless the user asks you to; "
    "tell the user that it may or may not have happened."
)

NOT_RUN_PREFIX = "the tool did not run, so it is safe to call again"

APPROVAL_DENIED = "The tool call was not run: the user denied approval."
APPROVAL_DEADLINE_PASSED = "approval deadline passed"
QUESTION_DECLINED = "The user declined to answer."
QUESTION_DEADLINE_PASSED = "question deadline passed"


def outcome_unknown(detail: str | None = None) -> str:
    return OUTCOME_UNKNOWN if not detail else f"{OUTCOME_UNKNOWN} ({detail})"


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
