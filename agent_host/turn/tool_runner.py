"""Running one model response's tool calls: reads (and built-ins) in parallel, writes one at a
time in the model's order, a write after one that did not succeed skipped; approvals first.

Steering and cancellation (`turn_control`): a call that has not started is not sent (it records
`rejected` with why); waits (approval, `ask_user`, `durable_wait`) end on a steer or a cancel; a
started read is abandoned on a cancel (best effort); a started write (its attempt committed, so
its request may have left) is never in a cancellable scope and runs to its recorded end.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

import anyio

from gateway.conventions.keys import Effect

from ..approvals.gate import ApprovalGate
from ..domain import session_events, texts
from ..domain.parking import TurnParked
from ..domain.records import ApprovalStatus, CallStatus, CancelReason, ToolCallRecord
from ..gateway_client.rounds import Round
from ..gateway_client.tools import CallRequest, CallResult, PriorAttempts
from ..store.session_store import SessionStore
from .builtins import WRITE_TODOS, Builtins
from .events import LoopEvents, ToolSource
from .tracing import Tracing
from .turn_control import Section, TurnControl

_CANCELLED_TEXTS = {
    CancelReason.STEERED: texts.CANCELLED_BY_STEERING,
    CancelReason.TURN_CANCELLED: texts.CANCELLED_BY_TURN_CANCELLATION,
}


class ToolRunner:
    def __init__(
        self, store: SessionStore, tools: ToolSource, approvals: ApprovalGate, builtins: Builtins, events: LoopEvents,
        tracing: Tracing | None = None,
    ) -> None:
        self._store = store
        self._tracing = tracing or Tracing()
        self._tools = tools
        self._approvals = approvals
        self._builtins = builtins
        self._events = events
        # Calls this host sent itself: a call found `sent` that is not in here was sent by an
        # earlier run of the host (killed or stopped), which the re-issue rules tell apart.
        self._sent_here: set[tuple[str, str]] = set()

    async def run(self, calls: list[ToolCallRecord], control: TurnControl) -> None:
        """Reads (and built-ins) in parallel; writes one at a time in the model's order."""
        writes = sorted((c for c in calls if c.is_write), key=lambda c: c.position)
        parked: list[TurnParked] = []

        async def parkable(step: Callable[[], Awaitable[object]]) -> None:
            # A parked wait stops its own step only; the others (a started write) run to their end.
            try:
                await step()
            except TurnParked as exc:
                parked.append(exc)

        async with anyio.create_task_group() as tg:
            for call in calls:
                if not call.is_write and not call.status.final:
                    tg.start_soon(parkable, partial(self._run_call, call, control))
            tg.start_soon(parkable, partial(self._run_writes, writes, control))
        if parked:
            raise parked[0]

    async def _run_writes(self, writes: list[ToolCallRecord], control: TurnControl) -> None:
        blocker: ToolCallRecord | None = None
        for write in writes:
            current = await self._store.get_tool_call(write.session_id, write.id)
            if not current.status.final:
                reason = None if current.status is CallStatus.SENT else await control.not_started_reason()
                if reason is not None:
                    current = await self.cancel(current, reason)
                elif blocker is not None:
                    current = await self._finish(current, CallStatus.SKIPPED, texts.skipped(blocker.name, blocker.id))
                    await self._events.tool_finished(current, False)
                else:
                    current = await self._run_call(current, control)
            if blocker is None and current.status is not CallStatus.SUCCEEDED:
                blocker = current

    async def _finish(self, record: ToolCallRecord, status: CallStatus, text: str) -> ToolCallRecord:
        return await self._store.update_tool_call(record, status=status, result_text=text)

    async def cancel(self, record: ToolCallRecord, reason: CancelReason, stopped: bool = False) -> ToolCallRecord:
        """The call is not run (or, `stopped`, a started read is abandoned): `rejected`, with why.
        The turn's open approvals and questions are closed with it."""
        text = texts.READ_STOPPED_BY_CANCELLATION if stopped else _CANCELLED_TEXTS[reason]
        record = await self._store.update_tool_call(record, status=CallStatus.REJECTED, result_text=text, cancel_reason=reason)
        await self._store.cancel_waits(record.session_id, record.turn_id, reason.value)
        await self._events.tool_finished(record, False)
        return record

    @staticmethod
    def _interrupted(control: TurnControl) -> CancelReason:
        return CancelReason.TURN_CANCELLED if control.cancelled else CancelReason.STEERED

    async def _run_call(self, record: ToolCallRecord, control: TurnControl) -> ToolCallRecord:
        with self._tracing.execute_tool(record) as span:
            record = await self._execute(record, control)
            failed = record.status in (CallStatus.FAILED, CallStatus.OUTCOME_UNKNOWN)
            Tracing.ended(span, record.status.value, (record.result_text or record.status.value) if failed else None)
            return record

    async def _execute(self, record: ToolCallRecord, control: TurnControl) -> ToolCallRecord:
        reason = None if record.status is CallStatus.SENT else await control.not_started_reason()
        if reason is not None:
            return await self.cancel(record, reason)
        await self._events.tool_started(record)
        replayed = False
        if record.kind == "builtin":
            if record.name == WRITE_TODOS:  # settles at once: nothing to wait for
                status, text = await self._builtins.run(record)
            else:
                with control.scope(Section.WAIT) as scope:
                    status, text = await self._builtins.run(record)
                if scope.cancelled_caught:
                    return await self.cancel(await self._reload(record), self._interrupted(control))
            record = await self._finish(record, status, text)
        else:
            if record.requires_approval and record.status in (CallStatus.PENDING, CallStatus.AWAITING_APPROVAL):
                record = await self._store.update_tool_call(record, status=CallStatus.AWAITING_APPROVAL)
                with control.scope(Section.WAIT) as scope:
                    decision = await self._approvals.wait(record)
                if scope.cancelled_caught:
                    return await self.cancel(record, self._interrupted(control))
                await self._events.approval_decided(record, decision)
                if not decision.allowed:
                    text = (
                        texts.APPROVAL_DEADLINE_PASSED
                        if decision.status is ApprovalStatus.EXPIRED
                        else texts.approval_denied(decision.reason)
                    )
                    record = await self._finish(record, CallStatus.REJECTED, text)
                    await self._events.tool_finished(record, False)
                    return record
                record = await self._store.update_tool_call(record, status=CallStatus.APPROVED)
                if (reason := await control.not_started_reason()) is not None:
                    return await self.cancel(record, reason)
            if record.is_write:
                # Never cancelled by the turn, runs to its recorded end; but a long-running task
                # it started is abandoned by cancel_turn (outcome unknown, the task cancelled).
                abandon = anyio.CancelScope()

                async def on_task() -> None:
                    control.abandon_on_cancel(abandon)

                with abandon:
                    result = await self._call_gateway(record, on_task)
                control.forget(abandon)
                if abandon.cancelled_caught:
                    record = await self._store.update_tool_call(
                        await self._reload(record), status=CallStatus.OUTCOME_UNKNOWN, result_text=texts.TASK_ABANDONED,
                        cancel_reason=CancelReason.TURN_CANCELLED,
                    )
                    await self._events.tool_finished(record, False)
                    return record
            else:
                with control.scope(Section.READ) as scope:
                    result = await self._call_gateway(record)
                if scope.cancelled_caught:
                    return await self.cancel(await self._reload(record), CancelReason.TURN_CANCELLED, stopped=True)
            replayed = result.replayed
            if result.found:  # search_tools' definitions join the session's tools (docs/discovery.md)
                await self._store.add_found_tools(record.session_id, [t.model_dump(mode="json") for t in result.found])
            record = await self._store.update_tool_call(
                record, status=result.status, result_text=result.text, attempts=max(result.attempts, record.attempts),
                images=result.images,
            )
        await self._events.tool_finished(record, replayed)
        return record

    async def _reload(self, record: ToolCallRecord) -> ToolCallRecord:
        return await self._store.get_tool_call(record.session_id, record.id)

    async def _kept_round(self, record: ToolCallRecord) -> Round | None:
        """The last 2026-07-28 round of questions an earlier run of the host kept for this call
        (with its questions), to be sent first with its old requestState; None when there is none.
        Read only when a plain call is sent on 2026-07-28 (a task's path has no await more)."""
        if record.status is not CallStatus.SENT:
            return None
        kept = [q.input_round for q in await self._store.call_questions(record.session_id, record.id) if q.input_round]
        if not kept or kept[-1].idempotency_key != record.idempotency_key:
            return None
        return Round(kept[-1].request_state, kept[-1].input_requests)

    async def _call_gateway(self, record: ToolCallRecord, on_task: Callable[[], Awaitable[None]] | None = None) -> CallResult:
        """One gateway call, with what the store knows of its earlier attempts."""
        ident = (record.session_id, record.id)
        prior = PriorAttempts()
        if record.status is CallStatus.SENT:
            prior = PriorAttempts(record.attempts, record.updated_at, before_restart=ident not in self._sent_here)

        async def on_attempt(attempt: int) -> None:
            self._sent_here.add(ident)
            await self._store.update_tool_call(record, status=CallStatus.SENT, attempts=attempt)

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            data = session_events.tool_progress(record, progress, total, message)
            await self._store.append_event(record.session_id, record.turn_id, session_events.TOOL_PROGRESS, data)
            await self._events.tool_progress(record, progress, total, message)

        request = CallRequest(record.name, record.arguments, record.idempotency_key, Effect(record.effect), prior,
                              ask_form=self._builtins.form_asker(record), on_task=on_task,
                              ask_round=self._builtins.round_asker(record), kept_round=partial(self._kept_round, record))
        return await self._tools.call(request, on_attempt, on_progress)
