"""The front: what clients talk to at `/mcp`, one concept per module.

    (the edge in front of it, gateway/http/edge.py: drain, Host/Origin, auth, the request rules)
    FastPath          fastpath.py    stateless tools/call and tools/list, both eras
    SDK server        handlers.py    everything else (the official SDK's Streamable HTTP);
                      task_methods.py  tasks/* of both eras (the work: gateway/tasks/)
                      events.py      list changes and resource updates to clients; subscriptions/listen
                      sessions.py    live handshake-era sessions: log level, resource subscriptions
                      session_state.py  what another replica needs to adopt a session (replicas)
                      event_store.py SSE resumption of the stateful front (Last-Event-ID), per session
                      session_manager.py  the SDK's session manager: session caps, one event store per session

Both entries (the fast path and the SDK handlers) only parse requests and write responses:
`tools.py` answers tools/call and tools/list for both, the pipeline (`gateway/pipeline/calls.py`)
does the work, and `wire.py` gives every answer its era's wire form.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from starlette.types import ASGIApp

from ..pipeline.calls import CallPipeline
from ..pipeline.catalog import Catalog
from ..pipeline.discovery import Discovery
from ..config.model import GatewayConfig
from ..media.serving import MediaReader
from ..pipeline.passthrough import Passthrough
from ..protocol import SERVER_INFO
from ..auth.policy import NO_POLICY, Policy
from ..auth.scope import PrincipalScope
from ..pipeline.subscriptions import ResourceWatch
from ..tasks import Tasks
from ..telemetry import Telemetry
from ..telemetry.sdk import trace_sdk_server
from ..upstreams.upstream import Upstream
from .fastpath import FastPath
from .events import ClientEvents, ListenStreams
from .handlers import FrontParts, GatewayServer, build_server
from ..pipeline.rounds import Parking
from .session_manager import GatewaySessionManager
from .sessions import Sessions
from .tools import ToolCalls, ToolListing

__all__ = ["ClientEvents", "Front", "Sessions", "build_front"]



@dataclass
class Front:
    """The composed `/mcp` endpoint and the SDK session manager the lifespan must run."""

    app: ASGIApp
    server: GatewayServer
    manager: StreamableHTTPSessionManager
    listen: ListenStreams  # closed at drain and shutdown: open subscriptions/listen streams end gracefully
    # tools/call and tools/list below authentication, for an Identity (what both entries call).
    tool_calls: ToolCalls | None = None
    listing: ToolListing | None = None


def build_front(
    config: GatewayConfig,
    catalog: Catalog,
    pipeline: CallPipeline,
    upstreams: dict[str, Upstream],
    scope: PrincipalScope,
    events: ClientEvents,
    watch: ResourceWatch,
    media: MediaReader | None = None,
    tasks: Tasks | None = None,
    *,
    telemetry: Telemetry | None = None,
    parking: Parking | None = None,
    policy: Policy = NO_POLICY,
) -> Front:
    server_info = SERVER_INFO
    discovery = Discovery(config.discovery, config.auth.tokens, catalog, scope, policy)
    offered = discovery if discovery.offered else None
    tool_calls = ToolCalls(pipeline, server_info, offered)
    listing = ToolListing(catalog, scope, server_info, policy, discovery=offered)
    passthrough = Passthrough(catalog, upstreams, scope, media)
    listen = ListenStreams(events, watch, scope)
    parts = FrontParts(catalog, passthrough, tool_calls, listing, events.sessions, watch, listen, dict(server_info), tasks,
                       parking)
    server = build_server(parts)
    tracer = telemetry.tracer if telemetry is not None else None
    trace_sdk_server(server, tracer)  # one front span per request on the SDK path too (or none)
    server_cfg = config.server
    resumable = server_cfg.stateful and server_cfg.sse_event_buffer > 0
    manager = GatewaySessionManager(
        app=server,
        stateless=not server_cfg.stateful,
        json_response=server_cfg.json_response,
        max_request_body_size=server_cfg.max_request_bytes,
        # Stateful: SSE priming events, retry and replay after Last-Event-ID, each session with
        # its own events (the SDK keeps none in stateless mode).
        event_buffer=server_cfg.sse_event_buffer if resumable else 0,
        event_buffer_bytes=server_cfg.session_event_buffer_bytes,
        event_buffer_total_bytes=server_cfg.session_event_buffer_total_bytes,
        retry_interval=server_cfg.sse_retry_ms if resumable else None,
        # Stateful sessions: capped per process and per principal, ended when idle.
        max_sessions=server_cfg.max_sessions,
        max_sessions_per_principal=server_cfg.max_sessions_per_principal,
        session_idle_timeout=server_cfg.session_idle_timeout_seconds,
    )
    endpoint: ASGIApp = StreamableHTTPASGIApp(manager)
    if server_cfg.fast_tool_calls and not server_cfg.json_response:
        endpoint = FastPath(
            endpoint, tool_calls, listing, catalog, handshake_era=not server_cfg.stateful,
            tracer=tracer,
        )
    return Front(app=endpoint, server=server, manager=manager, listen=listen, tool_calls=tool_calls, listing=listing)

