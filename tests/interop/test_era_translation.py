"""Each era's features carried across the gateway (issue 13), against the conformance reference
server (conformance/reference_server.py) speaking both eras, spoken to on 2026-07-28 for every
caller (`protocol: 2026-07-28`: with `auto`, a handshake-era caller that can be asked something
reaches it on the handshake era instead -- docs/interop.md, "The era per caller"), over Streamable
HTTP and over stdio.

* A handshake-era client (stateful gateway) of a 2026-07-28 upstream: the upstream's
  `input_required` rounds become elicitation/sampling/roots requests on the client's session;
  `logging/setLevel` becomes the per-request log level; `resources/subscribe` becomes the
  gateway's `subscriptions/listen` towards the upstream.
* A 2026-07-28 client: `input_required` rounds pass through (the SDK client answers them);
  `subscriptions/listen` hears list changes and resource updates.
* The stdio `protocol` setting is honoured (the upstream sees the era it was told).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated, ToolsListChanged

from tests.interop.support import Recorder, client, gateway_for, reference_http, reference_stdio, text_of
from tests.support.gateway import RunningGateway, http_upstream, start_gateway, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120),
              pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

UPSTREAMS = ["http", "stdio-2026"]


@contextmanager
def gateway_with_reference(tmp_path: Path, upstream_kind: str, *, stateful: bool = True) -> Iterator[RunningGateway]:
    with ExitStack() as stack:
        state = tmp_path / "reference"
        if upstream_kind == "http":
            # 2026-07-28 for every caller: with `auto`, a handshake caller that can be asked would
            # reach this both-eras server on the handshake era (the era per caller,
            # tests/interop/test_era_per_caller.py), and the translation would not be exercised.
            upstream = http_upstream("ref", stack.enter_context(reference_http(state_dir=state)), prefix="",
                                     keyless_writes="pass", protocol="2026-07-28")
        else:
            upstream = reference_stdio(state, protocol="2026-07-28")
        yield stack.enter_context(gateway_for(tmp_path, upstream, stateful=stateful))


@pytest.mark.parametrize("upstream_kind", UPSTREAMS)
async def test_input_required_rounds_are_asked_of_a_handshake_client(tmp_path: Path, upstream_kind: str) -> None:
    with gateway_with_reference(tmp_path, upstream_kind) as gateway:
        recorder = Recorder()
        async with client(gateway.url, mode="legacy", recorder=recorder) as legacy:
            assert text_of(await legacy.call_tool("test_protocol", {})) == "2026-07-28"  # the upstream's era
            elicited = await legacy.call_tool("test_elicitation", {"message": "Go?"})
            sampled = await legacy.call_tool("test_sampling", {"prompt": "Say hi"})
            rounds = await legacy.call_tool("test_input_required_result_multi_round", {})
            prompt = await legacy.get_prompt("test_input_required_result_prompt")
        assert "action=accept" in text_of(elicited) and '"response": "yes"' in text_of(elicited)
        assert text_of(sampled) == "LLM response: sampled"
        assert not rounds.is_error and "2 answer(s)" in text_of(rounds), text_of(rounds)
        assert isinstance(prompt.messages[0].content, types.TextContent)
        assert recorder.asked.count("elicitation/create") == 4 and recorder.asked.count("sampling/createMessage") == 1


async def test_a_stateless_handshake_client_is_told_why_it_cannot_answer(tmp_path: Path) -> None:
    """No session to ask on: the upstream is told the client can answer nothing, and its refusal
    (-32021, naming the capability) reaches the client as it is."""
    with gateway_with_reference(tmp_path, "http", stateful=False) as gateway:
        async with client(gateway.url, mode="legacy") as legacy:
            with pytest.raises(MCPError) as refused:
                await legacy.call_tool("test_input_required_result_elicitation", {})
        assert refused.value.error.code == types.MISSING_REQUIRED_CLIENT_CAPABILITY
        assert refused.value.error.data == {"requiredCapabilities": {"elicitation": {}}}


@pytest.mark.parametrize("upstream_kind", UPSTREAMS)
async def test_input_required_rounds_pass_through_to_a_2026_client(tmp_path: Path, upstream_kind: str) -> None:
    with gateway_with_reference(tmp_path, upstream_kind) as gateway:
        recorder = Recorder()
        async with client(gateway.url, mode="2026-07-28", recorder=recorder) as modern:
            greeted = await modern.call_tool("test_input_required_result_elicitation", {})
            several = await modern.call_tool("test_input_required_result_multiple_inputs", {})
        assert text_of(greeted) == "Hello, Ada!"
        assert "3 answer(s) (state-ok)" in text_of(several), text_of(several)
        assert sorted(recorder.asked) == ["elicitation/create", "elicitation/create", "roots/list", "sampling/createMessage"]


@pytest.mark.parametrize("upstream_kind", UPSTREAMS)
async def test_log_level_of_a_handshake_session_reaches_a_2026_upstream(tmp_path: Path, upstream_kind: str) -> None:
    with gateway_with_reference(tmp_path, upstream_kind) as gateway:
        recorder = Recorder()
        async with client(gateway.url, mode="legacy", recorder=recorder) as legacy:
            await legacy.set_logging_level("warning")
            await legacy.call_tool("test_logging_tool", {})
            await anyio.sleep(0.2)
        levels = [n.params.level for n in recorder.notifications if isinstance(n, types.LoggingMessageNotification)]
        assert levels == ["warning", "error"], levels


@pytest.mark.parametrize("upstream_kind", UPSTREAMS)
async def test_subscriptions_of_both_eras_reach_a_2026_upstream(tmp_path: Path, upstream_kind: str) -> None:
    uri = "test://watched-resource"
    with gateway_with_reference(tmp_path, upstream_kind) as gateway:
        recorder = Recorder()
        async with client(gateway.url, mode="legacy", recorder=recorder) as legacy, \
                client(gateway.url, mode="2026-07-28") as modern:
            await legacy.session.subscribe_resource(uri)
            events: list[object] = []
            async with modern.listen(resource_subscriptions=[uri], tools_list_changed=True) as subscription:

                async def collect() -> None:
                    async for event in subscription:
                        events.append(event)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(collect)
                    await anyio.sleep(0.3)  # the gateway's own listen stream towards the upstream reopens
                    await modern.call_tool("test_trigger_resource_update", {"uri": uri})
                    await modern.call_tool("test_trigger_tool_change", {})
                    with anyio.fail_after(10):
                        while not (recorder.updated(uri) and ResourceUpdated(uri=uri) in events and ToolsListChanged() in events
                                   and any(isinstance(n, types.ToolListChangedNotification) for n in recorder.notifications)):
                            await anyio.sleep(0.05)
                    tg.cancel_scope.cancel()
            assert "test_dynamic_tool" in [t.name for t in (await modern.list_tools()).tools]
            assert any(isinstance(n, types.ToolListChangedNotification) for n in recorder.notifications)
            await legacy.session.unsubscribe_resource(uri)


async def test_the_stdio_protocol_setting_is_honoured(tmp_path: Path) -> None:
    for protocol in ("handshake", "2026-07-28"):
        state = tmp_path / protocol
        config = write_config(state, {"upstreams": [reference_stdio(state, protocol=protocol)]})
        with start_gateway(config) as gateway:
            async with client(gateway.url, mode="2026-07-28") as modern:
                seen = text_of(await modern.call_tool("test_protocol", {}))
        assert seen == ("2025-11-25" if protocol == "handshake" else "2026-07-28")
