"""How what an upstream says during a call reaches the calling client, per entry.

* `SessionRelay`: a request served by the SDK (a live session can carry requests back, e.g.
  elicitation and sampling on a stateful handshake-era session).
* `StreamRelay`: a request served by the fast path: notifications become events on the
  request's own response stream; server-to-client requests are refused (no session).

Log notifications follow the SDK's rule for both: on 2026-07-28 only levels the request opted
into (`io.modelcontextprotocol/logLevel`), on the handshake era every level at or above the
session's `logging/setLevel` threshold.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.connection import allowed_log_levels
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import CLIENT_CAPABILITIES_META_KEY, LOG_LEVEL_META_KEY, METHOD_NOT_FOUND
from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import RelayRefused
from ..upstreams.relay import ASKING_CAPABILITIES
from .sessions import Sessions, level_allows
from ..protocol import Era

__all__ = ["EventSink", "SessionRelay", "StreamRelay"]

logger = logging.getLogger(__name__)


class EventSink(Protocol):
    """Where a fast-path request's notifications go (its response stream)."""

    async def event(self, message: dict[str, Any]) -> None: ...


def _asking(capabilities: Any) -> dict[str, Any]:
    """The capabilities that let an upstream ask the client something, from a declared set."""
    if not isinstance(capabilities, Mapping):
        return {}
    return {k: capabilities[k] for k in ASKING_CAPABILITIES if isinstance(capabilities.get(k), Mapping)}


def _modern_level(meta: Mapping[str, Any]) -> str | None:
    level = meta.get(LOG_LEVEL_META_KEY)
    return level if isinstance(level, str) else None


class StreamRelay:
    """Notifications as events on the request's own response stream."""

    def __init__(self, sink: EventSink, meta: Mapping[str, Any], protocol_version: str) -> None:
        self._sink = sink
        self._token = meta.get("progressToken")
        self._log_levels = allowed_log_levels(protocol_version, meta)
        self.modern = Era.of(protocol_version) is Era.MODERN
        # A handshake-era client without a session takes every level (the SDK's rule).
        self.log_level = _modern_level(meta) if self.modern else "debug"
        self._capabilities = _asking(meta.get(CLIENT_CAPABILITIES_META_KEY)) if self.modern else {}

    def client_capabilities(self) -> dict[str, Any]:
        return dict(self._capabilities)

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        if self._token is None:
            return
        params: dict[str, Any] = {"progressToken": self._token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self._sink.event({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})

    async def log(self, params: dict[str, Any]) -> None:
        if params.get("level") in self._log_levels:
            await self._sink.event({"jsonrpc": "2.0", "method": "notifications/message", "params": params})

    async def request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        raise RelayRefused.no_session(method)

    async def pause_stream(self) -> None:
        pass  # a stateless response cannot be resumed: it stays open until the answer


class _AnyResult(BaseModel):
    """A client's answer to a relayed request, kept as it came (the SDK validates it by method)."""

    model_config = ConfigDict(extra="allow")


class SessionRelay:
    """What an upstream says during one SDK-served request, sent back on that request's session."""

    def __init__(self, ctx: ServerRequestContext[Any], sessions: Sessions | None = None) -> None:
        self._ctx = ctx
        self._token = (ctx.meta or {}).get("progress_token")
        self.modern = Era.of(ctx.protocol_version) is Era.MODERN
        params: Mapping[str, Any] = ctx.params if isinstance(ctx.params, Mapping) else {}
        found = params.get("_meta")
        meta: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        self._log_levels = allowed_log_levels(ctx.protocol_version, meta)  # the SDK's rule for the era
        if self.modern:
            self.log_level: str | None = _modern_level(meta)
            self._threshold: str | None = None
            self._capabilities = _asking(meta.get(CLIENT_CAPABILITIES_META_KEY))
        else:
            self._threshold = sessions.log_level(ctx) if sessions is not None else None
            self.log_level = self._threshold or "debug"
            declared = ctx.session.client_capabilities
            can_ask = ctx.session.can_send_request and declared is not None
            self._capabilities = (
                _asking(declared.model_dump(by_alias=True, exclude_none=True)) if can_ask and declared is not None else {}
            )

    def client_capabilities(self) -> dict[str, Any]:
        return dict(self._capabilities)

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        if self._token is None:
            return
        try:
            await self._ctx.session.send_progress_notification(
                # The id as the client sent it (int or str): the SDK finds the request's stream by it.
                self._token, progress, total, message, related_request_id=self._ctx.request_id,  # type: ignore[arg-type]
            )
        except Exception:  # noqa: BLE001 - a lost progress notice must not fail the call
            logger.debug("progress notification dropped", exc_info=True)

    async def log(self, params: dict[str, Any]) -> None:
        level = params.get("level")
        if level not in self._log_levels or not level_allows(self._threshold, level):
            return
        try:
            notification = types.LoggingMessageNotification(params=types.LoggingMessageNotificationParams.model_validate(params))
            await self._ctx.session.send_notification(notification, related_request_id=self._ctx.request_id)
        except Exception:  # noqa: BLE001 - a lost (or malformed) log line must not fail the call
            logger.debug("log notification dropped", exc_info=True)

    async def request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        try:
            request = types.server_request_adapter.validate_python(
                {"method": method, **({"params": params} if params is not None else {})}
            )
        except ValidationError:
            raise RelayRefused(METHOD_NOT_FOUND, f"{method} cannot be relayed by the gateway") from None
        try:
            result = await self._ctx.session.send_request(
                request, _AnyResult, metadata=ServerMessageMetadata(related_request_id=self._ctx.request_id)
            )
        except NoBackChannelError:
            raise RelayRefused.no_session(method) from None
        except MCPError as exc:
            raise RelayRefused(exc.error.code, exc.error.message) from None
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def pause_stream(self) -> None:
        close = self._ctx.close_sse_stream  # set only where the client can resume (event store, 2025-11-25)
        if close is not None:
            await close()
