"""Multi-round-trip requests (2026-07-28 `input_required` results) across the gateway.

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
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from mcp_types import INVALID_PARAMS

from ..errors import InputNotProvided, RelayRefused, RequestError
from .relay import CallRelay

__all__ = [
    "INPUT_REQUIRED", "ROUND_KEYS", "answer_rounds", "asked_methods", "is_input_required",
    "not_provided_text", "round_params",
]

INPUT_REQUIRED = "input_required"
# The params a client sends in a later round of a multi-round-trip request.
ROUND_KEYS = ("inputResponses", "requestState")
MAX_ROUNDS = 16


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
