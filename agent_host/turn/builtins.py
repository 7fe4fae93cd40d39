"""Built-in tools the host handles itself: ask_user, durable_wait, write_todos, and (when the host
has a resource reader) mcp_list_resources_and_prompts, mcp_read_resource, mcp_get_prompt.

They run with a fixed policy (read, no approval). durable_wait stores its end time before it
sleeps, so a restarted host waits only the remaining time. A write_todos of a planning turn writes
a draft plan, which waits for the user's approval before an executing turn runs it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import anyio

from ..approvals.decisions import first_decision
from ..domain import texts
from ..domain.forms import FormError, check_form, form_fields
from ..domain.parking import TurnParked
from ..domain.records import (
    CallStatus, InputRound, PlanStatus, QuestionKind, QuestionRecord, QuestionStatus, ToolCallRecord, TurnMode,
)
from ..gateway_client.connection import FormAsker
from ..gateway_client.rounds import Round, RoundAsker
from ..gateway_client.resources import GatewayResources, ResourceError
from ..models.base import ToolSpec
from ..store.session_store import SessionStore
from .question_ids import input_question_id, question_id, round_question_id

log = logging.getLogger(__name__)

ASK_USER = "ask_user"
DURABLE_WAIT = "durable_wait"
WRITE_TODOS = "write_todos"
MCP_LIST_RESOURCES_AND_PROMPTS = "mcp_list_resources_and_prompts"
MCP_READ_RESOURCE = "mcp_read_resource"
MCP_GET_PROMPT = "mcp_get_prompt"
RESOURCE_TOOLS = (MCP_LIST_RESOURCES_AND_PROMPTS, MCP_READ_RESOURCE, MCP_GET_PROMPT)
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




def resource_tool_specs(servers: list[str]) -> dict[str, ToolSpec]:
    """The three resource and prompt tools; `server` is an enum of the host's MCP servers."""
    server = {"type": "string", "enum": list(servers), "description": "The MCP server to ask."}
    return {
        MCP_LIST_RESOURCES_AND_PROMPTS: ToolSpec(
            name=MCP_LIST_RESOURCES_AND_PROMPTS,
            description="List the resources, resource templates and prompts an MCP server offers.",
            input_schema={"type": "object", "properties": {"server": server}, "required": ["server"],
                          "additionalProperties": False},
        ),
        MCP_READ_RESOURCE: ToolSpec(
            name=MCP_READ_RESOURCE,
            description="Read a resource of an MCP server by its URI.",
            input_schema={"type": "object", "properties": {"server": server, "uri": {"type": "string", "minLength": 1}},
                          "required": ["server", "uri"], "additionalProperties": False},
        ),
        MCP_GET_PROMPT: ToolSpec(
            name=MCP_GET_PROMPT,
            description="Get a prompt of an MCP server by its name, with its arguments (strings by name).",
            input_schema={"type": "object", "properties": {
                "server": server, "name": {"type": "string", "minLength": 1},
                "arguments": {"type": "object", "additionalProperties": {"type": "string"}},
            }, "required": ["server", "name"], "additionalProperties": False},
        ),
    }


class Questioner(Protocol):
    async def ask(self, question: str, choices: list[str] | None, allows_free_text: bool) -> str | None:
        """The user's answer, or None when they decline."""
        ...

    async def ask_form(self, question: str, schema: dict[str, Any]) -> dict[str, Any] | None:
        """The user's values of a form (its requested schema), or None when they decline."""
        ...


