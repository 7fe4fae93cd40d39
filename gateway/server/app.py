"""The Starlette application: routes (/mcp, /healthz, /readyz, /admin, /media) and the lifespan that
builds every resource from the config (stores, upstreams, caches) and closes it again."""

from __future__ import annotations

import contextlib
import ipaddress
from functools import partial
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from datetime import timedelta

import anyio
from anyio.abc import TaskGroup
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ..pipeline.telemetry import CallTelemetry
from ..pipeline.audit import CallAudit
from ..audit import AuditLog
from ..audit.admin_api import audit_routes
from ..audit.runtime import open_audit, start_audit
from ..pipeline.calls import CallPipeline
from ..pipeline.rounds import Parking
from ..pipeline.catalog import Catalog
from ..config.model import GatewayConfig
from ..connectors import ConnectorRegistry
from ..connectors.admin_api import admin_routes
from ..approvals.admin_api import approval_routes
from ..approvals.service import Approvals
from ..approvals.open_store import open_approval_store
from ..approvals.store import ApprovalStore
from ..pins.admin_api import pin_routes
from ..pins.open_store import open_pin_store
from ..pins.service import ToolPins
from ..pipeline.approval import ApprovalStage
from ..connectors.bindings.policy import BindingPolicy
from ..storage.database import Database, opened
from ..storage.loop_sqlite import Checkpointed
from ..storage.events import ClusterEvents
from ..storage.replicas import ReplicaDirectory
from ..front.forwarding import RoundForwardingApp, SessionForwarding
from ..front.event_store import EVENT_MAX_AGE_SECONDS
from ..front.session_manager import GatewaySessionManager, share_sessions
from ..storage.front_events import FrontEventLog
from ..storage.front_sessions import FrontSessionStore
from .drain import Drain
from ..errors import UNAVAILABLE
from ..fences import Fences, FenceStore, Owner, open_fence_store
from ..fences.resolutions import ResolutionStore, open_resolution_store
from .console import console_routes
from .operator_api import OperatorView, operator_routes
from ..front import ClientEvents, Front, Sessions, build_front
from ..http.asgi import Refusal
from ..http.auth import Authenticator, BearerAuth
from ..front.events import ListenStreams
from ..http.hosts import HostOriginGuard, HostOriginPolicy
from ..http.resource_metadata import protected_resource_routes
from ..media.runtime import Media, open_media
from ..media.serving import MediaEndpoint
from .operations import Operations
from ..auth.policy import Policy
from ..pipeline.limits import upstream_answer_cap
from ..pipeline.subscriptions import ResourceWatch
from ..protocol import SERVER_INFO, JsonObject
from ..supervision import Supervisor
from ..tasks import ObservedTaskStore, TaskRecord, Tasks
from ..tasks.runtime import open_tasks_store, start_tasks, task_requests
from ..telemetry import Telemetry
from ..upstreams.listing import ListingCache, ListKind
from ..upstreams.upstream import Upstream

logger = logging.getLogger(__name__)


@dataclass
class Runtime:
    """Everything the running gateway owns; made in the lifespan, closed there."""

    config: GatewayConfig
    task_group: TaskGroup
    store: FenceStore
    fences: Fences
    upstreams: dict[str, Upstream]
    caches: list[ListingCache]
    catalog: Catalog
    mcp_app: ASGIApp
    connectors: ConnectorRegistry
    manager: StreamableHTTPSessionManager
    media: Media
    listen: ListenStreams
    tasks: Tasks | None = None
    audit: AuditLog | None = None  # None: audit.enabled false
    # Calls held for a person's decision (gateway/approvals/, docs/approvals.md).
    approvals: Approvals | None = None
    # Pinned tool definitions (gateway/pins/, docs/pinning.md).
    pins: ToolPins | None = None
    # The front below authentication: tools/call and tools/list for an Identity.
    front: Front | None = None
    # Operators' notes on fences in `unknown` (gateway/fences/resolutions.py; the console).
    resolutions: ResolutionStore | None = None
    # Every upstream has been asked for its tools once (reported by /readyz, not gated on:
    # one hung upstream must not take a replica out of rotation).
    catalog_listed: bool = False
    supervisor: Supervisor = field(default_factory=Supervisor)


