"""Every reach into a library's private API, in one place.

The gateway needs a few things its libraries do not publish. Each is wrapped here, named for what
it does, so the rest of the code calls a function of ours and an upgrade that moves an internal
breaks one module and one test (`tests/unit/test_sdk_internals.py`), loudly, not a rule
somewhere else silently:

* the MCP SDK's OpenTelemetry middleware class (`mcp.server._otel`) and the low-level server's
  `middleware` list, edited in place to put the gateway's own front span where the SDK's was;
* a server session's connection (`ServerSession._connection`), the only handle on "this
  stateful session" that lives as long as the session;
* the session manager's admission of a new stateful session (`_admit_session`) and the transport's
  SSE event store (`_event_store`): `front/session_manager.py`;
* the SDK's handshake-era serve loop (`mcp.server.runner`: `JSONRPCDispatcher`, `Connection.for_loop`,
  `serve_connection`), driven with a connection that is initialized already: a stateful session
  adopted from a replica that died (`serve_restored_loop`);
* OpenTelemetry's sampler chosen by `OTEL_TRACES_SAMPLER` (`_get_from_env_or_default`);
* the SDK client session's per-era stamp (`_stamp`) and dispatcher (`_dispatcher`), for the
  requests its typed methods do not know (the agent host's task methods);
* the SDK client's request clock (`mcp.shared._request_clock.waiting_on_a_person`), stopped while
  an elicitation waits for a person, so a request's timeout measures the peer only;
* the SDK client's capability builder (`Client._build_session`, `ClientSession._build_capabilities`),
  to declare elicitation in form mode only (the SDK declares form and URL with any callback).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp import Client
from mcp.client.session import ClientSession

if TYPE_CHECKING:
    from mcp.server import Server
    from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
    from mcp.server.streamable_http import EventStore, StreamableHTTPServerTransport
    from opentelemetry.sdk.trace.sampling import Sampler

__all__ = [
    "FormOnlyElicitationClient",
    "off_the_request_clock",
    "admit_session",
    "client_raw_request",
    "replace_sdk_tracing",
    "sampler_from_environment",
    "serve_restored_loop",
    "session_connection",
    "set_event_store",
]


def replace_sdk_tracing(server: Server[Any], replacement: Sequence[Callable[..., Any]]) -> None:
    """Drop the SDK's own OpenTelemetry middleware from `server` and put `replacement` first."""
    from mcp.server._otel import OpenTelemetryMiddleware

    kept = [m for m in server.middleware if not isinstance(m, OpenTelemetryMiddleware)]
    server.middleware[:] = [*replacement, *kept]


def session_connection(session: object) -> Any | None:
    """The connection object of a server session (one per stateful session), or None."""
    return getattr(session, "_connection", None)


def admit_session(manager: Any, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
    """The SDK manager's own admission of a new stateful session (call from an override)."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    return StreamableHTTPSessionManager._admit_session(manager, requestor)


def rekey_session(manager: Any, transport: StreamableHTTPServerTransport, session_id: str) -> None:
    """Give a just-admitted session (nothing sent yet) the id `session_id` instead of the SDK's."""
    old = transport.mcp_session_id
    transport.mcp_session_id = session_id
    manager._server_instances[session_id] = manager._server_instances.pop(old)
    if old in manager._session_owners:
        manager._session_owners[session_id] = manager._session_owners.pop(old)


async def serve_restored_loop(server: Server[Any], read_stream: Any, write_stream: Any, *, lifespan_state: Any,
                              session_id: str, version: str, client_params: types.InitializeRequestParams,
                              restored: Callable[[Any], None]) -> None:
    """The SDK's `serve_loop` for a session whose handshake happened on another process: its
    connection starts initialized with `client_params` at `version`; `restored(connection)` runs
    before the first message is read."""
    from mcp.server.connection import Connection
    from mcp.server.runner import serve_connection
    from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

    dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(read_stream, write_stream,
                                                           inline_methods=frozenset({"initialize"}))
    connection = Connection.for_loop(dispatcher, session_id=session_id, protocol_version_hint=version)
    connection.client_params = client_params
    connection.protocol_version = version
    connection.initialized.set()
    restored(connection)
    await serve_connection(server, dispatcher, connection=connection, lifespan_state=lifespan_state)


def set_event_store(transport: StreamableHTTPServerTransport, store: EventStore) -> None:
    """Give one session's transport its own SSE event store (the SDK shares one by default)."""
    transport._event_store = store


def sampler_from_environment() -> Sampler:
    """The sampler `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG` name, as the SDK reads them."""
    from opentelemetry.sdk.trace.sampling import _get_from_env_or_default

    return _get_from_env_or_default()


async def client_raw_request(session: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A request the SDK client's typed methods do not know, stamped for the session's era as the
    SDK stamps its own and sent through its dispatcher."""
    data: dict[str, Any] = {"method": method, "params": params}
    opts: dict[str, Any] = {}
    session._stamp(data, opts)
    result: dict[str, Any] = await session._dispatcher.send_raw_request(method, data["params"], opts)
    return result


class FormOnlyElicitationClient(Client):
    """The SDK client, declaring `elicitation: {form: {}}` (no URL mode) when it has an
    elicitation callback."""

    async def _build_session(self, exit_stack: AsyncExitStack) -> ClientSession:
        session = await super()._build_session(exit_stack)
        build = session._build_capabilities

        def form_only(version: str) -> types.ClientCapabilities:
            capabilities = build(version)
            if capabilities.elicitation is None:
                return capabilities
            form = types.ElicitationCapability(form=types.FormElicitationCapability())
            return capabilities.model_copy(update={"elicitation": form})

        session._build_capabilities = form_only  # type: ignore[method-assign]
        return session


@contextmanager
def off_the_request_clock() -> Iterator[None]:
    """Stop the timeout clock of the request being served (a question to a person during it)."""
    from mcp.shared._request_clock import waiting_on_a_person

    with waiting_on_a_person():
        yield
