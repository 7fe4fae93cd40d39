"""Spend limits and per-session settings, with a scripted model.

The scripted model reports usage as words: input = the words of the request's messages,
output = the words of its answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from agent_host.cli.main import main
from agent_host.models.base import ModelRequest, ModelResponse
from agent_host.models.scripted import ScriptedModelClient, call
from agent_host.domain.records import CallStatus, ControlKind, TurnStatus
from agent_host.domain.settings import SessionSettings, ToolPolicySetting, apply_policy, parse_policy
from agent_host.store.session_store import SessionStore
from gateway.conventions.keys import Effect
from tests.agent_host.loop_support import Tools, eventually, host, tool

pytestmark = pytest.mark.anyio


def looping(request: ModelRequest) -> ModelResponse:
    """Never answers: one read per model call."""
    return ModelResponse(text="still looking for the answer", tool_calls=[call(request, 0, "lookup", n=request.model_call)])


async def test_a_turn_token_limit_ends_the_turn_cleanly_before_the_next_model_call(tmp_path: Path) -> None:
    tools = Tools([tool("lookup", Effect.READ)])
    async with host(tmp_path, looping, tools, settings={"max_turn_tokens": 60}) as h:
        turn = await h.loop.run_turn("s1", "find it")
        usage = await h.store.usage_totals("s1", turn.id)
        calls = await h.store.tool_calls("s1")
    assert turn.status is TurnStatus.STOPPED
    tokens = usage.input_tokens + usage.output_tokens
    assert tokens >= 60 and turn.model_calls == usage.model_calls
    assert turn.error == f"spend limit reached: this turn used {tokens:,} tokens of its 60-token limit"
    # Ended cleanly: every call of the last model call has its result; no request was cut off.
    assert all(c.status is CallStatus.SUCCEEDED for c in calls) and len(tools.sent) == turn.model_calls
    # The usage shown at the end of the turn is the stored one.
    [(_, turn_usage, session_usage)] = h.seen.finished
    assert turn_usage == usage and session_usage.input_tokens == usage.input_tokens


async def test_a_session_token_limit_stops_the_next_turn_before_any_model_call(tmp_path: Path) -> None:
    def answer(request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="one two three four five")

    async with host(tmp_path, answer, settings={"max_session_tokens": 12}) as h:
        first = await h.loop.run_turn("s1", "a b c d e f g h")
        second = await h.loop.run_turn("s1", "and again")
        assert (await h.store.usage_totals("s1")).model_calls == 1
    assert first.status is TurnStatus.COMPLETED
    assert second.status is TurnStatus.STOPPED and second.model_calls == 0
    assert second.error is not None and second.error.startswith("spend limit reached: this session used ")


async def test_a_cost_limit_uses_the_configured_prices(tmp_path: Path) -> None:
    tools = Tools([tool("lookup", Effect.READ)])
    settings = {"input_price_per_mtok": 100_000.0, "output_price_per_mtok": 200_000.0, "max_turn_cost": 2.0}
    async with host(tmp_path, looping, tools, settings=settings) as h:
        turn = await h.loop.run_turn("s1", "find it")
        usage = await h.store.usage_totals("s1", turn.id)
    assert turn.status is TurnStatus.STOPPED
    assert usage.cost is not None and usage.cost >= 2.0
    assert usage.cost == pytest.approx((usage.input_tokens * 100_000 + usage.output_tokens * 200_000) / 1e6)
    assert turn.error == f"spend limit reached: this turn used ${usage.cost:.4f} of its $2.0000 limit"


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="needs input_price_per_mtok"):
        SessionSettings(max_turn_cost=1.0)
    with pytest.raises(ValueError):
        SessionSettings(temperature=3.0)
    with pytest.raises(ValueError, match="below compaction_trigger_ratio"):
        SessionSettings(compaction_trigger_ratio=0.5, compaction_retained_ratio=0.6)
    merged = SessionSettings(model="scripted").merged({"temperature": 0.2, "tool_policies": {"x": {"effect": "read"}}}, ["model"])
    assert merged.stored() == {"temperature": 0.2, "tool_policies": {"x": {"effect": "read"}}}


def test_a_tool_policy_raises_an_effect_never_lowers_it_and_its_approval_wins() -> None:
    assert apply_policy(Effect.READ, False, ToolPolicySetting(effect=Effect.NON_IDEMPOTENT_WRITE)) == (Effect.NON_IDEMPOTENT_WRITE, True)
    assert apply_policy(Effect.NON_IDEMPOTENT_WRITE, True, ToolPolicySetting(effect=Effect.READ)) == (Effect.NON_IDEMPOTENT_WRITE, True)
    assert apply_policy(Effect.IDEMPOTENT_WRITE, False, ToolPolicySetting(requires_approval=True)) == (Effect.IDEMPOTENT_WRITE, True)
    assert apply_policy(Effect.NON_IDEMPOTENT_WRITE, True, ToolPolicySetting(requires_approval=False)) == (Effect.NON_IDEMPOTENT_WRITE, False)
    assert parse_policy("payments__refund=idempotent_write,no-approval") == (
        "payments__refund", ToolPolicySetting(effect=Effect.IDEMPOTENT_WRITE, requires_approval=False))
    assert parse_policy("x=") == ("x", None)
    with pytest.raises(ValueError):
        parse_policy("x=sometimes")


async def test_settings_reach_the_model_and_a_running_turn_keeps_its_own_across_a_resume(tmp_path: Path) -> None:
    seen: list[tuple[str, float | None, int | None, list[str]]] = []
    tools = Tools([tool("lookup", Effect.READ)], delays={"lookup": 0.3})

    def script(request: ModelRequest) -> ModelResponse:
        seen.append((request.purpose, request.temperature, request.max_output_tokens, [t.name for t in request.tools]))
        if request.model_call == 1:
            return ModelResponse(tool_calls=[call(request, 0, "lookup", n=1)])
        return ModelResponse(text="done")

    settings = {"temperature": 0.2, "max_tokens": 300, "tool_policies": {"lookup": {"effect": "non_idempotent_write", "requires_approval": False}}}
    async with host(tmp_path, script, tools, settings=settings, approve="auto") as h:
        with anyio.move_on_after(0.15):  # the host stops while the read runs
            await h.loop.run_turn("s1", "one")
        # The session's settings change meanwhile; the unfinished turn keeps the ones it started with.
        await h.store.set_settings("s1", {"temperature": 0.9})
        resumed = await h.loop.resume("s1")
        assert resumed is not None and resumed.status is TurnStatus.COMPLETED
        [record] = await h.store.tool_calls("s1")
        assert record.effect == "non_idempotent_write" and not record.requires_approval  # the policy applied
        await h.loop.run_turn("s1", "two")
    assert [s[1:3] for s in seen] == [(0.2, 300)] * 2 + [(0.9, None)] * 2


async def test_the_model_setting_picks_the_client_of_the_next_turn(tmp_path: Path) -> None:
    def default(request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="from the default model")

    other = ScriptedModelClient(lambda r: ModelResponse(text="from the other model"), name="scripted:other")
    async with host(tmp_path, default, models=lambda spec: other) as h:
        assert (await h.loop.run_turn("s1", "hi")).final_text == "from the default model"
        await h.store.set_settings("s1", {"model": "scripted:other"}, "scripted:other")
        assert (await h.loop.run_turn("s1", "hi")).final_text == "from the other model"
        session = await h.store.get_session("s1")
        assert session is not None and session.model == "scripted:other"


def test_sessions_set_stores_settings_and_sessions_show_prints_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "s.db"

    async def create() -> None:
        async with SessionStore(store) as s:
            await s.create_session("scripted", "g", "s-set")

    anyio.run(create)
    assert main(["--store", str(store), "sessions", "set", "s-set", "--temperature", "0.3", "--max-turn-tokens", "5000",
                 "--tool-policy", "payments__refund=non_idempotent_write,approval", "--context-window", "32000"]) == 0
    out = capsys.readouterr().out
    assert '"temperature": 0.3' in out
    assert main(["--store", str(store), "sessions", "set", "s-set", "--unset", "temperature", "--model", "scripted"]) == 0
    capsys.readouterr()
    assert main(["--store", str(store), "sessions", "show", "s-set", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["session"]
    assert shown["settings"] == {
        "model": "scripted", "max_turn_tokens": 5000, "context_window_tokens": 32000,
        "tool_policies": {"payments__refund": {"effect": "non_idempotent_write", "requires_approval": True}},
    }
    assert main(["--store", str(store), "sessions", "set", "s-set", "--max-turn-cost", "1"]) == 2
    assert "needs input_price_per_mtok" in capsys.readouterr().err
    assert main(["--store", str(store), "sessions", "set", "nope", "--temperature", "1"]) == 2


async def test_controls_apply_only_to_a_running_turn(tmp_path: Path) -> None:
    async with host(tmp_path, lambda r: ModelResponse(text="ok")) as h:
        assert await h.store.request_control("s1", ControlKind.STEER, "web", "hello") is None
        await h.loop.run_turn("s1", "x")
        assert await h.store.request_control("s1", ControlKind.CANCEL, "web", None) is None
        assert await eventually(lambda: h.store.usage_totals("s1"))