class _RuntimeHolder:
    runtime: Runtime | None = None
    started = False
    # Why the runtime stopped while the process serves on (its lifespan ended unasked): /healthz
    # then answers 503 so an orchestrator restarts the process.
    failed: str | None = None


REPLICA_SECRET_ENV = "DEX_REPLICA_SECRET"  # the deployment's shared secret: sessions forwarded between replicas
REPLICA_URL_ENV = "DEX_REPLICA_URL"  # where the other replicas reach this one's MCP endpoint


def advertised_url(config: GatewayConfig) -> str:
    """This process's MCP endpoint as the other replicas reach it: `DEX_REPLICA_URL`, else the
    address it serves on (loopback for a wildcard bind)."""
    if url := os.environ.get(REPLICA_URL_ENV):
        return url
    host = config.server.host if config.server.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{config.server.port}{config.server.path}"


def replica_id_for(config: GatewayConfig) -> str:
    """Stable across restarts of one replica (same host and port), unique among replicas."""
    if config.fences.replica_id:
        return config.fences.replica_id
    if config.server.port == 0:
        # An unbound port 0 names no stable replica: never mistake a live peer for our past self.
        # (`dex-gateway serve` binds first and passes the real port.)
        return f"{socket.gethostname()}:ephemeral:{uuid.uuid4().hex}"
    return f"{socket.gethostname()}:{config.server.port}"


