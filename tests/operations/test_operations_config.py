"""Config of the operations features: env overrides, telemetry choices, rate limit keys, workers."""

from __future__ import annotations

import pytest

from gateway.config.model import config_from_text
from gateway.errors import ConfigError
from gateway.pipeline.ratelimits import NO_LIMITS, RateLimits
from gateway.telemetry import Telemetry
from gateway.server.workers import check_workers, worker_replica_id

BASE = "server: {port: 8080}\nupstreams:\n  - {name: a, transport: stdio, command: x}\n"


def test_env_overrides_set_keys_and_name_the_variable_in_errors() -> None:
    config = config_from_text(BASE, environ={
        "DEX_GATEWAY__SERVER__PORT": "9000",
        "dex_gateway__upstreams__0__args": "[--flag, b]",
        "DEX_GATEWAY__TELEMETRY__METRICS": "false",
        "DEX_GATEWAY__UPSTREAMS__1": "{name: b, transport: stdio, command: y}",
        "DEX_GATEWAY_CONFIG": "ignored.yaml",  # one underscore: not an override
    })
    assert config.server.port == 9000
    assert config.upstreams[0].args == ["--flag", "b"]
    assert [u.name for u in config.upstreams] == ["a", "b"]
    assert config.telemetry.metrics is False
    with pytest.raises(ConfigError, match=r"environment variable DEX_GATEWAY__SERVER__PROT: server.prot: unknown key"):
        config_from_text(BASE, environ={"DEX_GATEWAY__SERVER__PROT": "1"})
    with pytest.raises(ConfigError, match=r"environment variable DEX_GATEWAY__UPSTREAMS__5__URL: upstreams.5 does not exist"):
        config_from_text(BASE, environ={"DEX_GATEWAY__UPSTREAMS__5__URL": "http://x"})
    with pytest.raises(ConfigError, match=r"DEX_GATEWAY__SERVER__PORT: the value is not valid YAML"):
        config_from_text(BASE, environ={"DEX_GATEWAY__SERVER__PORT": "[1"})


def test_telemetry_is_off_by_default_and_env_chooses_the_exporter() -> None:
    config = config_from_text(BASE)
    off = Telemetry.from_config(config.telemetry, environ={})
    assert off.tracer is None and off.metrics is not None
    on = Telemetry.from_config(config.telemetry, environ={"OTEL_TRACES_EXPORTER": "console"})
    assert on.tracer is not None
    on.shutdown()
    disabled = Telemetry.from_config(config.telemetry, environ={"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"})
    assert disabled.tracer is None
    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER: unknown trace exporter 'jaeger'"):
        Telemetry.from_config(config.telemetry, environ={"OTEL_TRACES_EXPORTER": "jaeger"})
    with pytest.raises(ConfigError, match="http/protobuf"):
        Telemetry.from_config(config.telemetry, environ={"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    no_metrics = config_from_text(BASE + "telemetry: {metrics: false, traces_exporter: none}\n")
    assert Telemetry.from_config(no_metrics.telemetry, environ={}).metrics is None


def test_rate_limit_keys() -> None:
    assert RateLimits.from_config(config_from_text(BASE)) is NO_LIMITS
    config = config_from_text(
        "upstreams:\n  - {name: a, transport: stdio, command: x, rate_limit: {per_second: 5}}\n"
        "rate_limits: {per_principal: {per_second: 2, burst: 4}}\n"
    )
    assert config.upstreams[0].rate_limit.capacity == 5
    assert config.rate_limits.per_principal.capacity == 4
    assert RateLimits.from_config(config) is not NO_LIMITS
    with pytest.raises(ConfigError, match="rate_limits.redis_url"):
        config_from_text("rate_limits: {redis_url: 'http://x'}\n")
    with pytest.raises(ConfigError, match=r"<config>:2: upstreams.0.rate_limit.per_second"):
        config_from_text("upstreams:\n  - {name: a, transport: stdio, command: x, rate_limit: {per_second: 0}}\n")


def test_workers_need_a_shared_store_and_get_stable_replica_ids() -> None:
    with pytest.raises(ConfigError, match="memory://"):
        check_workers(config_from_text("fences: {store: 'memory://'}\n"), 2)
    check_workers(config_from_text("fences: {store: 'memory://'}\n"), 1)
    named = config_from_text("fences: {replica_id: gw-a}\n")
    assert [worker_replica_id(named, 8080, i) for i in range(2)] == ["gw-a/w0", "gw-a/w1"]
    assert worker_replica_id(config_from_text(""), 8080, 1).endswith(":8080/w1")
