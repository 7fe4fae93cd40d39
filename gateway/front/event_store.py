"""The SSE events of one stateful session, kept so its client can resume a dropped stream.

With an event store the SDK's handshake-era transport starts every POST's SSE response with a
priming event (an id, no data, and `retry:`), gives every message an id, and answers a GET with
`Last-Event-ID` by replaying what the client missed on that stream (SEP-1699). The gateway keeps
the events in memory, bounded by count and age: a client that comes back later than that starts
over. Stateless fronts keep none (the SDK's rule): a stateless client sends its request again.

Every session has its own store (`session_manager.py` attaches one to each new session): the
SDK's stream ids are the JSON-RPC request ids ("1", "7") and "_GET_stream", the same in every
session, so one store shared by all sessions would replay one session's events into another's
stream. Event ids start with a random prefix of the session's own, so an id seen in one session
names nothing in another, and an id this store never handed out replays nothing.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCMessage

__all__ = ["FrontEventStore"]


class FrontEventStore(EventStore):
    """The events of one session, oldest first, at most `max_events` of them and none older
    than `max_age_seconds`."""

    def __init__(self, max_events: int = 10_000, max_age_seconds: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._max_events = max_events
        self._max_age = max_age_seconds
        self._clock = clock
        self._events: OrderedDict[EventId, tuple[StreamId, JSONRPCMessage | None, float]] = OrderedDict()
        self._numbers = itertools.count(1)
        # 96 random bits: an id from another session (or an earlier process) is never one of ours.
        self._prefix = secrets.token_urlsafe(12)

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        now = self._clock()
        while self._events and (len(self._events) >= self._max_events or now - next(iter(self._events.values()))[2] > self._max_age):
            self._events.popitem(last=False)
        event_id = f"{self._prefix}-{next(self._numbers)}"
        self._events[event_id] = (stream_id, message, now)
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        known = self._events.get(last_event_id)
        if known is None:
            return None
        stream = known[0]
        later = list(self._events.items())  # a snapshot: new events may be stored while we send
        start = next(i for i, (event_id, _) in enumerate(later) if event_id == last_event_id) + 1
        for event_id, (stream_id, message, _) in later[start:]:
            if stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream
