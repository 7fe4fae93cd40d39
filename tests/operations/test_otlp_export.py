"""Spans leave a real gateway process over OTLP/HTTP, configured by the standard OTEL_* variables.

The receiver is written here: an HTTP server on loopback that decodes each POST /v1/traces body
as an `ExportTraceServiceRequest` (opentelemetry-proto) and keeps its spans. The gateway is
started with OTEL_TRACES_EXPORTER=otlp, OTEL_EXPORTER_OTLP_ENDPOINT pointing at it,
OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf and OTEL_SERVICE_NAME; nothing in its config file.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.operations.support import events, new_key, ops_upstream, post, tool_call, wait_for
from tests.support.gateway import start_gateway, write_config


class _Receiver:
    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, _Receiver]]:
    receiver = _Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            with receiver.lock:
                for resource_spans in request.resource_spans:
                    resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                    for scope_spans in resource_spans.scope_spans:
                        for span in scope_spans.spans:
                            receiver.spans.append({
                                "path": self.path, "resource": resource, "scope": scope_spans.scope.name,
                                "name": span.name, "kind": span.kind, "trace_id": span.trace_id.hex(),
                                "span_id": span.span_id.hex(), "parent": span.parent_span_id.hex(),
                                "attributes": {a.key: _value(a.value) for a in span.attributes},
                            })
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", receiver
    finally:
        server.shutdown()
        server.server_close()


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def test_spans_reach_an_otlp_http_receiver(tmp_path: Path) -> None:
    log = tmp_path / "ops.jsonl"
    cfg = write_config(tmp_path, {"upstreams": [ops_upstream("ops", log)]})
    with otlp_receiver() as (endpoint, receiver):
        env = {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": "gateway-under-test",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        with start_gateway(cfg, env=env) as gw, httpx.Client(timeout=30) as client:
            answer = post(client, gw.url, tool_call("ops__write", {"text": "x"}, key=new_key()))
            assert answer["result"]["isError"] is False

            def names() -> set[str]:
                with receiver.lock:
                    return {s["name"] for s in receiver.spans}

            wait_for(lambda: {"tools/call ops__write", "pipeline ops__write", "tools/call write"} <= names(),
                     timeout=15, what="the call's spans at the receiver")
    with receiver.lock:
        spans = {s["name"]: s for s in receiver.spans}
    front, pipeline, attempt = spans["tools/call ops__write"], spans["pipeline ops__write"], spans["tools/call write"]
    assert front["path"] == "/v1/traces"
    assert front["resource"]["service.name"] == "gateway-under-test"
    assert front["scope"] == "dex-gateway"
    assert pipeline["parent"] == front["span_id"] and attempt["parent"] == pipeline["span_id"]
    assert front["trace_id"] == pipeline["trace_id"] == attempt["trace_id"]
    assert pipeline["attributes"]["dex.fence.state"] == "claimed"
    assert pipeline["attributes"]["dex.outcome"] == "ok"
    assert attempt["attributes"]["dex.attempt"] == 1
    (started,) = events(log, "start", "write")
    assert started["meta"]["traceparent"].split("-")[1:3] == [attempt["trace_id"], attempt["span_id"]]
