"""Approvals enforced at the gateway (docs/approvals.md), end to end: a real `dex-gateway serve`
with the example payments server over stdio, the official MCP SDK client of each era, and the
admin API over HTTP. Executions are counted in the upstream's own log, by idempotency key."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest

from tests.gateway.helpers import KEY, OUTCOME, meta_of, new_key, text_of
from tests.support.gateway import RunningGateway, run_gateway_cli, start_gateway, stdio_upstream, write_config
from tests.support.approvals import Asked, connect, count_executions, refund
from tests.support.postgres import fresh_schema, schema_url

TOKENS = {"alice": "alice-agent-token", "bob": "bob-agent-token", "carol": "carol-approver-token",
          "alice-approver": "alice-approver-token", "admin": "the-admin-token"}
LEGACY, MODERN = "legacy", "2026-07-28"

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def config_for(state: Path, **approvals: Any) -> dict[str, Any]:
    return {
        "server": {"stateful": True},
        "auth": {
            "tokens": [
                {"principal": "alice", "token_sha256": sha(TOKENS["alice"]), "approvals": "gateway"},
                {"principal": "bob", "token_sha256": sha(TOKENS["bob"])},  # approvals: client (default)
            ],
            "approver_tokens": [{"name": "carol", "token_sha256": sha(TOKENS["carol"])},
                                # An approver named like a principal never decides that principal's calls.
                                {"name": "alice", "token_sha256": sha(TOKENS["alice-approver"])}],
            "admin_token_sha256": sha(TOKENS["admin"]),
        },
        "approvals": {"wait_seconds": 20, "poll_seconds": 0.05, **approvals},
        "policy": {"rules": [{"name": "large-refunds", "tools": ["pay__refund"], "principals": ["bob"],
                              "when": "arguments.amount > 5000", "effect": "require_approval",
                              "message": "refunds over 5,000 need finance"}]},
        "upstreams": [stdio_upstream("pay", "dex_server", state_dir=state)],
    }


@dataclass
class Setup:
    gateway: RunningGateway
    state: Path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("approvals")
    state = root / "pay"
    state.mkdir()
    with start_gateway(write_config(root, config_for(state))) as gateway:
        gateway.wait_for_log("catalog ready", timeout=30)
        yield Setup(gateway, state)


async def admin_get(gateway: RunningGateway, token: str, state: str = "pending") -> httpx.Response:
    async with httpx.AsyncClient(base_url=gateway.base, timeout=10) as http:
        return await http.get("/admin/approvals", params={"state": state}, headers={"authorization": f"Bearer {token}"})


async def decide(gateway: RunningGateway, token: str, approval_id: str, decision: str,
                 reason: str | None = None) -> httpx.Response:
    body: dict[str, Any] = {"decision": decision, **({"reason": reason} if reason else {})}
    async with httpx.AsyncClient(base_url=gateway.base, timeout=10) as http:
        return await http.post(f"/admin/approvals/{approval_id}/decision", json=body,
                               headers={"authorization": f"Bearer {token}"})


async def pending_for(gateway: RunningGateway, key: str, timeout: float = 10.0) -> dict[str, Any]:
    """The pending approval of the call with this key, once the gateway holds it."""
    with anyio.fail_after(timeout):
        while True:
            response = await admin_get(gateway, TOKENS["carol"])
            assert response.status_code == 200, response.text
            found = [a for a in response.json()["approvals"] if a["idempotency_key"] == key]
            if found:
                return found[0]
            await anyio.sleep(0.05)


# -- the client's user decides ----------------------------------------------------------------------


@pytest.mark.parametrize("era", [LEGACY, MODERN])
async def test_the_clients_user_allows_and_the_write_runs_once(setup: Setup, era: str) -> None:
    asked = Asked("accept")
    key = new_key("allow")
    async with connect(setup.gateway.url, era, TOKENS["alice"], asked) as client:
        first = await client.call_tool("pay__refund", refund(40, "o-<b>\u202e"), meta={KEY: key})
        again = await client.call_tool("pay__refund", refund(40, "o-<b>\u202e"), meta={KEY: key})
    assert first.is_error is False, text_of(first)
    assert text_of(again) == text_of(first)
    assert count_executions(setup.state, tool="refund", key=key) == 1
    assert len(asked.messages) == 1  # the retry with the same key is not asked again
    card = asked.messages[0]
    # The call itself, escaped: the tool, its upstream, the arguments (a bidi override made visible).
    assert "alice" in card and "pay__refund" in card and "upstream pay" in card
    assert 'order: "o-<b>\\u202e"' in card and "amount: 40" in card and "\u202e" not in card
    listed = (await admin_get(setup.gateway, TOKENS["admin"], "decided")).json()["approvals"]
    mine = [a for a in listed if a["idempotency_key"] == key]
    assert mine and mine[0]["state"] == "allowed"
    assert mine[0]["channel"] == ("elicitation" if era == LEGACY else "input_required")
    assert mine[0]["decided_by"] == "the user of alice" and mine[0]["card"] == card


@pytest.mark.parametrize("era", [LEGACY, MODERN])
async def test_the_clients_user_declines_and_nothing_runs(setup: Setup, era: str) -> None:
    asked = Asked("decline")
    key = new_key("decline")
    async with connect(setup.gateway.url, era, TOKENS["alice"], asked) as client:
        result = await client.call_tool("pay__refund", refund(41), meta={KEY: key})
        again = await client.call_tool("pay__refund", refund(41), meta={KEY: key})
    assert result.is_error is True
    assert meta_of(result)[OUTCOME] == "rejected"
    assert "approval denied" in text_of(result)
    assert "approval denied" in text_of(again) and len(asked.messages) == 1
    assert count_executions(setup.state, tool="refund", key=key) == 0


# -- an approver decides while the client waits -------------------------------------------------------


async def test_an_approver_allows_a_waiting_call_of_a_client_without_elicitation(setup: Setup) -> None:
    key = new_key("approver")
    results: list[types.CallToolResult] = []

    async def call() -> None:
        async with connect(setup.gateway.url, LEGACY, TOKENS["alice"]) as client:
            results.append(await client.call_tool("pay__refund", refund(42, "o-42"), meta={KEY: key}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        held = await pending_for(setup.gateway, key)
        assert count_executions(setup.state, tool="refund", key=key) == 0  # held before anything is sent
        assert held["principal"] == "alice" and held["tool"] == "pay__refund" and held["upstream"] == "pay"
        assert held["arguments"] == {"order": "o-42", "amount": 42} and held["state"] == "pending"
        assert held["created_at"].endswith("Z") and held["expires_at"].endswith("Z")
        # The calling principal's own token cannot decide; nor can a request without credentials.
        own = await decide(setup.gateway, TOKENS["alice"], held["id"], "allow")
        assert own.status_code == 403, own.text
        self_approval = await decide(setup.gateway, TOKENS["alice-approver"], held["id"], "allow")
        assert self_approval.status_code == 403 and "principal whose call this is" in self_approval.json()["error"]
        async with httpx.AsyncClient(base_url=setup.gateway.base) as http:
            bare = await http.post(f"/admin/approvals/{held['id']}/decision", json={"decision": "allow"})
        assert bare.status_code == 401
        bad = await decide(setup.gateway, TOKENS["carol"], held["id"], "maybe")
        assert bad.status_code == 400 and "decision" in bad.json()["error"]
        async with httpx.AsyncClient(base_url=setup.gateway.base) as http:
            carol = {"authorization": f"Bearer {TOKENS['carol']}"}
            not_json = await http.post(f"/admin/approvals/{held['id']}/decision", content=b"allow", headers=carol)
            bad_view = await http.get("/admin/approvals", params={"state": "everything"}, headers=carol)
        assert not_json.status_code == 400 and "invalid request" in not_json.json()["error"]
        assert bad_view.status_code == 400 and "pending, decided or all" in bad_view.json()["error"]
        assert (await admin_get(setup.gateway, TOKENS["bob"])).status_code == 403  # an agent token lists nothing
        async with httpx.AsyncClient() as http:  # and an approver token calls nothing
            as_agent = await http.post(setup.gateway.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                       headers={"authorization": f"Bearer {TOKENS['carol']}",
                                                "accept": "application/json, text/event-stream"})
        assert as_agent.status_code == 401
        allowed = await decide(setup.gateway, TOKENS["carol"], held["id"], "allow", reason="checked the order")
        assert allowed.status_code == 200, allowed.text
        assert allowed.json()["state"] == "allowed" and allowed.json()["decided_by"] == "carol"
    assert results[0].is_error is False, text_of(results[0])
    assert count_executions(setup.state, tool="refund", key=key) == 1
    setup.gateway.wait_for_log(r"tools/call pay__refund by alice: approved by carol \(admin_api\)")
    # A replayed (or a later, other) decision gets the first answer.
    replayed = await decide(setup.gateway, TOKENS["admin"], held["id"], "deny")
    assert replayed.status_code == 409
    assert replayed.json()["state"] == "allowed" and replayed.json()["decided_by"] == "carol"
    assert replayed.json()["reason"] == "checked the order"
    missing = await decide(setup.gateway, TOKENS["carol"], "0" * 32, "allow")
    assert missing.status_code == 404


async def test_an_approver_denies(setup: Setup) -> None:
    key = new_key("denied")
    results: list[types.CallToolResult] = []

    async def call() -> None:
        async with connect(setup.gateway.url, MODERN, TOKENS["alice"]) as client:  # 2026, no elicitation
            results.append(await client.call_tool("pay__refund", refund(43), meta={KEY: key}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        held = await pending_for(setup.gateway, key)
        assert (await decide(setup.gateway, TOKENS["carol"], held["id"], "deny", "no such order")).status_code == 200
    assert results[0].is_error and meta_of(results[0])[OUTCOME] == "rejected"
    assert "approval denied (no such order)" in text_of(results[0])
    assert count_executions(setup.state, tool="refund", key=key) == 0


async def test_a_principal_with_client_approvals_is_not_held(setup: Setup) -> None:
    key = new_key("client")
    async with connect(setup.gateway.url, LEGACY, TOKENS["bob"]) as client:
        result = await client.call_tool("pay__refund", refund(44), meta={KEY: key})
    assert result.is_error is False, text_of(result)
    assert count_executions(setup.state, tool="refund", key=key) == 1


# -- policy: a per-call rule --------------------------------------------------------------------------


async def test_a_refund_over_5000_waits_for_a_decision_and_one_under_runs_at_once(setup: Setup) -> None:
    small, large = new_key("small"), new_key("large")
    results: list[types.CallToolResult] = []
    async with connect(setup.gateway.url, LEGACY, TOKENS["bob"]) as client:
        under = await client.call_tool("pay__refund", refund(100), meta={KEY: small})

        async def call() -> None:
            results.append(await client.call_tool("pay__refund", refund(6000), meta={KEY: large}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            held = await pending_for(setup.gateway, large)
            assert "policy rule 'large-refunds': refunds over 5,000 need finance" in held["card"]
            assert (await decide(setup.gateway, TOKENS["carol"], held["id"], "deny")).status_code == 200
    assert under.is_error is False and count_executions(setup.state, tool="refund", key=small) == 1
    assert "approval denied" in text_of(results[0]) and count_executions(setup.state, tool="refund", key=large) == 0
    async with httpx.AsyncClient(base_url=setup.gateway.base, timeout=10) as http:
        metrics = (await http.get("/metrics", headers={"authorization": f"Bearer {TOKENS['admin']}"})).text
    assert [line for line in metrics.splitlines() if line.startswith("dex_gateway_approvals_total{")
            and 'state="denied"' in line and 'channel="admin_api"' in line and float(line.rsplit(" ", 1)[1]) >= 1], metrics


# -- deadline, restart ----------------------------------------------------------------------------------


async def test_the_deadline_rejects_and_an_old_approval_is_not_used_again(tmp_path: Path) -> None:
    state = tmp_path / "pay"
    state.mkdir()
    late_key, old_key = new_key("late"), new_key("old")
    data = {**config_for(state, deadline_seconds=2, wait_seconds=0),
            "fences": {"store": f"sqlite:///{tmp_path / 'fences.db'}", "retention_hours": 0.001}}  # 3.6 s
    with start_gateway(write_config(tmp_path, data)) as gateway:
        async with connect(gateway.url, LEGACY, TOKENS["alice"]) as client:
            waiting = await client.call_tool("pay__refund", refund(45), meta={KEY: late_key})
            held = await pending_for(gateway, late_key)
            asked = await client.call_tool("pay__refund", refund(46), meta={KEY: old_key})
            old = await pending_for(gateway, old_key)
            assert (await decide(gateway, TOKENS["carol"], old["id"], "allow")).status_code == 200
            ran = await client.call_tool("pay__refund", refund(46), meta={KEY: old_key})
            await anyio.sleep(2.1)
            late = await client.call_tool("pay__refund", refund(45), meta={KEY: late_key})
            too_late = await decide(gateway, TOKENS["carol"], held["id"], "allow")
            await anyio.sleep(1.6)  # 3.7 s after the decision, more than the retention
            reused = await client.call_tool("pay__refund", refund(46), meta={KEY: old_key})
    assert "waiting for an approver's decision" in text_of(waiting) and meta_of(waiting)[OUTCOME] == "rejected"
    assert "waiting for an approver's decision" in text_of(asked)
    assert late.is_error and meta_of(late)[OUTCOME] == "rejected" and "approval deadline passed" in text_of(late)
    assert too_late.status_code == 409 and too_late.json()["state"] == "expired"
    assert count_executions(state, tool="refund", key=late_key) == 0
    # Allowed once: the call ran; past the fences' retention the key is not run again on that approval.
    assert ran.is_error is False, text_of(ran)
    assert reused.is_error and "send it with a new idempotency key" in text_of(reused)
    assert count_executions(state, tool="refund", key=old_key) == 1


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
async def test_a_pending_approval_survives_sigkill_and_the_retry_runs_once(tmp_path: Path, database: str) -> None:
    state = tmp_path / "pay"
    state.mkdir()
    key = new_key("killed")
    data = config_for(state)
    if database == "sqlite":
        await _killed_while_pending(write_config(tmp_path, data), state, key)
        return
    async with fresh_schema("approvals_kill") as schema:
        data["fences"] = {"store": schema_url(schema)}
        await _killed_while_pending(write_config(tmp_path, data), state, key)


async def _killed_while_pending(config: Path, state: Path, key: str) -> None:
    with start_gateway(config) as gateway:

        async def call() -> None:
            try:
                async with connect(gateway.url, LEGACY, TOKENS["alice"]) as client:
                    await client.call_tool("pay__refund", refund(46), meta={KEY: key})
            except Exception:  # noqa: BLE001 - the gateway is killed under it (or the call is cancelled)
                pass

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            held = await pending_for(gateway, key)
            gateway.kill()
            tg.cancel_scope.cancel()
        gateway.start()
        after = await pending_for(gateway, key)
        assert after["id"] == held["id"] and after["state"] == "pending"
        assert (await decide(gateway, TOKENS["carol"], held["id"], "allow")).status_code == 200
        async with connect(gateway.url, LEGACY, TOKENS["alice"]) as client:
            ran = await client.call_tool("pay__refund", refund(46), meta={KEY: key})
            again = await client.call_tool("pay__refund", refund(46), meta={KEY: key})
    assert ran.is_error is False, text_of(ran)
    assert text_of(again) == text_of(ran)
    assert count_executions(state, tool="refund", key=key) == 1


async def test_the_cli_lists_and_decides(setup: Setup) -> None:
    key = new_key("cli")
    config = str(setup.gateway.config_path)
    results: list[types.CallToolResult] = []

    async def cli(*args: str) -> Any:
        return await anyio.to_thread.run_sync(lambda: run_gateway_cli("approvals", *args, "--config", config))

    async def call() -> None:
        async with connect(setup.gateway.url, LEGACY, TOKENS["alice"]) as client:
            results.append(await client.call_tool("pay__refund", refund(47, "o-cli"), meta={KEY: key}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        held = await pending_for(setup.gateway, key)
        # Two processes side by side (each starts in seconds on a busy machine).
        outputs: dict[str, Any] = {}

        async def run(name: str, *args: str) -> None:
            outputs[name] = await cli(*args)

        async with anyio.create_task_group() as clis:
            clis.start_soon(run, "list", "list", "--state", "all")
            clis.start_soon(run, "decide", "decide", held["id"], "allow", "--reason", "ok", "--as", "dana")
        listed, done = outputs["list"], outputs["decide"]
        assert listed.returncode == 0 and held["id"] in listed.stdout and 'order: "o-cli"' in listed.stdout
        assert done.returncode == 0, done.stderr
    assert results[0].is_error is False, text_of(results[0])
    assert count_executions(setup.state, tool="refund", key=key) == 1
    decided = (await admin_get(setup.gateway, TOKENS["carol"], "all")).json()["approvals"]
    mine = [a for a in decided if a["id"] == held["id"]][0]
    assert (mine["decided_by"], mine["channel"], mine["reason"]) == ("cli:dana", "cli", "ok")


async def test_a_task_stays_working_until_an_approver_decides_then_completes(setup: Setup) -> None:
    from tests.tasks.tasks_support import sdk_raw

    key = new_key("task")
    async with connect(setup.gateway.url, LEGACY, TOKENS["alice"]) as client:
        raw = await sdk_raw(client, "tools/call", {"name": "pay__refund", "arguments": refund(48, "o-task"),
                                                   "task": {"ttl": 60_000}, "_meta": {KEY: key}})
        created = types.CreateTaskResult.model_validate(raw, by_name=False)
        assert created.task.status == "working"
        held = await pending_for(setup.gateway, key)
        got = types.GetTaskResult.model_validate(
            await sdk_raw(client, "tasks/get", {"taskId": created.task.task_id}), by_name=False)
        assert got.status == "working" and count_executions(setup.state, tool="refund", key=key) == 0
        assert (await decide(setup.gateway, TOKENS["carol"], held["id"], "allow")).status_code == 200
        result = types.CallToolResult.model_validate(
            await sdk_raw(client, "tasks/result", {"taskId": created.task.task_id}), by_name=False)
    assert result.is_error is False, result
    assert count_executions(setup.state, tool="refund", key=key) == 1
