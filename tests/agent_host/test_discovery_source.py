"""The agent host's gateway tool source with discovery (docs/discovery.md): against a real
gateway in search mode fronting 1,000 tools (bench/many_tools_server.py) plus the notes server,
the host lists only the gateway's two tools; search_tools' answer carries the found definitions
(effect from the Dex _meta), a listing handed them offers them, and one is called by its own name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agent_host.gateway_client.tools import CallRequest, GatewayToolSource
from agent_host.domain.records import CallStatus
from gateway.conventions.keys import Effect
from tests.support.gateway import start_gateway, stdio_upstream, write_config
from tests.support.servers import REPO_ROOT

pytestmark = pytest.mark.anyio


async def test_found_tools_join_the_listing_and_are_called_by_name(tmp_path: Path) -> None:
    many = [{"name": f"m{i}", "transport": "stdio", "command": sys.executable,
             "args": [str(REPO_ROOT / "bench" / "many_tools_server.py"), "--tools", "1000", "--name", f"m{i}"]}
            for i in range(1)]
    config = write_config(tmp_path, {
        "discovery": {"mode": "search"},
        "upstreams": [*many, stdio_upstream("notes", "plain_server", state_dir=tmp_path / "n", keyless_writes="pass")],
    })
    with start_gateway(config) as gw:
        source = GatewayToolSource(gw.url)
        assert [t.name for t in await source.list_tools()] == ["search_tools", "call_tool"]
        found = await source.call(CallRequest("search_tools", {"query": "what notes are there", "limit": 3},
                                              "k-search", Effect.READ))
        assert found.status is CallStatus.SUCCEEDED and "notes__list_notes" in found.text, found.text
        assert len(found.found) == 3 and {t.name: t for t in found.found}["notes__list_notes"].effect is Effect.READ
        # The source keeps no state per session: the listing offers the found tools it is handed.
        assert [t.name for t in await source.list_tools()] == ["search_tools", "call_tool"]
        listed = {t.name: t for t in await source.list_tools(found.found)}
        assert "notes__list_notes" in listed and listed["notes__list_notes"].effect is Effect.READ
        assert len(listed) == 5  # the two gateway tools and the three found
        answer = await source.call(CallRequest("notes__list_notes", {}, "k-list", Effect.READ))
        assert answer.status is CallStatus.SUCCEEDED and answer.found == [], answer.text
