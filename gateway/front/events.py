"""What the gateway tells its clients when something changes, in each client's era.

* List changes (the merged tools, prompts or resources changed: an upstream said so, a connector
  was registered, an upstream's listing refreshed): `notifications/<kind>/list_changed` on every
  live handshake-era session's standalone stream, and on every 2026-07-28 `subscriptions/listen`
  stream that asked for that kind.
* Resource updates (an upstream said a resource changed): `notifications/resources/updated` to
  the sessions subscribed to the URI, and to the listen streams that name it.
* Task changes (this process's: gateway/tasks/observed.py; other replicas': gateway/storage/events.py):
  `notifications/tasks/status` to the handshake-era session that created the task.

`ListenStreams` serves `subscriptions/listen` (2026-07-28, SEP-2575) with the SDK's own
`ListenHandler` (acknowledgement first, every frame tagged with the subscription id, only the
kinds asked for), and holds the URIs a stream names in the gateway's `ResourceWatch` while it is
open, so their upstreams report updates.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)

from ..errors import RequestError
from ..protocol import Era
from ..auth.principals import ANONYMOUS, PRINCIPAL_SCOPE_KEY
from ..auth.scope import PrincipalScope
from ..pipeline.subscriptions import ResourceWatch
from ..tasks.records import TaskRecord
from ..tasks.wire import task_fields
from .sessions import Sessions

__all__ = ["ClientEvents", "ListenStreams"]

logger = logging.getLogger(__name__)

_LIST_EVENTS: dict[str, ServerEvent] = {
    "tools": ToolsListChanged(),
    "prompts": PromptsListChanged(),
    "resources": ResourcesListChanged(),
}


class ClientEvents:
    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions
        self.bus = InMemorySubscriptionBus()

    async def lists_changed(self, kinds: Iterable[str]) -> None:
        kinds = list(kinds)
        await self.sessions.lists_changed(kinds)
        for kind in kinds:
            if (event := _LIST_EVENTS.get(kind)) is not None:
                await self.bus.publish(event)

    async def resource_updated(self, uri: str) -> None:
        await self.sessions.resource_updated(uri)
        await self.bus.publish(ResourceUpdated(uri=uri))

    async def task_saved(self, record: TaskRecord) -> None:
        """A task this process changed: its status to the handshake-era session that created it
        (2026-07-28 clients poll `tasks/get`; the extension has no status notification)."""
        await self.sessions.task_status(task_fields(record, era=Era.HANDSHAKE), terminal=record.status.terminal)

    async def tasks_adopted(self, connection: Any, task_ids: Iterable[str],
                            read: Callable[[str], Awaitable[TaskRecord | None]]) -> None:
        """An adopted session's watched tasks (`read`: a task of the session's principal, None when
        it is not there): one that is gone is no longer watched; one that changed since the session
        was last told (while no process held the session) is told now. Later changes reach it as
        they reach any session: here, or from another replica through PostgreSQL."""
        for task_id in task_ids:
            record = await read(task_id)
            if record is None:
                self.sessions.unwatch_task(connection, task_id)
            else:
                await self.task_saved(record)


class ListenStreams:
    """`subscriptions/listen` for 2026-07-28 clients (registered as the server's listen handler)."""

    def __init__(self, events: ClientEvents, watch: ResourceWatch, scope: PrincipalScope) -> None:
        self._handler = ListenHandler(events.bus)
        self._watch = watch
        self._scope = scope

    async def __call__(self, ctx: ServerRequestContext[Any], params: types.SubscriptionsListenRequestParams) -> Any:
        principal = str(ctx.request.scope.get(PRINCIPAL_SCOPE_KEY, ANONYMOUS)) if ctx.request is not None else ANONYMOUS
        held: list[str] = []
        try:
            for uri in params.notifications.resource_subscriptions or ():
                # A URI the principal may not read is honoured and never fires, like an unknown one.
                if await self._hold(uri, self._readable_by(principal, uri)):
                    held.append(uri)
            return await self._handler(ctx, params)
        finally:
            for uri in held:
                await self._watch.release(uri)

    def _readable_by(self, principal: str, uri: str) -> Callable[[str], bool]:
        """Whether `principal` may read `uri` on a given upstream."""
        return lambda upstream: self._scope.may_use_resource(principal, uri, upstream)

    async def _hold(self, uri: str, allowed: Callable[[str], bool]) -> bool:
        try:
            return await self._watch.hold(uri, allowed)
        except RequestError as exc:
            logger.info("listen stream: the upstream of %s does not report its updates: %s", uri, exc.message)
            return False

    def close_all(self) -> None:
        """End every open listen stream gracefully (drain, shutdown): clients listen again elsewhere."""
        self._handler.close()
