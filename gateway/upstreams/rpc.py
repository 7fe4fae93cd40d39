"""JSON-RPC pieces shared by the stdio and HTTP upstream connections.

The gateway speaks to upstreams with its own lean client rather than the SDK `Client`: the
outcome rules need to know whether a request was *never sent* or *sent and interrupted*, and
a refused connection must not tear down a pooled session (see docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..errors import UpstreamInterrupted, UpstreamRpcError

HANDSHAKE_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"
CLIENT_INFO = {"name": "dex-mcp-gateway", "version": "0.1.0"}

ProgressCallback = Callable[[float, float | None, str | None], Awaitable[None]]


class Connection(Protocol):
    """One live MCP connection to an upstream (a session, or a stateless HTTP endpoint)."""

    @property
    def alive(self) -> bool: ...

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        *,
        timeout: float,
        on_progress: ProgressCallback | None = None,
    ) -> dict[str, Any]:
        """Send one request and return its `result`.

        Raises UpstreamNotSent (provably never sent), UpstreamInterrupted (maybe sent, no
        usable answer) or UpstreamRpcError (a JSON-RPC error answer).
        """
        ...

    async def aclose(self) -> None: ...


def result_or_raise(upstream: str, message: Any) -> dict[str, Any]:
    """The `result` of a JSON-RPC response, or the matching exception."""
    if not isinstance(message, dict):
        raise UpstreamInterrupted(upstream, "unreadable response: not a JSON object")
    if "error" in message:
        error = message["error"]
        if not isinstance(error, dict) or not isinstance(error.get("code"), int):
            raise UpstreamInterrupted(upstream, "unreadable response: malformed JSON-RPC error")
        raise UpstreamRpcError(upstream, error["code"], str(error.get("message", "")), error.get("data"))
    result = message.get("result")
    if not isinstance(result, dict):
        raise UpstreamInterrupted(upstream, "unreadable response: no result object")
    return result


async def deliver_progress(message: dict[str, Any], on_progress: ProgressCallback | None) -> None:
    """Hand a `notifications/progress` message to the caller's callback (others are dropped)."""
    if on_progress is None or message.get("method") != "notifications/progress":
        return
    params = message.get("params") or {}
    progress = params.get("progress")
    if not isinstance(progress, (int, float)):
        return
    total = params.get("total")
    await on_progress(float(progress), float(total) if isinstance(total, (int, float)) else None, params.get("message"))
