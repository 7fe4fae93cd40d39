"""One configured upstream MCP server: its session (made lazily, remade after a restart), an
`UpstreamSession` over a stdio or HTTP channel (gateway/upstreams/session.py, channels/).

`Upstream.request` raises what its connection raises (gateway/upstreams/rpc.py `Connection`):
`UpstreamNotSent` (provably never sent), `UpstreamInterrupted` (maybe sent, no usable answer),
`UpstreamRpcError` (a JSON-RPC error answer). A connection that died (a stdio process exited)
is dropped after such an error, and the next request starts a new one.

What the upstream says outside calls (list changes, resource updates) reaches the listeners
(`list_changed_listeners`, `resource_listeners`); `watch_resource` makes the upstream report the
updates of a URI for as long as the gateway's clients hold it (gateway/pipeline/subscriptions.py).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any

import anyio
from anyio.abc import TaskGroup
from mcp_types import INVALID_REQUEST, METHOD_NOT_FOUND

from ..auth.principals import Identity
from ..config.model import HttpUpstreamConfig, StdioUpstreamConfig
from ..errors import (
    UpstreamError,
    UpstreamInterrupted,
    UpstreamListingRefused,
    UpstreamNotSent,
    UpstreamRpcError,
    UpstreamUnauthorized,
)
from .caller_sessions import CallerSessions
from .credentials import Bearer, UpstreamCredentials
from .relay import ASKING_CAPABILITIES, CAPABILITY_OF, CallRelay
from ..protocol import TASKS_EXTENSION
from ..telemetry.tracing import upstream_request_span
from .channels.base import Channel
from .channels.http import HttpChannel
from .transport import HttpTransport
from .channels.stdio import StdioChannel
from .notices import OnDrop, ignore_drops
from .rpc import MODERN_VERSION, Connection
from .session import UpstreamSession

logger = logging.getLogger(__name__)

_HANDSHAKE_RETRY_SECONDS = 300.0  # an upstream that refused the handshake era is not asked again this long


class Upstream:
    def __init__(
        self,
        config: StdioUpstreamConfig | HttpUpstreamConfig,
        task_group: TaskGroup,
        on_drop: OnDrop | None = None,
        *,
        max_answer_bytes: int | None = None,
    ) -> None:
        self.config = config
        # An HTTP answer (a body, or one SSE event) is not read past this (gateway/pipeline/limits.py).
        self.max_answer_bytes = max_answer_bytes
        self.name = config.name
        self._task_group = task_group
        self._on_drop = on_drop or ignore_drops  # a call's notification coalesced or dropped (its kind)
        self._connection: Connection | None = None
        self._connect_lock = anyio.Lock()
        # Called when the upstream says one of its lists changed (listing caches refresh).
        self.list_changed_listeners: list[Callable[[], None]] = []
        # Called with a URI when the upstream says that resource changed (clients holding it are told).
        self.resource_listeners: list[Callable[[str], object]] = []
        self._watched: set[str] = set()
        self._closed = False  # closed for good (shutdown): no connection is made again
        self._last_era: str | None = None  # the era of the last connection that was closed (operators)
        # The tokens the gateway sends this upstream (auth.mode; gateway/upstreams/credentials.py).
        self.credentials = UpstreamCredentials(config) if isinstance(config, HttpUpstreamConfig) else None
        # token_exchange: each caller's own session when the upstream keeps sessions (caller_sessions.py).
        self._caller_sessions = CallerSessions(
            self.name, self._open_caller_session, task_group, size=config.auth.max_caller_sessions,
            idle_seconds=config.auth.caller_session_idle_seconds,
        ) if isinstance(config, HttpUpstreamConfig) and self.credentials is not None and self.credentials.per_caller \
            else None
        self._caller_transport: HttpTransport | None = None  # their one pool, made with the first
        # protocol auto: the era per caller (asks_on_handshake), over a second, handshake-era session.
        self._era_per_caller = isinstance(config, HttpUpstreamConfig) and config.protocol == "auto" and \
            self._caller_sessions is None
        self._handshake: UpstreamSession | None = None
        self._handshake_refused_until = 0.0  # monotonic: the upstream refused `initialize` (asks_on_handshake)
        self._handshake_task_tools: frozenset[str] = frozenset()  # task-capable there (handshake_takes)
        self._handshake_listed: Connection | None = None  # the session those were listed on
        self._asks_on_session: set[str] = set()  # tools seen to answer "no back-channel" on 2026 (handshake_takes)

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        *,
        timeout: float | None = None,
        relay: CallRelay | None = None,
        caller: Identity | None = None,
    ) -> dict[str, Any]:
        """One request on the pooled connection; raises UpstreamNotSent/Interrupted/RpcError.
        `caller`: who the request is for (a tools/call), when the upstream takes each caller's own
        token (auth.mode token_exchange); None: the gateway's own request."""
        credentials = self.credentials
        timeout = timeout or self.config.call_timeout_seconds
        connection = await self._connected()
        if credentials is None or not credentials.per_caller or caller is None:
            # The sync check first: a call the era per caller does not concern awaits nothing more.
            if self.asks_on_handshake(relay) and await self.handshake_takes(
                    relay, params.get("name") if method == "tools/call" and params else None):
                connection = self._handshake or connection
            return await self._send(connection, method, params, timeout, relay, None, caller)
        if self._caller_sessions is not None and await connection.keeps_session():
            # A session carries the identity of whoever opened it: this caller's own (caller_sessions.py).
            async with self._caller_sessions.using(caller) as own:
                return await self._send(own, method, params, timeout, relay, None, caller)
        return await self._send(connection, method, params, timeout, relay, await credentials.bearer(caller), caller)

    async def _send(
        self,
        connection: Connection,
        method: str,
        params: dict[str, Any] | None,
        timeout: float,
        relay: CallRelay | None,
        bearer: Bearer | None,
        caller: Identity | None,
    ) -> dict[str, Any]:
        with upstream_request_span(self.name, method, params) as params:
            try:
                return await connection.request(method, params, timeout=timeout, relay=relay, bearer=bearer)
            except UpstreamUnauthorized:
                if self.credentials is not None:
                    self.credentials.forget(caller)  # a refused token is not used again
                raise
            except (UpstreamInterrupted, UpstreamNotSent):
                if connection is self._connection and not connection.alive:
                    await self._forget(connection)
                raise

    def asks_on_handshake(self, relay: CallRelay | None) -> bool:
        """The era per caller (`protocol: auto`), the one rule: a caller that can be asked something
        reaches an upstream that speaks 2026-07-28 on the handshake era too, where a tool that asks
        through its session (the SDK's `ctx.elicit`, `create_message`) can ask; every other caller
        keeps the faster 2026-07-28 connection. "Can be asked": the caller's relay declares
        elicitation, sampling or roots --

        * a handshake-era caller, on its session: its calls go on the handshake era (the questions
          are relayed on its session), `handshake_takes`;
        * a 2026-07-28 caller, in its request's client capabilities: its call goes on 2026-07-28,
          where a tool that asks the 2026 way answers `input_required` itself; a tool that answers
          "no back-channel" instead asks only through a session: the call is sent again on the
          handshake era (`sends_again_on_handshake`), and so is every later call of that tool by
          such a caller. The pipeline parks these calls (`may_take_on_handshake`), so the questions
          reach the caller as `input_required` rounds (gateway/pipeline/rounds.py).

        Whether the upstream also speaks the handshake era is learnt by asking (an SDK server's
        `server/discover` lists only 2026-07-28 while it serves `initialize` too): one that refuses
        `initialize` is not asked again for `_HANDSHAKE_RETRY_SECONDS`. An upstream that takes each
        caller's own token (token_exchange) keeps one era. This check is synchronous: a call it does
        not concern awaits nothing more."""
        if relay is None or not self._era_per_caller or self.protocol_version != MODERN_VERSION:
            return False
        if self._handshake_refused_until > time.monotonic():
            return False
        return any(relay.client_capabilities().get(kind) is not None for kind in ASKING_CAPABILITIES)

    async def may_take_on_handshake(self, relay: CallRelay | None, tool: str | None) -> bool:
        """Whether a request may go on the handshake-era session (`asks_on_handshake`), opening it
        first. A tool the upstream can run as a task (its handshake-era listing says
        `execution.taskSupport: optional` or `required`) keeps 2026-07-28: its questions travel
        inside the task (input_required), which the gateway follows and relays in both eras."""
        if not self.asks_on_handshake(relay):
            return False
        if await self._handshake_connected() is None:
            return False
        return tool is None or tool not in self._handshake_task_tools

    async def handshake_takes(self, relay: CallRelay | None, tool: str | None) -> bool:
        """Whether this request goes on the handshake-era session now: a handshake-era caller's
        whenever it may (`may_take_on_handshake`); a 2026-07-28 caller's only for a tool seen to ask
        through its session (`sends_again_on_handshake`)."""
        if relay is not None and relay.modern and (tool is None or tool not in self._asks_on_session):
            return False
        return await self.may_take_on_handshake(relay, tool)

    async def sends_again_on_handshake(self, relay: CallRelay | None, tool: str, refusal: UpstreamRpcError) -> bool:
        """A 2026-07-28 caller's call of `tool` was refused on 2026-07-28 because the tool asks only
        through a session (the SDK's `NoBackChannelError`: -32600 "Cannot send 'elicitation/create':
        ... no back-channel"; the tool stopped at its question): True when the call is to be sent
        again on the handshake era (the caller can answer, the upstream speaks it), remembering the
        tool so its later calls go there at once (`handshake_takes`)."""
        if relay is None or not relay.modern or not _no_back_channel(refusal):
            return False
        if not await self.may_take_on_handshake(relay, tool):
            return False
        if tool not in self._asks_on_session:
            logger.info("upstream %s: tool %s asks only through a session; 2026-07-28 callers that can answer "
                        "reach it on the handshake era", self.name, tool)
            self._asks_on_session.add(tool)
        return True

    async def _handshake_connected(self) -> Connection | None:
        """The handshake-era session of an upstream that speaks both eras, negotiated (made with
        its first caller); None when the upstream refuses the handshake era (nothing was sent)."""
        connection = self._handshake
        if connection is None or not connection.alive:
            async with self._connect_lock:
                if self._closed:
                    raise UpstreamNotSent(self.name, "the gateway is shutting down")
                if self._handshake is None or not self._handshake.alive:
                    cfg = self.config
                    assert isinstance(cfg, HttpUpstreamConfig)
                    logger.info("upstream %s: opening a handshake-era session for callers that can be asked", self.name)
                    self._handshake = self._session(self._http_channel(cfg), protocol="handshake")
                connection = self._handshake
        try:
            await connection.start()  # negotiated once; later calls return at once
            if connection is not self._handshake_listed:
                self._handshake_task_tools = await self._task_only_tools(connection)
                self._handshake_listed = connection
        except UpstreamNotSent as exc:
            logger.info("upstream %s: no handshake era (%s); its callers stay on 2026-07-28", self.name, exc.reason)
            self._handshake_refused_until = time.monotonic() + _HANDSHAKE_RETRY_SECONDS
            if self._handshake is connection:
                self._handshake = None
            return None
        return connection

    async def _task_only_tools(self, connection: Connection) -> frozenset[str]:
        """The tools the handshake-era session lists as able to run as tasks (`execution.taskSupport`
        `optional` or `required`)."""
        names: set[str] = set()
        cursor: str | None = None
        for _ in range(100):  # pages
            try:
                page = await connection.request("tools/list", {"cursor": cursor} if cursor else None,
                                                timeout=self.config.connect_timeout_seconds)
            except (UpstreamRpcError, UpstreamInterrupted) as exc:
                raise UpstreamNotSent(self.name, f"its tools could not be listed on the handshake era: {exc.reason}")
            for tool in page.get("tools") or ():
                execution = tool.get("execution") if isinstance(tool, dict) else None
                if isinstance(execution, dict) and execution.get("taskSupport") in ("optional", "required"):
                    names.add(str(tool.get("name")))
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                break
        return frozenset(names)

    @property
    def protocol_version(self) -> str | None:
        """The era of the live connection (None before one is made)."""
        connection = self._connection
        return getattr(connection, "protocol_version", None) if connection is not None else None

    @property
    def offers_tasks(self) -> bool:
        """Whether the live connection is 2026-07-28 and the upstream declares the tasks extension
        there (it may run any call as a task: SEP-2663 lets the server decide per call)."""
        connection = self._connection
        if connection is None or getattr(connection, "protocol_version", None) != MODERN_VERSION:
            return False
        extensions = getattr(connection, "server_capabilities", {}).get("extensions")
        return isinstance(extensions, dict) and TASKS_EXTENSION in extensions

    @property
    def last_known_era(self) -> str | None:
        """The era of the live connection, else of the last one (operators: the console)."""
        return self.protocol_version or self._last_era

    async def watch_resource(self, uri: str) -> None:
        """Have the upstream report updates of `uri`; raises what its connection raises."""
        self._watched.add(uri)
        try:
            await (await self._connected()).watch(self._watched, new=uri)
        except BaseException:
            self._watched.discard(uri)
            raise

    async def unwatch_resource(self, uri: str) -> None:
        self._watched.discard(uri)
        connection = self._connection
        if connection is not None and connection.alive:
            await connection.watch(self._watched)

    # -- UpstreamEvents: what the connection reports ----------------------------------------------

    def list_changed(self, method: str) -> None:
        for listener in self.list_changed_listeners:
            listener()

    def resource_updated(self, uri: str) -> None:
        if uri not in self._watched:
            return  # nobody holds it (an upstream that reports more than it was asked)
        for listener in self.resource_listeners:
            listener(uri)

    async def connection_facts(self) -> tuple[str | None, bool]:
        """(protocol version, stateless) of the live connection, connecting first. Stateless: any
        process may send the next request of a conversation (a 2026-07-28 or session-less HTTP
        upstream); a stdio process or a handshake-era HTTP session belongs to this process."""
        connection = await self._connected()
        return getattr(connection, "protocol_version", None), bool(getattr(connection, "stateless", False))

    async def list_all(self, method: str, key: str, *, timeout: float) -> list[dict[str, Any]]:
        """Every page of a list method; a server without the method lists nothing. Raises
        UpstreamListingRefused once the pages hold more than `max_listed_items` items."""
        cap = self.config.max_listed_items
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        seen_cursors: set[str] = set()
        with anyio.fail_after(timeout):
            while True:
                try:
                    page = await self.request(method, {"cursor": cursor} if cursor else None, timeout=timeout)
                except UpstreamRpcError as exc:
                    if exc.code == METHOD_NOT_FOUND and not items:
                        return []
                    raise
                entries = page.get(key)
                if not isinstance(entries, list):
                    raise UpstreamInterrupted(self.name, f"{method} answer has no {key!r} list")
                items.extend(e for e in entries if isinstance(e, dict))
                if len(items) > cap:
                    raise UpstreamListingRefused(
                        self.name, f"{method} lists more than {cap} items (at least {len(items)}), over its "
                        f"max_listed_items of {cap}; the listing is refused")
                cursor = page.get("nextCursor")
                if not cursor:
                    return items
                if cursor in seen_cursors:
                    raise UpstreamInterrupted(self.name, f"{method} repeated cursor {cursor!r}")
                seen_cursors.add(cursor)

    async def _connected(self) -> Connection:
        connection = self._connection
        if connection is not None and connection.alive:
            return connection
        async with self._connect_lock:
            if self._closed:
                raise UpstreamNotSent(self.name, "the gateway is shutting down")
            if self._connection is not None and self._connection.alive:
                return self._connection
            self._connection = connection = await self._connect()
        if self._watched:
            try:
                await connection.watch(self._watched)  # a new connection subscribes again
            except UpstreamError as exc:
                logger.info("upstream %s: resubscribing failed: %s", self.name, exc.reason)
        return connection

    async def _connect(self) -> Connection:
        """A session over the right channel (gateway/upstreams/session.py); a process is spoken to
        at once, an HTTP upstream on its first request."""
        cfg = self.config
        channel: Channel
        if isinstance(cfg, StdioUpstreamConfig):
            logger.info("upstream %s: starting %s", self.name, cfg.command)
            channel = await StdioChannel.start(self.name, self._task_group, command=cfg.command, args=cfg.args,
                                               env=cfg.env, cwd=cfg.cwd)
        else:
            channel = self._http_channel(cfg)
        session = self._session(channel)
        if isinstance(channel, StdioChannel):
            await session.start()
        return session

    def _http_channel(self, cfg: HttpUpstreamConfig, caller: Identity | None = None,
                      transport: HttpTransport | None = None) -> HttpChannel:
        return HttpChannel(self.name, cfg.url, headers=cfg.headers, connect_timeout=cfg.connect_timeout_seconds,
                           tls_ca_file=cfg.tls_ca_file, max_response_bytes=self.max_answer_bytes,
                           max_connections=cfg.max_connections, pool_timeout=cfg.pool_timeout_seconds,
                           credentials=self.credentials, caller=caller, transport=transport,
                           owns_transport=transport is None)

    def _open_caller_session(self, caller: Identity) -> tuple[UpstreamSession, HttpChannel]:
        """A new session for `caller` alone, negotiated on its first request with the caller's token."""
        cfg = self.config
        assert isinstance(cfg, HttpUpstreamConfig)
        if self._caller_transport is None:
            self._caller_transport = self._http_channel(cfg).transport  # the pool, built with the same settings
        channel = self._http_channel(cfg, caller, self._caller_transport)
        return self._session(channel), channel

    def _session(self, channel: Channel, protocol: str | None = None) -> UpstreamSession:
        cfg = self.config
        return UpstreamSession(
            self.name,
            channel,
            protocol=protocol or cfg.protocol,
            connect_timeout=cfg.connect_timeout_seconds,
            events=self,
            task_group=self._task_group,
            roots=self._roots(),
            max_inbound_requests=cfg.max_inbound_requests,
            max_queued_notifications=cfg.max_queued_notifications,
            on_drop=self._on_drop,
        )

    def _roots(self) -> list[dict[str, Any]] | None:
        roots = self.config.roots
        return None if roots is None else [r.model_dump(exclude_none=True) for r in roots]

    async def _forget(self, connection: Connection) -> None:
        async with self._connect_lock:
            if self._connection is connection:
                self._connection = None
            self._last_era = getattr(connection, "protocol_version", None) or self._last_era
        with anyio.CancelScope(shield=True):
            await connection.aclose()

    async def aclose(self) -> None:
        """Close the connection for good: a request still in flight gets UpstreamNotSent, never a new process."""
        self._closed = True
        with anyio.CancelScope(shield=True):
            async with self._connect_lock:  # a connection being made now is closed too
                connection, self._connection = self._connection, None
            if connection is not None:
                await connection.aclose()
            handshake, self._handshake = self._handshake, None
            if handshake is not None:
                await handshake.aclose()
            if self._caller_sessions is not None:
                await self._caller_sessions.aclose()
            if self._caller_transport is not None:
                await self._caller_transport.aclose()
            if self.credentials is not None:
                await self.credentials.aclose()


def _no_back_channel(refusal: UpstreamRpcError) -> bool:
    """The MCP SDK's refusal of a question asked through a session that has no back-channel
    (`NoBackChannelError`: -32600 "Cannot send 'elicitation/create': ... no back-channel ...")."""
    message = refusal.rpc_message
    return refusal.code == INVALID_REQUEST and "no back-channel" in message and \
        any(f"'{method}'" in message for method in CAPABILITY_OF)


def resend_delay(config: StdioUpstreamConfig | HttpUpstreamConfig, attempt: int) -> float:
    """Seconds to wait before sending attempt `attempt + 1` of a call again: "full jitter"
    (uniform between 0 and `resend_backoff_seconds` x 2^(attempt-1), at most 10 x the base), so
    calls interrupted together (an upstream restart) do not all come back at the same instant."""
    base = config.resend_backoff_seconds
    return random.uniform(0.0, min(base * 10, base * 2 ** (attempt - 1)))
