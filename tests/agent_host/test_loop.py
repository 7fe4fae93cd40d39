"""The turn loop in-process, with a fake tool source: ordering, skips, limits, approvals, resume."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from agent_host.domain import texts
from agent_host.approvals.gate import ApprovalGate, approval_id
from agent_host.turn.builtins import Builtins
from agent_host.gateway_client.tools import CallRequest, CallResult, GatewayTool, OnAttempt, OnProgress, PriorAttempts
from agent_host.turn.loop import AgentConfig, TurnLoop
from agent_host.models.base import Message, ModelRequest, ModelResponse, ToolCall
from agent_host.models.scripted import ScriptedModelClient, call
from agent_host.store.session_store import ApprovalStatus, CallStatus, SessionStore, ToolCallRecord
from gateway.conventions.keys import Effect

pytestmark = pytest.mark.anyio

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}}


def tool(name: str, effect: Effect, approval: bool = False) -> GatewayTool:
    return GatewayTool(name=name, input_schema=SCHEMA, effect=effect, requires_approval=approval)


class FakeTools:
    """Answers by tool name; records every send with its key, and how many ran at once."""

    def __init__(self, tools: list[GatewayTool], answers: dict[str, CallStatus] | None = None, delay: float = 0.0) -> None:
        self.tools = tools
        self.answers = answers or {}
        self.delay = delay
        self.sent: list[tuple[str, str, int]] = []
        self.priors: list[PriorAttempts] = []
        self.running = 0
        self.max_running = 0
        self.hang = False  # True: after counting its attempt, a call never answers

    async def list_tools(self, found: Sequence[GatewayTool] = ()) -> list[GatewayTool]:
        return self.tools

    async def call(self, request: CallRequest, on_attempt: OnAttempt | None = None,
                   on_progress: OnProgress | None = None) -> CallResult:
        name, key, prior = request.name, request.key, request.prior
        self.priors.append(prior)
        attempts_done = prior.count
        if on_attempt is not None:
            await on_attempt(attempts_done + 1)
        self.sent.append((name, key, attempts_done))
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            await anyio.sleep(self.delay)
            if self.hang:
                await anyio.sleep_forever()
        finally:
            self.running -= 1
        status = self.answers.get(name, CallStatus.SUCCEEDED)
        text = {CallStatus.OUTCOME_UNKNOWN: texts.outcome_unknown(), CallStatus.FAILED: texts.failed("boom")}.get(status, f"{name} ok")
        return CallResult(status=status, text=text, attempts=attempts_done + 1)


class Prompter:
    def __init__(self, answers: list[bool]) -> None:
        self.answers = answers
        self.cards: list[str] = []

    async def ask(self, card: Any) -> tuple[bool, str | None]:
        self.cards.append(card.call)
        return self.answers.pop(0), None


@asynccontextmanager
async def make_loop(tmp_path: Path, script: Callable[[ModelRequest], ModelResponse], tools: FakeTools, *,
                    mode: str = "auto", prompter: Prompter | None = None, timeout: float | None = 5.0,
                    max_calls: int = 100) -> AsyncIterator[tuple[TurnLoop, SessionStore]]:
    async with SessionStore(tmp_path / "s.db") as store:
        gate = ApprovalGate(store, mode, prompter=prompter, timeout_seconds=timeout, poll_seconds=0.01)  # type: ignore[arg-type]
        loop = TurnLoop(store, ScriptedModelClient(script), tools, gate, Builtins(store, None),
                        AgentConfig(max_model_calls=max_calls))
        await store.create_session("scripted", "fake", "s1")
        yield loop, store


def first_then_summary(calls: Callable[[ModelRequest], list[Any]]) -> Callable[[ModelRequest], ModelResponse]:
    def script(request: ModelRequest) -> ModelResponse:
        if request.model_call == 1:
            return ModelResponse(tool_calls=calls(request))
        return ModelResponse(text=" | ".join(f"{m.tool_name}: {m.text}" for m in ScriptedModelClient.tool_results(request)))
    return script


async def test_reads_in_parallel_writes_in_order_and_skip_after_a_failure(tmp_path: Path) -> None:
    fake = FakeTools(
        [tool("r1", Effect.READ), tool("r2", Effect.READ), tool("w1", Effect.IDEMPOTENT_WRITE),
         tool("w2", Effect.NON_IDEMPOTENT_WRITE), tool("w3", Effect.NON_IDEMPOTENT_WRITE)],
        answers={"w2": CallStatus.OUTCOME_UNKNOWN}, delay=0.05,
    )
    script = first_then_summary(lambda r: [call(r, 0, "w1"), call(r, 1, "r1"), call(r, 2, "w2"), call(r, 3, "r2"), call(r, 4, "w3")])
    async with make_loop(tmp_path, script, fake) as (loop, store):
        turn = await loop.run_turn("s1", "go")
        assert turn.status.value == "completed"
        writes = [name for name, _, _ in fake.sent if name.startswith("w")]
        assert writes == ["w1", "w2"]  # w3 never sent
        assert fake.max_running >= 2  # reads overlapped (with each other and the write chain)
        calls = {c.name: c for c in await store.tool_calls("s1")}
        assert calls["w3"].status is CallStatus.SKIPPED
        assert calls["w3"].result_text == texts.skipped("w2", "call_1_2")
        assert calls["w2"].result_text == texts.OUTCOME_UNKNOWN
        assert "may have taken effect" in texts.OUTCOME_UNKNOWN and "Do not repeat" in texts.OUTCOME_UNKNOWN
        assert {key for _, key, _ in fake.sent} >= {"s1/turn-1/call_1_0", "s1/turn-1/call_1_2"}
        # The model saw every result, paired with its call, in the model's order.
        assert turn.final_text is not None and turn.final_text.index("w1:") < turn.final_text.index("w3:")


async def test_model_call_limit_offers_no_tools_then_ends_the_turn(tmp_path: Path) -> None:
    offered: list[int] = []

    def greedy(request: ModelRequest) -> ModelResponse:
        offered.append(len(request.tools))
        return ModelResponse(tool_calls=[call(request, 0, "r1")])

    fake = FakeTools([tool("r1", Effect.READ)])
    async with make_loop(tmp_path, greedy, fake, max_calls=3) as (loop, store):
        turn = await loop.run_turn("s1", "loop forever")
        assert turn.status.value == "failed" and turn.model_calls == 3
        assert offered[-1] == 0 and all(n > 0 for n in offered[:-1])
        last = [c for c in await store.tool_calls("s1") if c.model_call == 3]
        assert [c.status for c in last] == [CallStatus.NOT_RUN]
        assert last[0].result_text == "The tool call was not run: this turn reached its limit of 3 model calls."
        assert len(fake.sent) == 2


async def test_unknown_tool_and_invalid_arguments_reach_the_model_as_failures(tmp_path: Path) -> None:
    fake = FakeTools([tool("r1", Effect.READ)])
    script = first_then_summary(lambda r: [call(r, 0, "nope"), call(r, 1, "r1", n="not a number")])
    async with make_loop(tmp_path, script, fake) as (loop, store):
        await loop.run_turn("s1", "x")
        calls = {c.name: c for c in await store.tool_calls("s1")}
        assert calls["nope"].result_text == texts.unknown_tool("nope")
        assert calls["r1"].status is CallStatus.FAILED and "invalid r1 arguments" in (calls["r1"].result_text or "")
        assert fake.sent == []


async def test_approval_allowed_then_denied_on_the_prompt(tmp_path: Path) -> None:
    fake = FakeTools([tool("refund", Effect.NON_IDEMPOTENT_WRITE, approval=True)])
    script = first_then_summary(lambda r: [call(r, 0, "refund", n=1), call(r, 1, "refund", n=2)])
    prompter = Prompter([True, False])
    async with make_loop(tmp_path, script, fake, mode="prompt", prompter=prompter) as (loop, store):
        await loop.run_turn("s1", "x")
        assert prompter.cards == ["refund(n: 1)", "refund(n: 2)"]
        calls = await store.tool_calls("s1")
        assert [c.status for c in calls] == [CallStatus.SUCCEEDED, CallStatus.REJECTED]
        assert calls[1].result_text == texts.APPROVAL_DENIED
        approval = await store.get_approval(approval_id("s1", "call_1_1"))
        assert approval is not None and approval.status is ApprovalStatus.DENIED and approval.decided_by == "cli"


async def test_approval_deadline_passed(tmp_path: Path) -> None:
    fake = FakeTools([tool("refund", Effect.NON_IDEMPOTENT_WRITE, approval=True)])
    async with make_loop(tmp_path, first_then_summary(lambda r: [call(r, 0, "refund")]), fake, mode="api", timeout=0.2) as (loop, store):
        await loop.run_turn("s1", "x")
        [record] = await store.tool_calls("s1")
        assert record.status is CallStatus.REJECTED and record.result_text == "approval deadline passed"
        assert fake.sent == []
        # A decision after the deadline gets the deadline's answer.
        late = await store.decide_approval(approval_id("s1", record.id), ApprovalStatus.ALLOWED, "http", None, time.time())
        assert late is not None and late[0].status is ApprovalStatus.EXPIRED and late[1] is True


async def test_resume_resends_an_unfinished_call_with_the_same_key(tmp_path: Path) -> None:
    fake = FakeTools([tool("pay", Effect.NON_IDEMPOTENT_WRITE)])
    async with make_loop(tmp_path, first_then_summary(lambda r: [call(r, 0, "pay")]), fake) as (loop, store):
        # A host that died after sending: the model response is committed and the call marked sent.
        turn = await store.start_turn("s1", "pay")
        record = ToolCallRecord(session_id="s1", turn_id=turn.id, id="call_1_0", model_call=1, position=0, name="pay",
                                arguments={}, kind="gateway", effect="non_idempotent_write", requires_approval=False,
                                idempotency_key="s1/turn-1/call_1_0", status=CallStatus.SENT, attempts=1, updated_at=0)
        await store.record_model_response(turn, Message(role="assistant", tool_calls=[ToolCall(id="call_1_0", name="pay")]), [record])
        resumed = await loop.resume("s1")
        assert resumed is not None and resumed.status.value == "completed"
        assert fake.sent == [("pay", "s1/turn-1/call_1_0", 1)]
        # The source is told the stored count, and that an earlier run of the host sent it.
        assert fake.priors == [PriorAttempts(1, 0, before_restart=True)]
        assert (await store.tool_calls("s1"))[0].attempts == 2


async def test_a_call_this_host_sent_itself_is_not_taken_for_a_restart(tmp_path: Path) -> None:
    """The turn cancelled while its write was out, then resumed by the same host: the source is
    told the attempt was this host's own, so no after-restart recovery re-send is allowed."""
    fake = FakeTools([tool("pay", Effect.NON_IDEMPOTENT_WRITE)])
    fake.hang = True
    async with make_loop(tmp_path, first_then_summary(lambda r: [call(r, 0, "pay")]), fake) as (loop, store):
        with anyio.move_on_after(0.5) as scope:
            await loop.run_turn("s1", "pay")
        assert scope.cancelled_caught
        [record] = await store.tool_calls("s1")
        assert (record.status, record.attempts) == (CallStatus.SENT, 1)
        fake.hang = False
        await loop.resume("s1")
        assert fake.priors == [PriorAttempts(), PriorAttempts(1, record.updated_at, before_restart=False)]


