"""The gateway tool source: effects and approval from _meta, answers to outcomes, and the
re-issue rules (`agent_host.gateway_client.reissue`) by effect, across restarts."""

from __future__ import annotations

from typing import Any

import pytest

from agent_host.domain import texts
from agent_host.gateway_client.tools import (
    CallRequest,
    CallResult,
    GatewayToolSource,
    GatewayUnavailable,
    OnAttempt,
    OnProgress,
    call_result,
)
from agent_host.domain.records import CallStatus
from agent_host.gateway_client.reissue import RECOVERY_WINDOW_SECONDS, AttemptPlan, PriorAttempts, plan_attempts
from gateway.conventions.answers import Answer
from gateway.conventions.effects import listed_tool_classification
from gateway.conventions.keys import APPROVAL_KEY, EFFECT_KEY, OUTCOME_KEY, REPLAYED_KEY, Effect
from gateway.conventions.outcomes import AttemptEvent, Interrupted, NotSent, Replied, RpcError

pytestmark = pytest.mark.anyio

NOW = 1_000_000.0


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
    """The host reads the gateway's listing with the conventions' own reader."""
    c = listed_tool_classification(meta)
    assert (c.effect, c.requires_approval) == (effect, approval)


def _answer(text: str, is_error: bool = False, meta: dict[str, Any] | None = None) -> Answer:
    return Answer(content=[{"type": "text", "text": text}], is_error=is_error, meta=meta)


