"""The audit log of a real `dex-gateway serve` (SQLite and PostgreSQL), through the official MCP SDK
client: one row per write with its outcome (a payment sent, its replayed retry, a write without a
key refused, a write out of the caller's scope, a write the policy denies, a write left unknown by an
upstream SIGKILLed mid-call), never a row for a read; GET /admin/audit (admin token only, newest
first, pages, clear 400s); `dex-gateway audit list` and `export --jsonl`, which round-trips."""

from __future__ import annotations

import contextlib
import hashlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

from gateway.audit import AuditEntry, arguments_digest
from tests.gateway.helpers import KEY, OUTCOME, connect, meta_of, new_key, text_of
from tests.support.gateway import (
    RunningGateway, http_upstream, run_gateway_cli, start_gateway, stdio_upstream, write_config,
)
from tests.support.postgres import fresh_schema_url
from tests.support.servers import RunningServer, release_gate, spawn_http_server, wait_for_executions

pytestmark = pytest.mark.timeout(120)

AGENT, LIMITED, ADMIN = "audit-agent-token", "audit-limited-token", "audit-admin-token"


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class Logged:
    """A gateway that ran one call of each kind; `entries`: GET /admin/audit's page of them."""

    gateway: RunningGateway
    config: Path
    key: str
    entries: list[dict[str, Any]]


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def logged(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Logged]:
    tmp_path = tmp_path_factory.mktemp(f"audit-{request.param}")
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            store_url = f"sqlite:///{tmp_path / 'gateway.db'}"
        else:
            store_url = stack.enter_context(fresh_schema_url("audit_e2e"))
        yield from _run_calls(tmp_path, store_url)


def _run_calls(tmp_path: Path, store_url: str) -> Iterator[Logged]:
    state = tmp_path / "pay"
    server = spawn_http_server("dex_server", state_dir=state)
    try:
        config = write_config(tmp_path, {
            "auth": {"admin_token_sha256": _sha(ADMIN), "tokens": [
                {"principal": "agent", "token_sha256": _sha(AGENT)},
                {"principal": "limited", "token_sha256": _sha(LIMITED), "tools": ["pay__get_balance"]},
            ]},
            "upstreams": [http_upstream("pay", server.url)],
            "fences": {"store": store_url},
            "policy": {"rules": [{"name": "no-large-payments", "tools": ["pay__send_payment"],
                                  "when": "arguments.amount > 1000", "effect": "deny"}]},
        })
        with start_gateway(config) as gateway:
            key, gate = new_key("pay"), f"gate-{uuid.uuid4().hex[:6]}"
            anyio.run(_calls, gateway, state, server, key, gate)
            page = admin_get(gateway.base)
            assert page.status_code == 200, page.text
            assert page.json()["next_before"] is None
            yield Logged(gateway, config, key, page.json()["entries"])
        release_gate(state, gate)
    finally:
        server.stop()


