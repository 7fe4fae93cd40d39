"""Steering and cancel_turn, in-process with a scripted model and a fake gateway.

Steering: the message is applied at the next model call; waiting approvals and questions are
cancelled; a model call or tool call that started runs to its end; calls not started are not sent.
cancel_turn: stops the turn at once; calls not started are not sent; a started write runs to its
recorded end; a started read is abandoned; the reason is recorded.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import anyio
import pytest

from agent_host.domain import texts
from agent_host.approvals.gate import approval_id
from agent_host.models.base import ModelRequest, ModelResponse
from agent_host.models.scripted import call
from agent_host.domain.records import (
    ApprovalStatus,
    CallStatus,
    CancelReason,
    ControlKind,
    QuestionStatus,
    TurnStatus,
)
from gateway.conventions.keys import Effect
from tests.agent_host.loop_support import Tools, eventually, host, last_user, tool, turn_with

pytestmark = pytest.mark.anyio


def answer_with_last_user_text(request: ModelRequest) -> ModelResponse:
    results = " | ".join(f"{m.tool_name}={m.text}" for m in request.messages if m.role == "tool")
    return ModelResponse(text=f"LAST USER: {last_user(request)} || RESULTS: {results}")


async def test_a_steer_cancels_a_waiting_approval_and_reaches_the_next_model_call(tmp_path: Path) -> None:
    tools = Tools([tool("refund", Effect.NON_IDEMPOTENT_WRITE, approval=True)])

    def script(request: ModelRequest) -> ModelResponse:
        if request.model_call == 1:
            return ModelResponse(text="Refunding.", tool_calls=[call(request, 0, "refund", n=40)])
        return answer_with_last_user_text(request)

    async with host(tmp_path, script, tools) as h:
        aid = approval_id("s1", "call_1_0")

        async def meanwhile() -> None:
            await eventually(lambda: h.store.get_approval(aid))
            control = await h.store.request_control("s1", ControlKind.STEER, "web", "use staging instead")
            assert control is not None and control.turn_id == "turn-1"

        turn = await turn_with(h, "refund order 5521", meanwhile)
        assert turn.status is TurnStatus.COMPLETED
        assert turn.final_text is not None and turn.final_text.startswith("LAST USER: use staging instead")
        assert texts.CANCELLED_BY_STEERING in turn.final_text
        [record] = await h.store.tool_calls("s1")
        assert (record.status, record.cancel_reason) == (CallStatus.REJECTED, CancelReason.STEERED)
        approval = await h.store.get_approval(aid)
        assert approval is not None and approval.status is ApprovalStatus.CANCELLED
        # A decision sent after the steer gets the first answer back: nothing runs.
        late = await h.store.decide_approval(aid, ApprovalStatus.ALLOWED, "http", None, time.time())
        assert late is not None and late[1] is True and late[0].status is ApprovalStatus.CANCELLED
        assert tools.sent == []
        roles = [(m.role, m.text) for m in await h.store.messages("s1")]
        assert roles[2] == ("user", "use staging instead")  # after the call (its result is paired with it)
        assert h.seen.steer_messages == ["use staging instead"]


async def test_a_steer_lets_the_model_call_finish_and_stops_its_calls_from_starting(tmp_path: Path) -> None:
    tools = Tools([tool("lookup", Effect.READ)])
    in_model, release = anyio.Event(), anyio.Event()

    async def script(request: ModelRequest) -> ModelResponse:
        if request.model_call == 1:
            in_model.set()
            await release.wait()
            return ModelResponse(tool_calls=[call(request, 0, "lookup", n=1)])
        return answer_with_last_user_text(request)

    async with host(tmp_path, script, tools) as h:

        async def meanwhile() -> None:
            await in_model.wait()
            assert await h.store.request_control("s1", ControlKind.STEER, "terminal", "look up order 8 instead")
            await anyio.sleep(0.1)  # the watcher has seen it: the model call still runs
            release.set()

        turn = await turn_with(h, "look it up", meanwhile)
        assert turn.status is TurnStatus.COMPLETED and turn.model_calls == 2
        assert turn.final_text is not None and turn.final_text.startswith("LAST USER: look up order 8 instead")
        [record] = await h.store.tool_calls("s1")
        assert record.cancel_reason is CancelReason.STEERED and record.result_text == texts.CANCELLED_BY_STEERING
        assert tools.sent == []


async def test_a_steer_cancels_a_question_and_a_durable_wait(tmp_path: Path) -> None:
    def script(request: ModelRequest) -> ModelResponse:
        if request.model_call == 1:
            return ModelResponse(tool_calls=[
                call(request, 0, "ask_user", question="Which account?", choices=["a", "b"]),
                call(request, 1, "durable_wait", duration_seconds=3600, reason="cool down"),
            ])
        return answer_with_last_user_text(request)

    async with host(tmp_path, script) as h:

        async def meanwhile() -> None:
            await eventually(lambda: h.store.pending_questions("s1"))
            await h.store.request_control("s1", ControlKind.STEER, "web", "never mind, account b")

        turn = await turn_with(h, "ask me", meanwhile)
        assert turn.final_text is not None and turn.final_text.startswith("LAST USER: never mind, account b")
        calls = await h.store.tool_calls("s1")
        assert [(c.status, c.cancel_reason) for c in calls] == [(CallStatus.REJECTED, CancelReason.STEERED)] * 2
        [question] = [q for q in [await h.store.get_question(qid) for qid in [_qid(calls[0].id)]] if q]
        assert question.status is QuestionStatus.CANCELLED


def _qid(call_id: str) -> str:
    return approval_id("s1", call_id)


async def test_cancel_stops_a_model_call_at_once_and_records_why(tmp_path: Path) -> None:
    async def script(request: ModelRequest) -> ModelResponse:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with host(tmp_path, script) as h:
        asked: list[float] = []

        async def meanwhile() -> None:
            await eventually(lambda: h.store.unfinished_turn("s1"))
            await anyio.sleep(0.1)
            asked.append(time.monotonic())
            assert await h.store.request_control("s1", ControlKind.CANCEL, "web", "wrong question")

        turn = await turn_with(h, "think hard", meanwhile)
        assert time.monotonic() - asked[0] < 1.0
        assert turn.status is TurnStatus.CANCELLED and turn.error == "cancelled by the user (web): wrong question"
        assert turn.model_calls == 0  # the answer of the abandoned call is dropped
        messages = await h.store.messages("s1")
        assert messages[-1].text == texts.turn_cancelled_note(turn.error)
        # Nothing left to apply; a cancel with no turn running is refused.
        assert await h.store.pending_controls("s1", "turn-1") == []
        assert await h.store.request_control("s1", ControlKind.CANCEL, "web", None) is None


async def test_cancel_lets_a_started_write_finish_abandons_reads_and_sends_nothing_else(tmp_path: Path) -> None:
    tools = Tools(
        [tool("slow_write", Effect.NON_IDEMPOTENT_WRITE), tool("next_write", Effect.IDEMPOTENT_WRITE), tool("slow_read", Effect.READ)],
        delays={"slow_write": 0.6, "slow_read": math.inf},
    )

    def script(request: ModelRequest) -> ModelResponse:
        if request.model_call == 1:
            return ModelResponse(tool_calls=[
                call(request, 0, "slow_write", n=1), call(request, 1, "slow_read", n=2), call(request, 2, "next_write", n=3),
            ])
        raise AssertionError("no model call after the cancel")

    async with host(tmp_path, script, tools) as h:

        async def meanwhile() -> None:

            async def write_sent() -> bool:
                calls = {c.name: c for c in await h.store.tool_calls("s1")}
                return bool(calls) and calls["slow_write"].status is CallStatus.SENT

            await eventually(write_sent)
            assert await h.store.request_control("s1", ControlKind.CANCEL, "terminal", "Ctrl-C")

        turn = await turn_with(h, "write twice", meanwhile)
        assert turn.status is TurnStatus.CANCELLED and turn.error == "cancelled by the user (terminal): Ctrl-C"
        calls = {c.name: c for c in await h.store.tool_calls("s1")}
        assert calls["slow_write"].status is CallStatus.SUCCEEDED  # ran to its recorded end
        assert calls["slow_read"].status is CallStatus.REJECTED
        assert calls["slow_read"].result_text == texts.READ_STOPPED_BY_CANCELLATION
        assert (calls["next_write"].status, calls["next_write"].cancel_reason) == (CallStatus.REJECTED, CancelReason.TURN_CANCELLED)
        assert calls["next_write"].result_text == texts.CANCELLED_BY_TURN_CANCELLATION
        assert sorted(tools.sent) == ["slow_read", "slow_write"] and tools.finished == ["slow_write"]


async def test_cancel_while_an_approval_waits(tmp_path: Path) -> None:
    tools = Tools([tool("refund", Effect.NON_IDEMPOTENT_WRITE, approval=True)])
    seen: list[ModelRequest] = []

    def script(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        if last_user(request) == "hello":
            return ModelResponse(text="ok")
        return ModelResponse(tool_calls=[call(request, 0, "refund", n=1)])

    async with host(tmp_path, script, tools) as h:

        async def meanwhile() -> None:
            await eventually(lambda: h.store.pending_approvals("s1"))
            await h.store.request_control("s1", ControlKind.CANCEL, "web", None)

        turn = await turn_with(h, "refund", meanwhile)
        assert turn.status is TurnStatus.CANCELLED and turn.error == "cancelled by the user (web)"
        [record] = await h.store.tool_calls("s1")
        assert record.cancel_reason is CancelReason.TURN_CANCELLED and tools.sent == []
        assert (await h.store.pending_approvals("s1")) == []
        # The next turn's model call sees the cancelled call paired with its result, and the note.
        assert (await h.loop.run_turn("s1", "hello")).final_text == "ok"
        texts_seen = [(m.role, m.text) for m in seen[-1].messages]
        assert ("tool", texts.CANCELLED_BY_TURN_CANCELLATION) in texts_seen
        assert ("user", texts.turn_cancelled_note("cancelled by the user (web)")) in texts_seen
