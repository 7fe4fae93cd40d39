"""The SSE events of one stateful session, kept so its client can resume a dropped stream.

With an event store the SDK's handshake-era transport starts every POST's SSE response with a
priming event (an id, no data, and `retry:`), gives every message an id, and answers a GET with
`Last-Event-ID` by replaying what the client missed on that stream (SEP-1699). The gateway keeps
the events in memory, serialized (a message's stored bytes are its JSON), bounded by count, age and
bytes per session (`server.sse_event_buffer`, 300 s, `server.session_event_buffer_bytes`) and by
bytes over every session of the process (`server.session_event_buffer_total_bytes`, an `EventBudget`):
past a bound the oldest events go first, and a client that comes back for one of them starts over.
An event larger than a budget is not kept, and neither is anything before it in its session, so a
replay never skips an event it could not send. Stateless fronts keep none (the SDK's rule): a
stateless client sends its request again.

Every session has its own store (`session_manager.py` attaches one to each new session): the
SDK's stream ids are the JSON-RPC request ids ("1", "7") and "_GET_stream", the same in every
session, so one store shared by all sessions would replay one session's events into another's
stream. Event ids start with a random prefix of the session's own, so an id seen in one session
names nothing in another, and an id this store never handed out replays nothing.

With replicas (`durable`: the session's part of gateway/storage/front_events.py, PostgreSQL) the
GET stream's events (ids ending in `-g`: server notifications that belong to no request) are also
handed to a shared log as they are stored: `add` only queues them, a writer of the process inserts
them in batches, so no request waits for PostgreSQL. The log keeps each session's events within the
same count and age bounds. A POST stream's events are never written: they answer a request that
dies with its process.

A session adopted from a replica that died (`adopted=True`, session_manager.py) starts with an
empty store in memory. Its client's GET stream reconnecting with an id of the old process is
served from the shared log: the session's events after that id (the dead process's, then any this
process wrote), then this process's own GET-stream events not yet written, oldest first; an id the
log does not have for this session (another session's, one past the bounds, or one the dead process
had not written yet when it died) replays nothing and goes on from now. Without the log (no
replicas' secret, or SQLite) the stream goes on from now, and what was sent between the death and
the reconnection is lost. A POST stream's id of the old process answered a request that died with it
(`lost_stream`: the manager refuses the reconnection, and the client's request fails instead of
waiting).
"""

from __future__ import annotations

import itertools
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple, Protocol

from mcp.server.streamable_http import GET_STREAM_KEY, EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCMessage, jsonrpc_message_adapter

__all__ = ["EVENT_MAX_AGE_SECONDS", "DurableEvents", "EventBudget", "FrontEventStore"]

logger = logging.getLogger(__name__)

_GET_SUFFIX = "-g"
EVENT_MAX_AGE_SECONDS = 300.0


class DurableEvents(Protocol):
    """One session's GET-stream events in a log other processes read (gateway/storage/front_events.py)."""

    def add(self, event_id: str, data: bytes | None, *, cut: bool = False) -> None:
        """Queue the event; never waits. `cut`: the session's earlier events go (one too large to keep)."""

    async def after(self, event_id: str) -> list[tuple[str, bytes | None]] | None:
        """The session's events after `event_id`, oldest first; None: the log has no such event."""

DEFAULT_SESSION_BYTES = 4 * 1024 * 1024


class _Event(NamedTuple):
    stream_id: StreamId
    data: bytes | None  # the message's JSON; None: a priming event, or one too large to keep
    at: float


