"""Rate limits: token buckets per principal and per upstream, in process or shared through Redis.

* The buckets alone: N "replicas" (N Redis clients) hammering one bucket together never get more
  than the bucket gives (capacity + rate x time), while N in-process bucket sets each give it all.
* A real gateway: a limited call is a JSON-RPC error that says when to retry, and it was not sent
  upstream; both entries (fast path, SDK server) answer it the same, in both protocol eras.
* Two gateway processes sharing Redis: together they grant the upstream's burst once, not twice.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gateway.config.model import RateConfig
from gateway.errors import RATE_LIMITED
from gateway.pipeline.ratelimits import Bucket, LocalBuckets, RedisBuckets
from tests.operations.support import events, ops_upstream, tool_call
from tests.support.gateway import start_gateway, write_config

REDIS_URL = "redis://127.0.0.1:6379/0"
HANDSHAKE, MODERN = "2025-11-25", "2026-07-28"


def _redis_up() -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


needs_redis = pytest.mark.skipif(not _redis_up(), reason=f"no Redis at {REDIS_URL}")


async def _hammer(stores: list[Any], bucket: Bucket, seconds: float) -> tuple[int, float]:
    granted = 0
    started = time.monotonic()

    async def replica(store: Any) -> None:
        nonlocal granted
        while time.monotonic() - started < seconds:
            wait, _ = await store.take([bucket])
            if wait == 0:
                granted += 1
            else:
                await anyio.sleep(min(wait, 0.005))

    async with anyio.create_task_group() as tg:
        for store in stores:
            for _ in range(4):  # four concurrent callers per replica
                tg.start_soon(replica, store)
    return granted, time.monotonic() - started


@needs_redis
@pytest.mark.anyio
async def test_replicas_sharing_redis_never_grant_more_than_the_bucket() -> None:
    rate = RateConfig(per_second=20, burst=10)
    bucket = Bucket("p:alice", "principal", "alice", rate)
    prefix = f"dex-test:{uuid.uuid4().hex}:"
    replicas = [RedisBuckets(REDIS_URL, prefix) for _ in range(4)]
    try:
        granted, elapsed = await _hammer(replicas, bucket, 1.5)
    finally:
        for store in replicas:
            await store.aclose()
    allowed = rate.capacity + rate.per_second * elapsed
    assert granted <= allowed + 1, (granted, allowed)
    assert granted >= 0.8 * allowed, (granted, allowed)  # and it does grant what it holds
    # The same four replicas with their own in-process buckets grant about four times as much.
    local, elapsed = await _hammer([LocalBuckets() for _ in range(4)], bucket, 1.5)
    assert local > 3 * (rate.capacity + rate.per_second * elapsed) * 0.8


def test_principal_and_upstream_buckets_are_taken_together() -> None:
    buckets = LocalBuckets(clock=lambda: 0.0)
    principal = Bucket("p:a", "principal", "a", RateConfig(per_second=1, burst=5))
    upstream = Bucket("u:x", "upstream", "x", RateConfig(per_second=1, burst=2))
    assert buckets.take_now([principal, upstream]) == (0.0, -1)
    assert buckets.take_now([principal, upstream]) == (0.0, -1)
    wait, worst = buckets.take_now([principal, upstream])
    assert worst == 1 and wait == pytest.approx(1.0)
    # The refused call took nothing from the principal: three more calls to another upstream.
    for _ in range(3):
        assert buckets.take_now([principal]) == (0.0, -1)
    assert buckets.take_now([principal])[1] == 0


def _post(client: httpx.Client, url: str, era: str, message: dict[str, Any]) -> httpx.Response:
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json",
               "mcp-protocol-version": era}
    message = json.loads(json.dumps(message))
    if era == MODERN:
        headers["mcp-method"] = message["method"]
        headers["mcp-name"] = message["params"]["name"]
        message["params"]["_meta"] = {**message["params"].get("_meta", {}),
                                      "io.modelcontextprotocol/protocolVersion": era,
                                      "io.modelcontextprotocol/clientCapabilities": {}}
    return client.post(url, headers=headers, content=json.dumps(message).encode())


def _final(response: httpx.Response) -> str:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")][-1]
    return response.text


def test_a_limited_call_is_not_sent_and_both_entries_say_so_alike(tmp_path: Path) -> None:
    gateways, logs = {}, {}
    limited: dict[str, dict[str, tuple[int, str]]] = {}
    with httpx.Client(timeout=30) as client:
        for entry in ("fast", "sdk"):
            logs[entry] = tmp_path / f"{entry}.jsonl"
            cfg = write_config(tmp_path / entry, {
                "server": {"fast_tool_calls": entry == "fast"},
                "rate_limits": {"per_principal": {"per_second": 0.001, "burst": 1}},
                "upstreams": [ops_upstream("ops", logs[entry])],
            })
            with start_gateway(cfg) as gw:
                first = _post(client, gw.url, HANDSHAKE, tool_call("ops__slow_read", {"seconds": 0}, request_id=1))
                assert first.status_code == 200 and '"isError":false' in _final(first).replace(" ", "")
                limited[entry] = {}
                for era in (HANDSHAKE, MODERN):
                    response = _post(client, gw.url, era, tool_call("ops__slow_read", {"seconds": 0}, request_id=7))
                    limited[entry][era] = (response.status_code, _final(response))
                gateways[entry] = gw
    for era in (HANDSHAKE, MODERN):
        (fast_status, fast), (sdk_status, sdk) = limited["fast"][era], limited["sdk"][era]
        message = json.loads(fast)
        error = message["error"]
        assert error["code"] == RATE_LIMITED
        assert "The call was not sent; retry after" in error["message"]
        assert error["data"]["limit"] == "principal" and error["data"]["sent"] is False
        assert 900 < error["data"]["retryAfterSeconds"] <= 1000
        # Byte for byte the same answer, but for the seconds to wait (each gateway's own clock).
        mask = re.compile(r"\d+(\.\d+)?(?= s\.)|(?<=\"retryAfterSeconds\":)\s?[\d.]+")
        assert (fast_status, mask.sub("N", fast)) == (sdk_status, mask.sub("N", sdk)), (fast, sdk)
    for entry in ("fast", "sdk"):
        assert len(events(logs[entry], "start", "slow_read")) == 1  # only the first call was sent


@needs_redis
def test_two_gateways_sharing_redis_grant_the_upstream_burst_once(tmp_path: Path) -> None:
    log = tmp_path / "ops.jsonl"
    prefix = f"dex-test:{uuid.uuid4().hex}:"
    config = {
        "rate_limits": {"redis_url": REDIS_URL, "redis_prefix": prefix},
        "upstreams": [ops_upstream("ops", log, rate_limit={"per_second": 0.01, "burst": 3})],
    }
    a, b = write_config(tmp_path / "a", config), write_config(tmp_path / "b", config)
    codes = []
    with start_gateway(a) as gw_a, start_gateway(b) as gw_b, httpx.Client(timeout=30) as client:
        for n in range(8):
            gw = (gw_a, gw_b)[n % 2]
            response = _post(client, gw.url, HANDSHAKE, tool_call("ops__slow_read", {"seconds": 0}, request_id=n))
            message = json.loads(_final(response))
            codes.append("ok" if "result" in message else message["error"]["code"])
    assert codes.count("ok") == 3, codes
    assert codes.count(RATE_LIMITED) == 5, codes
    assert len(events(log, "start", "slow_read")) == 3
