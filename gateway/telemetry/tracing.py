"""Spans: one per MCP request on the front, one per tools/call in the pipeline, one per upstream
request and per connector attempt, with the MCP semantic conventions and the gateway's own
attributes (`dex.*`).

The tracer travels in the OpenTelemetry context, beside the current span: the front (or the
pipeline, for a call that has no front request) puts it there, and the layers below read it with
`current_tracer()`. No tracer in the context -- telemetry off, or a background request such as a
listing refresh -- means no span and no work beyond one context lookup.

Trace context crosses each hop as W3C `traceparent`/`tracestate`: read from the client's request
`_meta` (MCP's carrier) or else its HTTP headers, written into the `_meta` of every upstream
request and into the HTTP headers of connector bindings.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from ..protocol import Params
from ..conventions.outcomes import Interrupted, NotSent

__all__ = [
    "FrontSpan",
    "NO_FRONT_SPAN",
    "attempt_result",
    "attempt_span",
    "client_span",
    "current_tracer",
    "front_span",
    "inject_meta",
    "inject_headers",
    "trace_headers",
    "upstream_request_span",
]

_TRACER_KEY = otel_context.create_key("dex-gateway.tracer")
# Set inside a pipeline attempt span: the upstream request under it makes no span of its own.
_IN_ATTEMPT_KEY = otel_context.create_key("dex-gateway.attempt")
_TRACE_KEYS = ("traceparent", "tracestate")

# MCP semantic conventions (OpenTelemetry semconv, "MCP" and "GenAI" attribute groups).
METHOD = "mcp.method.name"
PROTOCOL = "mcp.protocol.version"
SESSION = "mcp.session.id"
REQUEST_ID = "jsonrpc.request.id"
TOOL = "gen_ai.tool.name"
OPERATION = "gen_ai.operation.name"
ERROR_TYPE = "error.type"
UPSTREAM = "dex.upstream"
ATTEMPT = "dex.attempt"
ATTEMPT_RESULT = "dex.attempt.result"
STATUS_CODE = "rpc.response.status_code"


def trace_headers(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str] | None:
    """The W3C trace headers among an ASGI request's headers (None when there are none)."""
    found = {k.decode(): v.decode("latin-1") for k, v in raw if k in (b"traceparent", b"tracestate")}
    return found or None


def current_tracer() -> Tracer | None:
    """The gateway's tracer when the current request is traced, else None."""
    value = otel_context.get_value(_TRACER_KEY)
    return value if isinstance(value, Tracer) else None


def _parent(meta: Mapping[str, Any] | None, headers: Mapping[str, str] | None) -> otel_context.Context | None:
    """The client's trace context: `_meta` first (MCP's carrier), then the HTTP headers."""
    for carrier in (meta, headers):
        if not carrier or not any(k in carrier for k in _TRACE_KEYS):
            continue
        try:
            ctx = propagate.extract({k: carrier[k] for k in _TRACE_KEYS if isinstance(carrier.get(k), str)})
        except (ValueError, TypeError):
            continue
        if trace.get_current_span(ctx).get_span_context().is_valid:
            return ctx
    return None


class FrontSpan:
    """The SERVER span of one MCP request; `NO_FRONT_SPAN` when telemetry is off."""

    __slots__ = ("span",)

    def __init__(self, span: Span | None) -> None:
        self.span = span

    def error(self, code: int, message: str) -> None:
        if self.span is not None:
            self.span.set_attributes({ERROR_TYPE: str(code), STATUS_CODE: str(code)})
            self.span.set_status(StatusCode.ERROR, message)

    def result(self, result: Mapping[str, Any]) -> None:
        """A tools/call result: an `isError` result marks the span failed (as the SDK does)."""
        if self.span is not None and result.get("isError") is True:
            self.span.set_attribute(ERROR_TYPE, "tool_error")
            self.span.set_status(StatusCode.ERROR)


NO_FRONT_SPAN = FrontSpan(None)


