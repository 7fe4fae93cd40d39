"""Resource subscriptions across the gateway: which URIs clients hold, and which upstream watches each.

Clients subscribe in their era: a handshake-era session with `resources/subscribe`, a 2026-07-28
client with a `subscriptions/listen` stream naming the URIs. Each holds a URI here; while any
client holds it, the upstream that serves it is asked to report its updates, in the upstream's
era (`Upstream.watch_resource`: `resources/subscribe` on the handshake era, the URI in the
gateway's own `subscriptions/listen` stream on 2026-07-28). The updates come back through
`Upstream.resource_listeners` and go to the clients holding the URI (gateway/front/events.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import anyio
from mcp_types import INTERNAL_ERROR

from .catalog import Catalog
from ..errors import RequestError, UpstreamError, UpstreamRpcError
from ..upstreams.upstream import Upstream

__all__ = ["ResourceWatch"]

logger = logging.getLogger(__name__)


class ResourceWatch:
    def __init__(self, catalog: Catalog, upstreams: Mapping[str, Upstream]) -> None:
        self._catalog = catalog
        self._upstreams = upstreams
        self._held: dict[str, tuple[str, int]] = {}  # uri -> (upstream, holders)
        self._lock = anyio.Lock()

    async def hold(self, uri: str, allowed: Callable[[str], bool] | None = None) -> bool:
        """One more client holds `uri`; False when no upstream serves it, or `allowed(upstream)` says
        the client may not read it (nothing to watch). Raises RequestError when the upstream refuses
        to report updates of it."""
        name = await self._catalog.resource_upstream(uri)
        if name is None or name not in self._upstreams or (allowed is not None and not allowed(name)):
            return False
        async with self._lock:
            held_by, count = self._held.get(uri, (name, 0))
            if count == 0:
                try:
                    await self._upstreams[held_by].watch_resource(uri)
                except UpstreamRpcError as exc:
                    raise RequestError(exc.code, exc.rpc_message, exc.data) from None
                except UpstreamError as exc:
                    logger.warning("upstream %s: cannot watch %s: %s", held_by, uri, exc)
                    raise RequestError(INTERNAL_ERROR, f"resources/subscribe failed: the upstream {held_by!r} did not answer") from None
            self._held[uri] = (held_by, count + 1)
        return True

    async def release(self, uri: str) -> None:
        """A client let go of `uri`; the last one ends the upstream's watch."""
        async with self._lock:
            held = self._held.get(uri)
            if held is None:
                return
            name, count = held
            if count > 1:
                self._held[uri] = (name, count - 1)
                return
            del self._held[uri]
            try:
                await self._upstreams[name].unwatch_resource(uri)
            except UpstreamError as exc:
                logger.info("upstream %s: unwatching %s failed: %s", name, uri, exc)

    def holders(self, uri: str) -> int:
        return self._held.get(uri, ("", 0))[1]