class EventBudget:
    """The bytes of buffered events over every session of one process: past `max_bytes`, the oldest
    events of any session are dropped (each from its own store)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._total = 0
        self._order: OrderedDict[EventId, tuple[FrontEventStore, int]] = OrderedDict()

    @property
    def total(self) -> int:
        return self._total

    def add(self, store: FrontEventStore, event_id: EventId, size: int) -> None:
        self._order[event_id] = (store, size)
        self._total += size
        while self._total > self.max_bytes and self._order:
            oldest, (owner, oldest_size) = self._order.popitem(last=False)
            self._total -= oldest_size
            owner.drop(oldest)

    def forget(self, event_id: EventId) -> None:
        """A store dropped the event itself."""
        entry = self._order.pop(event_id, None)
        if entry is not None:
            self._total -= entry[1]


class FrontEventStore(EventStore):
    """The events of one session, oldest first: at most `max_events` of them, none older than
    `max_age_seconds`, at most `max_bytes` of stored JSON, and within the process's `budget`."""

    def __init__(self, max_events: int = 10_000, max_age_seconds: float = EVENT_MAX_AGE_SECONDS,
                 clock: Callable[[], float] = time.monotonic, *, max_bytes: int = DEFAULT_SESSION_BYTES,
                 budget: EventBudget | None = None, adopted: bool = False,
                 durable: DurableEvents | None = None) -> None:
        self._adopted = adopted
        self._durable = durable
        self._max_events = max_events
        self._max_age = max_age_seconds
        self._max_bytes = max_bytes
        self._budget = budget
        self._clock = clock
        self._events: OrderedDict[EventId, _Event] = OrderedDict()
        self._bytes = 0
        self._numbers = itertools.count(1)
        # 96 random bits: an id from another session (or an earlier process) is never one of ours.
        self._prefix = secrets.token_urlsafe(12)

    @property
    def stored_bytes(self) -> int:
        return self._bytes

    @property
    def event_count(self) -> int:
        # Not __len__: the SDK tests `if self._event_store:`, and an empty store must stay truthy.
        return len(self._events)

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        now = self._clock()
        data = None if message is None else message.model_dump_json(by_alias=True, exclude_unset=True).encode()
        size = len(data) if data is not None else 0
        limit = self._max_bytes if self._budget is None else min(self._max_bytes, self._budget.max_bytes)
        cut = size > limit
        if cut:
            # Too large to keep: the events before it go too, so no replay passes over it unseen
            # (a client that resumes from before it starts over).
            self.close()
            data, size = None, 0
        while self._events and (len(self._events) >= self._max_events or self._bytes + size > self._max_bytes
                                or now - next(iter(self._events.values())).at > self._max_age):
            self._drop_oldest()
        event_id = f"{self._prefix}-{next(self._numbers)}" + (_GET_SUFFIX if stream_id == GET_STREAM_KEY else "")
        self._events[event_id] = _Event(stream_id, data, now)
        if self._durable is not None and stream_id == GET_STREAM_KEY:
            self._durable.add(event_id, data, cut=cut)
        self._bytes += size
        if self._budget is not None and size:
            self._budget.add(self, event_id, size)
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        known = self._events.get(last_event_id)
        if known is None:
            if not (self._adopted and last_event_id.endswith(_GET_SUFFIX)):
                return None
            # The GET stream of a holder that died: what the shared log has after the id, then on from now.
            await self._replay_durable(last_event_id, send_callback)
            return GET_STREAM_KEY
        stream = known.stream_id
        later = list(self._events.items())  # a snapshot: new events may be stored while we send
        start = next(i for i, (event_id, _) in enumerate(later) if event_id == last_event_id) + 1
        for event_id, event in later[start:]:
            if event.stream_id == stream and event.data is not None:
                await send_callback(EventMessage(jsonrpc_message_adapter.validate_json(event.data), event_id))
        return stream

    async def _replay_durable(self, last_event_id: EventId, send_callback: EventCallback) -> None:
        if self._durable is None:
            return
        try:
            logged = await self._durable.after(last_event_id)
        except Exception:  # noqa: BLE001 - the client goes on from now, as without the log
            logger.warning("could not read a session's stored events; its stream goes on from now", exc_info=True)
            return
        if logged is None:
            return  # not this session's (or past the bounds): nothing to replay
        ours = list(self._events.items())  # this process's own: sent from memory, after the log's others
        mine = {event_id for event_id, _ in ours}
        for event_id, data in logged:
            if event_id not in mine and data is not None:
                await send_callback(EventMessage(jsonrpc_message_adapter.validate_json(data), event_id))
        for event_id, event in ours:
            if event.stream_id == GET_STREAM_KEY and event.data is not None:
                await send_callback(EventMessage(jsonrpc_message_adapter.validate_json(event.data), event_id))

    def lost_stream(self, last_event_id: EventId) -> bool:
        """An adopted session's reconnection to a request stream of the process that died: that
        request is lost (nothing here can answer it)."""
        return (self._adopted and last_event_id not in self._events
                and not last_event_id.endswith(_GET_SUFFIX))

    def drop(self, event_id: EventId) -> None:
        """Forget one event (the process-wide budget evicts it)."""
        event = self._events.pop(event_id, None)
        if event is not None and event.data is not None:
            self._bytes -= len(event.data)

    def close(self) -> None:
        """Forget every event (the session ended), giving their bytes back to the budget."""
        while self._events:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        event_id, event = self._events.popitem(last=False)
        if event.data is not None:
            self._bytes -= len(event.data)
            if self._budget is not None:
                self._budget.forget(event_id)
