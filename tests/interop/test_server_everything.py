"""@modelcontextprotocol/server-everything behind a stateful gateway, over stdio and over Streamable
HTTP (issue 13): the features that need the upstream's own requests and notifications.

* roots: `get-roots-list` makes the upstream ask `roots/list` (over HTTP on its standalone GET
  stream); the gateway relays it to the calling client, whose roots come back -- promptly, never
  a request left unanswered;
* resource updates: a handshake-era client subscribes (`resources/subscribe`), a 2026-07-28 client
  listens (`subscriptions/listen` naming the URI); `toggle-subscriber-updates` makes the upstream
  send `notifications/resources/updated`, and both clients get it;
* list changes: `gzip-file-as-resource` registers a resource (the upstream says
  `notifications/resources/list_changed`); a 2026-07-28 client listening for resource list
  changes hears of it, and the new resource is listed.

Real processes: node running server-everything, `dex-gateway serve`, the official SDK client.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import anyio
import pytest
from mcp.shared.subscriptions import ResourcesListChanged, ResourceUpdated

from tests.interop.support import ROOT_URI, Recorder, client, gateway_for, require_everything, text_of
from tests.support.everything import everything_http, everything_stdio
from tests.support.gateway import RunningGateway, http_upstream

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120),
              pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

TRANSPORTS = ["stdio", "streamable_http"]


@contextmanager
def gateway_with_everything(tmp_path: Path, transport: str) -> Iterator[RunningGateway]:
    node = require_everything()
    with ExitStack() as stack:
        if transport == "stdio":
            upstream = everything_stdio("ev", node=node, prefix="", keyless_writes="pass")
        else:
            upstream = http_upstream("ev", stack.enter_context(everything_http(node)), prefix="", keyless_writes="pass")
        yield stack.enter_context(gateway_for(tmp_path, upstream))


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_roots_are_asked_of_the_calling_client(tmp_path: Path, transport: str) -> None:
    with gateway_with_everything(tmp_path, transport) as gateway:
        recorder = Recorder()
        async with client(gateway.url, mode="legacy", recorder=recorder) as legacy:
            started = time.monotonic()
            result = await legacy.call_tool("get-roots-list", {})
            took = time.monotonic() - started
        assert ROOT_URI in text_of(result), text_of(result)
        assert "roots/list" in recorder.asked
        assert took < 10, f"get-roots-list took {took:.1f} s"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_resource_updates_reach_subscribed_clients_of_both_eras(tmp_path: Path, transport: str) -> None:
    with gateway_with_everything(tmp_path, transport) as gateway:
        recorder = Recorder()
        async with client(gateway.url, mode="legacy", recorder=recorder) as legacy, \
                client(gateway.url, mode="2026-07-28") as modern:
            uri = (await legacy.list_resources()).resources[0].uri
            await legacy.session.subscribe_resource(uri)
            events: list[object] = []
            async with modern.listen(resource_subscriptions=[uri]) as subscription:

                async def collect() -> None:
                    async for event in subscription:
                        events.append(event)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(collect)
                    await legacy.call_tool("toggle-subscriber-updates", {})  # the upstream sends updates now
                    with anyio.fail_after(15):
                        while not (recorder.updated(str(uri)) and ResourceUpdated(uri=str(uri)) in events):
                            await anyio.sleep(0.05)
                    tg.cancel_scope.cancel()
            await legacy.call_tool("toggle-subscriber-updates", {})  # and stops
            await legacy.session.unsubscribe_resource(uri)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_list_changes_reach_a_2026_client_through_listen(tmp_path: Path, transport: str) -> None:
    with gateway_with_everything(tmp_path, transport) as gateway:
        data = "data:text/plain;base64," + base64.b64encode(b"hello from the interop test\n").decode()
        async with client(gateway.url, mode="2026-07-28") as modern:
            async with modern.listen(resources_list_changed=True) as subscription:
                result = await modern.call_tool("gzip-file-as-resource", {"name": "interop.txt.gz", "data": data})
                assert not result.is_error, text_of(result)
                with anyio.fail_after(15):
                    event = await subscription.__anext__()
                assert isinstance(event, ResourcesListChanged)
            listed = [str(r.uri) for r in (await modern.list_resources()).resources]
            assert any(u.endswith("interop.txt.gz") for u in listed), listed


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_upstream_questions_reach_a_2026_client_as_input_required_rounds(tmp_path: Path, transport: str) -> None:
    """server-everything asks with server-to-client requests (handshake era); a 2026-07-28 client
    gets them as input_required rounds (its SDK answers them with its callbacks) and the answers
    reach the upstream's pending requests."""
    with gateway_with_everything(tmp_path, transport) as gateway:
        recorder = Recorder()
        async with client(gateway.url, mode="2026-07-28", recorder=recorder) as modern:
            elicited = await modern.call_tool("trigger-elicitation-request", {})
            sampled = await modern.call_tool("trigger-sampling-request", {"prompt": "Say hi", "maxTokens": 20})
        assert "Name: Ada" in text_of(elicited), text_of(elicited)
        assert "sampled" in text_of(sampled), text_of(sampled)
        # server-everything also asks roots/list once on its own after it starts (its own timing, not
        # the tools'); when that lands while a call is open it is a question of that call too.
        assert [m for m in recorder.asked if m != "roots/list"] == ["elicitation/create", "sampling/createMessage"]
