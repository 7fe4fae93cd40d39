"""W3C trace context in the request `_meta` of the host's MCP requests (MCP's carrier for it):
the current span's `traceparent` (and `tracestate`, when there is one), so the gateway's and
the upstream's spans join the host's trace under its `execute_tool` span. Nothing is added when
nothing is traced (no tracer provider installed, or no span current)."""

from __future__ import annotations

from typing import Any

from opentelemetry import propagate

__all__ = ["with_trace"]

_TRACE_KEYS = ("traceparent", "tracestate")


def with_trace(meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """`meta` (a copy) with the current span's trace context; unchanged keys otherwise."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    out = {k: v for k, v in (meta or {}).items() if not (carrier and k in _TRACE_KEYS)}
    out.update({k: v for k, v in carrier.items() if k in _TRACE_KEYS})
    return out
