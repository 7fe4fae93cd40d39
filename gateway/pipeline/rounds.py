"""Multi-round-trip requests (2026-07-28 `input_required` results) and parking, in one place.

Rounds of an upstream's questions
---------------------------------

A 2026-07-28 upstream asks its client for input by answering `tools/call`, `prompts/get` or
`resources/read` with `{"resultType": "input_required", "inputRequests": {...},
"requestState": ...}`; the client answers each request and sends the same request again with
`inputResponses` and the echoed `requestState`.

* A 2026-07-28 client gets that result as it is, and its next round (`inputResponses`,
  `requestState`) goes to the upstream unchanged: the upstream keeps (and protects) its state.
* A handshake-era client has no such results: the gateway asks it each input request as a
  server-to-client request on its session (elicitation, sampling, roots), then sends the next
  round to the upstream itself, until the upstream answers completely (`answer_rounds`).
  A client that cannot be asked (no session, no capability) gets `InputNotProvided`.

Parking
-------
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
without a round, then it is cancelled. Its `requestState` names this process (`owner`, its boot
id): a round that reaches another replica is forwarded here (gateway/front/forwarding.py). A
round that comes late, or whose process died, gets -32602 naming the expired state, and the
client starts over. Parking is for requests that may be
asked something: a 2026-07-28 upstream asks with `input_required` itself (passed through).
"""
from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import anyio
from anyio.abc import TaskGroup
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from ..conventions.answers import Answer
from ..errors import InputNotProvided, RelayRefused, RequestError
from ..protocol import Era, Result
from ..upstreams.relay import CAPABILITY_OF, CallRelay

__all__ = [
    "INPUT_REQUIRED", "PARKED_STATE_PREFIX", "Parking", "ROUND_KEYS", "answer_rounds", "asked_methods",
    "is_input_required", "not_provided_text", "parked_owner", "round_params", "unanswerable",
]  # fmt: skip

logger = logging.getLogger(__name__)

INPUT_REQUIRED = "input_required"
# The params a client sends in a later round of a multi-round-trip request.
ROUND_KEYS = ("inputResponses", "requestState")
MAX_ROUNDS = 16
PARKED_STATE_PREFIX = "dex-gateway.parked."
_SETTLE_SECONDS = 0.02  # questions asked together (within this) go out in one round


# -- rounds of an upstream's questions ------------------------------------------------------------


def is_input_required(result: Any) -> bool:
    return isinstance(result, Mapping) and result.get("resultType") == INPUT_REQUIRED


def asked_methods(result: Mapping[str, Any]) -> list[str]:
    """The methods an `input_required` result asks for (`elicitation/create`, ...)."""
    requests = result.get("inputRequests")
    if not isinstance(requests, Mapping):
        return []
    return sorted({str(r.get("method")) for r in requests.values() if isinstance(r, Mapping)})


