"""Spans and metrics, one place (docs/configuration.md, `telemetry`).

    telemetry = Telemetry.from_config(config.telemetry)   # reads the OTEL_* variables too
    telemetry.install()      # in the lifespan: the global tracer provider, if we made one
    ...
    telemetry.shutdown()     # flush spans on the way out

Traces are off unless an exporter is chosen (`OTEL_TRACES_EXPORTER=otlp` or
`telemetry.traces_exporter: otlp`); then `tracer` is set and the front, the pipeline and the
upstream layers make spans (gateway/telemetry/tracing.py). Off, `tracer` is None and no span,
context or attribute is made anywhere. Metrics (gateway/telemetry/metrics.py) are on by default.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.trace import Tracer

from ..config.model import TelemetryConfig
from ..errors import ConfigError
from .metrics import CONTENT_TYPE, GatewayMetrics, UpstreamState
from .tracing import FrontSpan, NO_FRONT_SPAN, front_span

if TYPE_CHECKING:  # the SDK is imported only when tracing is on
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = [
    "CONTENT_TYPE", "FrontSpan", "GatewayMetrics", "NO_FRONT_SPAN",
    "Telemetry", "UpstreamState", "front_span",
]

logger = logging.getLogger(__name__)

SCOPE = "dex-gateway"
_EXPORTERS = frozenset({"none", "otlp", "console"})


@dataclass
class Telemetry:
    tracer: Tracer | None = None
    metrics: GatewayMetrics | None = None
    # The provider this object made (and so installs and shuts down); None when given one.
    _provider: object | None = field(default=None, repr=False)

    @classmethod
    def off(cls) -> "Telemetry":
        return cls()

    @classmethod
    def from_config(
        cls, config: TelemetryConfig, *, environ: Mapping[str, str] | None = None, instance_id: str | None = None
    ) -> "Telemetry":
        env = os.environ if environ is None else environ
        metrics = GatewayMetrics() if config.metrics else None
        exporters = _exporters(config, env)
        if not exporters:
            return cls(metrics=metrics)
        provider = _provider(config, env, exporters, instance_id)
        return cls(tracer=provider.get_tracer(SCOPE), metrics=metrics, _provider=provider)

    @classmethod
    def with_tracer_provider(cls, provider: trace.TracerProvider, *, metrics: bool = True) -> "Telemetry":
        """Telemetry on a provider made by the caller (tests: an in-memory exporter)."""
        return cls(tracer=provider.get_tracer(SCOPE), metrics=GatewayMetrics() if metrics else None)

    def install(self) -> None:
        """Make our provider the global one (libraries that trace find it), unless one is set."""
        if self._provider is None:
            return
        if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            trace.set_tracer_provider(self._provider)  # type: ignore[arg-type]
        else:
            logger.info("telemetry: a global tracer provider is already set; the gateway keeps its own")

    def shutdown(self) -> None:
        """Export what is still buffered (bounded by the exporter's timeout)."""
        provider = self._provider
        if provider is not None:
            provider.shutdown()  # type: ignore[attr-defined]


def _exporters(config: TelemetryConfig, env: Mapping[str, str]) -> list[str]:
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    raw = env.get("OTEL_TRACES_EXPORTER")
    source = "OTEL_TRACES_EXPORTER" if raw is not None else "telemetry.traces_exporter"
    names = [n.strip().lower() for n in (raw if raw is not None else config.traces_exporter).split(",") if n.strip()]
    unknown = [n for n in names if n not in _EXPORTERS]
    if unknown:
        raise ConfigError(f"{source}: unknown trace exporter {unknown[0]!r}; use otlp, console or none")
    return [n for n in names if n != "none"]


def _provider(config: TelemetryConfig, env: Mapping[str, str], exporters: list[str], instance_id: str | None) -> "TracerProvider":
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    from ..internals import sampler_from_environment
    from ..protocol import GATEWAY_VERSION

    attributes = {"service.name": config.service_name, "service.version": GATEWAY_VERSION}
    if instance_id:
        attributes["service.instance.id"] = instance_id
    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the config file.
    resource = Resource.create(attributes).merge(OTELResourceDetector().detect())
    sampler = sampler_from_environment() if env.get("OTEL_TRACES_SAMPLER") else ParentBased(TraceIdRatioBased(config.sample_ratio))
    provider = TracerProvider(resource=resource, sampler=sampler)
    for name in exporters:
        if name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        else:
            provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(config, env)))
    return provider


def _otlp_exporter(config: TelemetryConfig, env: Mapping[str, str]) -> "SpanExporter":
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    ).strip()
    if protocol != "http/protobuf":
        raise ConfigError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: the gateway exports traces as OTLP over HTTP (http/protobuf) only"
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or not config.otlp_endpoint:
        return OTLPSpanExporter()  # the exporter reads the OTEL_EXPORTER_OTLP_* variables itself
    return OTLPSpanExporter(endpoint=config.otlp_endpoint.rstrip("/") + "/v1/traces")
