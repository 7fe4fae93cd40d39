"""What running the gateway in production adds around the request path, in one object the app
holds: telemetry (spans, metrics), rate limits, the drain, and the limits on open GET streams.

    ops = Operations.from_config(config, drain=drain)     # in create_app
    mcp = ops.edge(front, authenticator)                   # /mcp's edge (http/edge.py)
    routes += ops.routes(authenticator)                    # /metrics
    async with ops.running(): ...                          # in the lifespan
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import anyio
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from ..config.model import GatewayConfig
from .drain import Drain
from ..http.asgi import Refusal
from ..http.edge import Edge
from ..http.requests import RequestRules
from ..http.auth import Authenticator
from ..http.hosts import HostOriginPolicy
from ..http.streams import IdleStreams
from ..pipeline.ratelimits import RateLimits
from ..telemetry import Telemetry, UpstreamState
from ..http.metrics import metrics_endpoint
from ..upstreams.listing import ListingCache

__all__ = ["Operations"]

logger = logging.getLogger(__name__)


@dataclass
class Operations:
    config: GatewayConfig
    telemetry: Telemetry
    limits: RateLimits
    drain: Drain

    @classmethod
    def from_config(
        cls, config: GatewayConfig, *, drain: Drain | None = None, telemetry: Telemetry | None = None,
        instance_id: str | None = None,
    ) -> "Operations":
        telemetry = telemetry or Telemetry.from_config(config.telemetry, instance_id=instance_id)
        return cls(config, telemetry, RateLimits.from_config(config, telemetry.metrics), drain or Drain())

    def edge(self, front: Callable[[], ASGIApp | Refusal], authenticator: Authenticator) -> Edge:
        """`/mcp`: the drain's gate, Host/Origin, auth, the request rules and idle GET streams
        (http/edge.py) in front of the running front."""
        server = self.config.server
        streams = IdleStreams(server.stream_idle_seconds)
        self.drain.watch_streams(streams)
        return Edge(front, gate=self.drain, hosts=HostOriginPolicy(server), auth=authenticator,
                    requests=RequestRules(max_body=server.max_request_bytes, json_only=server.json_response),
                    streams=streams)

    def routes(self, authenticator: Authenticator) -> list[BaseRoute]:
        if self.telemetry.metrics is None:
            return []
        endpoint = metrics_endpoint(
            lambda: self.telemetry.metrics, authenticator, self.config.telemetry.metrics_token_sha256,
            HostOriginPolicy(self.config.server),
        )
        return [Route("/metrics", endpoint)]

    def not_ready(self) -> str | None:
        """Why /readyz must answer 503 whatever the stores say (the drain), or None."""
        return "draining" if self.drain.draining else None

    def watch_upstreams(self, caches: Sequence[ListingCache]) -> None:
        metrics = self.telemetry.metrics
        if metrics is None:
            return

        def states() -> list[UpstreamState]:
            out = []
            for cache in caches:
                up, age = cache.health()
                out.append(UpstreamState(cache.upstream.name, up, age))
            return out

        metrics.watch_upstreams(states)

    def watch_catalog(self, rebuilds: Callable[[], int]) -> None:
        """Report how often the catalog was rebuilt (`rebuilds`: the count so far)."""
        if self.telemetry.metrics is not None:
            self.telemetry.metrics.watch_catalog(rebuilds)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Install the tracer provider for the app's life; flush spans and close Redis after."""
        self.telemetry.install()
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                await self.limits.aclose()
                # The exporter's HTTP client blocks: flush from a thread.
                await anyio.to_thread.run_sync(self.telemetry.shutdown)