def round_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The round keys (`inputResponses`, `requestState`) a client's request carries, checked:
    RequestError (-32602) for responses that are not an object of objects, or a state that is
    not a string (whatever the upstream's era, it never sees a malformed round)."""
    rounds = {k: params[k] for k in ROUND_KEYS if k in params}
    responses = rounds.get("inputResponses", {})
    if not isinstance(responses, Mapping) or not all(isinstance(r, Mapping) for r in responses.values()):
        raise RequestError(INVALID_PARAMS, "inputResponses must be an object whose values are the answers (objects)")
    if "requestState" in rounds and not isinstance(rounds["requestState"], str):
        raise RequestError(INVALID_PARAMS, "requestState must be the string the server sent")
    return rounds


Send = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


async def answer_rounds(send: Send, params: dict[str, Any], result: dict[str, Any], relay: CallRelay | None) -> dict[str, Any]:
    """The upstream's final result: each `input_required` round answered by asking a handshake-era
    client (`relay`) and sent again with `send`. A 2026-07-28 client's result (or one with no
    client to ask) is returned as it is; raises InputNotProvided when the client cannot be asked."""
    rounds = 0
    while is_input_required(result):
        if relay is None or relay.modern:
            return result  # a 2026 client answers it; without a client, the front decides
        found = result.get("inputRequests")
        requests: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        methods = asked_methods(result)
        rounds += 1
        if rounds > MAX_ROUNDS:
            raise InputNotProvided(methods, f"more than {MAX_ROUNDS} rounds of questions")
        responses: dict[str, Any] = {}
        for key, request in requests.items():
            if not isinstance(request, Mapping) or not isinstance(request.get("method"), str):
                raise InputNotProvided(methods, f"input request {key!r} is malformed")
            asked = request.get("params")
            try:
                responses[key] = await relay.request(request["method"], dict(asked) if isinstance(asked, Mapping) else None)
            except RelayRefused as exc:
                raise InputNotProvided(methods, exc.message) from None
        again = {k: v for k, v in params.items() if k not in ROUND_KEYS}
        again["inputResponses"] = responses
        if isinstance(result.get("requestState"), str):
            again["requestState"] = result["requestState"]
        result = await send(again)
    return result


def not_provided_text(tool: str, exc: InputNotProvided) -> str:
    """The failed tool result a handshake-era client gets when it cannot answer the questions."""
    return (f"The tool {tool} did not run: it needs input from the client ({', '.join(exc.methods) or 'a question'}) "
            f"that this client cannot give ({exc.reason}). Call it from a client that declares the capability "
            "on a live session (stateful gateway), or from a 2026-07-28 client.")


def unanswerable(tool: str, answer: Answer) -> Answer:
    """A round of questions for a handshake-era client served without a session that can carry them
    (only a 2026-07-28 client takes a round as an answer): the failed tool result it gets instead."""
    assert answer.input_required is not None
    reason = "it is served without a session that can carry them"
    return Answer.error_text(not_provided_text(tool, InputNotProvided(asked_methods(answer.input_required), reason)))


# -- parking ----------------------------------------------------------------------------------------


def parked_owner(state: str) -> str | None:
    """The process (boot id) a parked `requestState` names, or None when it names none."""
    if not state.startswith(PARKED_STATE_PREFIX):
        return None
    owner, dot, _ = state[len(PARKED_STATE_PREFIX):].partition(".")
    return owner if dot and owner else None

T = TypeVar("T")


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
        try:
            await question.answer.wait()
        finally:
            self.questions.pop(key, None)  # answered, or no longer wanted (the work was cancelled)
        assert question.response is not None
        return question.response


class _Parked(Generic[T]):
    def __init__(self, principal: str, target: str, first: CallRelay) -> None:
        self.principal = principal
        self.target = target  # the tool, prompt or resource the rounds belong to
        self.relay = _ParkingRelay(first)
        self.scope = anyio.CancelScope()
        self.done = anyio.Event()
        self.result: T | None = None
        self.error: BaseException | None = None
        self.expiry: anyio.CancelScope | None = None

    async def run(self, work: Callable[[CallRelay], Awaitable[T]]) -> None:
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
    def __init__(self, task_group: TaskGroup, *, ttl_seconds: float = 300.0, owner: str = "local") -> None:
        """`owner`: this process as the other replicas know it (its boot id), named in each state."""
        self._tg = task_group
        self._owner = owner
        self._ttl = ttl_seconds
        self._parked: dict[str, _Parked[Any]] = {}

    @staticmethod
    def may_ask(relay: CallRelay | None) -> bool:
        """A 2026-07-28 client that could answer an upstream's question."""
        return relay is not None and relay.modern and bool(relay.client_capabilities())

    def takes(self, era: Era, relay: CallRelay | None, rounds: Mapping[str, Any], *, upstream_may_ask: bool) -> bool:
        """The parking rule: a 2026-07-28 client's request runs parked when it is a later round of a
        parked one, or when its upstream may ask (`upstream_may_ask`) and the client could answer."""
        return era is Era.MODERN and relay is not None and (
            self.continues(rounds) or (upstream_may_ask and self.may_ask(relay))
        )

    @staticmethod
    def continues(rounds: Mapping[str, Any]) -> bool:
        """A later round of a request parked here (by its requestState)."""
        state = rounds.get("requestState")
        return isinstance(state, str) and state.startswith(PARKED_STATE_PREFIX)

    async def round(self, principal: str, target: str, relay: CallRelay, rounds: Mapping[str, Any],
                    work: Callable[[CallRelay], Awaitable[T]]) -> T | Result:
        """The request's result (what `work` returns), or (while the upstream asks) an
        `input_required` round: a wire dict with `inputRequests` and the parked `requestState`."""
        if self.continues(rounds):
            state = str(rounds["requestState"])
            parked: _Parked[Any] | None = self._parked.get(state)
            if parked is None or parked.principal != principal or parked.target != target:
                # Another principal's (or tool's) round leaves the state to its owner.
                raise RequestError(INVALID_PARAMS, "Invalid or expired requestState: the questions were asked too "
                                   "long ago, or by a gateway process this one cannot reach; send the request again without it")
            del self._parked[state]
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

    async def _next(self, parked: _Parked[T]) -> T | Result:
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

    def _ask(self, parked: _Parked[Any]) -> Result:
        state = f"{PARKED_STATE_PREFIX}{self._owner}.{secrets.token_urlsafe(24)}"
        self._parked[state] = parked
        asked = {}
        for key, question in list(parked.relay.questions.items()):
            if not question.answer.is_set():
                question.asked = True
                asked[key] = question.request
        self._tg.start_soon(self._expire, state, parked)
        return {"resultType": "input_required", "inputRequests": asked, "requestState": state}

    async def _expire(self, state: str, parked: _Parked[Any]) -> None:
        with anyio.CancelScope() as scope:
            parked.expiry = scope
            await anyio.sleep(self._ttl)
            if self._parked.pop(state, None) is parked:
                logger.info("a request waiting for its client's answers expired (%s)", parked.target)
                parked.scope.cancel()
