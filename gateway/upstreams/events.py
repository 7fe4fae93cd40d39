"""What an upstream says outside any call: list changes and resource updates.

Every connection hands such notifications to the `Upstream` that owns it (`UpstreamEvents`),
whichever way they arrive: a stdio process's stdout, an HTTP upstream's standalone GET stream
(handshake era), its `subscriptions/listen` stream (2026-07-28), or a call's own response
stream. `ResourceSubscriptions` keeps a handshake-era session's `resources/subscribe` state in
step with the URIs the gateway's clients hold (a new session subscribes again).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

from ..errors import UpstreamError, UpstreamRpcError

__all__ = ["LIST_CHANGED", "NO_EVENTS", "ResourceSubscriptions", "UpstreamEvents", "listen_filter", "route_event"]

logger = logging.getLogger(__name__)

LIST_CHANGED = frozenset(
    {"notifications/tools/list_changed", "notifications/prompts/list_changed", "notifications/resources/list_changed"}
)
RESOURCE_UPDATED = "notifications/resources/updated"


class UpstreamEvents(Protocol):
    def list_changed(self, method: str) -> None:
        """The upstream said one of its lists changed (`method`: the notification)."""
        ...

    def resource_updated(self, uri: str) -> None:
        """The upstream said the resource at `uri` changed."""
        ...


class _NoEvents:
    def list_changed(self, method: str) -> None:
        pass

    def resource_updated(self, uri: str) -> None:
        pass


NO_EVENTS: UpstreamEvents = _NoEvents()


def route_event(message: Mapping[str, Any], events: UpstreamEvents) -> bool:
    """Hand a list change or a resource update to `events`; True when `message` was one."""
    method = message.get("method")
    if method in LIST_CHANGED:
        events.list_changed(str(method))
        return True
    if method == RESOURCE_UPDATED:
        params = message.get("params")
        uri = params.get("uri") if isinstance(params, Mapping) else None
        if isinstance(uri, str):
            events.resource_updated(uri)
        return True
    return False


def listen_filter(capabilities: Mapping[str, Any], uris: Iterable[str]) -> dict[str, Any]:
    """The `notifications` filter of the gateway's `subscriptions/listen` towards a 2026-07-28
    upstream: every list change it can report, and the URIs clients hold (if it can report those)."""
    def flag(kind: str, key: str) -> bool:
        section = capabilities.get(kind)
        return isinstance(section, Mapping) and section.get(key) is True

    wanted: dict[str, Any] = {}
    for kind, name in (("tools", "toolsListChanged"), ("prompts", "promptsListChanged"), ("resources", "resourcesListChanged")):
        if flag(kind, "listChanged"):
            wanted[name] = True
    if flag("resources", "subscribe") and (held := sorted(uris)):
        wanted["resourceSubscriptions"] = held
    return wanted


Request = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


class ResourceSubscriptions:
    """The URIs one handshake-era session has `resources/subscribe`d (a new session starts empty)."""

    def __init__(self) -> None:
        self._done: set[str] = set()
        self._session: object = None

    async def sync(self, session: object, wanted: Iterable[str], request: Request, *, new: str | None = None) -> None:
        """Subscribe what is wanted and not yet subscribed on `session`, unsubscribe the rest.
        An error subscribing `new` (the URI a client just asked for) is raised; others are logged."""
        if session is not self._session:
            self._session, self._done = session, set()
        wanted = set(wanted)
        for uri in sorted(wanted - self._done):
            try:
                await request("resources/subscribe", {"uri": uri})
            except UpstreamRpcError:
                if uri == new:
                    raise
                logger.info("resources/subscribe %s refused", uri)
                continue
            except UpstreamError:
                if uri == new:
                    raise
                logger.info("resources/subscribe %s failed", uri)
                continue
            self._done.add(uri)
        for uri in sorted(self._done - wanted):
            self._done.discard(uri)
            try:
                await request("resources/unsubscribe", {"uri": uri})
            except UpstreamError as exc:
                logger.info("resources/unsubscribe %s: %s", uri, exc)
