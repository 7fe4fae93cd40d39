"""The rounds of a 2026-07-28 tool call answered with `input_required`, driven by the host so
that a round survives a restart of the host.

The MCP SDK client's own driver (`Client.call_tool`) keeps a round's `requestState` in memory
only: a host killed while the user thinks sends the call again from the start. Here each round's
state and input requests go to `ask` together with each question (the host keeps them with the
session question, agent_host/turn/input_rounds.py) before the user sees it; a restarted host hands
the round it finds back (`resume`), and its answers (the stored ones, or the ones still to come)
go out as that round, with the OLD `requestState` and the same `_meta` (the same idempotency key).

When the gateway no longer knows the state (its parked call ended: its 5 minutes passed or it
restarted; it answers -32602 naming the requestState, as the SDK server does), the call is sent
again from the start under its key (the gateway's fence decides), and `notes` says so.

Only plain calls: a call that declares the tasks extension keeps `Client.call_tool` (a task's
questions go by `tasks/update`, modern_tasks.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, InputRequiredRoundsExceededError
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError

from ..domain import texts
from .connection import FormAsker, answer_input_request

__all__ = ["KeptRound", "Round", "RoundAsker", "call_in_rounds", "state_unknown"]

log = logging.getLogger(__name__)

_STATE_ONLY_WAIT, _STATE_ONLY_WAIT_MAX = 0.05, 0.25  # a round with a state and no questions: as the SDK waits


@dataclass(frozen=True)
class Round:
    """One `input_required` answer: the server's `requestState` and its `inputRequests` (wire form)."""

    request_state: str | None
    input_requests: dict[str, Any]


# The asker of a round's input request `key` (the round is kept with the question it makes).
RoundAsker = Callable[[Round, str], FormAsker]
# The round an earlier run of the host kept for the call (None: none), read when the call is sent.
KeptRound = Callable[[], Awaitable[Round | None]]


def state_unknown(exc: BaseException) -> bool:
    """The server refused a round because it does not know its requestState (expired, from another
    process, or after its restart): -32602 naming the requestState."""
    return isinstance(exc, MCPError) and exc.code == types.INVALID_PARAMS and "requeststate" in exc.message.lower()


async def _responses(current: Round, ask: RoundAsker | None) -> dict[str, Any]:
    """Every input request of the round answered, asked together (as the SDK client does)."""
    responses: dict[str, Any] = {}

    async def one(key: str, request: Any) -> None:
        responses[key] = await answer_input_request(ask(current, key) if ask is not None else None, request)

    async with anyio.create_task_group() as tg:
        for key, request in current.input_requests.items():
            tg.start_soon(one, key, request)
    return responses


async def call_in_rounds(
    client: Client, name: str, arguments: dict[str, Any], meta: types.RequestParamsMeta, timeout: float,
    on_progress: ProgressFnT | None, ask: RoundAsker | None, kept: KeptRound | None, notes: list[str],
) -> types.CallToolResult:
    """`tools/call` on `client` to its final result, each `input_required` round answered through
    `ask`; `kept`: finds the round a restarted host sends first (its answers asked or found again)."""
    session = client.session
    resume = await kept() if kept is not None else None

    async def send(responses: dict[str, Any] | None, state: str | None) -> types.CallToolResult | types.InputRequiredResult:
        # The host answers elicitation only (anything else is declined): every response is one.
        typed: types.InputResponses | None = None if responses is None else {
            key: types.ElicitResult.model_validate(response) for key, response in responses.items()}
        return await session.call_tool(
            name, arguments, read_timeout_seconds=timeout, progress_callback=on_progress,
            input_responses=typed, request_state=state, meta=meta, allow_input_required=True,
        )

    if resume is not None:
        try:
            result = await send(await _responses(resume, ask), resume.request_state)
        except MCPError as exc:
            if not state_unknown(exc):
                raise
            log.warning("%s: the gateway no longer knows the pending round (%s); sending the call again", name, exc.message)
            notes.append(texts.ROUND_STATE_UNKNOWN)
            result = await send(None, None)
    else:
        result = await send(None, None)
    rounds, wait, most = 0, _STATE_ONLY_WAIT, client.input_required_max_rounds  # the SDK client's own bound
    while isinstance(result, types.InputRequiredResult):
        rounds += 1
        if rounds > most:
            raise InputRequiredRoundsExceededError(most)
        requests = {k: r.model_dump(mode="json", by_alias=True, exclude_none=True)
                    for k, r in (result.input_requests or {}).items()}
        current = Round(result.request_state, requests)
        responses: dict[str, Any] | None = None
        if requests:
            wait = _STATE_ONLY_WAIT
            responses = await _responses(current, ask)
        else:
            await anyio.sleep(wait)
            wait = min(wait * 2, _STATE_ONLY_WAIT_MAX)
        result = await send(responses, current.request_state)
    return result