def create_app(config: GatewayConfig, *, drain: Drain | None = None, telemetry: Telemetry | None = None) -> Starlette:
    """`drain`: SIGTERM's handle (gateway/server/serve.py); `telemetry`: instead of the config's (tests)."""
    holder = _RuntimeHolder()
    authenticator = Authenticator(config.auth)
    ops = Operations.from_config(config, drain=drain, telemetry=telemetry, instance_id=replica_id_for(config))
    # Registrations live in the fence store's database, so every replica sees the same set.
    database = Database(config.fences.store)  # one pool (PostgreSQL) for fences and registrations
    connectors = ConnectorRegistry(database, policy=BindingPolicy.from_config(config.connectors))
    boot_id = uuid.uuid4().hex  # this process start, as the other replicas know it
    cluster = ClusterEvents(database, origin=boot_id)  # other replicas' events (PostgreSQL only)
    directory = ReplicaDirectory(database, replica_id=replica_id_for(config), boot_id=boot_id,
                                 url=advertised_url(config))
    secret = os.environ.get(REPLICA_SECRET_ENV, "")
    # Stateful sessions' state, shared, so another replica adopts a session whose holder died.
    session_store = (FrontSessionStore(database, boot_id=boot_id)
                     if secret and directory.enabled and config.server.stateful else None)
    forwarding = SessionForwarding(boot_id, secret, directory.url_of, session_store) \
        if secret and directory.enabled else None
    # Their GET-stream events, shared, so the adopting replica replays what a client missed.
    event_log = (FrontEventLog(database, max_events=config.server.sse_event_buffer, max_age_seconds=EVENT_MAX_AGE_SECONDS)
                 if session_store is not None and config.server.sse_event_buffer > 0 else None)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        stopped_on_request = False
        try:
            async with _runtime_running(app) as runtime:
                yield
                stopped_on_request = True
        except BaseException as exc:
            if holder.started and not stopped_on_request:
                holder.failed = f"the gateway runtime stopped ({type(exc).__name__}); restart the process"
                logger.critical("the gateway runtime stopped; /healthz now answers 503", exc_info=True)
            raise
        finally:
            if holder.started and not stopped_on_request and holder.failed is None:
                holder.failed = "the gateway runtime stopped; restart the process"

    @contextlib.asynccontextmanager
    async def _runtime_running(app: Starlette) -> AsyncIterator[Runtime]:
        supervisor = Supervisor(ops.telemetry.metrics)
        async with (
            anyio.create_task_group() as tg, database, opened(open_fence_store(database)) as store, connectors,
            open_media(config.media, database) as media, open_tasks_store(config.tasks, database) as task_store,
            opened(open_approval_store(database)) as approval_store, opened(open_pin_store(database)) as pin_store,
            opened(open_resolution_store(database)) as resolutions, open_audit(config.audit, database) as audit,
            opened(session_store) if session_store is not None else contextlib.nullcontext(),
            opened(event_log) if event_log is not None else contextlib.nullcontext(),
        ):
            if config.connectors.dir:
                await connectors.load_dir(config.connectors.dir)
            metrics = ops.telemetry.metrics
            pins = ToolPins(pin_store, {u.name: u.pinning for u in config.upstreams},
                            spawn=lambda fn: tg.start_soon(supervisor.once, "pin recorder", fn),
                            on_change=metrics.definition_changed if metrics is not None else None)
            await pins.load()  # before the first listing is checked against them
            runtime = await _build_runtime(config, tg, store, authenticator, connectors, media, task_store, ops=ops,
                                           supervisor=supervisor, approval_store=approval_store, pins=pins, audit=audit,
                                           cluster=cluster, boot_id=boot_id, forwarding=forwarding,
                                           session_store=session_store, event_log=event_log)
            runtime.resolutions = resolutions
            if isinstance(runtime.manager, GatewaySessionManager) and config.server.stateful:
                runtime.manager.forwarding = forwarding
            await directory.open()
            if session_store is not None:
                await session_store.sweep(directory.table)
            if event_log is not None:
                tg.start_soon(supervisor.loop, "front event writer", event_log.run)
            if directory.enabled:
                tg.start_soon(supervisor.loop, "replica heartbeat", directory.run_heartbeat)
            holder.runtime = runtime
            app.state.runtime = runtime
            holder.started = True
            try:
                async with ops.running(), runtime.manager.run():
                    retention = timedelta(hours=config.fences.retention_hours)
                    tg.start_soon(supervisor.loop, "fence sweeper", lambda: runtime.fences.run_sweeper(
                        retention, config.fences.sweep_interval_seconds))
                    tg.start_soon(supervisor.loop, "fence lease renewer", runtime.fences.run_renewer)
                    if isinstance(store, Checkpointed):
                        tg.start_soon(supervisor.loop, "fence store checkpointer", store.run_checkpointer)
                    if runtime.approvals is not None:
                        tg.start_soon(supervisor.loop, "approval sweeper", partial(
                            runtime.approvals.run_sweeper, config.fences.sweep_interval_seconds))
                    tg.start_soon(supervisor.loop, "pin review poller", partial(pins.run_poller, PIN_POLL_SECONDS))
                    tg.start_soon(supervisor.once, "catalog warm-up", lambda: _warm_up(runtime))
                    if audit is not None:
                        start_audit(config.audit, audit, lambda work, fn: tg.start_soon(supervisor.loop, work, fn))
                    yield runtime
            finally:
                holder.runtime = None
                runtime.listen.close_all()
                await directory.close()
                if forwarding is not None:
                    with anyio.CancelScope(shield=True):
                        await forwarding.aclose()
                with anyio.CancelScope(shield=True):
                    for upstream in runtime.upstreams.values():
                        await upstream.aclose()
                tg.cancel_scope.cancel()

    def front() -> ASGIApp | Refusal:
        """The running front, or why there is none (503: nothing was done)."""
        runtime = holder.runtime
        if runtime is not None:
            return runtime.mcp_app
        return _STARTING if holder.failed is None else _STOPPED

    async def healthz(request: Request) -> JSONResponse:
        # Liveness: 503 once the runtime stopped under a running server (restart the process).
        if holder.failed is not None:
            return JSONResponse({"status": "failed"}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> JSONResponse:
        runtime = holder.runtime
        if runtime is None:
            return JSONResponse({"status": "starting"}, status_code=503)
        if (why := ops.not_ready()) is not None:
            return JSONResponse({"status": why}, status_code=503)
        try:
            with anyio.fail_after(2):
                await runtime.store.ping()  # reachability, one cheap query: never a count of the table
        except Exception:  # noqa: BLE001 - readiness reports any failure as "not ready", never raises
            logger.warning("readiness: the fence store did not answer", exc_info=True)
            return JSONResponse({"status": "store unavailable"}, status_code=503)
        body: JsonObject = {"status": "ready"}
        if _may_see_detail(authenticator, request):
            body.update(upstreams=list(runtime.upstreams), catalog_listed=runtime.catalog_listed)
            refused = {c.upstream.name: reasons for c in runtime.caches if (reasons := c.refusals())}
            if refused:
                body["refused_listings"] = refused
        return JSONResponse(body)

    routes: list[BaseRoute] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
    ]
    routes.extend(protected_resource_routes(config))  # RFC 9728, with auth.oauth
    routes.extend(admin_routes(connectors, _admin_check(authenticator)))
    admin_name = config.auth.admin_token_name
    routes.extend(pin_routes(lambda: holder.runtime.pins if holder.runtime is not None else None,
                             _admin_check(authenticator), admin_name=admin_name))
    routes.extend(audit_routes(lambda: (None if holder.runtime is None else holder.runtime.audit, holder.runtime is not None),
                               _admin_check(authenticator)))
    routes.extend(approval_routes(lambda: holder.runtime.approvals if holder.runtime is not None else None,
                                  _approver_check(authenticator)))
    routes.extend(ops.routes(authenticator))
    routes.extend(operator_routes(lambda: _operator_view(holder.runtime), _admin_check(authenticator),
                                  admin_name=admin_name))
    routes.extend(console_routes(config.auth.oauth, _approver_check(authenticator), _admin_check(authenticator)))
    app = _GatewayApp(config.server.path, ops.edge(front, authenticator), routes=routes, lifespan=lifespan)
    app.guard_admin(HostOriginPolicy(config.server))
    # /media: the same Host/Origin guard and bearer auth as /mcp (gateway/media/serving.py).
    media_endpoint = MediaEndpoint(lambda: holder.runtime.media.reader if holder.runtime is not None else None)
    app.serve_media(HostOriginGuard(BearerAuth(media_endpoint, authenticator), HostOriginPolicy(config.server)))
    return app


