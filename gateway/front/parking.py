"""A handshake-era upstream's questions, asked of a 2026-07-28 client as `input_required` rounds.

A handshake-era upstream asks its client during a request, with server-to-client requests on
its session (elicitation, sampling, roots). A 2026-07-28 client cannot take requests: it is asked
with an `input_required` result and answers by sending its request again. So, for a 2026 client
that can answer something (its request declares elicitation, sampling or roots), a request bound
for a handshake-era upstream runs in the background, and:

* when the upstream asks, the request is answered with `input_required`: the questions under
  keys of the gateway's, and a `requestState` naming the parked request;
* the client's next round (`inputResponses`, that `requestState`) answers the upstream's pending
  requests, and the same request waits again -- for its result, or the upstream's next questions.

The parked request lives in this process (the upstream's session is here too) for `ttl_seconds`
without a round, then it is cancelled. A round that reaches another process (or comes late) gets
-32602 naming the expired state, and the client starts over. Parking is for requests that may be
asked something: a 2026-07-28 upstream asks with `input_required` itself (passed through).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from ..errors import RelayRefused, RequestError
from ..upstreams.relay import CAPABILITY_OF, CallRelay

__all__ = ["PARKED_STATE_PREFIX", "Parking"]

logger = logging.getLogger(__name__)

PARKED_STATE_PREFIX = "dex-gateway.parked."
_SETTLE_SECONDS = 0.02  # questions asked together (within this) go out in one round

Work = Callable[[CallRelay], Awaitable[dict[str, Any]]]


@dataclass
class _Question:
    request: dict[str, Any]
    answer: "anyio.Event" = field(default_factory=anyio.Event)
    response: dict[str, Any] | None = None
    asked: bool = False  # sent to the client in a round


class _ParkingRelay:
    """The relay the parked request runs with: questions wait for a round; notifications go to
    the round in progress (none between rounds)."""

    modern = True

    def __init__(self, first: CallRelay) -> None:
        self.current: CallRelay | None = first
        self.log_level = first.log_level
        self._capabilities = first.client_capabilities()
        self.questions: dict[str, _Question] = {}
        self.changed = anyio.Event()
        self._numbers = 0

    def client_capabilities(self) -> dict[str, Any]:
        return dict(self._capabilities)

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        if self.current is not None:
            await self.current.progress(progress, total, message)

    async def log(self, params: dict[str, Any]) -> None:
        if self.current is not None:
            await self.current.log(params)

    async def pause_stream(self) -> None:
        pass  # a round's stream is its own request's

    async def request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        capability = CAPABILITY_OF.get(method)
        if capability is None or capability not in self._capabilities:
            raise RelayRefused(INVALID_PARAMS, f"the client did not declare the capability {method} needs")
        self._numbers += 1
        question = _Question({"method": method, "params": params or {}})
        key = f"{capability}-{self._numbers}"
        self.questions[key] = question
        self.changed.set()
        await question.answer.wait()
        self.questions.pop(key, None)
        assert question.response is not None
        return question.response


class _Parked:
    def __init__(self, principal: str, target: str, first: CallRelay) -> None:
        self.principal = principal
        self.target = target  # the tool, prompt or resource the rounds belong to
        self.relay = _ParkingRelay(first)
        self.scope = anyio.CancelScope()
        self.done = anyio.Event()
        self.result: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.expiry: anyio.CancelScope | None = None

    async def run(self, work: Work) -> None:
        with self.scope:
            try:
                self.result = await work(self.relay)
            except Exception as exc:  # noqa: BLE001 - handed to the round waiting for it, raised there
                self.error = exc
        if self.result is None and self.error is None:
            self.error = RequestError(INTERNAL_ERROR, "the request was cancelled while it waited for the client's answers")
        self.done.set()
        self.relay.changed.set()

    def answer(self, responses: Any) -> None:
        if not isinstance(responses, Mapping):
            return
        for key, response in responses.items():
            question = self.relay.questions.get(key)
            if question is not None and question.asked and isinstance(response, Mapping) and not question.answer.is_set():
                question.response = dict(response)
                question.answer.set()


class Parking:
    def __init__(self, task_group: TaskGroup, *, ttl_seconds: float = 300.0) -> None:
        self._tg = task_group
        self._ttl = ttl_seconds
        self._parked: dict[str, _Parked] = {}

    @staticmethod
    def may_ask(relay: CallRelay | None) -> bool:
        """A 2026-07-28 client that could answer an upstream's question."""
        return relay is not None and relay.modern and bool(relay.client_capabilities())

    @staticmethod
    def continues(rounds: Mapping[str, Any]) -> bool:
        """A later round of a request parked here (by its requestState)."""
        state = rounds.get("requestState")
        return isinstance(state, str) and state.startswith(PARKED_STATE_PREFIX)

    async def round(self, principal: str, target: str, relay: CallRelay, rounds: Mapping[str, Any], work: Work) -> dict[str, Any]:
        """The request's result, or (while the upstream asks) an `input_required` round."""
        if self.continues(rounds):
            state = str(rounds["requestState"])
            parked = self._parked.pop(state, None)
            if parked is None or parked.principal != principal or parked.target != target:
                raise RequestError(INVALID_PARAMS, "Invalid or expired requestState: the questions were asked by "
                                   "another gateway process, or too long ago; send the request again without it")
            if parked.expiry is not None:
                parked.expiry.cancel()
            parked.answer(rounds.get("inputResponses"))
        else:
            parked = _Parked(principal, target, relay)
            self._tg.start_soon(parked.run, work)
        parked.relay.current = relay
        try:
            return await self._next(parked)
        except anyio.get_cancelled_exc_class():
            parked.scope.cancel()  # the client went away mid-round: the request ends with it
            raise
        finally:
            parked.relay.current = None

    async def _next(self, parked: _Parked) -> dict[str, Any]:
        relay = parked.relay
        while True:
            if parked.done.is_set():
                if parked.error is not None:
                    raise parked.error
                assert parked.result is not None
                return parked.result
            open_questions = {k: q for k, q in relay.questions.items() if not q.answer.is_set()}
            if open_questions:
                await anyio.sleep(_SETTLE_SECONDS)  # let questions asked together go out together
                return self._ask(parked)
            relay.changed = anyio.Event()
            await relay.changed.wait()

    def _ask(self, parked: _Parked) -> dict[str, Any]:
        state = PARKED_STATE_PREFIX + secrets.token_urlsafe(24)
        self._parked[state] = parked
        asked = {}
        for key, question in list(parked.relay.questions.items()):
            if not question.answer.is_set():
                question.asked = True
                asked[key] = question.request
        self._tg.start_soon(self._expire, state, parked)
        return {"resultType": "input_required", "inputRequests": asked, "requestState": state}

    async def _expire(self, state: str, parked: _Parked) -> None:
        with anyio.CancelScope() as scope:
            parked.expiry = scope
            await anyio.sleep(self._ttl)
            if self._parked.pop(state, None) is parked:
                logger.info("a request waiting for its client's answers expired (%s)", parked.target)
                parked.scope.cancel()
