"""Plan mode and the turn continuation hook, with a scripted model."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_host.domain import texts
from agent_host.turn.continuation import MAX_CONSECUTIVE_CONTINUATIONS, ContinuationContext, ContinueTurn, load_hook
from agent_host.turn.loop import AgentConfig
from agent_host.models.base import ModelRequest, ModelResponse
from agent_host.models.scripted import call
from agent_host.domain.plan import PLANNING_NOTE
from agent_host.cli.plan_flow import pending_execution
from agent_host.domain.records import CallStatus, ControlKind, PlanStatus, TurnMode, TurnStatus
from gateway.conventions.keys import Effect
from tests.agent_host.loop_support import Tools, host, last_user, tool

pytestmark = pytest.mark.anyio

TASKS = [{"content": "check the balance", "status": "pending"}, {"content": "refund order 5521", "status": "pending"}]


def planner(seen: list[ModelRequest]):  # type: ignore[no-untyped-def]
    """Plans with write_todos (and tries a write, which a planning turn refuses); executes the
    approved plan by calling the tools and marking the tasks completed."""

    def script(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        names = [t.name for t in request.tools]
        if request.tools and names == ["write_todos"]:  # a planning turn
            if request.model_call == 1:
                todos = TASKS if "feedback" not in last_user(request) else TASKS + [{"content": "tell the user", "status": "pending"}]
                return ModelResponse(text="Here is my plan.", tool_calls=[
                    call(request, 0, "write_todos", todos=todos), call(request, 1, "refund", n=5521)])
            return ModelResponse(text="Plan written: approve it to run.")
        if request.model_call == 1:
            return ModelResponse(tool_calls=[call(request, 0, "refund", n=5521)])
        if request.model_call == 2:
            done = [dict(t, status="completed") for t in TASKS]
            return ModelResponse(tool_calls=[call(request, 0, "write_todos", todos=done)])
        return ModelResponse(text="All done.")

    return script


async def test_a_planning_turn_writes_a_draft_that_runs_only_once_that_revision_is_approved(tmp_path: Path) -> None:
    seen: list[ModelRequest] = []
    tools = Tools([tool("refund", Effect.NON_IDEMPOTENT_WRITE)])
    async with host(tmp_path, planner(seen), tools) as h:
        planning = await h.loop.run_turn("s1", "refund order 5521", TurnMode.PLANNING)
        assert planning.status is TurnStatus.COMPLETED and planning.mode is TurnMode.PLANNING
        calls = {c.name: c for c in await h.store.tool_calls("s1", planning.id)}
        assert calls["write_todos"].status is CallStatus.SUCCEEDED
        assert (calls["refund"].status, calls["refund"].result_text) == (CallStatus.REJECTED, texts.PLANNING_ONLY)
        assert tools.sent == []  # nothing ran while planning
        session = await h.store.get_session("s1")
        assert session is not None and (session.plan_revision, session.plan_status) == (1, PlanStatus.DRAFT)
        # The plan note comes before the turn's messages: the planning instructions, then the plan.
        first = seen[0].messages
        assert first[0].text == PLANNING_NOTE and first[1].text == "refund order 5521"
        assert "[Dex] The current plan (revision 1, draft):\n1. [pending] check the balance" in seen[1].messages[0].text

        # Feedback on the draft is a planning turn too (a new revision); the old one can no longer be approved.
        feedback = await h.loop.run_turn("s1", "feedback: also tell me")
        assert feedback.mode is TurnMode.PLANNING
        assert await h.store.request_control("s1", ControlKind.EXECUTE_PLAN, "web", revision=1) is None
        control = await h.store.request_control("s1", ControlKind.EXECUTE_PLAN, "web", revision=2)
        assert control is not None and (await pending_execution(h.store, "s1")) == control

        # Executing: the plan is active, every tool is offered, and the model keeps the statuses current.
        await h.store.mark_applied([control])
        await h.store.set_plan_status("s1", PlanStatus.ACTIVE)
        executing = await h.loop.run_turn("s1", texts.plan_approved(2), TurnMode.EXECUTING)
        assert executing.status is TurnStatus.COMPLETED and executing.final_text == "All done."
        assert tools.sent == ["refund"]
        note = seen[-3].messages[-2].text  # before the executing turn's own message
        assert note.startswith("[Dex] The current plan (revision 2, active):") and "Keep the task statuses current" in note
        session = await h.store.get_session("s1")
        assert session is not None and session.plan_status is PlanStatus.COMPLETED and session.plan_revision == 3
        assert await pending_execution(h.store, "s1") is None


def tool_and_answer(request: ModelRequest) -> ModelResponse:
    if request.model_call == 1:
        return ModelResponse(tool_calls=[call(request, 0, "lookup", n=1)])
    return ModelResponse(text="DECISION: yes" if "Finish with" in last_user(request) else "thinking")


async def test_continue_after_an_answer_without_tools_calls_the_model_again(tmp_path: Path) -> None:
    contexts: list[ContinuationContext] = []

    def hook(context: ContinuationContext) -> object:
        contexts.append(context)
        if not context.tool_results and "DECISION:" not in context.model_text:
            return ContinueTurn("Finish with a line that starts with DECISION:.")
        return "default"

    async with host(tmp_path, tool_and_answer, Tools([tool("lookup", Effect.READ)]), hook=hook) as h:  # type: ignore[arg-type]
        turn = await h.loop.run_turn("s1", "decide")
        messages = [(m.role, m.text) for m in await h.store.messages("s1")]
    assert turn.status is TurnStatus.COMPLETED and turn.final_text == "DECISION: yes" and turn.model_calls == 3
    assert [len(c.tool_results) for c in contexts] == [1, 0, 0]
    assert contexts[0].tool_results[0].tool_name == "lookup" and contexts[0].tool_results[0].status == "succeeded"
    # The answer and the message are both stored in the turn, the message as user text.
    assert messages[-3:] == [("assistant", "thinking"), ("user", "Finish with a line that starts with DECISION:."),
                             ("assistant", "DECISION: yes")]


async def test_end_after_tools_completes_the_turn_without_another_model_call(tmp_path: Path) -> None:
    async with host(tmp_path, tool_and_answer, Tools([tool("lookup", Effect.READ)]), hook=lambda c: "end") as h:
        turn = await h.loop.run_turn("s1", "look")
    assert turn.status is TurnStatus.COMPLETED and turn.model_calls == 1


async def test_continue_after_tools_adds_the_message_after_the_results(tmp_path: Path) -> None:
    seen: list[ModelRequest] = []

    def script(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return tool_and_answer(request)

    def hook(context: ContinuationContext) -> object:
        return ContinueTurn("Check the result twice.") if context.tool_results else "default"

    async with host(tmp_path, script, Tools([tool("lookup", Effect.READ)]), hook=hook) as h:  # type: ignore[arg-type]
        await h.loop.run_turn("s1", "look")
    assert [(m.role, m.text) for m in seen[1].messages[-2:]] == [("tool", "lookup ok"), ("user", "Check the result twice.")]


async def test_at_most_8_continuations_in_a_row_then_the_turn_fails_with_its_answer(tmp_path: Path) -> None:
    def chatter(request: ModelRequest) -> ModelResponse:
        return ModelResponse(text=f"answer {request.model_call}")

    async with host(tmp_path, chatter, hook=lambda c: ContinueTurn("more")) as h:
        turn = await h.loop.run_turn("s1", "go on")
    assert turn.status is TurnStatus.FAILED
    assert turn.error == texts.continuation_limit(MAX_CONSECUTIVE_CONTINUATIONS)
    assert turn.model_calls == MAX_CONSECUTIVE_CONTINUATIONS + 1 and turn.final_text == f"answer {turn.model_calls}"


async def test_continued_calls_count_toward_the_model_call_limit(tmp_path: Path) -> None:
    async with host(tmp_path, lambda r: ModelResponse(text="again"), hook=lambda c: ContinueTurn("more"), max_calls=3) as h:
        turn = await h.loop.run_turn("s1", "go on")
    assert turn.status is TurnStatus.FAILED and turn.model_calls == 3
    assert turn.error == texts.limit_reached(3)


async def test_a_hook_that_fails_or_answers_nonsense_fails_the_turn(tmp_path: Path) -> None:
    def broken(context: ContinuationContext) -> object:
        raise RuntimeError("no database")

    async with host(tmp_path, lambda r: ModelResponse(text="hi"), hook=broken) as h:  # type: ignore[arg-type]
        turn = await h.loop.run_turn("s1", "x")
    assert turn.status is TurnStatus.FAILED
    assert turn.error == "the turn continuation hook failed: RuntimeError: no database"
    async with host(tmp_path / "b", lambda r: ModelResponse(text="hi"), hook=lambda c: ContinueTurn("  ")) as h:
        turn = await h.loop.run_turn("s1", "x")
    assert turn.status is TurnStatus.FAILED and "expected 'end', 'default' or ContinueTurn(message)" in (turn.error or "")


async def test_the_hook_is_named_in_the_config(tmp_path: Path) -> None:
    config = AgentConfig(continuation_hook="tests.agent_host.scripts:end_turn_hook", control_poll_seconds=0.02)
    async with host(tmp_path, tool_and_answer, Tools([tool("lookup", Effect.READ)]), config=config) as h:
        turn = await h.loop.run_turn("s1", "look")
    assert turn.model_calls == 1 and turn.status is TurnStatus.COMPLETED
    with pytest.raises(ValueError, match="cannot be loaded"):
        load_hook("tests.agent_host.scripts:nope")
