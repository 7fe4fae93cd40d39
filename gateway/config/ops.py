"""The config sections of running the gateway in production: `telemetry`, `rate_limits`, and
the `rate_limit` of a token or an upstream (docs/configuration.md). Part of gateway.yaml's
models (gateway/config/model.py), kept here so that module stays one screenful per concern."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["RateConfig", "RateLimitsConfig", "TelemetryConfig"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RateConfig(_Strict):
    """A token bucket: `per_second` calls on average, up to `burst` at once."""

    per_second: float = Field(gt=0)
    burst: int = Field(0, ge=0)  # 0: max(1, per_second)

    @property
    def capacity(self) -> float:
        return float(self.burst) if self.burst else max(1.0, self.per_second)


class TelemetryConfig(_Strict):
    """Traces and metrics (docs/configuration.md, `telemetry`). The standard OTEL_* environment
    variables override these keys."""

    # none (default: no spans are made), otlp (OTLP over HTTP/protobuf), console; OTEL_TRACES_EXPORTER.
    traces_exporter: str = "none"
    # Base URL of the OTLP/HTTP receiver (/v1/traces is appended); OTEL_EXPORTER_OTLP_ENDPOINT.
    otlp_endpoint: str | None = Field(None, pattern=r"^https?://")
    service_name: str = Field("dex-gateway", min_length=1)  # OTEL_SERVICE_NAME
    # Share of new traces kept (a client's sampled flag is followed); OTEL_TRACES_SAMPLER(_ARG).
    sample_ratio: float = Field(1.0, ge=0, le=1)
    # Prometheus text at /metrics.
    metrics: bool = True
    # SHA-256 of a token that may read /metrics and nothing else (the admin token may too).
    metrics_token_sha256: str | None = Field(None, pattern=r"^[0-9a-fA-F]{64}$")


class RateLimitsConfig(_Strict):
    """tools/call rate limits (token buckets). Unset: no limit."""

    # Every principal's own bucket, unless its token sets rate_limit.
    per_principal: RateConfig | None = None
    # redis://host:port/db: buckets shared by every replica; unset: each process has its own.
    redis_url: str | None = Field(None, pattern=r"^rediss?://")
    # Prefix of the Redis keys (one per bucket).
    redis_prefix: str = Field("dex-gateway:rate:", min_length=1)
