"""The payloads of a session's event log (the live stream `GET /sessions/{id}/events` and the web
page), built from stored records.

Everything the model chose (its text, tool names, argument names and values, questions, choices,
plan items) and everything a tool or an approver sent back is escaped for display here
(`safe_text`: control, bidi and invisible characters as visible escapes), so the log holds only
inert text; the page also renders it with `textContent`, never as HTML. Calls are shown as the
card shows them, from the tool name and arguments (`cards.call_summary`).
"""

from __future__ import annotations

from typing import Any

from ..models.base import Message
from .cards import MAX_NAME_CHARS, ApprovalCard, call_summary
from .forms import FormError, form_fields
from .records import ControlRecord, QuestionRecord, ToolCallRecord, TurnRecord
from .safe_text import terminal_text

MAX_TEXT_CHARS = 20_000
MAX_RESULT_CHARS = 2_000
MAX_CHOICE_CHARS = 200

# Event types (the SSE `event:` field).
TURN_STARTED = "turn_started"
TURN_FINISHED = "turn_finished"
MESSAGE = "message"
DELTA = "delta"
TOOL_CALL = "tool_call"
TOOL_PROGRESS = "tool_progress"
APPROVAL = "approval"
QUESTION = "question"
PLAN = "plan"
USAGE = "usage"
CONTROL = "control"
COMPACTION = "compaction"
SETTINGS = "settings"


def text(value: str | None, limit: int = MAX_TEXT_CHARS, keep_newlines: bool = True) -> str | None:
    return None if value is None else terminal_text(value, limit, keep_newlines=keep_newlines)


def name(value: str) -> str:
    return terminal_text(value, MAX_NAME_CHARS)


def inert(value: Any) -> Any:
    """Every string in a JSON value escaped for display (idempotent on escaped text): the last
    guard before a payload leaves the host."""
    if isinstance(value, str):
        return terminal_text(value, keep_newlines=True)
    if isinstance(value, list):
        return [inert(v) for v in value]
    if isinstance(value, dict):
        return {terminal_text(str(k)): inert(v) for k, v in value.items()}
    return value


def turn_started(turn: TurnRecord) -> dict[str, Any]:
    return {"turn_id": turn.id, "mode": turn.mode.value, "user_text": text(turn.user_text)}


def turn_finished(turn: TurnRecord) -> dict[str, Any]:
    return {
        "turn_id": turn.id, "status": turn.status.value, "final_text": text(turn.final_text),
        "error": text(turn.error, 2000), "model_calls": turn.model_calls,
    }


def message(turn_id: str, entry: Message) -> dict[str, Any]:
    return {
        "turn_id": turn_id,
        "role": entry.role,
        "text": text(entry.text),
        "tool_calls": [{"id": name(c.id), "call": call_summary(c.name, c.arguments)} for c in entry.tool_calls],
    }


def delta(turn_id: str, chunk: str) -> dict[str, Any]:
    return {"turn_id": turn_id, "text": text(chunk)}


def tool_call(record: ToolCallRecord) -> dict[str, Any]:
    final = record.status.final
    return {
        "turn_id": record.turn_id,
        "tool_call_id": name(record.id),
        "tool": name(record.name),
        "call": call_summary(record.name, record.arguments),
        "effect": record.effect,
        "status": record.status.value,
        "cancel_reason": record.cancel_reason.value if record.cancel_reason else None,
        "result": text(record.result_text, MAX_RESULT_CHARS) if final else None,
    }


def tool_progress(record: ToolCallRecord, progress: float, total: float | None, message: str | None) -> dict[str, Any]:
    """An upstream's notifications/progress for a running call (a task's status messages too)."""
    return {
        "turn_id": record.turn_id,
        "tool_call_id": name(record.id),
        "progress": progress,
        "total": total,
        "message": text(message, 500, keep_newlines=False),
    }


def approval(card: ApprovalCard, decided_by: str | None, reason: str | None) -> dict[str, Any]:
    data = card.model_dump(mode="json")
    data.update(decided_by=text(decided_by, 64, keep_newlines=False), reason=text(reason, 500, keep_newlines=False))
    return data


def question(record: QuestionRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "turn_id": record.turn_id,
        "tool_call_id": name(record.tool_call_id),
        "question": text(record.question, 2000),
        "choices": [text(c, MAX_CHOICE_CHARS, keep_newlines=False) for c in record.choices or []],
        "allows_free_text": record.allows_free_text,
        "status": record.status.value,
        "answer": text(record.answer, 2000),
        "answered_by": text(record.answered_by, 64, keep_newlines=False),
        "deadline": record.deadline,
        "kind": record.kind.value,
        "fields": _fields(record.form),
    }


def _fields(form: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """A form question's fields, every text cut and made safe (None: not a form)."""
    if form is None:
        return None
    try:
        fields = form_fields(form)
    except FormError:
        return []
    return [{
        "name": text(f.name, MAX_NAME_CHARS, keep_newlines=False), "type": f.type,
        "title": text(f.title, 200, keep_newlines=False), "description": text(f.description, 1000),
        "required": f.required, "enum": [text(e, MAX_CHOICE_CHARS, keep_newlines=False) for e in f.enum] if f.enum else None,
        "enum_titles": [text(e, MAX_CHOICE_CHARS, keep_newlines=False) for e in f.enum_titles] if f.enum_titles else None,
    } for f in fields]


def plan(revision: int, status: str | None, todos: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {
        "revision": revision,
        "status": status,
        "todos": [
            {"content": text(str(t.get("content", "")), 1000, keep_newlines=False), "status": text(str(t.get("status", "")), 32)}
            for t in todos or []
        ],
    }


def usage(turn_id: str, kind: str, model: str, input_tokens: int, output_tokens: int, cost: float | None) -> dict[str, Any]:
    return {
        "turn_id": turn_id, "kind": kind, "model": name(model),
        "input_tokens": input_tokens, "output_tokens": output_tokens, "cost": cost,
    }


def control(record: ControlRecord, applied: bool) -> dict[str, Any]:
    return {
        "id": record.id, "turn_id": record.turn_id, "kind": record.kind.value, "text": text(record.text, 2000),
        "revision": record.revision, "source": text(record.source, 64, keep_newlines=False), "applied": applied,
    }


def compaction(turn_id: str, replaced_messages: int, tool_call_ids: list[str], summary_chars: int) -> dict[str, Any]:
    return {
        "turn_id": turn_id, "replaced_messages": replaced_messages,
        "tool_results_by_reference": [name(i) for i in tool_call_ids], "summary_chars": summary_chars,
    }


QUEUE = "queue"


def queued(message_id: str, text_: str | None, status: str) -> dict[str, Any]:
    """A message sent while a turn ran: `queued`, `started` (it began a turn) or `withdrawn`."""
    return {"message_id": message_id, "text": text(text_), "status": status}
