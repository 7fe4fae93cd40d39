"""Which tools/call goes upstream as an upstream task (the pipeline asks, gateway/pipeline/calls.py).

Every upstream call goes through `UpstreamTaskCall`, which decides once it knows the upstream's era:

* 2026-07-28 upstream: the call declares the tasks extension and the upstream decides (SEP-2663);
  a task it hands out is polled to its end (a plain client waits for it). With
  `tasks.plain_required: refuse`, a plain client's call goes without the extension, so the
  upstream's own -32021 for a task-required tool reaches the client;
* handshake-era upstream: a tool whose upstream says `taskSupport: required`, always; a tool that
  supports tasks (`optional`) when the call runs as a gateway task; any other: a plain request.

The upstream task's id is stored with the gateway task, so another replica can carry on polling a
stateless upstream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..pipeline.stages import Request, ToolCall
from ..errors import UpstreamRpcError
from ..upstreams.relay import CallRelay
from ..protocol import Era
from ..pipeline.catalog import ToolRoute
from ..upstreams.upstream import Upstream
from .upstream import UpstreamTaskCall

__all__ = ["TaskRequests"]


class TaskRequests:
    def __init__(self, *, default_ttl_ms: int, clock: Callable[[], float], refuse_plain: bool = False) -> None:
        self._default_ttl_ms = default_ttl_ms
        self._clock = clock
        self._refuse_plain = refuse_plain

    def follows_task(self, upstream: Upstream) -> bool:
        """Whether a plain client's call may become an upstream task the gateway follows: a
        2026-07-28 upstream that declares the tasks extension (unless `plain_required: refuse`
        sends plain calls without it). Its `input_required` questions are the caller's to answer
        (gateway/pipeline/calls.py parks such a call for a 2026-07-28 caller that can answer)."""
        return not self._refuse_plain and upstream.offers_tasks

    def for_call(self, upstream: Upstream, route: ToolRoute, call: ToolCall) -> Request | None:
        """The request that sends `call` (None: a plain request on the upstream)."""
        version = upstream.protocol_version  # None before its first connection: decided when connected
        plain = call.sink is None and route.task_support != "required" and version is not None
        if plain and Era.of(version) is Era.HANDSHAKE:
            return None  # a handshake-era upstream's plain call: decided without connecting
        as_task = UpstreamTaskCall(upstream, route.name, route.effect, route.task_support, call.sink,
                                   self._default_ttl_ms, self._clock, self._refuse_plain, call.identity).request
        if not (plain and upstream.asks_on_handshake(call.relay)):
            return as_task
        caller = call.identity

        async def per_caller(method: str, params: dict[str, Any] | None, *, relay: CallRelay | None = None,
                             timeout: float | None = None) -> dict[str, Any]:
            # The era per caller: a plain call on the handshake-era session, unless the upstream can
            # run this tool as a task (then as a 2026-07-28 call the gateway follows, its questions
            # inside the task). A 2026-07-28 caller's call goes there once the tool proved it asks
            # only through a session ("no back-channel" on 2026-07-28: sent again there).
            if await upstream.handshake_takes(relay, route.target):
                return await upstream.request(method, params, relay=relay, timeout=timeout, caller=caller)
            try:
                return await as_task(method, params, relay=relay, timeout=timeout)
            except UpstreamRpcError as exc:
                if not await upstream.sends_again_on_handshake(relay, route.target, exc):
                    raise
                if not route.effect.resendable:
                    # Learnt for its next calls, but this one is not sent again: what a write (or an
                    # unclassified tool) did before its question may not run twice -- the rule for
                    # every interrupted call (gateway/conventions/keys.py `Effect.resendable`).
                    raise
            return await upstream.request(method, params, relay=relay, timeout=timeout, caller=caller)

        return per_caller
