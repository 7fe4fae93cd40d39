"""Spans of one fenced tools/call, in process, with an in-memory exporter, through both entries.

The gateway app runs in this process (its lifespan entered by hand) with a tracer provider whose
spans land in an `InMemorySpanExporter`; requests go through httpx's ASGI transport, once to a
gateway whose fast path answers `tools/call` and once to one where the SDK's server does
(`server.fast_tool_calls: false`). The client's trace context comes in the request `_meta` or in
the HTTP `traceparent` header. Asserted: the span tree front (SERVER) -> pipeline (INTERNAL) ->
upstream attempt (CLIENT), each span's attributes, the client's trace as parent, the attempt's
`traceparent` in the `_meta` the upstream received, and a retry with the same key answered from
the fence (`dex.fence.state: replayed`, no attempt span).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gateway.server.app import create_app
from gateway.config.model import GatewayConfig
from gateway.telemetry import Telemetry
from tests.operations.support import HANDSHAKE, ACCEPT, events, last_message, new_key, ops_upstream, tool_call

pytestmark = pytest.mark.anyio

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_SPAN}-01"


def _config(tmp_path: Path, log: Path, fast: bool) -> GatewayConfig:
    return GatewayConfig.model_validate({
        "server": {"fast_tool_calls": fast},
        "upstreams": [ops_upstream("ops", log)],
        "fences": {"store": f"sqlite:///{tmp_path / 'fences.db'}"},
    })


async def _call(client: httpx.AsyncClient, message: dict[str, Any], carrier: str) -> dict[str, Any]:
    headers = {"content-type": "application/json", "accept": ACCEPT, "mcp-protocol-version": HANDSHAKE}
    if carrier == "header":
        headers["traceparent"] = TRACEPARENT
    else:
        message["params"]["_meta"]["traceparent"] = TRACEPARENT
    response = await client.post("/mcp", json=message, headers=headers)
    assert response.status_code == 200, response.text
    return last_message(response)


async def _listed(app: Any) -> None:
    """Wait for the start-up listing (its spans are no part of the call's tree)."""
    import anyio

    with anyio.fail_after(20):
        while not app.state.runtime.catalog_listed:
            await anyio.sleep(0.02)


def _hex(span: ReadableSpan) -> tuple[str, str]:
    ctx = span.get_span_context()
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def _children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.get_span_context().span_id]


@pytest.mark.parametrize("carrier", ["meta", "header"])
@pytest.mark.parametrize("entry", ["fast", "sdk"])
async def test_span_tree_of_a_fenced_call(tmp_path: Path, entry: str, carrier: str) -> None:
    log = tmp_path / "ops.jsonl"
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = create_app(_config(tmp_path, log, entry == "fast"), telemetry=Telemetry.with_tracer_provider(provider))
    key = new_key()
    async with app.router.lifespan_context(app):
        await _listed(app)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080", timeout=30) as client:
            first = await _call(client, tool_call("ops__write", {"text": "hi"}, key=key), carrier)
            spans = list(exporter.get_finished_spans())
            exporter.clear()
            retry = await _call(client, tool_call("ops__write", {"text": "hi"}, key=key, request_id=2), carrier)
            retry_spans = list(exporter.get_finished_spans())
    provider.shutdown()
    assert first["result"]["isError"] is False, first
    assert retry["result"]["content"] == first["result"]["content"]

    # front (SERVER), one per request, child of the client's span
    (front,) = [s for s in spans if s.kind is SpanKind.SERVER]
    assert front.name == "tools/call ops__write"
    assert _hex(front)[0] == TRACE_ID and f"{front.parent.span_id:016x}" == PARENT_SPAN
    assert front.attributes["mcp.method.name"] == "tools/call"
    assert front.attributes["gen_ai.tool.name"] == "ops__write"
    assert front.attributes["gen_ai.operation.name"] == "execute_tool"
    assert front.attributes["jsonrpc.request.id"] == "1"
    assert front.attributes["mcp.protocol.version"] == HANDSHAKE

    # pipeline (INTERNAL): the gateway's own attributes
    (pipeline,) = _children(spans, front)
    assert pipeline.kind is SpanKind.INTERNAL and pipeline.name == "pipeline ops__write"
    assert dict(pipeline.attributes) == {
        "gen_ai.tool.name": "ops__write", "dex.effect": "non_idempotent_write", "dex.approval": "none",
        "dex.upstream": "ops", "dex.fence.state": "claimed", "dex.replayed": False, "dex.attempts": 1,
        "dex.outcome": "ok",
    }

    # the upstream attempt (CLIENT), whose context the upstream received in _meta
    (attempt,) = _children(spans, pipeline)
    assert attempt.kind is SpanKind.CLIENT and attempt.name == "tools/call write"
    assert attempt.attributes["dex.attempt"] == 1
    assert attempt.attributes["dex.upstream"] == "ops"
    assert attempt.attributes["dex.attempt.result"] == "replied"
    assert attempt.attributes["mcp.method.name"] == "tools/call"
    assert not _children(spans, attempt)
    (started,) = events(log, "start", "write")
    trace_id, span_id = _hex(attempt)
    assert started["meta"]["traceparent"] == f"00-{trace_id}-{span_id}-01"
    assert len(spans) == 3, [s.name for s in spans]

    # the retry: answered by the fence, nothing sent
    (front2,) = [s for s in retry_spans if s.kind is SpanKind.SERVER]
    (pipeline2,) = _children(retry_spans, front2)
    assert pipeline2.attributes["dex.fence.state"] == "replayed"
    assert pipeline2.attributes["dex.replayed"] is True
    assert not _children(retry_spans, pipeline2)
    assert len(events(log, "start", "write")) == 1


async def test_no_spans_when_off(tmp_path: Path) -> None:
    """Telemetry off (the default): the SDK's own OpenTelemetry middleware is gone too."""
    log = tmp_path / "ops.jsonl"
    app = create_app(_config(tmp_path, log, fast=False), telemetry=Telemetry.off())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080", timeout=30) as client:
            answer = await _call(client, tool_call("ops__write", {"text": "x"}, key=new_key()), "meta")
    assert answer["result"]["isError"] is False
    (started,) = events(log, "start", "write")
    # The client's traceparent passes through untouched: the gateway adds no span of its own.
    assert started["meta"]["traceparent"] == TRACEPARENT