def test_outcome_key_wins_over_is_error() -> None:
    unknown = call_result("t", _answer("bank silent", is_error=True, meta={OUTCOME_KEY: "unknown"}), 1)
    assert unknown.status is CallStatus.OUTCOME_UNKNOWN and unknown.text.startswith(texts.OUTCOME_UNKNOWN)
    rejected = call_result("t", _answer("key reused", is_error=True, meta={OUTCOME_KEY: "rejected"}), 1)
    assert rejected.status is CallStatus.REJECTED and "key reused" in rejected.text
    assert call_result("t", _answer("bad input", is_error=True), 1).status is CallStatus.FAILED
    ok = call_result("t", _answer("done", meta={REPLAYED_KEY: True}), 1)
    assert ok.status is CallStatus.SUCCEEDED and ok.text == "done" and ok.replayed
    # An inline image the host did not keep is a placeholder, never its base64 (agent_host/gateway_client/images.py).
    image = call_result("t", Answer(content=[{"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}]), 1)
    assert image.text == "[image: image/png, not kept by the host]" and image.images == []
    other = call_result("t", Answer(content=[{"type": "resource_link", "uri": "notes://1", "name": "n"}]), 1)
    assert other.text == '{"type": "resource_link", "uri": "notes://1", "name": "n"}'


@pytest.mark.parametrize(
    ("effect", "prior", "plan"),
    [
        # read / idempotent_write: 3 attempts in all, the count carried over a restart.
        (Effect.READ, PriorAttempts(), AttemptPlan(1, 3)),
        (Effect.IDEMPOTENT_WRITE, PriorAttempts(2, NOW, before_restart=True), AttemptPlan(3, 3)),
        (Effect.IDEMPOTENT_WRITE, PriorAttempts(3, NOW, before_restart=True), AttemptPlan(4, 3)),
        # others: one attempt; after a restart, one same-key recovery re-send, within the window.
        (Effect.NON_IDEMPOTENT_WRITE, PriorAttempts(), AttemptPlan(1, 1)),
        (Effect.NON_IDEMPOTENT_WRITE, PriorAttempts(1, NOW, before_restart=True), AttemptPlan(2, 2, recovery=True)),
        (Effect.UNCLASSIFIED, PriorAttempts(1, NOW, before_restart=True), AttemptPlan(2, 2, recovery=True)),
        (Effect.NON_IDEMPOTENT_WRITE, PriorAttempts(2, NOW, before_restart=True), AttemptPlan(3, 2)),
        (Effect.NON_IDEMPOTENT_WRITE, PriorAttempts(1, NOW, before_restart=False), AttemptPlan(2, 1)),
        (Effect.NON_IDEMPOTENT_WRITE, PriorAttempts(1, NOW - RECOVERY_WINDOW_SECONDS - 1, True), AttemptPlan(2, 1)),
    ],
)
def test_attempt_plans(effect: Effect, prior: PriorAttempts, plan: AttemptPlan) -> None:
    assert plan_attempts(effect, prior, NOW) == plan


class Scripted(GatewayToolSource):
    """A source whose attempts follow a list of events instead of the network."""

    def __init__(self, events: list[AttemptEvent]) -> None:
        super().__init__("http://127.0.0.1:1/mcp", token="t", clock=lambda: NOW)
        self.events = events
        self.sent: list[tuple[str, int]] = []

    async def _attempt(self, request: CallRequest, attempt: int, on_attempt: OnAttempt | None,
                       on_progress: OnProgress | None, notes: list[str]) -> AttemptEvent:
        event = self.events.pop(0)
        if not isinstance(event, NotSent):
            if on_attempt is not None:
                await on_attempt(attempt)
            self.sent.append((request.key, attempt))
        return event


CUT = Interrupted("connection broke")
OK = Replied(_answer("fine"))


async def _call(source: Scripted, effect: Effect, prior: PriorAttempts | None = None) -> tuple[CallResult, list[int]]:
    counted: list[int] = []

    async def on_attempt(attempt: int) -> None:
        counted.append(attempt)

    request = CallRequest("t", {}, "s/turn-1/c1", effect, prior or PriorAttempts())
    return await source.call(request, on_attempt), counted


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
    source = Scripted([CUT] * 3)
    result, counted = await _call(source, effect)
    assert result.status is status and result.attempts == sends
    assert source.sent == [("s/turn-1/c1", n) for n in range(1, sends + 1)] and counted == list(range(1, sends + 1))
    if effect.is_write:
        assert "may have taken effect" in result.text and "Do not repeat this call unless the user asks" in result.text


async def test_retry_succeeds_with_the_same_key() -> None:
    source = Scripted([CUT, OK])
    result, _ = await _call(source, Effect.IDEMPOTENT_WRITE)
    assert result.status is CallStatus.SUCCEEDED and result.attempts == 2
    assert [key for key, _ in source.sent] == ["s/turn-1/c1"] * 2


async def test_an_internal_error_answer_counts_as_interrupted_and_others_as_answers() -> None:
    retried, _ = await _call(Scripted([RpcError(-32603, "internal"), OK]), Effect.READ)
    assert retried.status is CallStatus.SUCCEEDED and retried.attempts == 2
    refused, _ = await _call(Scripted([RpcError(-32050, "over limit", {"_meta": {OUTCOME_KEY: "rejected"}})]), Effect.READ)
    assert refused.status is CallStatus.REJECTED
    bad, _ = await _call(Scripted([RpcError(-32602, "bad params")]), Effect.READ)
    assert bad.text == texts.failed("MCP error -32602: bad params")


async def test_never_sent_is_safe_to_call_again_unless_an_earlier_attempt_was_sent() -> None:
    fresh, counted = await _call(Scripted([NotSent("down")]), Effect.NON_IDEMPOTENT_WRITE)
    assert fresh.status is CallStatus.NOT_RUN and fresh.text.startswith(texts.NOT_RUN_PREFIX) and counted == []
    later, _ = await _call(Scripted([CUT, NotSent("down")]), Effect.IDEMPOTENT_WRITE)
    assert later.status is CallStatus.OUTCOME_UNKNOWN and later.attempts == 1
    recovery, _ = await _call(Scripted([NotSent("down")]), Effect.NON_IDEMPOTENT_WRITE, PriorAttempts(1, NOW, True))
    assert recovery.status is CallStatus.OUTCOME_UNKNOWN and recovery.attempts == 1


async def test_after_a_restart_a_single_attempt_write_gets_one_same_key_recovery() -> None:
    replayed = Replied(_answer("paid", meta={REPLAYED_KEY: True}))
    source = Scripted([replayed])
    result, counted = await _call(source, Effect.NON_IDEMPOTENT_WRITE, PriorAttempts(1, NOW, before_restart=True))
    assert result.status is CallStatus.SUCCEEDED and result.replayed and result.attempts == 2 and counted == [2]
    # The recovery interrupted too: outcome unknown, nothing more.
    cut, _ = await _call(Scripted([CUT]), Effect.NON_IDEMPOTENT_WRITE, PriorAttempts(1, NOW, before_restart=True))
    assert cut.status is CallStatus.OUTCOME_UNKNOWN and cut.attempts == 2


@pytest.mark.parametrize(
    ("effect", "prior", "status"),
    [
        (Effect.NON_IDEMPOTENT_WRITE, PriorAttempts(2, NOW, before_restart=True), CallStatus.OUTCOME_UNKNOWN),
        (Effect.NON_IDEMPOTENT_WRITE, PriorAttempts(1, NOW, before_restart=False), CallStatus.OUTCOME_UNKNOWN),
        (Effect.IDEMPOTENT_WRITE, PriorAttempts(3, NOW, before_restart=True), CallStatus.OUTCOME_UNKNOWN),
        (Effect.READ, PriorAttempts(3, NOW, before_restart=True), CallStatus.FAILED),
    ],
)
async def test_no_attempt_left_gives_up_without_sending(effect: Effect, prior: PriorAttempts, status: CallStatus) -> None:
    source = Scripted([])
    result, counted = await _call(source, effect, prior)
    assert result.status is status and result.attempts == prior.count
    assert source.sent == [] and counted == []


async def test_unreachable_gateway_lists_nothing_and_raises_unavailable() -> None:
    source = GatewayToolSource("http://127.0.0.1:9/mcp", connect_timeout=1, connect_attempts=1)
    with pytest.raises(GatewayUnavailable, match="cannot reach the gateway at http://127.0.0.1:9/mcp"):
        await source.list_tools()
