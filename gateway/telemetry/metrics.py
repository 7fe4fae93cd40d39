"""Prometheus metrics (prometheus-client), served as text at `/metrics`.

Every metric belongs to one `GatewayMetrics`, made with the app (no process-global registry),
so several gateways in one process (tests) never collide. Under `serve --workers N` each worker
writes its samples to files in `PROMETHEUS_MULTIPROC_DIR` (set by the supervisor before the
workers start, as prometheus-client's multiprocess mode requires) and any worker answering a
scrape sums every worker's counters, histograms and in-flight gauge. Upstream health and listing
age are read at scrape time from the answering worker's own caches.

Label values come only from the configuration and the catalog (tool names that exist, upstream
names, fixed outcome words), never from client input, so a client cannot grow the label sets.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "GatewayMetrics", "UpstreamState", "multiprocess_dir"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# A call through the gateway takes ~1-3 ms; upstream tools take from ms to minutes.
_CALL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


def multiprocess_dir() -> str | None:
    """The shared sample directory of `serve --workers N`, or None in a single process."""
    return os.environ.get(MULTIPROC_ENV) or None


@dataclass(frozen=True, slots=True)
class UpstreamState:
    """One upstream as this process sees it, for the scrape."""

    name: str
    up: bool  # its tools are listed and the last listing did not fail
    listing_age_seconds: float | None  # since the tools listing was last fetched; None: never


class _Runtime(Collector):
    """Upstream health and listing age, read when scraped."""

    def __init__(self, source: Callable[[], Iterable[UpstreamState]]) -> None:
        self._source = source

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily("dex_gateway_upstream_up", "1 when the upstream's tools are listed and its last listing succeeded", labels=["upstream"])
        age = GaugeMetricFamily("dex_gateway_upstream_listing_age_seconds", "seconds since the upstream's tools were last listed", labels=["upstream"])
        for state in self._source():
            up.add_metric([state.name], 1.0 if state.up else 0.0)
            if state.listing_age_seconds is not None:
                age.add_metric([state.name], state.listing_age_seconds)
        yield up
        yield age


class _Catalog(Collector):
    """How often the merged catalog was rebuilt, read when scraped."""

    def __init__(self, rebuilds: Callable[[], int]) -> None:
        self._rebuilds = rebuilds

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily("dex_gateway_catalog_rebuilds", "merges of the upstreams' routes after listings changed")
        family.add_metric([], float(self._rebuilds()))
        yield family


class GatewayMetrics:
    def __init__(self) -> None:
        self._multiprocess = multiprocess_dir()
        self._registry = CollectorRegistry()
        # Multiprocess mode: samples go to files, and the scrape reads them (not this registry).
        registry = None if self._multiprocess else self._registry
        self.calls = Counter(
            "dex_gateway_tool_calls", "tools/call answers by tool, upstream (or connector) and outcome",
            ["tool", "upstream", "outcome"], registry=registry,
        )
        self.call_seconds = Histogram(
            "dex_gateway_tool_call_duration_seconds", "time from routing to the answer of a tools/call",
            ["tool", "upstream"], buckets=_CALL_BUCKETS, registry=registry,
        )
        self.attempts = Counter(
            "dex_gateway_upstream_attempts", "upstream tools/call attempts by result (replied, rpc_error, interrupted, not_sent)",
            ["upstream", "result"], registry=registry,
        )
        self.tool_definition_changes = Counter(
            "dex_gateway_tool_definition_changes", "upstream tool definitions that changed since they were pinned",
            ["upstream"], registry=registry,
        )
        self.fence_claims = Counter("dex_gateway_fence_claims", "writes claimed by a fence and sent", ["tool"], registry=registry)
        self.fence_replays = Counter("dex_gateway_fence_replays", "retries answered from a fence's stored answer", ["tool"], registry=registry)
        self.fence_unknowns = Counter(
            "dex_gateway_fence_unknowns", "calls answered unknown by a fence (stored, owner_died, wait_timeout)",
            ["tool", "reason"], registry=registry,
        )
        self.fence_takeovers = Counter(
            "dex_gateway_fence_takeovers", "pending calls of a dead owner taken over and sent again", ["tool"], registry=registry
        )
        self.fence_rejections = Counter(
            "dex_gateway_fence_rejections", "keys reused for another call, refused", ["tool"], registry=registry
        )
        self.in_flight = Gauge(
            "dex_gateway_tool_calls_in_flight", "tools/call requests being answered", registry=registry,
            multiprocess_mode="livesum",
        )
        self.rate_limited = Counter(
            "dex_gateway_rate_limited", "calls refused by a rate limit (nothing sent)", ["limit"], registry=registry
        )
        self.policy_denials = Counter(
            "dex_gateway_policy_denials",
            "calls denied by a policy rule (nothing sent), by rule and reason (matched, error: fail closed)",
            ["rule", "reason"], registry=registry,
        )
        self.approvals = Counter(
            "dex_gateway_approvals",
            "calls held for a person's decision, by how they ended (allowed, denied, expired, pending: the client "
            "stopped waiting) and the channel that decided",
            ["state", "channel"], registry=registry,
        )
        self.notifications_dropped = Counter(
            "dex_gateway_upstream_notifications_dropped",
            "progress (coalesced) and log notifications of calls not delivered to a slow client, by upstream and kind",
            ["upstream", "kind"], registry=registry,
        )
        self.background_failures = Counter(
            "dex_gateway_background_failures", "failures of background work (task jobs, sweepers, notifiers), logged and retried",
            ["work"], registry=registry,
        )
        self._runtime: _Runtime | None = None
        self._catalog: _Catalog | None = None

    def definition_changed(self, upstream: str) -> None:
        """An upstream tool's definition changed since it was pinned (gateway/pins/)."""
        self.tool_definition_changes.labels(upstream).inc()

    def notifications_dropped_of(self, upstream: str) -> Callable[[str], None]:
        """Count one notification of a call to `upstream` coalesced or dropped (`kind`: progress, log)."""
        counter = self.notifications_dropped

        def dropped(kind: str) -> None:
            counter.labels(upstream, kind).inc()

        return dropped

    def background_failed(self, work: str) -> None:
        """`work` is a fixed name from the code (gateway/supervision.py), never client input."""
        self.background_failures.labels(work).inc()

    def watch_upstreams(self, source: Callable[[], Iterable[UpstreamState]]) -> None:
        """Report upstream health and listing age from `source` at every scrape."""
        self._runtime = _Runtime(source)
        if not self._multiprocess:
            self._registry.register(self._runtime)

    def watch_catalog(self, rebuilds: Callable[[], int]) -> None:
        """Report the catalog's rebuild count from `rebuilds` at every scrape."""
        self._catalog = _Catalog(rebuilds)
        if not self._multiprocess:
            self._registry.register(self._catalog)

    def exposition(self) -> bytes:
        """The Prometheus text of every metric (all workers' under `--workers N`)."""
        if not self._multiprocess:
            return generate_latest(self._registry)
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=self._multiprocess)
        if self._runtime is not None:
            registry.register(self._runtime)
        if self._catalog is not None:
            registry.register(self._catalog)
        return generate_latest(registry)
