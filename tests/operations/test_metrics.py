"""`/metrics` of a real gateway after a few calls: the counters and histograms, and who may read it.

Calls made: a fenced write, its retry (replayed from the fence), a duplicate of a slow write
while the first still runs (the duplicate waits `fences.wait_seconds`, then is answered unknown),
and a read. Then the scrape: without a token 401, with an agent's token 401 (metrics name every
principal's tools), with the scrape-only token or the admin token 200 and the Prometheus text.
"""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gateway.http.auth import sha256_hex
from tests.operations.support import new_key, ops_upstream, post, tool_call, wait_for, events
from tests.support.gateway import start_gateway, write_config

AGENT, ADMIN, SCRAPER = "agent-token", "admin-token", "scrape-token"


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_metrics_after_calls(tmp_path: Path) -> None:
    log = tmp_path / "ops.jsonl"
    cfg = write_config(tmp_path, {
        "auth": {"tokens": [{"principal": "agent", "token_sha256": sha256_hex(AGENT)}],
                 "admin_token_sha256": sha256_hex(ADMIN)},
        "telemetry": {"metrics_token_sha256": sha256_hex(SCRAPER)},
        "upstreams": [ops_upstream("ops", log)],
        "fences": {"store": f"sqlite:///{tmp_path / 'fences.db'}", "wait_seconds": 0.3},
    })
    with start_gateway(cfg) as gw, httpx.Client(timeout=30) as client:
        key = new_key()
        first = post(client, gw.url, tool_call("ops__write", {"text": "a"}, key=key), token=AGENT)
        again = post(client, gw.url, tool_call("ops__write", {"text": "a"}, key=key), token=AGENT)
        assert "result" in again, (first, again)
        assert again["result"]["content"] == first["result"]["content"]
        post(client, gw.url, tool_call("ops__slow_read", {"seconds": 0}), token=AGENT)

        slow_key = new_key()
        slow = threading.Thread(target=post, args=(httpx.Client(timeout=30), gw.url,
                                                   tool_call("ops__slow_write", {"seconds": 2}, key=slow_key)),
                                kwargs={"token": AGENT})
        slow.start()
        wait_for(lambda: events(log, "start", "slow_write"), what="the slow write to start")
        duplicate = post(client, gw.url, tool_call("ops__slow_write", {"seconds": 2}, key=slow_key), token=AGENT)
        assert duplicate["result"]["_meta"]["io.superdurable.dex/outcome"] == "unknown"
        in_flight = client.get(f"{gw.base}/metrics", headers={"authorization": f"Bearer {SCRAPER}"})
        slow.join()

        assert client.get(f"{gw.base}/metrics").status_code == 401
        assert client.get(f"{gw.base}/metrics", headers={"authorization": f"Bearer {AGENT}"}).status_code == 401
        assert client.get(f"{gw.base}/metrics", headers={"authorization": f"Bearer {ADMIN}"}).status_code == 200
        response = client.get(f"{gw.base}/metrics", headers={"authorization": f"Bearer {SCRAPER}"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    m = _samples(response.text)

    def value(name: str, **labels: str) -> float:
        return m.get((name, tuple(sorted(labels.items()))), 0.0)

    assert value("dex_gateway_tool_calls_total", tool="ops__write", upstream="ops", outcome="ok") == 2
    assert value("dex_gateway_tool_calls_total", tool="ops__slow_read", upstream="ops", outcome="ok") == 1
    assert value("dex_gateway_tool_calls_total", tool="ops__slow_write", upstream="ops", outcome="ok") == 1
    assert value("dex_gateway_tool_calls_total", tool="ops__slow_write", upstream="ops", outcome="unknown") == 1
    assert value("dex_gateway_fence_claims_total", tool="ops__write") == 1
    assert value("dex_gateway_fence_replays_total", tool="ops__write") == 1
    assert value("dex_gateway_fence_unknowns_total", tool="ops__slow_write", reason="wait_timeout") == 1
    assert value("dex_gateway_upstream_attempts_total", upstream="ops", result="replied") == 3
    assert value("dex_gateway_tool_call_duration_seconds_count", tool="ops__write", upstream="ops") == 2
    assert value("dex_gateway_tool_call_duration_seconds_bucket", tool="ops__slow_write", upstream="ops", le="5.0") == 2
    assert value("dex_gateway_tool_call_duration_seconds_bucket", tool="ops__slow_write", upstream="ops", le="1.0") == 1
    assert value("dex_gateway_tool_calls_in_flight") == 0
    assert value("dex_gateway_upstream_up", upstream="ops") == 1
    assert value("dex_gateway_upstream_listing_age_seconds", upstream="ops") > 0
    # Families that these calls did not touch are still declared.
    for family in ("dex_gateway_fence_takeovers", "dex_gateway_rate_limited"):
        assert f"# TYPE {family}_total counter" in response.text or f"# TYPE {family} counter" in response.text
    # While the slow write ran, it was counted in flight.
    assert _samples(in_flight.text)[("dex_gateway_tool_calls_in_flight", ())] == 1
