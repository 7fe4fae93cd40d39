"""JSON-RPC pieces of an upstream session (gateway/upstreams/session.py), whatever its channel.

The gateway speaks to upstreams with its own lean client rather than the SDK `Client`: the
outcome rules need to know whether a request was *never sent* or *sent and interrupted*, and
a refused connection must not tear down a pooled session (see docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    INTERNAL_ERROR,
    LOG_LEVEL_META_KEY,
    METHOD_NOT_FOUND,
    PROTOCOL_VERSION_META_KEY,
)

from ..conventions.keys import GATEWAY_PREFIX
from ..errors import RelayRefused, UpstreamInterrupted, UpstreamRpcError
from ..protocol import CLIENT_INFO
from .relay import CallRelay

if TYPE_CHECKING:
    from .credentials import Bearer

HANDSHAKE_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"

# What the gateway tells an upstream it can do: server-to-client requests made during a call
# are relayed to the calling client (or refused at once when it cannot answer them).
CLIENT_CAPABILITIES: dict[str, Any] = {"sampling": {}, "elicitation": {}, "roots": {"listChanged": False}}

# Requests from one upstream (ping, elicitation, sampling, roots) answered at the same time.
DEFAULT_MAX_INBOUND = 64


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
        bearer: "Bearer | None" = None,
    ) -> dict[str, Any]:
        """Send one request and return its `result` (`bearer`: the request's own token).

        Raises UpstreamNotSent (provably never sent), UpstreamInterrupted (maybe sent, no
        usable answer) or UpstreamRpcError (a JSON-RPC error answer).
        """
        ...

    async def keeps_session(self) -> bool:
        """Whether the upstream keeps an MCP session for this connection (negotiating first)."""
        ...

    async def watch(self, uris: Iterable[str], new: str | None = None) -> None:
        """Have the upstream report updates of exactly these resources (an error for `new` is raised)."""
        ...

    async def aclose(self) -> None: ...


def request_meta(meta: Mapping[str, Any], relay: CallRelay | None, *, modern: bool, token: int | None) -> dict[str, Any]:
    """A request's `_meta` for the upstream hop: the relay's progress token, and on 2026-07-28 the
    envelope with what the calling client can answer and the log level it wants."""
    out = dict(meta)
    if relay is not None and token is not None:
        out["progressToken"] = token
    if modern:
        out[PROTOCOL_VERSION_META_KEY] = MODERN_VERSION
        out[CLIENT_INFO_META_KEY] = CLIENT_INFO
        capabilities = dict(out.get(CLIENT_CAPABILITIES_META_KEY) or {})  # a task call declares the extension
        if relay is not None:
            capabilities.update(relay.client_capabilities())
            if relay.log_level is not None:
                out[LOG_LEVEL_META_KEY] = relay.log_level
        out[CLIENT_CAPABILITIES_META_KEY] = capabilities
    return out


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
    strip_gateway_keys(result)
    return result


# Members that hold the upstream's own data, never an MCP object with a `_meta` of the protocol.
_DATA_MEMBERS = frozenset({"structuredContent", "inputSchema", "outputSchema", "arguments", "_meta"})
_MAX_META_DEPTH = 4


def strip_gateway_keys(result: dict[str, Any]) -> None:
    """Drop every `_meta` key under the gateway's own prefix (`dex-gateway/`) from an upstream result,
    in place: the result's, and those of the MCP objects in it (listed items, content blocks, a task,
    prompt messages) down to 4 levels. Only the gateway writes these keys (replay marker, task
    marker, image references): an upstream that sends them would forge them. Every upstream result
    passes here (`result_or_raise`), before the gateway adds its own."""
    _strip(result, _MAX_META_DEPTH)


def _strip(node: Any, depth: int) -> None:
    if isinstance(node, dict):
        meta = node.get("_meta")
        if isinstance(meta, dict) and any(isinstance(k, str) and k.startswith(GATEWAY_PREFIX) for k in meta):
            node["_meta"] = {k: v for k, v in meta.items() if not (isinstance(k, str) and k.startswith(GATEWAY_PREFIX))}
        if depth > 0:
            for key, value in node.items():
                if key not in _DATA_MEMBERS and isinstance(value, (dict, list)):
                    _strip(value, depth - 1)
    elif isinstance(node, list) and depth > 0:
        for item in node:
            if isinstance(item, (dict, list)):
                _strip(item, depth - 1)


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


async def answer_server_request(
    message: dict[str, Any], relay: CallRelay | None, roots: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The JSON-RPC response to a request the upstream sent us: `ping` at once; `roots/list` from
    the upstream's configured `roots` when set; otherwise relayed to the calling client, or (no
    client to ask: a request outside any call) an error -- never left unanswered."""
    method = str(message.get("method"))
    params = message.get("params")
    reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message.get("id")}
    if method == "ping":
        reply["result"] = {}
        return reply
    if method == "roots/list" and roots is not None:
        reply["result"] = {"roots": roots}
        return reply
    if relay is None:
        reply["error"] = {"code": METHOD_NOT_FOUND,
                          "message": f"{method} cannot be answered: it belongs to no client request of the gateway"}
        return reply
    try:
        reply["result"] = await relay.request(method, params if isinstance(params, dict) else None)
    except RelayRefused as exc:
        reply["error"] = {"code": exc.code, "message": exc.message}
    return reply


class InboundRequests:
    """How many requests from one upstream are being answered, capped at `limit`: an upstream that
    floods the gateway with requests (100,000 pings during a call) gets errors, not memory."""

    def __init__(self, upstream: str, limit: int = DEFAULT_MAX_INBOUND) -> None:
        self._upstream = upstream
        self._limit = max(1, limit)
        self.active = 0

    def refusal(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """None when the request may be answered (then `release()` once it is), else the error
        reply to send the upstream at once."""
        if self.active < self._limit:
            self.active += 1
            return None
        return {"jsonrpc": "2.0", "id": message.get("id"), "error": {
            "code": INTERNAL_ERROR,
            "message": (f"too many requests from upstream {self._upstream}: the gateway is already answering "
                        f"{self._limit} of them (upstreams.{self._upstream}.max_inbound_requests); "
                        f"{message.get('method')} refused"),
        }}

    def release(self) -> None:
        self.active -= 1
