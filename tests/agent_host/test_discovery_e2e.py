"""The agent host on the scripted model through a gateway of 1,000 tools in discovery's search
mode (docs/discovery.md): it starts with search_tools, finds a tool it was not listed, and calls
it by name; the session store records both calls."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.agent_host.host_support import dex_agent
from tests.support.gateway import start_gateway, stdio_upstream, write_config
from tests.support.servers import REPO_ROOT

SCRIPTS = "scripted:tests.agent_host.scripts:"


def test_the_scripted_model_finds_and_calls_a_tool_it_was_not_listed(tmp_path: Path) -> None:
    many = [{"name": f"m{i}", "transport": "stdio", "command": sys.executable,
             "args": [str(REPO_ROOT / "bench" / "many_tools_server.py"), "--tools", "1000", "--name", f"m{i}"]}
            for i in range(1)]
    config = write_config(tmp_path, {
        "discovery": {"mode": "search"},
        "upstreams": [*many, stdio_upstream("payments", "dex_server", state_dir=tmp_path / "p")],
    })
    store = tmp_path / "s.db"
    with start_gateway(config) as gw:
        proc = dex_agent("--store", str(store), "run", "--gateway", gw.url, "--session", "s-find",
                         "--model", SCRIPTS + "discover_and_call", "--yes", "what is the balance of acme")
        assert proc.finish() == 0, proc.output
    shown = dex_agent("--store", str(store), "sessions", "show", "s-find", "--json")
    assert shown.finish() == 0, shown.output
    calls = json.loads(shown.output)["tool_calls"]
    assert [(c["name"], c["status"]) for c in calls] == [("search_tools", "succeeded"), ("payments__get_balance", "succeeded")]
    assert calls[1]["effect"] == "read"  # classified from the Dex _meta that search_tools carried
    assert "payments__get_balance" in calls[0]["result_text"]
