"""Parking (gateway/pipeline/rounds.py): a handshake-era upstream's questions asked of a 2026-07-28
client as input_required rounds, with a fake relay and fake work instead of the gateway."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.abc
import pytest

from gateway.errors import RequestError
from gateway.pipeline.rounds import PARKED_STATE_PREFIX, Parking
from gateway.errors import RelayRefused
from gateway.upstreams.relay import CallRelay

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


class ModernRelay:
    modern = True
    log_level: str | None = None

    def __init__(self, capabilities: dict[str, Any] | None = None) -> None:
        self._capabilities = {"elicitation": {}, "sampling": {}} if capabilities is None else capabilities
        self.progress_seen: list[float] = []

    def client_capabilities(self) -> dict[str, Any]:
        return dict(self._capabilities)

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress_seen.append(progress)

    async def log(self, params: dict[str, Any]) -> None: ...

    async def request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        raise RelayRefused.no_session(method)

    async def pause_stream(self) -> None: ...


async def asking_twice(relay: CallRelay) -> dict[str, Any]:
    """An upstream call that asks two questions, one after the other, and reports progress between."""
    first = await relay.request("elicitation/create", {"message": "name?"})
    await relay.progress(1, 2, "halfway")
    second = await relay.request("sampling/createMessage", {"messages": [], "maxTokens": 5})
    return {"content": [{"type": "text", "text": f"{first['content']['name']} / {second['model']}"}], "isError": False}


async def test_questions_become_rounds_until_the_result(tg: anyio.abc.TaskGroup) -> None:
    parking = Parking(tg)
    round1 = await parking.round("alice", "tool", ModernRelay(), {}, asking_twice)
    assert round1["resultType"] == "input_required" and round1["requestState"].startswith(PARKED_STATE_PREFIX)
    [(key1, question1)] = round1["inputRequests"].items()
    assert question1["method"] == "elicitation/create"
    second_relay = ModernRelay()
    round2 = await parking.round("alice", "tool", second_relay, {
        "inputResponses": {key1: {"action": "accept", "content": {"name": "Ada"}}}, "requestState": round1["requestState"]},
        asking_twice)
    [(key2, question2)] = round2["inputRequests"].items()
    assert question2["method"] == "sampling/createMessage" and round2["requestState"] != round1["requestState"]
    assert second_relay.progress_seen == [1]  # notifications go to the round in progress
    done = await parking.round("alice", "tool", ModernRelay(), {
        "inputResponses": {key2: {"role": "assistant", "content": {"type": "text", "text": "x"}, "model": "m"}},
        "requestState": round2["requestState"]}, asking_twice)
    assert done["content"][0]["text"] == "Ada / m"


async def test_a_missing_answer_is_asked_again(tg: anyio.abc.TaskGroup) -> None:
    parking = Parking(tg)
    round1 = await parking.round("alice", "tool", ModernRelay(), {}, asking_twice)
    again = await parking.round("alice", "tool", ModernRelay(), {"inputResponses": {"other": {}},
                                                                  "requestState": round1["requestState"]}, asking_twice)
    assert again["inputRequests"] == round1["inputRequests"]


@pytest.mark.parametrize("principal, target, state", [
    ("mallory", "tool", None), ("alice", "other-tool", None), ("alice", "tool", PARKED_STATE_PREFIX + "unknown")])
async def test_a_round_of_another_principal_tool_or_an_unknown_state_is_refused(
    tg: anyio.abc.TaskGroup, principal: str, target: str, state: str | None
) -> None:
    parking = Parking(tg)
    round1 = await parking.round("alice", "tool", ModernRelay(), {}, asking_twice)
    with pytest.raises(RequestError) as refused:
        await parking.round(principal, target, ModernRelay(), {"inputResponses": {}, "requestState": state or round1["requestState"]},
                            asking_twice)
    assert refused.value.code == -32602 and "Invalid or expired requestState" in refused.value.message
    # The refused round left the state to its owner: alice's own round goes on.
    [key] = round1["inputRequests"]
    round2 = await parking.round("alice", "tool", ModernRelay(), {
        "inputResponses": {key: {"action": "accept", "content": {"name": "Ada"}}}, "requestState": round1["requestState"]},
        asking_twice)
    assert round2["resultType"] == "input_required" and round2["requestState"] != round1["requestState"]


async def test_an_unanswered_round_expires_and_cancels_the_request(tg: anyio.abc.TaskGroup) -> None:
    cancelled = anyio.Event()

    async def asking(relay: CallRelay) -> dict[str, Any]:
        try:
            await relay.request("elicitation/create", {})
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise
        return {}

    parking = Parking(tg, ttl_seconds=0.2)
    round1 = await parking.round("alice", "tool", ModernRelay(), {}, asking)
    with anyio.fail_after(5):
        await cancelled.wait()
    with pytest.raises(RequestError):
        await parking.round("alice", "tool", ModernRelay(), {"requestState": round1["requestState"]}, asking)


async def test_a_question_the_client_cannot_answer_is_refused_upstream(tg: anyio.abc.TaskGroup) -> None:
    async def asking(relay: CallRelay) -> dict[str, Any]:
        try:
            await relay.request("roots/list", None)
        except RelayRefused as exc:
            return {"content": [{"type": "text", "text": exc.message}], "isError": True}
        return {}

    result = await Parking(tg).round("alice", "tool", ModernRelay({"elicitation": {}}), {}, asking)
    assert result["isError"] and "did not declare" in result["content"][0]["text"]


@pytest.fixture
async def tg() -> Any:
    async with anyio.create_task_group() as group:
        yield group
        group.cancel_scope.cancel()
