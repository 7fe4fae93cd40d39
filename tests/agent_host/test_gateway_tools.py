"""The gateway tool source: effects and approval from _meta, answers to outcomes, retries by effect."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from agent_host import texts
from agent_host.gateway_tools import (
    GatewayToolSource,
    GatewayUnavailable,
    _Interrupted,
    classify_error,
    classify_result,
    effect_of,
    requires_approval_of,
)
from agent_host.store import CallStatus
from gateway.conventions.keys import APPROVAL_KEY, EFFECT_KEY, OUTCOME_KEY, REPLAYED_KEY, Effect

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("meta", "effect", "approval"),
    [
        ({EFFECT_KEY: "read"}, Effect.READ, False),
        ({EFFECT_KEY: "non_idempotent_write", APPROVAL_KEY: "recommended"}, Effect.NON_IDEMPOTENT_WRITE, True),
        ({EFFECT_KEY: "idempotent_write", APPROVAL_KEY: None}, Effect.IDEMPOTENT_WRITE, True),
        ({EFFECT_KEY: "non_idempotent_write"}, Effect.NON_IDEMPOTENT_WRITE, False),
        ({}, Effect.UNCLASSIFIED, True),
        ({EFFECT_KEY: "maybe"}, Effect.UNCLASSIFIED, True),
        (None, Effect.UNCLASSIFIED, True),
    ],
)
def test_effect_and_approval_from_meta(meta: dict[str, Any] | None, effect: Effect, approval: bool) -> None:
    assert effect_of(meta) is effect
    assert requires_approval_of(meta, effect) is approval


def _result(text: str, is_error: bool = False, meta: dict[str, Any] | None = None) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=is_error, _meta=meta)


def test_outcome_key_wins_over_is_error() -> None:
    unknown = classify_result(_result("bank silent", is_error=True, meta={OUTCOME_KEY: "unknown"}))
    assert unknown.status is CallStatus.OUTCOME_UNKNOWN and unknown.text.startswith(texts.OUTCOME_UNKNOWN)
    rejected = classify_result(_result("key reused", is_error=True, meta={OUTCOME_KEY: "rejected"}))
    assert rejected.status is CallStatus.REJECTED and "key reused" in rejected.text
    failed = classify_result(_result("bad input", is_error=True))
    assert failed.status is CallStatus.FAILED
    ok = classify_result(_result("done", meta={REPLAYED_KEY: True}))
    assert ok.status is CallStatus.SUCCEEDED and ok.text == "done" and ok.replayed


def test_json_rpc_errors() -> None:
    error = MCPError(-32050, "over limit", {"_meta": {OUTCOME_KEY: "rejected"}})
    assert classify_error(error).status is CallStatus.REJECTED
    assert classify_error(MCPError(-32602, "bad params")).text == texts.failed("MCP error -32602: bad params")
    with pytest.raises(_Interrupted):
        classify_error(MCPError(-32603, "internal"))


class Scripted(GatewayToolSource):
    """A source whose single exchanges follow a list of outcomes instead of the network."""

    def __init__(self, outcomes: list[Exception | None]) -> None:
        super().__init__("http://127.0.0.1:1/mcp", token="t")
        self.outcomes = outcomes
        self.keys: list[str] = []

    async def _call_once(self, name: str, arguments: dict[str, Any], key: str) -> Any:
        self.keys.append(key)
        outcome = self.outcomes.pop(0)
        if outcome is not None:
            raise outcome
        return classify_result(_result("fine"))


@pytest.mark.parametrize(
    ("effect", "sends", "status"),
    [
        (Effect.READ, 3, CallStatus.FAILED),
        (Effect.IDEMPOTENT_WRITE, 3, CallStatus.OUTCOME_UNKNOWN),
        (Effect.NON_IDEMPOTENT_WRITE, 1, CallStatus.OUTCOME_UNKNOWN),
        (Effect.UNCLASSIFIED, 1, CallStatus.OUTCOME_UNKNOWN),
    ],
)
async def test_interrupted_calls_are_retried_by_effect(effect: Effect, sends: int, status: CallStatus) -> None:
    source = Scripted([_Interrupted("reset")] * 3)
    recorded: list[int] = []
    result = await source.call("t", {}, "s/turn-1/c1", effect, on_attempt=recorded.append)
    assert result.status is status
    assert source.keys == ["s/turn-1/c1"] * sends and recorded == list(range(1, sends + 1))


async def test_retry_succeeds_with_the_same_key() -> None:
    source = Scripted([_Interrupted("reset"), None])
    result = await source.call("t", {}, "k", Effect.IDEMPOTENT_WRITE)
    assert result.status is CallStatus.SUCCEEDED and result.attempts == 2 and source.keys == ["k", "k"]


async def test_never_sent_is_safe_to_call_again_unless_an_earlier_attempt_was_sent() -> None:
    fresh = await Scripted([GatewayUnavailable("down")]).call("t", {}, "k", Effect.NON_IDEMPOTENT_WRITE)
    assert fresh.status is CallStatus.NOT_RUN and fresh.text.startswith(texts.NOT_RUN_PREFIX)
    resumed = await Scripted([GatewayUnavailable("down")]).call("t", {}, "k", Effect.NON_IDEMPOTENT_WRITE, attempts_done=1)
    assert resumed.status is CallStatus.OUTCOME_UNKNOWN


async def test_a_resumed_non_idempotent_call_is_sent_once_more() -> None:
    source = Scripted([None])
    result = await source.call("t", {}, "k", Effect.NON_IDEMPOTENT_WRITE, attempts_done=1)
    assert result.status is CallStatus.SUCCEEDED and result.attempts == 2 and source.keys == ["k"]


async def test_unreachable_gateway_lists_nothing_and_raises_unavailable() -> None:
    source = GatewayToolSource("http://127.0.0.1:9/mcp", connect_timeout=1, connect_attempts=1)
    with pytest.raises(GatewayUnavailable):
        await source.list_tools()
