"""The turn loop: model call -> tool calls -> results -> model call ... until an answer.

Each step reads committed state from the store and commits its result before the next one,
so `resume()` continues a killed host's turn at the step where it stopped: a call that may
have been sent is sent again with the same idempotency key.

Before each model call, in order: the steer messages waiting for the turn are added to it, the
spend limits are checked (a reached one ends the turn `stopped`), and the history is compacted
when it would exceed its share of the context window. At the end of each iteration the turn
continuation hook may end or continue the turn. A cancel request ends the turn `cancelled` at
once (`turn_control`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import anyio
from pydantic import BaseModel, Field

from ..approvals.gate import ApprovalGate
from ..domain import session_events, texts
from ..domain.call_keys import idempotency_key
from ..domain.plan import plan_note
from ..domain.records import CallStatus, PlanStatus, ToolCallRecord, TurnMode, TurnRecord, TurnStatus
from ..domain.settings import SessionSettings, apply_policy
from ..domain.spend import limit_reached
from ..gateway_client.images import ImageLibrary, ImageReference
from ..gateway_client.tools import GatewayRefused, GatewayTool, GatewayUnavailable
from ..models.base import Message, ModelClient, ModelError, ModelRequest, ModelResponse, ToolCall, ToolSpec
from ..store.session_store import SessionStore
from .builtins import DEFINITIONS as BUILTIN_DEFINITIONS
from .builtins import RESOURCE_TOOLS, WRITE_TODOS, Builtins
from .compaction import Compactor, Request
from .continuation import MAX_CONSECUTIVE_CONTINUATIONS, ContinuationContext, ContinuationError, ContinueTurn, Hook, decide
from .continuation import load_hook, results_of
from .events import LoopEvents, ToolSource
from .tool_runner import ToolRunner
from .tracing import Tracing
from .turn_control import POLL_SECONDS, Section, TurnControl
from .validation import check_arguments

log = logging.getLogger(__name__)

DEFAULT_INSTRUCTIONS = (
    "You are an agent that acts through tools published by the Dex MCP gateway. Read before you "
    "write, and never repeat a write whose outcome is unknown unless the user asks."
)
MODEL_ATTEMPTS = 3
DELTA_FLUSH_SECONDS = 0.1
DELTA_FLUSH_CHARS = 1024

__all__ = ["AgentConfig", "LoopEvents", "ToolSource", "TurnLoop", "idempotency_key"]


class AgentConfig(BaseModel):
    instructions: str = DEFAULT_INSTRUCTIONS
    max_model_calls: int = Field(default=100, ge=1)
    # The mcp_* resource and prompt tools are offered only when the host has a resource reader.
    builtin_tools: list[str] = Field(default_factory=lambda: [*BUILTIN_DEFINITIONS, *RESOURCE_TOOLS])
    # `module:function`, called at the end of each iteration (`continuation.py`).
    continuation_hook: str | None = None
    control_poll_seconds: float = POLL_SECONDS
    # A gateway listing that fails or takes longer offers no tools in that model call (a warning).
    listing_timeout_seconds: float = Field(default=10.0, gt=0)


class _Deltas:
    """Streamed text into the session's event log, coalesced (100 ms or 1,024 characters)."""

    def __init__(self, store: SessionStore, turn: TurnRecord) -> None:
        self._store, self._turn = store, turn
        self._buffer: list[str] = []
        self._since = time.monotonic()

    async def add(self, chunk: str) -> None:
        self._buffer.append(chunk)
        if time.monotonic() - self._since >= DELTA_FLUSH_SECONDS or sum(map(len, self._buffer)) >= DELTA_FLUSH_CHARS:
            await self.flush()

    async def flush(self) -> None:
        if self._buffer:
            text, self._buffer = "".join(self._buffer), []
            data = session_events.delta(self._turn.id, text)
            await self._store.append_event(self._turn.session_id, self._turn.id, session_events.DELTA, data)
        self._since = time.monotonic()


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
        models: Callable[[str], ModelClient] | None = None,
        continuation: Hook | None = None,
        images: ImageLibrary | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self._store = store
        self._tracing = tracing or Tracing()
        self._model = model
        self._models = models  # resolves a session's `model` setting to a client
        self._tools = tools
        self._config = config or AgentConfig()
        self._events = events or LoopEvents()
        self._builtins = builtins
        self._runner = ToolRunner(store, tools, approvals, builtins, self._events, self._tracing)
        self._compactor = Compactor(store, self._events)
        hook_spec = self._config.continuation_hook
        self._hook = continuation or (load_hook(hook_spec) if hook_spec else None)
        # Why the last turn that failed for want of the gateway failed (None: it did not).
        self.gateway_error: GatewayUnavailable | None = None
        # Loads the bytes of the session's images at each model call (None: no images are shown).
        self._images = images

    # Entry points -----------------------------------------------------------------------------

    async def run_turn(
        self, session_id: str, user_text: str, mode: TurnMode = TurnMode.CHAT, images: list[ImageReference] | None = None
    ) -> TurnRecord:
        unfinished = await self._store.unfinished_turn(session_id)
        if unfinished is not None:
            raise RuntimeError(f"session {session_id} has an unfinished turn {unfinished.id}: resume it first")
        session = await self._store.get_session(session_id)
        if mode is TurnMode.CHAT and session is not None and session.plan_status is PlanStatus.DRAFT:
            mode = TurnMode.PLANNING  # a message about a draft plan is feedback: it revises the draft
        turn = await self._store.start_turn(session_id, user_text, mode, images)
        return await self._drive(turn)

    async def resume(self, session_id: str) -> TurnRecord | None:
        turn = await self._store.unfinished_turn(session_id)
        return None if turn is None else await self._drive(turn)

    # The loop ---------------------------------------------------------------------------------

    async def _drive(self, turn: TurnRecord) -> TurnRecord:
        control = TurnControl(self._store, turn, self._config.control_poll_seconds)
        with self._tracing.invoke_agent(turn) as span:
            await control.check()
            async with anyio.create_task_group() as tg:
                tg.start_soon(control.watch)
                try:
                    turn = await self._steps(turn, control)
                finally:
                    tg.cancel_scope.cancel()
            Tracing.ended(span, turn.status.value, turn.error if turn.status is TurnStatus.FAILED else None)
        await control.settle()
        session_usage = await self._store.usage_totals(turn.session_id)
        await self._events.turn_finished(turn, await self._store.usage_totals(turn.session_id, turn.id), session_usage)
        return turn

    async def _finish(self, turn: TurnRecord, status: TurnStatus, final_text: str | None, error: str | None) -> bool:
        if status is TurnStatus.FAILED:
            # A failed turn whose tools ran leaves a note, so a later model call does not repeat them.
            calls = await self._store.tool_calls(turn.session_id, turn.id)
            if any(c.status.final for c in calls):
                note = texts.turn_failed_note(error or "unknown error")
                await self._store.append_message(turn.session_id, turn.id, Message(role="user", text=note))
        finished = await self._store.finish_turn(
            turn.session_id, turn.id, status, final_text, error, unless_steered=status is TurnStatus.COMPLETED
        )
        return finished

    async def _steps(self, turn: TurnRecord, control: TurnControl) -> TurnRecord:
        while True:
            fresh = await self._store.get_turn(turn.session_id, turn.id)
            assert fresh is not None
            turn = fresh
            if turn.status is not TurnStatus.RUNNING:
                return turn
            if control.cancelled:
                await self._cancel(turn, control)
                continue
            last = (await self._store.messages(turn.session_id, turn.id))[-1]
            if last.role == "assistant":
                calls = [c for c in await self._store.tool_calls(turn.session_id, turn.id) if c.model_call == turn.model_calls]
                if not all(c.status.final for c in calls):
                    await self._runner.run(calls, control)
                    continue
                if not await self._store.has_pending_steer(turn.session_id, turn.id):
                    try:
                        if await self._end_of_iteration(turn, last, calls):
                            continue
                    except ContinuationError as exc:
                        await self._finish(turn, TurnStatus.FAILED, last.text or None, str(exc))
                        continue
                if turn.model_calls >= self._config.max_model_calls:
                    # Only reachable when the last allowed call still asked for tools.
                    error = texts.limit_reached(self._config.max_model_calls)
                    await self._finish(turn, TurnStatus.FAILED, last.text or None, error)
                    continue
            await self._model_step(turn, control)

    async def _end_of_iteration(self, turn: TurnRecord, last: Message, calls: list[ToolCallRecord]) -> bool:
        """The continuation hook at the end of an iteration; True when it settled the step (the
        turn ended, or a continuation message was stored)."""
        context = ContinuationContext(
            turn.session_id, turn.id, turn.settings, last.text, list(last.tool_calls), results_of(calls)
        )
        decision = await decide(self._hook, context)
        answered = not last.tool_calls
        if isinstance(decision, ContinueTurn):
            if answered and turn.continuations >= MAX_CONSECUTIVE_CONTINUATIONS:
                await self._finish(turn, TurnStatus.FAILED, last.text or None, texts.continuation_limit(MAX_CONSECUTIVE_CONTINUATIONS))
                return True
            if turn.model_calls >= self._config.max_model_calls:
                await self._finish(turn, TurnStatus.FAILED, last.text or None, texts.limit_reached(self._config.max_model_calls))
                return True
            await self._store.append_message(turn.session_id, turn.id, Message(role="user", text=decision.message), continuation=answered)
            return True
        if decision == "end" or answered:
            # Not ended when a steer message came meanwhile: the next pass applies it.
            await self._finish(turn, TurnStatus.COMPLETED, last.text or None, None)
            return True
        return False

    async def _cancel(self, turn: TurnRecord, control: TurnControl) -> None:
        """End the turn `cancelled`: started writes run to their end, nothing else is sent."""
        pending = [c for c in await self._store.tool_calls(turn.session_id, turn.id) if not c.status.final]
        if pending:
            await self._runner.run(pending, control)
        reason = control.cancel_reason or texts.turn_cancelled_reason("unknown", None)
        await self._store.cancel_waits(turn.session_id, turn.id, "turn_cancelled")
        await self._store.append_message(turn.session_id, turn.id, Message(role="user", text=texts.turn_cancelled_note(reason)))
        await self._finish(turn, TurnStatus.CANCELLED, None, reason)

    def _settings(self, turn: TurnRecord) -> SessionSettings:
        return SessionSettings.of(turn.settings)

    def _model_for(self, settings: SessionSettings) -> ModelClient:
        if settings.model and self._models is not None and settings.model != self._model.name:
            return self._models(settings.model)
        return self._model

    async def _offered_tools(
        self, with_tools: bool, mode: TurnMode, settings: SessionSettings, session_id: str
    ) -> tuple[list[ToolSpec], dict[str, GatewayTool]]:
        """The tools of this model call (none from the gateway when it cannot list them: `_listed`). A
        planning turn is offered only write_todos, and lists nothing from the gateway."""
        if not with_tools:
            return [], {}
        if mode is TurnMode.PLANNING:
            return [BUILTIN_DEFINITIONS[WRITE_TODOS]], {}
        listed = await self._listed(session_id)
        builtins = [spec for name in self._config.builtin_tools if (spec := self._builtins.spec(name)) is not None]
        reserved = {b.name for b in builtins}
        gateway: dict[str, GatewayTool] = {}
        for tool in listed:
            if tool.name in reserved:
                log.warning("gateway tool %s uses the name of a built-in tool; left out", tool.name)
                continue
            effect, approval = apply_policy(tool.effect, tool.requires_approval, settings.tool_policies.get(tool.name))
            gateway[tool.name] = tool.model_copy(update={"effect": effect, "requires_approval": approval})
        specs = [ToolSpec(name=t.name, description=t.description, input_schema=t.input_schema) for t in gateway.values()]
        return specs + builtins, gateway

    async def _listed(self, session_id: str) -> list[GatewayTool]:
        """The gateway's tools, with those the session found by search_tools (kept in the store,
        so a resumed session has them: docs/discovery.md); none, with a warning, when the listing
        fails or takes longer than the listing timeout (a down gateway never fails a turn; a
        refused token does)."""
        found = [GatewayTool.model_validate(d) for d in await self._store.found_tools(session_id)]
        try:
            with anyio.fail_after(self._config.listing_timeout_seconds):
                return await self._tools.list_tools(found)
        except GatewayRefused:
            raise
        except GatewayUnavailable as exc:
            log.warning(texts.listing_failed(str(exc)))
        except TimeoutError:
            log.warning(texts.listing_failed(texts.listing_timed_out(self._config.listing_timeout_seconds)))
        return []

    async def _model_step(self, turn: TurnRecord, control: TurnControl) -> None:
        steered = await self._store.apply_steers(turn.session_id, turn.id)
        if steered:
            await self._events.steered(turn, steered)
        settings = self._settings(turn)
        stop = limit_reached(
            settings, await self._store.usage_totals(turn.session_id, turn.id), await self._store.usage_totals(turn.session_id)
        )
        if stop is not None:
            await self._finish(turn, TurnStatus.STOPPED, None, stop)
            return
        number = turn.model_calls + 1
        # The last allowed model call is offered no tools, so the model has to answer.
        try:
            specs, gateway = await self._offered_tools(number < self._config.max_model_calls, turn.mode, settings,
                                                      turn.session_id)
        except GatewayRefused as exc:
            # A refused token is the user's to fix: no turn can reach the tools until then.
            self.gateway_error = exc
            await self._finish(turn, TurnStatus.FAILED, None, str(exc))
            return
        self.gateway_error = None
        model = self._model_for(settings)
        session = await self._store.get_session(turn.session_id)
        assert session is not None
        wanted = Request(turn, plan_note(session, turn.mode), settings.instructions or self._config.instructions, specs, settings.temperature, settings.max_tokens)
        try:
            request = await self._compactor.request(wanted, settings, model, control)
            if request is not None and self._images is not None:
                request = await self._images.with_bytes(request)
            response = None if request is None else await self._call_model(model, request, turn, control)
        except ModelError as exc:
            await self._finish(turn, TurnStatus.FAILED, None, f"model call failed: {exc}")
            return
        if response is None:
            return  # cancelled: the answer is dropped
        await self._events.model_response(turn, response)
        message, records = await self._records(turn, number, response, gateway, limit_hit=not specs and bool(response.tool_calls))
        usage = response.usage
        await self._store.record_model_response(
            turn, message, records,
            (model.name, usage.input_tokens, usage.output_tokens, settings.cost(usage.input_tokens, usage.output_tokens)),
        )
        for record in records:
            if record.status.final:
                await self._events.tool_refused(record)

    async def _call_model(self, model: ModelClient, request: ModelRequest, turn: TurnRecord, control: TurnControl) -> ModelResponse | None:
        """The model call, tried up to MODEL_ATTEMPTS times; None when the turn was cancelled."""
        for attempt in range(1, MODEL_ATTEMPTS + 1):
            deltas = _Deltas(self._store, turn)

            async def on_text(chunk: str) -> None:
                await self._events.text(chunk)
                await deltas.add(chunk)

            try:
                with self._tracing.chat(model.name, turn) as span:
                    with control.scope(Section.MODEL) as scope:
                        response = await model.complete(request, on_text=on_text)
                        span.set_attribute("gen_ai.usage.input_tokens", response.usage.input_tokens)
                        span.set_attribute("gen_ai.usage.output_tokens", response.usage.output_tokens)
                    Tracing.ended(span, "cancelled" if scope.cancelled_caught else "answered")
                await deltas.flush()
                return None if scope.cancelled_caught else response
            except ModelError:
                if attempt == MODEL_ATTEMPTS:
                    raise
                await anyio.sleep(0.5 * attempt)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _records(
        self, turn: TurnRecord, number: int, response: ModelResponse, gateway: dict[str, GatewayTool], limit_hit: bool
    ) -> tuple[Message, list[ToolCallRecord]]:
        taken = await self._store.tool_call_ids(turn.session_id)
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
        kind, effect, approval = "unknown", "unclassified", False
        schema: dict[str, Any] | None = None
        builtin = self._builtins.spec(call.name) if call.name in self._config.builtin_tools else None
        if builtin is not None:
            kind, effect, schema = "builtin", "read", builtin.input_schema
        elif call.name in gateway:
            tool = gateway[call.name]
            kind, effect, approval, schema = "gateway", tool.effect.value, tool.requires_approval, tool.input_schema
        if limit_hit:
            status, text = CallStatus.NOT_RUN, texts.limit_reached(self._config.max_model_calls)
        elif turn.mode is TurnMode.PLANNING and call.name != WRITE_TODOS:
            status, text = CallStatus.REJECTED, texts.PLANNING_ONLY
        elif kind == "unknown":
            status, text = CallStatus.FAILED, texts.unknown_tool(call.name)
        elif call.invalid_arguments is not None:
            status, text = CallStatus.FAILED, texts.invalid_arguments(call.name, call.invalid_arguments)
        elif schema is not None and (problem := check_arguments(schema, call.arguments)) is not None:
            status, text = CallStatus.FAILED, texts.invalid_arguments(call.name, problem)
        return ToolCallRecord(
            session_id=turn.session_id, turn_id=turn.id, id=call_id, model_call=number, position=position,
            name=call.name, arguments=call.arguments, kind=kind, effect=effect, requires_approval=approval,
            idempotency_key=idempotency_key(turn.session_id, turn.id, call_id), status=status, result_text=text,
            updated_at=0.0,
        )
