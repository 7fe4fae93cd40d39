"""Events between replicas that share PostgreSQL, through `LISTEN/NOTIFY`: the one owner of the channel.

Replicas tell each other only that something changed, by id; each one reads what it needs from
the shared tables itself. The payload is small JSON, `{"k": kind, "r": ref, "o": origin}`:

    task        ref: a task id      a task's record changed (its status notification, gateway/front/events.py)
    connectors  ref: ""             a connector was registered, changed or removed (the registry re-reads)
    resource    ref: a URI          an upstream said a resource changed (subscribers on every replica)

`origin` is the sending process's boot id: a replica never handles its own events. One channel
per schema (`dex_events_` and a hash of the schema name), so deployments sharing a database in
different schemas do not hear each other. Delivery is best effort, as NOTIFY is: an event sent
while a replica's listening connection was down is not replayed (the clients of that replica
still poll `tasks/get`; the connector registry still polls its version row).

With SQLite or a memory store there is nothing to share with: `publish` does nothing and `run`
returns at once.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from .database import Database

if TYPE_CHECKING:
    import asyncpg

__all__ = ["ClusterEvents", "EventKind", "MAX_REF_BYTES"]

logger = logging.getLogger(__name__)

EventKind = Literal["task", "connectors", "resource"]
_KINDS: frozenset[str] = frozenset({"task", "connectors", "resource"})
MAX_REF_BYTES = 2_000  # NOTIFY payloads stop at 8,000 bytes; a longer ref is not sent (logged)
_QUEUE = 1_000  # events received and not yet handled; past it new ones are dropped (logged)

Handler = Callable[[str], Awaitable[None]]


class ClusterEvents:
    def __init__(self, database: Database, origin: str) -> None:
        self._database = database
        self._origin = origin
        self._handlers: dict[str, list[Handler]] = {}
        self.channel = _channel(database.postgres.schema) if self.enabled else ""

    @property
    def enabled(self) -> bool:
        return self._database.scheme == "postgresql"

    def on(self, kind: EventKind, handler: Handler) -> None:
        """`handler(ref)` runs for each `kind` event another replica sends."""
        self._handlers.setdefault(kind, []).append(handler)

    async def publish(self, kind: EventKind, ref: str = "") -> None:
        """Tell the other replicas; never raises (a lost event is logged: NOTIFY is best effort anyway)."""
        if not self.enabled:
            return
        if len(ref.encode()) > MAX_REF_BYTES:
            logger.warning("cluster event %s not sent: its ref is longer than %d bytes", kind, MAX_REF_BYTES)
            return
        payload = json.dumps({"k": kind, "r": ref, "o": self._origin}, separators=(",", ":"))
        try:
            await self._database.pool.execute("SELECT pg_notify($1, $2)", self.channel, payload)
        except Exception:  # noqa: BLE001 - the other replicas miss one event; this request goes on
            logger.warning("cluster event %s %s: NOTIFY failed", kind, ref, exc_info=True)

    async def run(self) -> None:
        """Listen until cancelled, handling each event; returns at once without PostgreSQL. Raises
        when the listening connection is lost (the supervisor starts it again after a backoff)."""
        if not self.enabled:
            return
        import asyncpg

        send, receive = anyio.create_memory_object_stream[tuple[str, str]](_QUEUE)
        lost = anyio.Event()
        # A connection of its own, outside the pool: pool connections are not reset after use
        # (database.py `_keep_session`), so none of them may hold a LISTEN.
        conn: asyncpg.Connection = await asyncpg.connect(self._database.postgres.dsn, timeout=10)
        try:
            conn.add_termination_listener(lambda _conn: lost.set())
            await conn.add_listener(self.channel, _receiver(send, self._origin))
            logger.info("listening for other replicas' events on %s", self.channel)
            async with anyio.create_task_group() as tg, receive:
                tg.start_soon(self._handle_all, receive)
                await lost.wait()
                tg.cancel_scope.cancel()
            raise ConnectionError("the connection listening for other replicas' events was lost")
        finally:
            with anyio.CancelScope(shield=True):
                if not conn.is_closed():
                    await conn.close(timeout=2)

    async def _handle_all(self, receive: Any) -> None:
        async for kind, ref in receive:
            for handler in self._handlers.get(kind, ()):
                try:
                    await handler(ref)
                except Exception:  # noqa: BLE001 - one failed handler must not stop the others
                    logger.warning("cluster event %s %s: its handler failed", kind, ref, exc_info=True)


def _receiver(send: MemoryObjectSendStream[tuple[str, str]], origin: str) -> Callable[..., None]:
    def received(_conn: object, _pid: int, _channel: str, payload: str) -> None:
        try:
            event = json.loads(payload)
            kind, ref, sender = event["k"], event["r"], event["o"]
        except (ValueError, KeyError, TypeError):
            logger.warning("cluster event ignored: not an event payload")
            return
        if sender == origin or kind not in _KINDS or not isinstance(ref, str):
            return
        try:
            send.send_nowait((kind, ref))
        except anyio.WouldBlock:
            logger.warning("cluster event %s %s dropped: %d events are waiting already", kind, ref, _QUEUE)

    return received


def _channel(schema: str) -> str:
    return "dex_events_" + hashlib.sha256(schema.encode()).hexdigest()[:16]