# How often a replica looks for tool reviews made elsewhere (another replica, `dex-gateway tools review`).
PIN_POLL_SECONDS = 5.0

_STARTING = Refusal(503, UNAVAILABLE, "gateway is starting")
_STOPPED = Refusal(503, UNAVAILABLE, "the gateway stopped serving; nothing was done")


def _may_see_detail(authenticator: Authenticator, request: Request) -> bool:
    """Readiness detail (every upstream's name) only for the admin token, or for a loopback caller
    when no credential is configured at all; an agent token (scoped to some upstreams) and anyone
    else get the status alone."""
    if not authenticator.config.any_credential:
        return request.client is not None and _is_loopback(request.client.host)
    return authenticator.is_admin(request.headers.get("authorization"))


def _operator_view(runtime: Runtime | None) -> OperatorView | None:
    if runtime is None or runtime.resolutions is None:
        return None
    return OperatorView(config=runtime.config, caches=runtime.caches, catalog=runtime.catalog, fences=runtime.store,
                        resolutions=runtime.resolutions, tasks=runtime.tasks.store if runtime.tasks else None)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class _GatewayApp(Starlette):
    """Starlette for the operational routes; the MCP path goes straight to the front.

    The front answers every request itself (JSON-RPC errors included, never a stack trace),
    so Starlette's router and error middleware would only add CPU to the hottest path. The
    admin API sits behind the same Host/Origin guard as the front, `/media` behind that guard
    and the front's bearer auth; the health probes do not
    (an orchestrator probes by pod address, and they tell nothing without a token).
    """

    def __init__(self, mcp_path: str, mcp_endpoint: ASGIApp, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._mcp_path = mcp_path
        self._mcp_endpoint = mcp_endpoint
        self._admin: ASGIApp = super().__call__
        self._media: ASGIApp = super().__call__

    def guard_admin(self, policy: HostOriginPolicy) -> None:
        self._admin = HostOriginGuard(super().__call__, policy)

    def serve_media(self, endpoint: ASGIApp) -> None:
        self._media = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            if path == self._mcp_path:
                await self._mcp_endpoint(scope, receive, send)
                return
            if path == "/admin" or path.startswith(("/admin/", "/console")):
                await self._admin(scope, receive, send)
                return
            if path.startswith("/media/"):
                await self._media(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


async def _build_runtime(
    config: GatewayConfig,
    tg: TaskGroup,
    store: FenceStore,
    authenticator: Authenticator,
    connectors: ConnectorRegistry,
    media: Media,
    task_store: ObservedTaskStore | None = None,
    *,
    ops: Operations,
    supervisor: Supervisor | None = None,
    audit: AuditLog | None = None,
    approval_store: ApprovalStore | None = None,
    pins: ToolPins | None = None,
    cluster: ClusterEvents | None = None,
    boot_id: str = "local",
    forwarding: SessionForwarding | None = None,
    session_store: FrontSessionStore | None = None,
    event_log: FrontEventLog | None = None,
) -> Runtime:
    """`cluster`: events to and from the other replicas sharing PostgreSQL (gateway/storage/events.py)."""
    supervisor = supervisor or Supervisor(ops.telemetry.metrics)

    def spawn(work: str, fn: Callable[[], Awaitable[object]]) -> None:
        tg.start_soon(supervisor.once, work, fn)

    fences = Fences(
        store,
        Owner.fresh(replica_id_for(config)),
        lease_seconds=config.fences.lease_seconds,
        wait_seconds=config.fences.wait_seconds,
    )
    answer_cap = upstream_answer_cap(config)
    metrics = ops.telemetry.metrics
    upstreams = {u.name: Upstream(u, tg, metrics.notifications_dropped_of(u.name) if metrics else None,
                                  max_answer_bytes=answer_cap)
                 for u in config.upstreams}
    caches = [ListingCache(upstream, tg) for upstream in upstreams.values()]
    ops.watch_upstreams(caches)
    events = ClientEvents(Sessions())  # what changed, to each client in its era (gateway/front/events.py)
    if task_store is not None:

        def tell_task_status(record: TaskRecord) -> None:
            if events.sessions.watches_task(record.task_id):  # none on a stateless front: nothing to do
                spawn("task status notifier", partial(events.task_saved, record))
            if cluster is not None and cluster.enabled:  # a session on another replica may watch it
                spawn("task change to replicas", partial(cluster.publish, "task", record.task_id))

        async def task_changed_elsewhere(task_id: str) -> None:
            if task_store is not None and events.sessions.watches_task(task_id):
                if (record := await task_store.get(task_id)) is not None:
                    await events.task_saved(record)

        task_store.listeners.append(tell_task_status)
        if cluster is not None:
            cluster.on("task", task_changed_elsewhere)
    catalog = Catalog(caches, connectors, augment_tasks=task_store is not None and config.tasks.augment,
                      on_lists_changed=lambda kinds: spawn("list change notifier", partial(events.lists_changed, kinds)),
                      spawn=tg.start_soon, pins=pins)
    ops.watch_catalog(lambda: catalog.rebuilds)
    watch = ResourceWatch(catalog, upstreams)
    events.sessions.on_release(watch.release, spawn=lambda fn: spawn("subscription release", fn))
    for upstream in upstreams.values():
        upstream.resource_listeners.append(lambda uri: spawn("resource notifier", partial(events.resource_updated, uri)))
        if cluster is not None and cluster.enabled:
            upstream.resource_listeners.append(
                lambda uri: spawn("resource update to replicas", partial(cluster.publish, "resource", uri)))
    scope = authenticator.scope  # OAuth principals' scope is bound from their claims as they authenticate
    policy = Policy(config.policy)
    parking = Parking(tg, owner=boot_id)
    approvals = Approvals(approval_store, config.approvals) if approval_store is not None else None
    call_telemetry = CallTelemetry.of(ops.telemetry)
    pipeline = CallPipeline(
        catalog, upstreams, fences, scope, max_result_bytes=config.server.max_result_bytes, media=media.stage,
        upstream_tasks=task_requests(config.tasks), telemetry=call_telemetry, limits=ops.limits, parking=parking,
        policy=policy, audit=CallAudit(audit),
        approvals=ApprovalStage(approvals, policy, call_telemetry, reuse_seconds=config.fences.retention_hours * 3600)
        if approvals is not None else None,
    )
    tasks = start_tasks(config.tasks, task_store, tg, pipeline=pipeline, fences=fences,
                        upstreams=upstreams, server_info=SERVER_INFO, supervisor=supervisor)
    if tasks is not None:
        pipeline.add_task_stage(tasks)
    front = build_front(config, catalog, pipeline, upstreams, scope, events, watch, media.reader, tasks,
                        telemetry=ops.telemetry, parking=parking, policy=policy)
    ops.drain.watch_streams(front.listen)
    if session_store is not None and isinstance(front.manager, GatewaySessionManager):
        async def tasks_adopted(connection: Any, task_ids: list[str], principal: str) -> None:
            if task_store is not None:  # an adopted session's watched tasks, its principal's only
                read = task_store.get
                await events.tasks_adopted(connection, task_ids, lambda task_id: read(task_id, principal))

        share_sessions(front.manager, session_store, events.sessions, watch, spawn=lambda fn: spawn("adopted session state", fn),
                       tasks_adopted=tasks_adopted, event_log=event_log)

    async def connectors_changed() -> None:
        catalog.refresh_routes()

    tg.start_soon(supervisor.loop, "connector registry watch", lambda: connectors.watch(connectors_changed))
    if cluster is not None and cluster.enabled:
        async def connectors_stored() -> None:
            await cluster.publish("connectors")

        async def connectors_changed_elsewhere(_ref: str) -> None:
            connectors.poke()

        connectors.stored_listeners.append(connectors_stored)
        cluster.on("connectors", connectors_changed_elsewhere)
        # Each replica's own upstream session may not hear of a change made through another's (a
        # stdio upstream is a child per replica): its subscribers are told all the same. An upstream
        # that tells every session may so be told twice; `resources/updated` is idempotent.
        cluster.on("resource", events.resource_updated)
        tg.start_soon(supervisor.loop, "events from other replicas", cluster.run)
    return Runtime(
        config=config,
        task_group=tg,
        store=store,
        fences=fences,
        upstreams=upstreams,
        caches=caches,
        catalog=catalog,
        mcp_app=front.app if forwarding is None else RoundForwardingApp(front.app, forwarding),
        connectors=connectors,
        manager=front.manager,
        media=media,
        listen=front.listen,
        tasks=tasks,
        supervisor=supervisor,
        front=front,
        audit=audit,
        approvals=approvals,
        pins=pins,
    )


async def _warm_up(runtime: Runtime) -> None:
    """List every upstream once at start so the first client does not wait for it. Prompts and
    resources too: a list the gateway holds is refreshed when the upstream says it changed, and
    clients are told (gateway/front/events.py)."""
    await runtime.catalog.tools()
    runtime.catalog_listed = True
    logger.info("catalog ready: %d tools from %d upstreams", len(await runtime.catalog.tools()), len(runtime.upstreams))
    await runtime.catalog.prompts()
    await runtime.catalog.resources()
    await runtime.catalog.resource_templates()


def _admin_check(authenticator: Authenticator) -> Callable[[Request], Awaitable[bool]]:
    async def authorize(request: Request) -> bool:
        return authenticator.is_admin(request.headers.get("authorization"))

    return authorize


def _approver_check(authenticator: Authenticator) -> Callable[[Request], Awaitable[str | None]]:
    async def approver(request: Request) -> str | None:
        return await authenticator.approver(request.headers.get("authorization"))

    return approver


__all__ = ["Runtime", "create_app", "replica_id_for", "ListKind"]