@contextmanager
def front_span(
    tracer: Tracer,
    method: str,
    *,
    target: str | None,
    request_id: Any,
    protocol_version: str | None,
    session_id: str | None = None,
    meta: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Iterator[FrontSpan]:
    """A SERVER span named `{method} {target}`, current (with the tracer) for the body."""
    attributes: dict[str, AttributeValue] = {METHOD: method}
    if protocol_version:
        attributes[PROTOCOL] = protocol_version
    if request_id is not None:
        attributes[REQUEST_ID] = str(request_id)
    if session_id:
        attributes[SESSION] = session_id
    if method == "tools/call":
        attributes[OPERATION] = "execute_tool"
        if target:
            attributes[TOOL] = target
    elif method == "prompts/get" and target:
        attributes["gen_ai.prompt.name"] = target
    parent = _parent(meta, headers)
    span = tracer.start_span(
        f"{method} {target}" if target else method, context=parent, kind=SpanKind.SERVER, attributes=attributes
    )
    with _entered(span, otel_context.set_value(_TRACER_KEY, tracer, trace.set_span_in_context(span, parent))):
        yield FrontSpan(span)


@contextmanager
def traced(tracer: Tracer, name: str, attributes: Mapping[str, Any]) -> Iterator[Span]:
    """An INTERNAL span, current with the tracer for the body (the pipeline's call span)."""
    span = tracer.start_span(name, kind=SpanKind.INTERNAL, attributes=dict(attributes))
    with _entered(span, otel_context.set_value(_TRACER_KEY, tracer, trace.set_span_in_context(span))):
        yield span


@contextmanager
def client_span(name: str, attributes: Mapping[str, Any]) -> Iterator[Span | None]:
    """A CLIENT span (a connector attempt, a passthrough request) under the current request's
    span; yields None, creating nothing, when the current request is not traced."""
    tracer = current_tracer()
    if tracer is None:
        yield None
        return
    span = tracer.start_span(name, kind=SpanKind.CLIENT, attributes=dict(attributes))
    with _entered(span, trace.set_span_in_context(span)):
        yield span


@contextmanager
def attempt_span(tool: str, target: str, upstream: str, attempt: int) -> Iterator[Span]:
    """The CLIENT span of one attempt of a tools/call to an upstream (the caller checked that the
    request is traced); the upstream request made inside carries its traceparent."""
    tracer = current_tracer()
    assert tracer is not None
    attributes: dict[str, AttributeValue] = {METHOD: "tools/call", OPERATION: "execute_tool", TOOL: target, UPSTREAM: upstream, ATTEMPT: attempt,
                  "dex.tool": tool}
    span = tracer.start_span(f"tools/call {target}", kind=SpanKind.CLIENT, attributes=attributes)
    with _entered(span, otel_context.set_value(_IN_ATTEMPT_KEY, True, trace.set_span_in_context(span))):
        yield span


@contextmanager
def _entered(span: Span, ctx: otel_context.Context) -> Iterator[Span]:
    """`span` current (in `ctx`) for the body; a body that raises marks it failed; ended after."""
    token = otel_context.attach(ctx)
    try:
        yield span
    except BaseException as exc:
        mark_failed(span, type(exc).__qualname__)
        raise
    finally:
        otel_context.detach(token)
        span.end()


def upstream_request_span(
    upstream: str, method: str, params: Params | None
) -> AbstractContextManager[Params | None]:
    """Around one request to an upstream: yields `params` with the current trace context in its
    `_meta`. Outside a pipeline attempt (passthrough requests) the request gets a CLIENT span of
    its own. Untraced: yields `params` unchanged, at the cost of one context lookup."""
    if current_tracer() is None:
        return nullcontext(params)
    return _upstream_request_span(upstream, method, params)


@contextmanager
def _upstream_request_span(upstream: str, method: str, params: Params | None) -> Iterator[Params | None]:
    if otel_context.get_value(_IN_ATTEMPT_KEY):
        yield inject_meta(params)
        return
    target = (params or {}).get("name") or (params or {}).get("uri")
    attributes: dict[str, AttributeValue] = {METHOD: method, UPSTREAM: upstream}
    if method == "tools/call" and isinstance(target, str):
        attributes[TOOL] = target
    elif method.startswith("resources/") and isinstance(target, str):
        attributes["mcp.resource.uri"] = target
    name = f"{method} {target}" if isinstance(target, str) and method != "resources/read" else method
    with client_span(name, attributes):
        yield inject_meta(params)


def inject_meta(params: Params | None) -> Params | None:
    """`params` with the current span's `traceparent` in its `_meta` (a copy; the caller's dict
    and its `_meta` are not changed). Unchanged when nothing is traced."""
    if current_tracer() is None:
        return params
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    if not carrier:
        return params
    out = dict(params or {})
    meta = {k: v for k, v in (out.get("_meta") or {}).items() if k not in _TRACE_KEYS}
    meta.update(carrier)
    out["_meta"] = meta
    return out


def inject_headers(headers: MutableMapping[str, str]) -> None:
    """Add the current span's `traceparent` (and `tracestate`) to outgoing HTTP headers."""
    if current_tracer() is not None:
        propagate.inject(headers)


def mark_failed(span: Span | None, error_type: str, message: str | None = None) -> None:
    if span is not None:
        span.set_attribute(ERROR_TYPE, error_type)
        span.set_status(StatusCode.ERROR, message)


def attempt_result(result: object) -> str:
    """replied, not_sent or interrupted: what one attempt came to (a connector binding's result)."""
    if isinstance(result, NotSent):
        return "not_sent"
    return "interrupted" if isinstance(result, Interrupted) else "replied"