class Builtins:
    """`ask_user` questions are stored (`questions`), so the terminal, the HTTP API and the web
    page can answer them; the first answer wins and the deadline rejects."""

    def __init__(
        self,
        store: SessionStore,
        questioner: Questioner | None,
        question_timeout: float | None = None,
        clock: Callable[[], float] = time.time,
        poll_seconds: float = 0.1,
        api_answers: bool = False,
        park: bool = False,
        resources: GatewayResources | None = None,
    ) -> None:
        self._store = store
        self._questioner = questioner
        self._question_timeout = question_timeout
        self._clock = clock
        self._poll = poll_seconds
        # True when the HTTP API serves this store's questions: then nobody at the terminal is not
        # a decline, and the question waits for the API or its deadline.
        self._api_answers = api_answers
        # True in `dex-agent serve`: questions and durable waits park the turn (`domain/parking.py`).
        self._park = park
        # The MCP servers' resources and prompts (None: the mcp_* tools are not offered).
        self._resources = resources
        self._resource_specs = resource_tool_specs(resources.server_names) if resources is not None else {}

    def spec(self, name: str) -> ToolSpec | None:
        """The definition of a built-in tool this host offers (None: not offered)."""
        if name in RESOURCE_TOOLS:
            return self._resource_specs.get(name)
        return DEFINITIONS.get(name)

    async def run(self, record: ToolCallRecord) -> tuple[CallStatus, str]:
        if record.name == ASK_USER:
            return await self._ask_user(record)
        if record.name == DURABLE_WAIT:
            return await self._durable_wait(record)
        if record.name == WRITE_TODOS:
            return await self._write_todos(record)
        if record.name in RESOURCE_TOOLS and self._resources is not None:
            return await self._resource_tool(self._resources, record)
        return CallStatus.FAILED, texts.unknown_tool(record.name)

    async def _ask_user(self, record: ToolCallRecord) -> tuple[CallStatus, str]:
        args = record.arguments
        text = str(args["question"]).strip()
        if not text:
            return CallStatus.FAILED, texts.invalid_arguments(ASK_USER, "question is blank")
        choices = [str(c) for c in args.get("choices") or []] or None
        allows_free_text = args.get("allows_free_text")
        free = bool(allows_free_text) if allows_free_text is not None else not choices
        if self._questioner is None and not self._api_answers:
            return CallStatus.SUCCEEDED, texts.QUESTION_DECLINED
        await self._store.update_tool_call(record, status=CallStatus.AWAITING_ANSWER)
        decided = await self.ask(record, question_id(record.session_id, record.id), text, choices, free)
        if decided.status is QuestionStatus.ANSWERED and decided.answer:
            return CallStatus.SUCCEEDED, texts.question_answered(decided.answer)
        if decided.status is QuestionStatus.EXPIRED:
            return CallStatus.FAILED, texts.QUESTION_DEADLINE_PASSED
        return CallStatus.SUCCEEDED, texts.QUESTION_DECLINED

    def form_asker(self, record: ToolCallRecord) -> FormAsker:
        """Asks the user an upstream's form questions during this call: each becomes a session
        question (`<call id>-input-<n>`, so a call sent again after a restart finds its answers),
        answered with the form's fields, declined, or past its deadline (`cancel`)."""
        asked = 0

        async def ask(message: str, schema: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
            nonlocal asked
            asked += 1
            ident = input_question_id(record, asked)
            return await self._form_question(record, ident, message, schema)

        return ask

    def round_asker(self, record: ToolCallRecord) -> RoundAsker:
        """Asks the questions of this call's 2026-07-28 `input_required` rounds: like `form_asker`,
        but each question keeps its round (the gateway's requestState and input requests, the
        input request it covers, the call's tool, arguments and key: `InputRound`), and a round
        asked again (a restarted host resuming it) finds its questions and their answers by
        (requestState, input request) instead of making new ones (`question_ids.round_question_id`)."""
        numbering = anyio.Lock()  # a round's questions are asked together: their ids one at a time
        given: set[str] = set()  # ids given here whose questions may not be stored yet

        def for_key(current: Round, key: str) -> FormAsker:
            kept = InputRound(request_state=current.request_state, input_requests=current.input_requests, key=key,
                              tool=record.name, arguments=record.arguments, idempotency_key=record.idempotency_key)

            async def ask(message: str, schema: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
                async with numbering:
                    asked = await self._store.call_questions(record.session_id, record.id)
                    ident = round_question_id(record, asked, kept, given)
                    given.add(ident)
                return await self._form_question(record, ident, message, schema, kept)

            return ask

        return for_key

    async def _form_question(
        self, record: ToolCallRecord, ident: str, message: str, schema: dict[str, Any], kept: InputRound | None = None,
    ) -> tuple[str, dict[str, Any] | None]:
        """An upstream's form question (session question `ident`): `accept` with the form's fields,
        `decline`, or `cancel` (past its deadline, the turn steered or cancelled)."""
        try:
            form_fields(schema)
        except FormError as exc:
            log.warning("%s asked a form the host cannot show (%s): declined", record.name, exc)
            return "decline", None
        if self._questioner is None and not self._api_answers:
            return "decline", None
        text = message.strip() or texts.FORM_WITHOUT_MESSAGE
        # Asked while the upstream's call is open: waited for here, never parked (the call
        # cannot be put aside and picked up by another process).
        decided = await self.ask(record, ident, text, None, True, QuestionKind.ELICITATION, schema, may_park=False,
                                 input_round=kept)
        if decided.status is QuestionStatus.ANSWERED and decided.answer:
            return "accept", json.loads(decided.answer)
        if decided.status is QuestionStatus.DECLINED:
            return "decline", None
        return "cancel", None  # past its deadline, or the turn was steered or cancelled

    async def ask(
        self, record: ToolCallRecord, ident: str, text: str, choices: list[str] | None, free: bool,
        kind: QuestionKind = QuestionKind.ASK_USER, form: dict[str, Any] | None = None, *, may_park: bool = True,
        input_round: InputRound | None = None,
    ) -> QuestionRecord:
        """Store the question (idempotent by id) and wait for its first decision: an answer (the
        terminal, the API, the page), a decline, or the deadline."""
        now = self._clock()
        question = await self._store.create_question(QuestionRecord(
            id=ident, session_id=record.session_id, turn_id=record.turn_id,
            tool_call_id=record.id, question=text, choices=choices, allows_free_text=free,
            status=QuestionStatus.PENDING, created_at=now, kind=kind, form=form,
            deadline=None if self._question_timeout is None else now + self._question_timeout, input_round=input_round,
        ))
        if self._park and may_park and question.status is QuestionStatus.PENDING and (
            question.deadline is None or self._clock() < question.deadline
        ):
            raise TurnParked("an answer", question.deadline)
        questioner = self._questioner

        async def prompt() -> None:
            assert questioner is not None
            if form is not None:
                content = await questioner.ask_form(text, form)
                if content is not None and check_form(form, content) is None:
                    await self._store.answer_question(question.id, QuestionStatus.ANSWERED, texts.as_json(content), "cli", self._clock())
                else:
                    await self._store.answer_question(question.id, QuestionStatus.DECLINED, None, "cli", self._clock())
                return
            answer = await questioner.ask(text, choices, free)
            status = QuestionStatus.ANSWERED if answer and answer.strip() else QuestionStatus.DECLINED
            await self._store.answer_question(question.id, status, answer.strip() if answer else None, "cli", self._clock())

        async def read() -> QuestionRecord | None:
            current = await self._store.get_question(question.id)
            return None if current is None or current.status is QuestionStatus.PENDING else current

        async def expire() -> QuestionRecord:
            result = await self._store.answer_question(question.id, QuestionStatus.EXPIRED, None, "deadline", self._clock())
            assert result is not None
            return result[0]

        return await first_decision(read, expire, question.deadline, self._clock, self._poll, prompt if questioner else None)

    async def _resource_tool(self, resources: GatewayResources, record: ToolCallRecord) -> tuple[CallStatus, str]:
        args = record.arguments
        server = str(args["server"])
        try:
            if record.name == MCP_LIST_RESOURCES_AND_PROMPTS:
                value = await resources.list_all(server)
            elif record.name == MCP_READ_RESOURCE:
                value = await resources.read(server, str(args["uri"]))
            else:
                arguments = {str(k): str(v) for k, v in (args.get("arguments") or {}).items()}
                value = await resources.get_prompt(server, str(args["name"]), arguments)
        except ResourceError as exc:
            return CallStatus.FAILED, texts.failed(str(exc))
        return CallStatus.SUCCEEDED, texts.sorted_json(value)

    async def _durable_wait(self, record: ToolCallRecord) -> tuple[CallStatus, str]:
        duration = int(record.arguments["duration_seconds"])
        until = record.wait_until
        if until is None:
            until = self._clock() + duration
            record = await self._store.update_tool_call(record, status=CallStatus.WAITING, wait_until=until)
        remaining = until - self._clock()
        if remaining > 0 and self._park:
            raise TurnParked("the end of a durable wait", until)
        if remaining > 0:
            await anyio.sleep(remaining)
        return CallStatus.SUCCEEDED, texts.wait_completed(duration, str(record.arguments.get("reason", "")))

    async def _write_todos(self, record: ToolCallRecord) -> tuple[CallStatus, str]:
        siblings = [
            c for c in await self._store.tool_calls(record.session_id, record.turn_id)
            if c.model_call == record.model_call and c.name == WRITE_TODOS
        ]
        if len(siblings) > 1:
            return CallStatus.FAILED, texts.failed("write_todos was called more than once in one response")
        todos: list[dict[str, Any]] = list(record.arguments["todos"])
        turn = await self._store.get_turn(record.session_id, record.turn_id)
        # A planning turn writes a draft: it waits for the user's approval before it runs.
        status = PlanStatus.DRAFT if todos and turn is not None and turn.mode is TurnMode.PLANNING else None
        revision = await self._store.set_plan(record.session_id, todos or None, status)
        if not todos:
            return CallStatus.SUCCEEDED, texts.todos_cleared(revision)
        return CallStatus.SUCCEEDED, texts.todos_updated(revision, len(todos))
