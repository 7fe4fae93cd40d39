"""A stateful session survives the death of the replica that holds it (issue 26, left item 1).

Three stateful `dex-gateway serve` on one PostgreSQL, with `DEX_REPLICA_SECRET`, behind Debian's
haproxy (round-robin, no stickiness). The official SDK client (streamable HTTP, 2025-11-25 session)
initializes, calls tools, sets its log level to `error` and subscribes to a resource; a keyed write
(dex_server's `hold_payment`, blocked at its gate) and a call whose upstream asks the client a
question (an elicitation, not answered yet) are in flight when the replica holding the session is
SIGKILLed. Then, on the same session id and without a new `initialize`: both interrupted calls end
(their streams are gone with their replica, never a hang; the late answer to the question reaches
no request); the next calls succeed on the replica
that adopted the session; its log level still filters what is relayed; a resource update reaches it;
the keyed write sent again answers `unknown` from its fence and ran upstream once. A second session
of the dead replica, asked for through two replicas at once, is adopted by exactly one of them
(the other forwards to it).

Short version (default run): the store's adoption race, many adopters, one winner.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.storage.database import Database
from gateway.storage.front_sessions import FrontSessionStore
from tests.gateway.helpers import KEY, OUTCOME, meta_of, new_key
from tests.interop.support import Recorder, text_of
from tests.interop.test_era_per_caller import asking_server
from tests.support.gateway import REPO_ROOT, RunningGateway, http_upstream, start_gateway, write_config
from tests.support.haproxy import start_haproxy
from tests.support.postgres import PG_URL
from tests.support.raw_sessions import open_session, sse_messages
from tests.support.resource_server import SCRIPT_PATH as RESOURCE_SERVER
from tests.support.servers import count_executions, release_gate, start_http_server, wait_for_executions

pytestmark = pytest.mark.anyio

SECRET = {"DEX_REPLICA_SECRET": "adoption-test-secret"}
NOTE = "notes://1"


class Traffic:
    """What the SDK client sent: the session ids on its requests, and how many `initialize`."""

    def __init__(self) -> None:
        self.session_ids: list[str] = []
        self.initializes = 0

    async def request(self, request: httpx2.Request) -> None:
        if (sid := request.headers.get("mcp-session-id")) is not None:
            self.session_ids.append(sid)
        try:
            body = request.content
        except Exception:  # noqa: BLE001 - a streamed body: not an initialize
            body = b""
        if request.method == "POST" and b'"initialize"' in body:
            self.initializes += 1


class Question:
    """The client's answer to an elicitation, held back until the test lets it go."""

    def __init__(self) -> None:
        self.asked = anyio.Event()
        self.may_answer = anyio.Event()

    async def elicit(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.set()
        await self.may_answer.wait()
        return types.ElicitResult(action="accept", content={"name": "Ada"})


@asynccontextmanager
async def sdk_client(url: str, recorder: Recorder, traffic: Traffic, question: Question) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=120), event_hooks={"request": [traffic.request]})
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy", read_timeout_seconds=60,
                            message_handler=recorder.message, elicitation_callback=question.elicit,
                            cache=None) as client:
        yield client


def _resources_upstream() -> dict[str, Any]:
    # A child per replica; the handshake era, so its `resources/updated` rides its session.
    return {"name": "res", "transport": "stdio", "command": __import__("sys").executable, "cwd": str(REPO_ROOT),
            "args": [str(RESOURCE_SERVER), "--transport", "stdio", "--updates", "--resource", NOTE],
            "protocol": "handshake"}


async def _row(pg_url: str, session_id: str) -> tuple[str, str] | None:
    schema = pg_url.rsplit("schema=", 1)[1]
    conn = await asyncpg.connect(PG_URL)
    try:
        row = await conn.fetchrow(f'SELECT s.owner, r.replica_id FROM "{schema}".dex_front_sessions s '
                                  f'LEFT JOIN "{schema}".dex_replicas r ON r.boot_id = s.owner '
                                  "WHERE s.session_id = $1", session_id)
    finally:
        await conn.close()
    return (str(row["owner"]), str(row["replica_id"])) if row is not None else None


