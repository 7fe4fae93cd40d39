"""The agent host through a gateway in discovery's search mode (docs/discovery.md): on the
scripted model and on `openai:` against a recorded response set, through 1,000 tools it starts
with search_tools, finds a tool it was not listed, and calls it by name; a call through call_tool
gets its target's approval card; a resumed session (a new process, SQLite or PostgreSQL) is
offered the tools it found at once."""

from __future__ import annotations

import json
import os
import sys
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.agent_host.host_support import dex_agent
from tests.support.gateway import start_gateway, stdio_upstream, write_config
from tests.support.postgres import fresh_schema_url
from tests.support.processes import spawn_listening, terminate
from tests.support.servers import REPO_ROOT

SCRIPTS = "scripted:tests.agent_host.scripts:"
RECORDED_OPENAI = REPO_ROOT / "tests" / "support" / "recorded_openai_server.py"


def test_the_scripted_model_finds_and_calls_a_tool_it_was_not_listed(tmp_path: Path) -> None:
    config = _thousand_and_payments(tmp_path)
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


def test_the_approval_card_of_call_tool_shows_the_target_call(tmp_path: Path) -> None:
    """call_tool is published as needing approval; the card the person sees names the target tool
    and its arguments (what runs), never `call_tool`; the stored call stays call_tool's."""
    config = write_config(tmp_path, {
        "discovery": {"mode": "search"},
        "upstreams": [stdio_upstream("payments", "dex_server", state_dir=tmp_path / "p")],
    })
    store = tmp_path / "s.db"
    with start_gateway(config) as gw:
        proc = dex_agent("--store", str(store), "run", "--gateway", gw.url, "--session", "s-card",
                         "--model", SCRIPTS + "refund_through_call_tool", "--yes", "refund order 5521")
        assert proc.finish() == 0, proc.output
    card = [line for line in proc.output.splitlines() if line.startswith("  +-- ") or line.startswith("  |   ")]
    assert "  +-- refund wants to run" in card, proc.output
    assert '  |   refund(order: "5521", amount: 40)' in card, proc.output
    assert not any("call_tool" in line for line in card), proc.output
    # The effect the search answer carried for the target, not call_tool's `unclassified`.
    assert any(line.startswith("  |   tool payments__refund · non_idempotent_write · approval") for line in card), proc.output
    shown = dex_agent("--store", str(store), "sessions", "show", "s-card", "--json")
    assert shown.finish() == 0, shown.output
    calls = json.loads(shown.output)["tool_calls"]
    assert [(c["name"], c["status"]) for c in calls] == [("search_tools", "succeeded"), ("call_tool", "succeeded")]
    assert "refund rf-1 of 40 EUR" in calls[1]["result_text"]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_found_tools_are_kept_by_the_session_store_for_a_resumed_session(tmp_path: Path, backend: str) -> None:
    """A session finds get_balance, then a new host process on the same store (SQLite or
    PostgreSQL) offers it to the model at once: no search again (the scripted model fails if it is
    not offered)."""
    with ExitStack() as stack:
        store = str(tmp_path / "s.db") if backend == "sqlite" else stack.enter_context(fresh_schema_url("found"))
        _find_then_resume(tmp_path, store)


def _find_then_resume(tmp_path: Path, store: str) -> None:
    config = write_config(tmp_path, {
        "discovery": {"mode": "search"},
        "upstreams": [stdio_upstream("payments", "dex_server", state_dir=tmp_path / "p")],
    })
    with start_gateway(config) as gw:
        first = dex_agent("--store", str(store), "run", "--gateway", gw.url, "--session", "s-keep",
                          "--model", SCRIPTS + "discover_and_call", "--yes", "what is the balance of acme")
        assert first.finish() == 0, first.output
        again = dex_agent("--store", str(store), "run", "--gateway", gw.url, "--session", "s-keep",
                          "--model", SCRIPTS + "call_found_at_once", "--yes", "and the balance of acme again")
        assert again.finish() == 0, again.output
    shown = dex_agent("--store", str(store), "sessions", "show", "s-keep", "--json")
    assert shown.finish() == 0, shown.output
    calls = json.loads(shown.output)["tool_calls"]
    assert [(c["name"], c["status"]) for c in calls] == [
        ("search_tools", "succeeded"), ("payments__get_balance", "succeeded"), ("payments__get_balance", "succeeded"),
    ]


def _thousand_and_payments(tmp_path: Path) -> Path:
    return write_config(tmp_path, {
        "discovery": {"mode": "search"},
        "upstreams": [
            {"name": "m0", "transport": "stdio", "command": sys.executable,
             "args": [str(REPO_ROOT / "bench" / "many_tools_server.py"), "--tools", "1000", "--name", "m0"]},
            stdio_upstream("payments", "dex_server", state_dir=tmp_path / "p"),
        ],
    })


def test_an_openai_model_finds_and_calls_a_tool_through_a_recorded_response_set(tmp_path: Path) -> None:
    """`--model openai:…` (the real OpenAI-compatible client) against a recorded response set:
    through 1,000 tools the model is offered search_tools and call_tool, searches, is offered the
    tool it found in the next request, and calls it by name."""
    lines: list[str] = []
    recording = REPO_ROOT / "tests" / "agent_host" / "recorded" / "openai_discovery.json"
    api, url = spawn_listening([sys.executable, str(RECORDED_OPENAI), str(recording)], cwd=REPO_ROOT,
                               env=dict(os.environ), name="recorded-openai", lines=lines, ready_timeout=20)
    try:
        assert url is not None, "\n".join(lines)
        root = url.rsplit("/", 1)[0]
        store = tmp_path / "s.db"
        with start_gateway(_thousand_and_payments(tmp_path)) as gw:
            proc = dex_agent("--store", str(store), "run", "--gateway", gw.url, "--session", "s-openai",
                             "--model", "openai:recorded-model", "--openai-base-url", root + "/v1", "--no-stream",
                             "--yes", "what is the balance of acme")
            assert proc.finish() == 0, proc.output
        seen = httpx.get(root + "/seen", timeout=10).json()
    finally:
        terminate(api)
    offered = [{t["function"]["name"] for t in body.get("tools", [])} for body in seen]
    assert len(seen) == 3 and {"search_tools", "call_tool"} <= offered[0], offered
    assert "payments__get_balance" not in offered[0] and len(offered[0]) < 128, sorted(offered[0])
    assert "payments__get_balance" in offered[1], sorted(offered[1])
    shown = dex_agent("--store", str(store), "sessions", "show", "s-openai", "--json")
    assert shown.finish() == 0, shown.output
    calls = json.loads(shown.output)["tool_calls"]
    assert [(c["name"], c["status"]) for c in calls] == [("search_tools", "succeeded"), ("payments__get_balance", "succeeded")]
    assert "acme" in calls[1]["result_text"], calls[1]["result_text"]