async def test_durable_wait_resumes_with_the_remaining_time(tmp_path: Path) -> None:
    fake = FakeTools([])
    script = first_then_summary(lambda r: [call(r, 0, "durable_wait", duration_seconds=30, reason="r")])
    async with make_loop(tmp_path, script, fake) as (loop, store):
        turn = await store.start_turn("s1", "wait")
        record = ToolCallRecord(session_id="s1", turn_id=turn.id, id="call_1_0", model_call=1, position=0,
                                name="durable_wait", arguments={"duration_seconds": 30, "reason": "r"}, kind="builtin",
                                effect="read", requires_approval=False, idempotency_key="k", status=CallStatus.WAITING,
                                wait_until=time.time() + 0.3, updated_at=0)
        await store.record_model_response(turn, Message(role="assistant", tool_calls=[ToolCall(id="call_1_0", name="durable_wait")]), [record])
        started = time.monotonic()
        await loop.resume("s1")
        assert 0.25 <= time.monotonic() - started < 2  # the 0.3 s left, neither nothing nor 30
        assert (await store.tool_calls("s1"))[0].result_text == texts.wait_completed(30, "r")


async def test_write_todos_and_repeated_ids_across_turns(tmp_path: Path) -> None:
    script = first_then_summary(lambda r: [call(r, 0, "write_todos", todos=[{"content": "a", "status": "pending"}])])
    async with make_loop(tmp_path, script, FakeTools([])) as (loop, store):
        await loop.run_turn("s1", "plan")
        await loop.run_turn("s1", "plan again")
        ids = [c.id for c in await store.tool_calls("s1")]
        assert ids[0] == "call_1_0" and ids[1] != ids[0]  # a repeated model id is renamed: keys stay unique
        assert (await store.tool_calls("s1"))[1].result_text == texts.todos_updated(2, 1)
        session = await store.get_session("s1")
        assert session is not None and session.plan_revision == 2
