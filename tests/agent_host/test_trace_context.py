"""The host's trace context reaches the gateway and the upstream: with tracing on, the host's
`tools/call` carries `traceparent` in request `_meta` (put there by the MCP SDK's dispatcher for
its client span `MCP send tools/call …`, a child of the host's `execute_tool` span), so the
gateway's span for the call joins the host's trace under it, and the upstream's request carries
the same trace. Real processes: `dex-agent run`, the gateway (stdio ops upstream), and an OTLP/HTTP
receiver both export to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tests.operations.test_otlp_export as otlp
from tests.agent_host.host_support import run_agent
from tests.operations.support import events, ops_upstream, wait_for
from tests.support.gateway import start_gateway, write_config


def _env(endpoint: str, service: str) -> dict[str, str]:
    return {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_SERVICE_NAME": service, "OTEL_BSP_SCHEDULE_DELAY": "100"}


def test_traceparent_in_meta_joins_the_gateway_and_upstream_to_the_hosts_trace(tmp_path: Path) -> None:
    log = tmp_path / "ops.jsonl"
    config = write_config(tmp_path, {"upstreams": [ops_upstream("ops", log)]})
    with otlp.otlp_receiver() as (endpoint, receiver), start_gateway(config, env=_env(endpoint, "gw")) as gateway:
        done = run_agent("run", "--gateway", gateway.url, "--store", str(tmp_path / "s.db"), "--yes",
                         "--model", "scripted:tests.agent_host.trace_scripts:write_once", "write it",
                         env=_env(endpoint, "host"))
        assert done.returncode == 0, done.stdout + done.stderr

        def spans() -> dict[str, dict[str, Any]]:
            with receiver.lock:
                return {s["name"]: s for s in receiver.spans}

        wait_for(lambda: {"execute_tool ops__write", "tools/call ops__write", "tools/call write"} <= set(spans()),
                 timeout=20, what="the host's and the gateway's spans at the receiver")
    found = spans()
    tool, front, attempt = found["execute_tool ops__write"], found["tools/call ops__write"], found["tools/call write"]
    sent = found["MCP send tools/call ops__write"]  # the MCP SDK's client span, whose traceparent goes in _meta
    assert tool["resource"]["service.name"] == "host" and front["resource"]["service.name"] == "gw"
    # The request left under the host's execute_tool span, and the gateway's span of the call is
    # the child of the request's span: one trace from the turn to the upstream.
    assert sent["parent"] == tool["span_id"] and front["parent"] == sent["span_id"]
    assert front["trace_id"] == tool["trace_id"] == attempt["trace_id"]
    assert found["invoke_agent dex-agent"]["trace_id"] == tool["trace_id"]
    # The upstream's request carries the same trace (the gateway's attempt span as its parent).
    (started,) = events(log, "start", "write")
    assert started["meta"]["traceparent"].split("-")[1:3] == [tool["trace_id"], attempt["span_id"]]


def test_without_tracing_no_traceparent_is_sent(tmp_path: Path) -> None:
    log = tmp_path / "ops.jsonl"
    config = write_config(tmp_path, {"upstreams": [ops_upstream("ops", log)]})
    with start_gateway(config) as gateway:
        done = run_agent("run", "--gateway", gateway.url, "--store", str(tmp_path / "s.db"), "--yes",
                         "--model", "scripted:tests.agent_host.trace_scripts:write_once", "write it")
        assert done.returncode == 0, done.stdout + done.stderr
    (started,) = events(log, "start", "write")
    assert "traceparent" not in (started.get("meta") or {}), started
