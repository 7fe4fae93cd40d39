"""The tools/call pipeline: route -> policy -> fence -> dispatch -> outcome -> fence -> answer.

Each stage lives in its own module; this one only strings them together in the order of the
diagram in docs/architecture.md.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from .catalog import Catalog, ToolRoute
from .conventions.answers import Answer, Dispatched
from .conventions.keys import IDEMPOTENCY_KEY, MCP_RESERVED_PREFIX, Effect, Outcome
from .conventions.outcomes import (
    AttemptEvent,
    Interrupted,
    NotSent,
    Replied,
    RpcError,
    SendAgain,
    rejected,
    resolve_attempt,
    unknown,
)
from .errors import UnknownToolError, UpstreamInterrupted, UpstreamNotSent, UpstreamRpcError
from .fences import FenceRejected, Fences, FenceUnknown, Proceed, Replay
from .principals import ANONYMOUS
from .upstreams.rpc import CallRelay
from .upstreams.upstream import Upstream

logger = logging.getLogger(__name__)

# Keys of the client's request _meta that belong to the client->gateway hop only.
_HOP_LOCAL_KEYS = frozenset({"progressToken"})


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tools/call as the front received it."""

    principal: str
    name: str
    arguments: dict[str, Any]
    meta: Mapping[str, Any]
    relay: CallRelay | None = None  # progress, logs and requests back to the client

    @property
    def idempotency_key(self) -> str | None:
        key = self.meta.get(IDEMPOTENCY_KEY)
        return key if isinstance(key, str) and key else None


class CallPipeline:
    def __init__(self, catalog: Catalog, upstreams: Mapping[str, Upstream], fences: Fences) -> None:
        self._catalog = catalog
        self._upstreams = upstreams
        self._fences = fences

    async def call(self, call: ToolCall) -> Answer:
        route = await self._catalog.tool(call.name)
        if route is None:
            raise UnknownToolError(f"unknown tool {call.name!r}")
        key = call.idempotency_key
        if route.effect is Effect.READ:
            return (await self._dispatch(route, call, fence_id=None, takeover=False)).answer
        if key is None:
            if route.keyless_writes == "pass":
                return (await self._dispatch(route, call, fence_id=None, takeover=False)).answer
            return rejected(_missing_key_text(route))
        return await self._fenced(route, call, key)

    async def _fenced(self, route: ToolRoute, call: ToolCall, key: str) -> Answer:
        try:
            decision = await self._fences.begin(
                principal=call.principal, key=key, tool=route.name, arguments=call.arguments, effect=route.effect
            )
        except ValueError as exc:
            # The fingerprint needs canonical JSON; NaN or infinities have none.
            return rejected(f"The tool {route.name} was not run: its arguments are not valid JSON ({exc}).")
        if isinstance(decision, Replay):
            return Answer.from_wire(decision.answer)
        if isinstance(decision, FenceUnknown):
            return Answer.from_wire(decision.answer) if decision.answer else unknown(decision.text)
        if isinstance(decision, FenceRejected):
            return rejected(decision.text)
        assert isinstance(decision, Proceed)
        ticket = decision.ticket
        # Shielded: once claimed, a call runs to its recorded end even if the client goes
        # away, so the client's retry gets the answer instead of an unknown.
        with anyio.CancelScope(shield=True):
            async with self._fences.holding(ticket):
                dispatched = await self._dispatch(route, call, fence_id=ticket.fence_id, takeover=ticket.takeover)
            answer = dispatched.answer
            if not dispatched.sent:
                await self._fences.release(ticket)
            elif answer.outcome is Outcome.UNKNOWN:
                await self._fences.mark_unknown(ticket, answer.to_wire())
            else:
                await self._fences.complete(ticket, answer.to_wire())
        return answer

    async def _dispatch(self, route: ToolRoute, call: ToolCall, *, fence_id: str | None, takeover: bool) -> Dispatched:
        if route.connector is not None:
            return await route.connector.dispatch(
                call.arguments, idempotency_key=call.idempotency_key, fence_id=fence_id, takeover=takeover
            )
        upstream = self._upstreams.get(route.upstream or "")
        if upstream is None:
            return Dispatched(_never_sent(route, f"upstream {route.upstream!r} is not configured"), sent=False)
        params: dict[str, Any] = {"name": route.target, "arguments": call.arguments}
        forwarded = forwardable_meta(call.meta)
        if route.scope_forwarded_keys and call.idempotency_key and call.principal != ANONYMOUS:
            forwarded[IDEMPOTENCY_KEY] = scoped_key(call.principal, call.idempotency_key)
        if forwarded:
            params["_meta"] = forwarded
        sent = False
        attempt = 1
        while True:
            event = await _attempt(upstream, params, call.relay)
            sent = sent or not isinstance(event, NotSent)
            verdict = resolve_attempt(route.name, route.effect, attempt, event, max_attempts=route.max_attempts)
            if not isinstance(verdict, SendAgain):
                return Dispatched(verdict, sent)
            logger.info("tool %s: attempt %d interrupted (%s); sending again", route.name, attempt, verdict.reason)
            attempt += 1


async def _attempt(upstream: Upstream, params: dict[str, Any], relay: CallRelay | None) -> AttemptEvent:
    try:
        result = await upstream.request("tools/call", params, relay=relay)
    except UpstreamNotSent as exc:
        return NotSent(exc.reason)
    except UpstreamInterrupted as exc:
        return Interrupted(exc.reason)
    except UpstreamRpcError as exc:
        return RpcError(exc.code, exc.rpc_message, exc.data)
    return Replied(answer_from_result(result))


def answer_from_result(result: Mapping[str, Any]) -> Answer:
    """An upstream tools/call result as an Answer, minus keys that belong to the upstream hop."""
    meta = without_hop_keys(result.get("_meta"))
    content = result.get("content")
    structured = result.get("structuredContent")
    return Answer(
        content=[b for b in content if isinstance(b, dict)] if isinstance(content, list) else [],
        structured_content=structured if isinstance(structured, dict) else None,
        is_error=result.get("isError") is True,
        meta=meta,
    )


def without_hop_keys(meta: Any) -> dict[str, Any] | None:
    """An upstream answer's _meta minus the reserved keys of the upstream hop (serverInfo...)."""
    if not isinstance(meta, dict):
        return None
    return {k: v for k, v in meta.items() if not k.startswith(MCP_RESERVED_PREFIX)} or None


def forwardable_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The client's request _meta minus keys that belong to the client->gateway hop."""
    return {
        k: v for k, v in meta.items() if k not in _HOP_LOCAL_KEYS and not k.startswith(MCP_RESERVED_PREFIX)
    }


def scoped_key(principal: str, key: str) -> str:
    """The key an upstream sees for an authenticated principal: stable, distinct per principal."""
    return f"{hashlib.sha256(principal.encode('utf-8')).hexdigest()[:16]}/{key}"


def _never_sent(route: ToolRoute, reason: str) -> Answer:
    return resolve_attempt(route.name, route.effect, 1, NotSent(reason))  # type: ignore[return-value]


def _missing_key_text(route: ToolRoute) -> str:
    return (
        f"The tool {route.name} was not run: it is a {route.effect.value} tool, and the gateway runs writes only "
        f"with an idempotency key. Send the key in the request's _meta as "
        f'"{IDEMPOTENCY_KEY}": "<a key unique to this call, the same on every retry>", '
        "for example <session>/<turn>/<toolCallId>."
    )
