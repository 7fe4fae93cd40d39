"""`/mcp`'s edge: every rule a request meets before the front, run in order by one function.

    Edge(front, gate=drain, hosts=HostOriginPolicy(...), auth=authenticator,
         requests=RequestRules(...), streams=IdleStreams(...))

In order, each rule in its own module and each answered with its own refusal (a JSON-RPC error
body, never a 500):

    gate      the drain: 503 while the process shuts down; counts the requests in flight
    front     503 while the gateway starts (or after its runtime stopped)
    hosts     421 / 403 for a foreign Host or Origin (DNS rebinding)      http/hosts.py
    auth      401 / 403 without an acceptable token (static or OAuth); the identity into the scope   http/auth.py
    requests  413 / 405 / 415 / 406 / -32700 / -32600: one message per POST   http/requests.py
    streams   a GET stream ends when idle or at drain                     http/streams.py

The rules are checks that return, not a stack of ASGI middleware: a request crosses one function
here, whichever rules apply (docs/architecture.md counts the path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from starlette.types import ASGIApp, Receive, Scope, Send

from .asgi import Refusal, replay_body
from .auth import Authenticator
from .hosts import HostOriginPolicy
from .requests import RequestRules
from .streams import IdleStreams

__all__ = ["Edge", "Gate"]


class Gate(Protocol):
    """Admits requests while the process serves (server/drain.py's `Drain`)."""

    def admit(self) -> Refusal | None:
        """None: the request is in flight until `left()`; else the refusal to answer."""

    def left(self) -> None: ...


class Edge:
    def __init__(
        self,
        front: Callable[[], ASGIApp | Refusal],
        *,
        gate: Gate,
        hosts: HostOriginPolicy,
        auth: Authenticator,
        requests: RequestRules,
        streams: IdleStreams,
    ) -> None:
        self._front = front  # the running front, or why there is none (starting, stopped)
        self._gate = gate
        self._hosts = hosts
        self._auth = auth
        self._requests = requests
        self._streams = streams

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gate = self._gate
        refusal = gate.admit()
        if refusal is not None:
            await refusal.send(send)
            return
        try:
            front = self._front()
            if isinstance(front, Refusal):
                await front.send(send)
                return
            refused = self._hosts.refusal(scope)
            if refused is None:
                refused = await self._auth.admit(scope)
            if refused is None:
                body = await self._requests.admit(scope, receive)
                if isinstance(body, Refusal):
                    refused = body
                elif body is not None:
                    await front(scope, replay_body(body, receive), send)
                    return
                elif scope["method"] == "GET":
                    await self._streams.serve(front, scope, receive, send)
                    return
                else:
                    await front(scope, receive, send)
                    return
            await refused.send(send)
        finally:
            gate.left()