def _logs(recorder: Recorder) -> list[str]:
    return [str(n.params.data) for n in recorder.notifications if isinstance(n, types.LoggingMessageNotification)]


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_a_session_outlives_its_replica(tmp_path: Path, pg_url: str) -> None:
    state = tmp_path / "pay"
    with ExitStack() as stack:
        pay = stack.enter_context(start_http_server("dex_server", state_dir=state))
        asking = stack.enter_context(asking_server())
        replicas: dict[str, RunningGateway] = {}
        for name in ("r0", "r1", "r2"):
            config = write_config(tmp_path / name, {
                "server": {"stateful": True},
                "upstreams": [http_upstream("pay", pay.url), _resources_upstream(), http_upstream("ask", asking)],
                "fences": {"store": pg_url, "replica_id": name, "lease_seconds": 4},
            })
            gateway = stack.enter_context(start_gateway(config, env=SECRET))
            gateway.wait_for_log("listening for other replicas' events", timeout=30)
            replicas[name] = gateway
        balancer = stack.enter_context(start_haproxy(tmp_path / "haproxy", [g.port for g in replicas.values()])) + "/mcp"
        recorder, traffic, question = Recorder(), Traffic(), Question()
        key, gate = new_key("adopt"), "adopt-gate"
        try:
            async with sdk_client(balancer, recorder, traffic, question) as client:
                for i in range(3):
                    balance = await client.call_tool("pay__get_balance", {"account": f"acct-{i}"})
                    assert not balance.is_error, text_of(balance)
                await client.set_logging_level("error")
                await client.subscribe_resource(NOTE)
                chatter = await client.call_tool("res__chatter", {})
                assert not chatter.is_error, text_of(chatter)
                assert _logs(recorder) == ["chatter at error"], _logs(recorder)
                session_id = traffic.session_ids[-1]
                holder = await _row(pg_url, session_id)
                assert holder is not None, "the session's state is in the store"
                dead_name = holder[1]

                # A second session held by the same replica, for the race below.
                http = stack.enter_context(httpx.Client(timeout=30))
                raced = open_session(http, replicas[dead_name].url)

                # A keyed write and a question to the client are in flight on the holder when it is SIGKILLed.
                interrupted: list[BaseException | types.CallToolResult] = []

                async def in_flight(tool: str, arguments: dict[str, Any], meta: dict[str, Any] | None) -> None:
                    try:
                        interrupted.append(await client.call_tool(tool, arguments, meta=meta))
                    except Exception as exc:  # noqa: BLE001 - its replica dies under it
                        interrupted.append(exc)

                with anyio.fail_after(60):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(in_flight, "pay__hold_payment", {"gate": gate}, {KEY: key})
                        tg.start_soon(in_flight, "ask__ask_name", {}, {KEY: new_key("ask")})
                        await anyio.to_thread.run_sync(lambda: wait_for_executions(state, 1, key=key))
                        with anyio.fail_after(20):
                            while not question.asked.is_set():
                                assert not interrupted, interrupted  # nothing ends before the kill
                                await anyio.sleep(0.05)
                        replicas[dead_name].kill()
                        question.may_answer.set()  # the answer reaches no request any more
                # Never a hang: both calls end (their requests were lost with their replica).
                assert len(interrupted) == 2
                assert all(not isinstance(i, types.CallToolResult) or i.is_error for i in interrupted), interrupted

                # The same session goes on through the balancer, without a new initialize.
                initializes = traffic.initializes
                for i in range(4):
                    balance = await client.call_tool("pay__get_balance", {"account": f"after-{i}"})
                    assert not balance.is_error, text_of(balance)
                assert traffic.initializes == initializes == 1
                assert set(traffic.session_ids) == {session_id}
                adopted = await _row(pg_url, session_id)
                assert adopted is not None and adopted[1] != dead_name, adopted

                # Its log level still applies; a resource update after the adoption reaches it.
                chatter = await client.call_tool("res__chatter", {})
                assert not chatter.is_error, text_of(chatter)
                assert _logs(recorder) == ["chatter at error", "chatter at error"], _logs(recorder)
                before = recorder.updated(NOTE)
                for _ in range(3):  # round-robin: the replica that adopted it hears the update at least once
                    touched = await client.call_tool("res__touch", {"uri": NOTE})
                    assert not touched.is_error, text_of(touched)
                with anyio.fail_after(10):
                    while recorder.updated(NOTE) <= before:
                        await anyio.sleep(0.05)

                # The keyed write sent again answers from its fence: unknown, never run twice.
                with anyio.fail_after(30):
                    again = await client.call_tool("pay__hold_payment", {"gate": gate}, meta={KEY: key})
                assert again.is_error and meta_of(again)[OUTCOME] == "unknown", (text_of(again), meta_of(again))
                assert count_executions(state, tool="hold_payment", key=key) == 1

            # The race: the dead replica's other session asked for through both survivors at once.
            survivors = [g for n, g in replicas.items() if n != dead_name]

            def ask(gateway: RunningGateway, request_id: int) -> httpx.Response:
                return http.post(gateway.url, headers=raced,
                                 json={"jsonrpc": "2.0", "id": request_id, "method": "tools/list"})

            answers = await asyncio.gather(*(asyncio.to_thread(ask, g, 50 + i) for i, g in enumerate(survivors)))
            for i, answer in enumerate(answers):
                assert answer.status_code == 200, (answer.status_code, answer.text)
                assert any(m.get("id") == 50 + i and "result" in m for m in sse_messages(answer.text)), answer.text
            owner = await _row(pg_url, raced["mcp-session-id"])
            assert owner is not None and owner[1] != dead_name
            adopters = [g for g in survivors if f"session …{raced['mcp-session-id'][-12:]}: adopted" in g.log]
            assert len(adopters) == 1, [g.log[-2000:] for g in survivors]
        finally:
            release_gate(state, gate)


async def test_one_replica_wins_an_adoption_race(pg_url: str) -> None:
    database = Database(pg_url)
    await database.open()
    try:
        dead = "d" * 32
        first = FrontSessionStore(database, boot_id=dead)
        await first.open()
        state = {"version": "2025-11-25", "client": {"capabilities": {}}, "level": "error", "resources": [NOTE]}
        assert await first.save("s1", "alice", state)
        adopters = [FrontSessionStore(database, boot_id=f"{i:032x}") for i in range(8)]
        for store in adopters:
            await store.open()
        got = await asyncio.gather(*(s.adopt("s1", dead_owner=dead, principal="alice") for s in adopters))
        winners = [s.boot_id for s, g in zip(adopters, got) if g is not None]
        assert len(winners) == 1 and [g for g in got if g is not None] == [state]
        assert await first.owner("s1") == winners[0]
        # The dead holder's late write changes nothing; another principal cannot adopt it.
        assert not await first.save("s1", "alice", {**state, "level": "debug"})
        assert await adopters[0].adopt("s1", dead_owner=winners[0], principal="mallory") is None
    finally:
        await database.close()
