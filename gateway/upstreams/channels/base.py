"""What an upstream session needs of the channel that carries its messages.

A `Channel` moves JSON-RPC messages and nothing else: `exchange` sends one message and, for a
request, returns its answer, handing what the upstream says meanwhile (its own requests, its
notifications) to the exchange's `Listener`. Messages that belong to no exchange go to the
channel's `outside` listener. Negotiation, ids, the `_meta` envelope, timeouts, cancellation and
answering the upstream's requests are the session's (gateway/upstreams/session.py).

The "did any byte leave" contract: `exchange` raises `UpstreamNotSent` only when the message
provably never reached the upstream, `UpstreamInterrupted` when it may have, `SessionLost`
when the upstream does not know the session (HTTP 404: the request was not processed).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from ..sse import StreamCursor

if TYPE_CHECKING:
    from ..credentials import Bearer

__all__ = ["UNBOUND", "Answer", "Channel", "Listener", "Negotiated"]

Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Negotiated:
    """What every request of one negotiated session carries: the protocol version and (handshake
    era over HTTP) the session id. Never mutated: a probe or a handshake uses its own, so
    concurrent calls cannot pick up a provisional one."""

    version: str | None  # None only for the `initialize` request itself
    session_id: str | None = None


@dataclass(frozen=True, slots=True)
class Listener:
    """Where what the upstream says during an exchange (or outside any) goes."""

    on_request: Callable[[Message], Awaitable[None]]  # must not wait for a person: answer in a task
    on_notification: Callable[[Message], None]  # never waits
    client: bool = False  # a client waits on this exchange (stdio hands it unlabelled messages)
    on_pause: Callable[[], Awaitable[None]] | None = None  # the server paused the answer stream (SSE polling)


@dataclass(frozen=True, slots=True)
class Answer:
    """The upstream's JSON-RPC response, and the session it opened (HTTP `Mcp-Session-Id`)."""

    message: Message
    session_id: str | None = None


async def _unanswered(message: Message) -> None:
    """Before a session binds a channel (never in practice: the session sets `outside` at once)."""


UNBOUND = Listener(_unanswered, lambda message: None)


class Channel(Protocol):
    outside: Listener  # set by the session: messages that belong to no exchange
    # Whether another gateway process reaches the same upstream (HTTP), so a session negotiated
    # without a session id is stateless; a child process (stdio) belongs to this one.
    shared: bool

    @property
    def alive(self) -> bool: ...

    async def exchange(self, message: Message, negotiated: Negotiated, listener: Listener | None,
                       bearer: "Bearer | None" = None) -> Answer | None:
        """Send one message; for a request (it has an id), wait for and return its answer. `bearer`:
        this request's own token (a caller's exchanged token), else the channel's own credentials."""
        ...

    def cancels_by_closing(self, negotiated: Negotiated) -> bool:
        """Whether leaving an exchange unfinished cancels it (no `notifications/cancelled` needed)."""
        ...

    async def events(self, negotiated: Negotiated, cursor: StreamCursor, opened: anyio.Event) -> bool | None:
        """Read the session's own stream of messages outside any exchange (to `outside`) once:
        True when it was open and ended, False when it failed, None when the upstream has none."""
        ...

    async def aclose(self, negotiated: Negotiated | None) -> None: ...