async def _calls(gateway: RunningGateway, state: Path, server: RunningServer, key: str, gate: str) -> None:
    held: list[CallToolResult] = []
    async with connect(gateway.url, "legacy", token=AGENT) as client:
        assert (await client.call_tool("pay__get_balance", {"account": "a"})).is_error is False
        sent = await client.call_tool("pay__send_payment", {"to": "erin", "amount": 3}, meta={KEY: key})
        assert sent.is_error is False, text_of(sent)
        again = await client.call_tool("pay__send_payment", {"to": "erin", "amount": 3}, meta={KEY: key})
        assert again.is_error is False
        keyless = await client.call_tool("pay__send_payment", {"to": "erin", "amount": 4})
        assert meta_of(keyless)[OUTCOME] == "rejected"
        with pytest.raises(BaseException) as denied:
            await client.call_tool("pay__send_payment", {"to": "mallory", "amount": 5000}, meta={KEY: new_key("big")})
        assert unknown_tool(denied.value)

        async def hold() -> None:
            held.append(await client.call_tool("pay__hold_payment", {"gate": gate}, meta={KEY: new_key("held")}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(hold)
            await anyio.to_thread.run_sync(lambda: wait_for_executions(state, 1, tool="hold_payment"))
            server.kill()
        assert meta_of(held[0])[OUTCOME] == "unknown"
    async with connect(gateway.url, "legacy", token=LIMITED) as limited:
        with pytest.raises(BaseException) as out_of_scope:
            await limited.call_tool("pay__send_payment", {"to": "erin", "amount": 1}, meta={KEY: new_key("x")})
        assert unknown_tool(out_of_scope.value)


def admin_get(base: str, token: str | None = ADMIN, **params: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"{base}/admin/audit", params=params, headers=headers, timeout=10)


def unknown_tool(exc: BaseException) -> bool:
    found = exc if isinstance(exc, MCPError) else next(
        (e for e in getattr(exc, "exceptions", ()) if isinstance(e, MCPError)), None)
    return found is not None and "unknown tool" in str(found)


def test_one_row_per_write_with_its_outcome(logged: Logged) -> None:
    entries = logged.entries
    summary = [(e["principal"], e["tool"], e["outcome"], e["fence_state"]) for e in entries]
    assert summary == [
        ("limited", "pay__send_payment", "rejected", "none"),  # out of scope
        ("agent", "pay__hold_payment", "unknown", "claimed"),  # upstream SIGKILLed mid-call
        ("agent", "pay__send_payment", "rejected", "none"),    # policy rule
        ("agent", "pay__send_payment", "rejected", "none"),    # no idempotency key
        ("agent", "pay__send_payment", "replayed", "replayed"),
        ("agent", "pay__send_payment", "ok", "claimed"),
    ], summary
    assert all(e["tool"] != "pay__get_balance" for e in entries)  # reads are never audited
    ok = entries[-1]
    assert ok["idempotency_key"] == logged.key and ok["upstream"] == "pay" and ok["approval"] is None
    assert ok["arguments_digest"] == arguments_digest({"to": "erin", "amount": 3})
    assert "arguments" not in ok and ok["latency_ms"] > 0 and entries[-2]["latency_ms"] is None
    assert list(ok) == ["id", "time", "principal", "tool", "upstream", "arguments_digest", "idempotency_key",
                        "approval", "fence_state", "outcome", "latency_ms", "trace_id"]


def test_admin_api_filters_pages_and_refusals(logged: Logged) -> None:
    base, entries = logged.gateway.base, logged.entries
    assert admin_get(base, token=None).status_code == 401
    assert admin_get(base, token=AGENT).status_code == 403
    assert [e["outcome"] for e in admin_get(base, outcome="rejected").json()["entries"]] == ["rejected"] * 3
    assert [e["principal"] for e in admin_get(base, principal="limited").json()["entries"]] == ["limited"]
    first = admin_get(base, limit=4).json()
    second = admin_get(base, limit=4, before=first["next_before"]).json()
    assert [e["id"] for e in first["entries"] + second["entries"]] == [e["id"] for e in entries]
    assert second["next_before"] is None
    for bad, name in (({"since": "yesterday"}, "since"), ({"outcome": "maybe"}, "outcome"),
                      ({"limit": "0"}, "limit"), ({"before": "x"}, "before"), ({"sort": "asc"}, "'sort'")):
        response = admin_get(base, **bad)
        assert response.status_code == 400 and name in response.json()["error"], response.text


def test_cli_lists_and_export_round_trips(logged: Logged) -> None:
    config = str(logged.config)
    listed = run_gateway_cli("audit", "list", "--config", config)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].split()[:5] == ["ID", "TIME", "PRINCIPAL", "TOOL", "OUTCOME"]
    assert "write without an idempotency key" in listed.stdout and "no-large-payments" in listed.stdout
    exported = run_gateway_cli("audit", "export", "--jsonl", "--config", config)
    assert exported.returncode == 0, exported.stderr
    lines = exported.stdout.splitlines()
    rows = [AuditEntry.from_json(json.loads(line)) for line in lines]
    assert [json.dumps(row.to_json(), ensure_ascii=False) for row in rows] == lines
    assert [row.to_api() for row in reversed(rows)] == logged.entries
    since = run_gateway_cli("audit", "export", "--since", "1h", "--principal", "limited", "--config", config)
    assert [json.loads(line)["principal"] for line in since.stdout.splitlines()] == ["limited"]
    bad = run_gateway_cli("audit", "list", "--since", "last week", "--config", config)
    assert bad.returncode == 2 and "--since: cannot read 'last week'" in bad.stderr


@pytest.mark.anyio
async def test_a_clean_shutdown_writes_every_queued_row(tmp_path: Path) -> None:
    """Rows still queued when SIGTERM arrives (the writer gathers them for a second here) are written
    before the gateway exits; with traces on, a row names the trace of the client's traceparent and
    the gateway's own span in it."""
    state = tmp_path / "pay"
    config = write_config(tmp_path, {
        "upstreams": [stdio_upstream("pay", "dex_server", state_dir=state)],
        "audit": {"flush_interval_ms": 1000},
        "telemetry": {"traces_exporter": "console"},
    })
    trace_id, client_span = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    with start_gateway(config) as gateway:
        async with connect(gateway.url, "legacy") as client:
            for n in range(5):
                refused = await client.call_tool("pay__send_payment", {"to": "erin", "amount": n})
                assert meta_of(refused)[OUTCOME] == "rejected"
            sent = await client.call_tool("pay__send_payment", {"to": "erin", "amount": 9},
                                          meta={KEY: new_key("p"), "traceparent": f"00-{trace_id}-{client_span}-01"})
            assert sent.is_error is False, text_of(sent)
        gateway.stop()  # SIGTERM: drain, then the lifespan closes the audit log
        assert gateway.process is not None and gateway.process.returncode == 0, gateway.log
    exported = run_gateway_cli("audit", "export", "--config", str(config))
    rows = [json.loads(line) for line in exported.stdout.splitlines()]
    assert [(r["outcome"], r["arguments"]) for r in rows] == [("rejected", None)] * 5 + [("ok", None)]
    assert [r["reason"] for r in rows[:5]] == ["write without an idempotency key"] * 5
    assert rows[5]["trace_id"] == trace_id and len(rows[5]["span_id"]) == 16 and rows[5]["span_id"] != client_span
    assert all(len(r["trace_id"]) == 32 and r["trace_id"] != trace_id for r in rows[:5])  # traces of their own


def test_a_bad_audit_setting_names_its_key(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"audit": {"retention_days": 0, "arguments": "sometimes"}})
    listed = run_gateway_cli("audit", "list", "--config", str(config))
    assert listed.returncode == 2
    assert "audit.retention_days: Input should be greater than 0" in listed.stderr
    assert "audit.arguments: Input should be a valid boolean" in listed.stderr
