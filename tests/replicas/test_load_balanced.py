"""Three `dex-gateway serve` sharing PostgreSQL behind Debian's haproxy (round-robin, no
stickiness; issue 26 "Must show", the parts that need no session affinity):

* a connector registered through the balancer (on whichever replica it lands) is announced by
  `tools/list_changed` on the 2026-07-28 listen streams of every replica, at once (LISTEN/NOTIFY);
* one replica SIGKILLed mid-test: the clients' calls through the balancer go on on the others,
  and removing the connector is announced to the listen streams of the two that are left.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.subscriptions import ToolsListChanged

from tests.support.gateway import REPO_ROOT, RunningGateway, http_upstream, start_gateway, write_config
from tests.support.haproxy import start_haproxy
from tests.support.servers import start_http_server

# Three gateways (and their upstreams) behind haproxy: about 10 s, so with the long tests (make test-all).
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ADMIN_TOKEN = "replicas-admin-token"
TICKETS_TEXT = (REPO_ROOT / "examples/connectors/tickets/connector.yaml").read_text()
TICKETS_TOOLS = {"tickets_list_ticket_ids", "tickets_close_ticket"}
# Never called here: the tools are listed, not called (port 9: discard, nothing listens).
BINDING = {"type": "http", "base_url": "http://127.0.0.1:9/tickets",
           "credential": {"header": "Authorization", "env": "TICKETS_TOKEN", "scheme": "Bearer"}}
ANNOUNCED = 5.0  # seconds for an announcement to reach a stream (NOTIFY: well under a second)


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@asynccontextmanager
async def _client(url: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=120))
    async with http, Client(streamable_http_client(url, http_client=http), mode="2026-07-28", cache=None,
                            read_timeout_seconds=60) as client:
        yield client


async def _next_tools_change(subscription: object) -> None:
    with anyio.fail_after(ANNOUNCED):
        async for event in subscription:  # type: ignore[attr-defined]
            if isinstance(event, ToolsListChanged):
                return


def _tool_names(result: object) -> set[str]:
    return {t.name for t in result.tools}  # type: ignore[attr-defined]


async def test_three_replicas_behind_haproxy(tmp_path: Path, pg_url: str) -> None:
    with ExitStack() as stack:
        upstream = stack.enter_context(start_http_server("tasks_server", state_dir=tmp_path / "upstream"))
        replicas: list[RunningGateway] = []
        for name in ("r0", "r1", "r2"):
            config = write_config(tmp_path / name, {
                "auth": {"admin_token_sha256": _sha(ADMIN_TOKEN)},
                "connectors": {"allowed_hosts": ["127.0.0.1"], "credential_env": ["TICKETS_TOKEN"]},
                "upstreams": [http_upstream("t", upstream.url)],
                "fences": {"store": pg_url, "replica_id": name, "lease_seconds": 4},
            })
            gateway = stack.enter_context(start_gateway(config, env={"TICKETS_TOKEN": "unused"}))
            gateway.wait_for_log("listening for other replicas' events", timeout=30)
            replicas.append(gateway)
        balancer = stack.enter_context(start_haproxy(tmp_path / "haproxy", [g.port for g in replicas]))
        mcp_url = balancer + "/mcp"
        admin = stack.enter_context(httpx.Client(base_url=balancer, timeout=30,
                                                 headers={"authorization": f"Bearer {ADMIN_TOKEN}"}))
        async with AsyncExitStack() as streams:
            listening = []
            for gateway in replicas:  # one listen stream held by each replica
                client = await streams.enter_async_context(_client(gateway.url))
                listening.append(await streams.enter_async_context(client.listen(tools_list_changed=True)))
            caller = await streams.enter_async_context(_client(mcp_url))
            assert not TICKETS_TOOLS & _tool_names(await caller.list_tools())

            registered = admin.post("/admin/connectors", json={"manifest": TICKETS_TEXT, "filename": "tickets.yaml",
                                                                "binding": BINDING})
            assert registered.status_code == 201, registered.text
            for subscription in listening:
                await _next_tools_change(subscription)
            for _ in replicas:  # round-robin: every replica lists them
                assert TICKETS_TOOLS <= _tool_names(await caller.list_tools())

            replicas[0].kill()  # mid-test: its stream ends; the balancer's clients go on on the others
            for _ in range(6):
                result = await caller.call_tool("t__greet", {"name": "replicas"})
                assert not result.is_error, result
            removed = admin.delete("/admin/connectors/tickets")
            assert removed.status_code in (200, 204), removed.text
            for subscription in listening[1:]:
                await _next_tools_change(subscription)
            assert not TICKETS_TOOLS & _tool_names(await caller.list_tools())
