"""The SDK internals the gateway relies on, checked so that an SDK upgrade that moves them fails here,
loudly, instead of silently turning a security rule off (gateway/front/session_manager.py)."""

from __future__ import annotations

import inspect

import pytest

from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from gateway.front.event_store import FrontEventStore
from gateway.front.session_manager import GatewaySessionManager


def test_the_manager_still_admits_sessions_through_admit_session() -> None:
    admit = getattr(StreamableHTTPSessionManager, "_admit_session", None)
    assert callable(admit), "StreamableHTTPSessionManager._admit_session is gone: per-session event stores are off"
    assert list(inspect.signature(admit).parameters) == ["self", "requestor"]
    # ... and the manager's request path calls it.
    assert "_admit_session(" in inspect.getsource(StreamableHTTPSessionManager._handle_stateful_request)


def test_the_transport_still_reads_its_event_store_from_event_store() -> None:
    source = inspect.getsource(StreamableHTTPServerTransport)
    assert "self._event_store = event_store" in source
    assert "self._event_store.store_event(" in source
    assert "event_store = self._event_store" in source  # the replay


def test_each_admitted_session_gets_a_store_of_its_own() -> None:
    from mcp.server.lowlevel import Server

    manager = GatewaySessionManager(app=Server("t"), stateless=False, event_buffer=10)
    first = manager._admit_session(None)
    second = manager._admit_session(None)
    assert first is not None and second is not None
    assert isinstance(first._event_store, FrontEventStore) and isinstance(second._event_store, FrontEventStore)
    assert first._event_store is not second._event_store
    none = GatewaySessionManager(app=Server("t"), stateless=False, event_buffer=0)._admit_session(None)
    assert none is not None and none._event_store is None


def test_the_sdk_server_still_carries_its_otel_middleware_in_a_list() -> None:
    from mcp.server._otel import OpenTelemetryMiddleware
    from mcp.server.lowlevel import Server

    from gateway.internals import replace_sdk_tracing

    server = Server("t")
    assert any(isinstance(m, OpenTelemetryMiddleware) for m in server.middleware), "the SDK no longer adds its span"

    def mine(*_: object) -> None: ...

    replace_sdk_tracing(server, [mine])
    assert server.middleware[0] is mine
    assert not any(isinstance(m, OpenTelemetryMiddleware) for m in server.middleware)


def test_a_server_session_still_keeps_its_connection_as_connection() -> None:
    from mcp.server.session import ServerSession

    assert "self._connection" in inspect.getsource(ServerSession), "ServerSession._connection moved: per-session state is off"


def test_opentelemetry_still_reads_the_sampler_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    from gateway.internals import sampler_from_environment

    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    assert sampler_from_environment() is ALWAYS_OFF


def test_the_manager_still_discards_sessions_through_discard_session() -> None:
    # The per-principal session count and the event store's bytes are given back there.
    discard = getattr(StreamableHTTPSessionManager, "_discard_session", None)
    assert callable(discard), "StreamableHTTPSessionManager._discard_session is gone: session counts never go down"
    assert list(inspect.signature(discard).parameters) == ["self", "session_id", "transport"]
    manager_source = inspect.getsource(StreamableHTTPSessionManager)
    assert manager_source.count("self._discard_session(") >= 3  # DELETE, the session's end, a failed opening
    assert "self._server_instances: dict[str, StreamableHTTPServerTransport]" in manager_source


def test_the_per_principal_cap_counts_admitted_sessions_and_forgets_discarded_ones() -> None:
    import anyio
    import pytest
    from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
    from mcp.server.lowlevel import Server

    from gateway.errors import SessionLimitReached

    manager = GatewaySessionManager(app=Server("t"), stateless=False, max_sessions_per_principal=2, max_sessions=3)
    alice = AuthorizationContext(client_id="alice", issuer=None, subject="alice")
    first, second = manager._admit_session(alice), manager._admit_session(alice)
    assert first is not None and second is not None and manager.open_sessions("alice") == 2
    with pytest.raises(SessionLimitReached) as refused:
        manager._admit_session(alice)
    assert refused.value.status == 429 and "server.max_sessions_per_principal" in refused.value.message
    assert manager._admit_session(None) is not None  # without auth only max_sessions applies
    with pytest.raises(SessionLimitReached) as full:
        manager._admit_session(AuthorizationContext(client_id="bob", issuer=None, subject="bob"))
    assert full.value.status == 503 and "server.max_sessions" in full.value.message

    async def discard_twice() -> None:
        assert first.mcp_session_id is not None
        await manager._discard_session(first.mcp_session_id, first)
        await manager._discard_session(first.mcp_session_id, first)  # a DELETE, then the session's end

    anyio.run(discard_twice)
    assert manager.open_sessions("alice") == 1
    assert manager._admit_session(alice) is not None


def test_the_sdk_client_still_stamps_and_dispatches_through_stamp_and_dispatcher() -> None:
    from mcp.client.session import ClientSession

    source = inspect.getsource(ClientSession)
    assert "self._stamp" in source and "self._dispatcher" in source, "ClientSession._stamp/_dispatcher moved: host tasks are off"
    from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

    send = getattr(JSONRPCDispatcher, "send_raw_request", None)
    assert callable(send) and list(inspect.signature(send).parameters)[:3] == ["self", "method", "params"]


def test_the_client_still_builds_its_capabilities_and_session_where_form_only_elicitation_hooks_in() -> None:
    """gateway/internals.FormOnlyElicitationClient (the agent host declares form mode only)."""
    from mcp import Client
    from mcp.client.session import ClientSession

    assert list(inspect.signature(ClientSession._build_capabilities).parameters) == ["self", "version"]
    assert "_build_session" in Client.__dict__
    assert "self._build_capabilities(" in inspect.getsource(ClientSession)


def test_the_client_request_clock_can_still_be_stopped_for_a_person() -> None:
    """gateway/internals.off_the_request_clock (an upstream's question waiting for the user)."""
    from mcp.shared import _request_clock

    assert callable(_request_clock.waiting_on_a_person)
    assert "request_clock(" in inspect.getsource(__import__("mcp.shared.jsonrpc_dispatcher", fromlist=["x"]))


def test_the_handshake_loop_can_still_be_driven_with_an_initialized_connection() -> None:
    """`serve_restored_loop` (an adopted session, gateway/internals.py) rebuilds the SDK's `serve_loop`
    from its parts, seeding the connection as a completed handshake would."""
    from mcp.server.connection import Connection
    from mcp.server.runner import serve_connection, serve_loop
    from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

    assert "Connection.for_loop(" in inspect.getsource(serve_loop)
    assert "inline_methods" in inspect.signature(JSONRPCDispatcher).parameters
    assert "protocol_version_hint" in inspect.signature(Connection.for_loop).parameters
    assert {"connection", "lifespan_state"} <= set(inspect.signature(serve_connection).parameters)
    connection = Connection.for_loop(object(), session_id="s")  # type: ignore[arg-type]
    assert not connection.initialize_accepted
    connection.initialized.set()
    assert connection.initialize_accepted  # the gate the SDK checks before every request
    transport = StreamableHTTPServerTransport(mcp_session_id="s")
    assert hasattr(transport, "idle_scope") and callable(transport.connect)
