"""Built-in tools the host handles itself: ask_user, durable_wait, write_todos.

They run with a fixed policy (read, no approval). durable_wait stores its end time before it
sleeps, so a restarted host waits only the remaining time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import anyio

from . import texts
from .models.base import ToolSpec
from .store import CallStatus, SessionStore, ToolCallRecord

ASK_USER = "ask_user"
DURABLE_WAIT = "durable_wait"
WRITE_TODOS = "write_todos"
MAX_DURABLE_WAIT_SECONDS = 365 * 24 * 3600

DEFINITIONS: dict[str, ToolSpec] = {
    ASK_USER: ToolSpec(
        name=ASK_USER,
        description="Ask the user a question and wait for the answer. Use it when you need a decision or a fact only the user has.",
        input_schema={
            "type": "object",
            "properties": {
                "question": {"type": "string", "minLength": 1},
                "choices": {"type": ["array", "null"], "items": {"type": "string"}},
                "allows_free_text": {"type": ["boolean", "null"]},
            },
            "required": ["question"],
            "additionalProperties": False,
        },
    ),
    DURABLE_WAIT: ToolSpec(
        name=DURABLE_WAIT,
        description="Wait for a number of seconds before continuing (survives a restart of the host).",
        input_schema={
            "type": "object",
            "properties": {
                "duration_seconds": {"type": "integer", "minimum": 1, "maximum": MAX_DURABLE_WAIT_SECONDS},
                "reason": {"type": "string"},
            },
            "required": ["duration_seconds", "reason"],
            "additionalProperties": False,
        },
    ),
    WRITE_TODOS: ToolSpec(
        name=WRITE_TODOS,
        description="Replace the plan of this session with a list of tasks and their status.",
        input_schema={
            "type": "object",
            "properties": {
                "todos": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "content": {"type": "string", "minLength": 1},
                            "status": {"enum": ["pending", "in_progress", "completed"]},
                        },
                        "required": ["content", "status"],
                        "additionalProperties": False,
                    },
                }
            },
            "required": ["todos"],
            "additionalProperties": False,
        },
    ),
}


class Questioner(Protocol):
    async def ask(self, question: str, choices: list[str] | None, allows_free_text: bool) -> str | None:
        """The user's answer, or None when they decline."""
        ...


class Builtins:
    def __init__(
        self,
        store: SessionStore,
        questioner: Questioner | None,
        question_timeout: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._questioner = questioner
        self._question_timeout = question_timeout
        self._clock = clock

    async def run(self, record: ToolCallRecord) -> tuple[CallStatus, str]:
        if record.name == ASK_USER:
            return await self._ask_user(record)
        if record.name == DURABLE_WAIT:
            return await self._durable_wait(record)
        if record.name == WRITE_TODOS:
            return self._write_todos(record)
        return CallStatus.FAILED, texts.unknown_tool(record.name)

    async def _ask_user(self, record: ToolCallRecord) -> tuple[CallStatus, str]:
        args = record.arguments
        question = str(args["question"]).strip()
        if not question:
            return CallStatus.FAILED, texts.invalid_arguments(ASK_USER, "question is blank")
        choices = args.get("choices") or None
        allows_free_text = args.get("allows_free_text")
        free = bool(allows_free_text) if allows_free_text is not None else not choices
        if self._questioner is None:
            return CallStatus.SUCCEEDED, texts.QUESTION_DECLINED
        self._store.update_tool_call(record, status=CallStatus.AWAITING_ANSWER)
        answer: str | None
        if self._question_timeout is None:
            answer = await self._questioner.ask(question, choices, free)
        else:
            with anyio.move_on_after(self._question_timeout) as scope:
                answer = await self._questioner.ask(question, choices, free)
            if scope.cancelled_caught:
                return CallStatus.FAILED, texts.QUESTION_DEADLINE_PASSED
        if answer is None or not answer.strip():
            return CallStatus.SUCCEEDED, texts.QUESTION_DECLINED
        return CallStatus.SUCCEEDED, texts.question_answered(answer.strip())

    async def _durable_wait(self, record: ToolCallRecord) -> tuple[CallStatus, str]:
        duration = int(record.arguments["duration_seconds"])
        until = record.wait_until
        if until is None:
            until = self._clock() + duration
            record = self._store.update_tool_call(record, status=CallStatus.WAITING, wait_until=until)
        remaining = until - self._clock()
        if remaining > 0:
            await anyio.sleep(remaining)
        return CallStatus.SUCCEEDED, texts.wait_completed(duration, str(record.arguments.get("reason", "")))

    def _write_todos(self, record: ToolCallRecord) -> tuple[CallStatus, str]:
        siblings = [
            c for c in self._store.tool_calls(record.session_id, record.turn_id)
            if c.model_call == record.model_call and c.name == WRITE_TODOS
        ]
        if len(siblings) > 1:
            return CallStatus.FAILED, texts.failed("write_todos was called more than once in one response")
        todos: list[dict[str, Any]] = list(record.arguments["todos"])
        revision = self._store.set_plan(record.session_id, todos or None)
        if not todos:
            return CallStatus.SUCCEEDED, texts.todos_cleared(revision)
        return CallStatus.SUCCEEDED, texts.todos_updated(revision, len(todos))
