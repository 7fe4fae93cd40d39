"""The front span of every request the SDK's server answers (the fast path makes its own).

The SDK's low-level `Server` ships an `OpenTelemetryMiddleware` as `server.middleware[0]`: a
SERVER span per message on the *global* tracer provider, parented by the `_meta` trace context
only. The gateway replaces it with `FrontSpans`, the same span (name, kind, MCP attributes,
error status) on the gateway's own tracer, plus the session id and a client's HTTP `traceparent`,
and with the tracer in the context for the spans below. Telemetry off: the SDK's middleware is
removed too, so the SDK path makes no span and pays nothing for one. Either way exactly one front
span (or none) per request.
"""

from __future__ import annotations

from typing import Any

from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from opentelemetry.trace import Tracer
from pydantic import ValidationError

from ..internals import replace_sdk_tracing
from .tracing import front_span

__all__ = ["FrontSpans", "trace_sdk_server"]


class FrontSpans:
    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    async def __call__(self, ctx: ServerRequestContext[Any], call_next: Any) -> Any:
        params = ctx.params if isinstance(ctx.params, dict) else {}
        name = params.get("name")
        request = ctx.request
        headers = getattr(request, "headers", None)
        meta = params.get("_meta")
        with front_span(
            self._tracer, ctx.method,
            target=name if isinstance(name, str) else None,
            request_id=ctx.request_id,
            protocol_version=ctx.protocol_version,
            session_id=headers.get("mcp-session-id") if headers is not None else None,
            meta=meta if isinstance(meta, dict) else None,
            headers=headers,
        ) as span:
            try:
                result = await call_next(ctx)
            except MCPError as exc:
                span.error(exc.error.code, exc.error.message)
                raise
            except ValidationError:
                span.error(INVALID_PARAMS, "Invalid request parameters")
                raise
            if ctx.method == "tools/call" and isinstance(result, dict):
                span.result(result)
            return result


def trace_sdk_server(server: Server[Any], tracer: Tracer | None) -> None:
    """Put `FrontSpans` where the SDK's OpenTelemetry middleware is (or drop it: no tracer)."""
    replace_sdk_tracing(server, [FrontSpans(tracer)] if tracer is not None else [])
