"""The turn loop: model call -> tool calls -> results -> model call ... until an answer.

Each step reads committed state from the store and commits its result before the next one,
so `resume()` continues a killed host's turn at the step where it stopped: a call that may
have been sent is sent again with the same idempotency key.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import anyio
import jsonschema
from pydantic import BaseModel, Field

from gateway.conventions.keys import Effect

from . import texts
from .approvals import ApprovalCard, ApprovalGate, Decision
from .builtins import DEFINITIONS as BUILTIN_DEFINITIONS
from .builtins import Builtins
from .gateway_tools import CallResult, GatewayTool, GatewayUnavailable
from .models.base import Message, ModelClient, ModelError, ModelRequest, ModelResponse, ToolCall, ToolSpec
from .store import ApprovalStatus, CallStatus, SessionStore, ToolCallRecord, TurnRecord, TurnStatus

log = logging.getLogger(__name__)

DEFAULT_INSTRUCTIONS = (
    "You are an agent that acts through tools published by the Dex MCP gateway. Read before you "
    "write, and never repeat a write whose outcome is unknown unless the user asks."
)
MODEL_ATTEMPTS = 3


class AgentConfig(BaseModel):
    instructions: str = DEFAULT_INSTRUCTIONS
    max_model_calls: int = Field(default=100, ge=1)
    builtin_tools: list[str] = Field(default_factory=lambda: list(BUILTIN_DEFINITIONS))


class ToolSource(Protocol):
    async def list_tools(self) -> list[GatewayTool]: ...

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        key: str,
        effect: Effect,
        attempts_done: int = 0,
        on_attempt: Callable[[int], None] | None = None,
    ) -> CallResult: ...


class LoopEvents:
    """What the loop reports as it goes; the CLI prints it. The default does nothing."""

    async def text(self, delta: str) -> None: ...

    async def model_response(self, turn: TurnRecord, response: ModelResponse) -> None: ...

    async def tool_started(self, record: ToolCallRecord) -> None: ...

    async def tool_finished(self, record: ToolCallRecord, replayed: bool) -> None: ...

    async def approval_card(self, card: ApprovalCard) -> None: ...

    async def approval_decided(self, record: ToolCallRecord, decision: Decision) -> None: ...


def idempotency_key(session_id: str, turn_id: str, tool_call_id: str) -> str:
    return f"{session_id}/{turn_id}/{tool_call_id}"


def _check_arguments(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    try:
        jsonschema.validate(arguments, schema)
    except jsonschema.ValidationError as exc:
        return exc.message
    except jsonschema.SchemaError:
        # A schema we cannot read is the gateway's problem to report; let the call decide.
        return None
    return None


class TurnLoop:
    def __init__(
        self,
        store: SessionStore,
        model: ModelClient,
        tools: ToolSource,
        approvals: ApprovalGate,
        builtins: Builtins,
        config: AgentConfig | None = None,
        events: LoopEvents | None = None,
    ) -> None:
        self._store = store
        self._model = model
        self._tools = tools
        self._approvals = approvals
        self._builtins = builtins
        self._config = config or AgentConfig()
        self._events = events or LoopEvents()

    # Entry points -----------------------------------------------------------------------------

    async def run_turn(self, session_id: str, user_text: str) -> TurnRecord:
        unfinished = self._store.unfinished_turn(session_id)
        if unfinished is not None:
            raise RuntimeError(f"session {session_id} has an unfinished turn {unfinished.id}: resume it first")
        turn = self._store.start_turn(session_id, user_text)
        return await self._drive(turn)

    async def resume(self, session_id: str) -> TurnRecord | None:
        turn = self._store.unfinished_turn(session_id)
        return None if turn is None else await self._drive(turn)

    # The loop ---------------------------------------------------------------------------------

    async def _drive(self, turn: TurnRecord) -> TurnRecord:
        while True:
            turn = self._reload(turn)
            if turn.status is not TurnStatus.RUNNING:
                return turn
            last = self._store.messages(turn.session_id, turn.id)[-1]
            if last.role == "assistant" and not last.tool_calls:
                # Crashed between the answer's commit and the turn's: finish it now.
                self._store.finish_turn(turn.session_id, turn.id, TurnStatus.COMPLETED, last.text, None)
                continue
            if last.role == "assistant":
                calls = [c for c in self._store.tool_calls(turn.session_id, turn.id) if c.model_call == turn.model_calls]
                if not all(c.status.final for c in calls):
                    await self._run_calls(calls)
                    continue
                if turn.model_calls >= self._config.max_model_calls:
                    # Only reachable when the last allowed call still asked for tools.
                    error = texts.limit_reached(self._config.max_model_calls)
                    self._store.finish_turn(turn.session_id, turn.id, TurnStatus.FAILED, last.text or None, error)
                    continue
            await self._model_step(turn)

    def _reload(self, turn: TurnRecord) -> TurnRecord:
        fresh = self._store.get_turn(turn.session_id, turn.id)
        assert fresh is not None
        return fresh

    async def _offered_tools(self, with_tools: bool) -> tuple[list[ToolSpec], dict[str, GatewayTool]]:
        if not with_tools:
            return [], {}
        try:
            listed = await self._tools.list_tools()
        except GatewayUnavailable as exc:
            # A down gateway offers no tools for this model call; it never fails the turn.
            log.warning("no gateway tools this model call: %s", exc)
            listed = []
        builtins = [BUILTIN_DEFINITIONS[name] for name in self._config.builtin_tools]
        reserved = {b.name for b in builtins}
        gateway: dict[str, GatewayTool] = {}
        for tool in listed:
            if tool.name in reserved:
                log.warning("gateway tool %s uses the name of a built-in tool; left out", tool.name)
                continue
            gateway[tool.name] = tool
        specs = [ToolSpec(name=t.name, description=t.description, input_schema=t.input_schema) for t in gateway.values()]
        return specs + builtins, gateway

    def _request(self, turn: TurnRecord, tools: list[ToolSpec]) -> ModelRequest:
        """Built from committed state only: stored messages, each call paired with its result."""
        records = {c.id: c for c in self._store.tool_calls(turn.session_id)}
        messages: list[Message] = []
        for message in self._store.messages(turn.session_id):
            messages.append(message)
            for call in message.tool_calls:
                record = records.get(call.id)
                text = record.result_text if record and record.status.final and record.result_text is not None else texts.missing_result()
                messages.append(Message(role="tool", text=text, tool_call_id=call.id, tool_name=call.name))
        return ModelRequest(
            instructions=self._config.instructions, messages=messages, tools=tools, model_call=turn.model_calls + 1
        )

    async def _model_step(self, turn: TurnRecord) -> None:
        number = turn.model_calls + 1
        # The last allowed model call is offered no tools, so the model has to answer.
        specs, gateway = await self._offered_tools(with_tools=number < self._config.max_model_calls)
        request = self._request(turn, specs)
        response: ModelResponse | None = None
        for attempt in range(1, MODEL_ATTEMPTS + 1):
            try:
                response = await self._model.complete(request, on_text=self._events.text)
                break
            except ModelError as exc:
                if attempt == MODEL_ATTEMPTS:
                    self._store.finish_turn(turn.session_id, turn.id, TurnStatus.FAILED, None, f"model call failed: {exc}")
                    return
                await anyio.sleep(0.5 * attempt)
        assert response is not None
        await self._events.model_response(turn, response)
        message, records = self._records(turn, number, response, gateway, limit_hit=not specs and bool(response.tool_calls))
        self._store.record_model_response(turn, message, records)

    def _records(
        self, turn: TurnRecord, number: int, response: ModelResponse, gateway: dict[str, GatewayTool], limit_hit: bool
    ) -> tuple[Message, list[ToolCallRecord]]:
        taken = self._store.tool_call_ids(turn.session_id)
        calls: list[ToolCall] = []
        records: list[ToolCallRecord] = []
        for position, call in enumerate(response.tool_calls):
            call_id = call.id or f"call_{number}_{position}"
            # Keys and approval ids need ids unique in the session; providers only need the
            # stored assistant message and its results to agree, so a repeated id is renamed.
            if call_id in taken:
                call_id = f"{call_id}.{turn.id}.{number}"
            taken.add(call_id)
            calls.append(call.model_copy(update={"id": call_id}))
            records.append(self._record(turn, number, position, call_id, call, gateway, limit_hit))
        message = Message(role="assistant", text=response.text, tool_calls=calls)
        return message, records

    def _record(
        self, turn: TurnRecord, number: int, position: int, call_id: str, call: ToolCall,
        gateway: dict[str, GatewayTool], limit_hit: bool,
    ) -> ToolCallRecord:
        status, text = CallStatus.PENDING, None
        kind, effect, approval, schema = "unknown", Effect.UNCLASSIFIED.value, False, None
        if call.name in self._config.builtin_tools:
            kind, effect, schema = "builtin", Effect.READ.value, BUILTIN_DEFINITIONS[call.name].input_schema
        elif call.name in gateway:
            tool = gateway[call.name]
            kind, effect, approval, schema = "gateway", tool.effect.value, tool.requires_approval, tool.input_schema
        if limit_hit:
            status, text = CallStatus.NOT_RUN, texts.limit_reached(self._config.max_model_calls)
        elif kind == "unknown":
            status, text = CallStatus.FAILED, texts.unknown_tool(call.name)
        elif call.invalid_arguments is not None:
            status, text = CallStatus.FAILED, texts.invalid_arguments(call.name, call.invalid_arguments)
        elif schema is not None and (problem := _check_arguments(schema, call.arguments)) is not None:
            status, text = CallStatus.FAILED, texts.invalid_arguments(call.name, problem)
        return ToolCallRecord(
            session_id=turn.session_id, turn_id=turn.id, id=call_id, model_call=number, position=position,
            name=call.name, arguments=call.arguments, kind=kind, effect=effect, requires_approval=approval,
            idempotency_key=idempotency_key(turn.session_id, turn.id, call_id), status=status, result_text=text,
            updated_at=0.0,
        )

    # Tool calls -------------------------------------------------------------------------------

    async def _run_calls(self, calls: list[ToolCallRecord]) -> None:
        """Reads (and built-ins) in parallel; writes one at a time in the model's order."""
        writes = sorted((c for c in calls if c.is_write), key=lambda c: c.position)
        async with anyio.create_task_group() as tg:
            for call in calls:
                if not call.is_write and not call.status.final:
                    tg.start_soon(self._run_call, call)
            tg.start_soon(self._run_writes, writes)

    async def _run_writes(self, writes: list[ToolCallRecord]) -> None:
        blocker: ToolCallRecord | None = None
        for write in writes:
            current = self._store.get_tool_call(write.session_id, write.id)
            if not current.status.final:
                if blocker is not None:
                    current = self._finish(current, CallStatus.SKIPPED, texts.skipped(blocker.name, blocker.id))
                    await self._events.tool_finished(current, False)
                else:
                    current = await self._run_call(current)
            if blocker is None and current.status is not CallStatus.SUCCEEDED:
                blocker = current

    def _finish(self, record: ToolCallRecord, status: CallStatus, text: str) -> ToolCallRecord:
        return self._store.update_tool_call(record, status=status, result_text=text)

    async def _run_call(self, record: ToolCallRecord) -> ToolCallRecord:
        await self._events.tool_started(record)
        replayed = False
        if record.kind == "builtin":
            status, text = await self._builtins.run(record)
            record = self._finish(record, status, text)
        else:
            if record.requires_approval and record.status in (CallStatus.PENDING, CallStatus.AWAITING_APPROVAL):
                record = self._store.update_tool_call(record, status=CallStatus.AWAITING_APPROVAL)
                decision = await self._approvals.wait(record)
                await self._events.approval_decided(record, decision)
                if not decision.allowed:
                    text = (
                        texts.APPROVAL_DEADLINE_PASSED
                        if decision.status is ApprovalStatus.EXPIRED
                        else texts.approval_denied(decision.reason)
                    )
                    record = self._finish(record, CallStatus.REJECTED, text)
                    await self._events.tool_finished(record, False)
                    return record
                record = self._store.update_tool_call(record, status=CallStatus.APPROVED)
            attempts_done = record.attempts if record.status is CallStatus.SENT else 0
            sent = record

            def on_attempt(attempt: int) -> None:
                self._store.update_tool_call(sent, status=CallStatus.SENT, attempts=attempt)

            result = await self._tools.call(
                record.name, record.arguments, record.idempotency_key, Effect(record.effect), attempts_done, on_attempt
            )
            replayed = result.replayed
            record = self._store.update_tool_call(record, status=result.status, result_text=result.text, attempts=max(result.attempts, record.attempts))
        await self._events.tool_finished(record, replayed)
        return record

