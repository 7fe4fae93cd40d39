"""JSON-RPC pieces shared by the stdio and HTTP upstream connections.

The gateway speaks to upstreams with its own lean client rather than the SDK `Client`: the
outcome rules need to know whether a request was *never sent* or *sent and interrupted*, and
a refused connection must not tear down a pooled session (see docs/architecture.md).
"""

from __future__ import annotations

from typing import Any, Protocol

from mcp_types import METHOD_NOT_FOUND

from ..errors import UpstreamInterrupted, UpstreamRpcError
from ..relay import CallRelay, RelayRefused

HANDSHAKE_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"
CLIENT_INFO = {"name": "dex-mcp-gateway", "version": "0.1.0"}

# What the gateway tells an upstream it can do: server-to-client requests made during a call
# are relayed to the calling client (or refused at once when it cannot answer them).
CLIENT_CAPABILITIES: dict[str, Any] = {"sampling": {}, "elicitation": {}, "roots": {"listChanged": False}}


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
        relay: CallRelay | None = None,
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


async def deliver_notification(message: dict[str, Any], relay: CallRelay | None) -> None:
    """Hand a progress or log notification to the calling client (others are dropped)."""
    if relay is None:
        return
    params = message.get("params") or {}
    if message.get("method") == "notifications/message" and isinstance(params, dict):
        await relay.log(params)
        return
    if message.get("method") != "notifications/progress":
        return
    progress = params.get("progress")
    if not isinstance(progress, (int, float)):
        return
    total = params.get("total")
    await relay.progress(float(progress), float(total) if isinstance(total, (int, float)) else None, params.get("message"))


async def answer_server_request(message: dict[str, Any], relay: CallRelay | None) -> dict[str, Any]:
    """The JSON-RPC response to a request the upstream sent us."""
    method = str(message.get("method"))
    params = message.get("params")
    reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message.get("id")}
    if method == "ping":
        reply["result"] = {}
        return reply
    if relay is None:
        if method == "roots/list":
            reply["result"] = {"roots": []}
        else:
            reply["error"] = {"code": METHOD_NOT_FOUND, "message": f"{method} cannot be answered on this hop"}
        return reply
    try:
        reply["result"] = await relay.request(method, params if isinstance(params, dict) else None)
    except RelayRefused as exc:
        reply["error"] = {"code": exc.code, "message": exc.message}
    return reply
