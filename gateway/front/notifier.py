"""Tells live client sessions that the gateway's tool list changed (`notifications/tools/list_changed`).

The SDK hands handlers a per-request session; the connection under it lives as long as the
client's MCP session, and its standalone stream is where list_changed goes. The handlers
remember each connection they see (weakly: a closed session is simply forgotten).
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from mcp.server import ServerRequestContext

__all__ = ["SessionNotifier"]

logger = logging.getLogger(__name__)


class SessionNotifier:
    def __init__(self) -> None:
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()

    def remember(self, ctx: ServerRequestContext[Any]) -> None:
        # The SDK (2.3) exposes the connection only as ServerSession._connection.
        connection = getattr(ctx.session, "_connection", None)
        if connection is not None:
            self._connections.add(connection)

    async def tools_changed(self) -> None:
        """Tell every live session that the aggregated tool list changed."""
        for connection in list(self._connections):
            try:
                await connection.send_tool_list_changed()
            except Exception:  # noqa: BLE001 - a closed session just misses the notice
                logger.debug("could not notify a session of a tool list change", exc_info=True)
