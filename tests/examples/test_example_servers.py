"""The example upstream servers, run as real processes and spoken to with the official SDK client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, Tool

from tests.support.inflight import FlockWatch
from tests.support.servers import (
    count_executions,
    read_executions,
    release_gate,
    start_http_server,
    stdio_params,
    wait_for_executions,
)

pytestmark = pytest.mark.anyio

EFFECT = "io.superdurable.dex/effect"
APPROVAL = "io.superdurable.dex/approval"
OUTCOME = "io.superdurable.dex/outcome"
KEY = "io.superdurable.dex/idempotencyKey"
MODES = ["legacy", "auto"]  # "auto" lands on 2026-07-28 against these servers

DEX_EFFECTS = {
    "get_balance": "read", "list_payments": "read", "set_memo": "idempotent_write",
    "refund": "non_idempotent_write", "send_payment": "non_idempotent_write",
    "close_account": "non_idempotent_write", "settle_uncertain": "non_idempotent_write",
    "long_report": "read", "sleep": "read", "statement": "read", "hold_payment": "non_idempotent_write",
    "hold_memo": "idempotent_write", "crash_read": "read", "crash_memo": "idempotent_write",
    "crash_payment": "non_idempotent_write",
}


@asynccontextmanager
async def stdio_client(name: str, state_dir: Path, mode: str, *args: str) -> AsyncIterator[Client]:
    async with Client(stdio_params(name, state_dir=state_dir, args=args), mode=mode, cache=None) as client:
        yield client


async def all_tools(client: Client) -> tuple[list[Tool], int]:
    """Every page of tools/list, and how many pages it took."""
    tools: list[Tool] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = await client.list_tools(cursor=cursor)
        pages += 1
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            return tools, pages


def text(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def exercise_dex_server(client: Client, state_dir: Path, key_prefix: str) -> None:
    """The core behaviour every transport must show: listing, keys, replay, progress."""
    tools, _ = await all_tools(client)
    assert {t.name: (t.meta or {}).get(EFFECT) for t in tools} == DEX_EFFECTS
    approvals = {t.name for t in tools if (t.meta or {}).get(APPROVAL) == "recommended"}
    assert approvals == {"refund", "close_account"}

    keyless = await client.call_tool("send_payment", {"to": "bob", "amount": 5})
    assert keyless.is_error and (keyless.meta or {}).get(OUTCOME) == "rejected"
    assert KEY in text(keyless)

    key = f"{key_prefix}/send"
    first = await client.call_tool("send_payment", {"to": "bob", "amount": 5}, meta={KEY: key})
    again = await client.call_tool("send_payment", {"to": "bob", "amount": 5}, meta={KEY: key})
    assert not first.is_error and text(again) == text(first)
    assert count_executions(state_dir, tool="send_payment", key=key) == 1

    reused = await client.call_tool("send_payment", {"to": "eve", "amount": 5}, meta={KEY: key})
    assert reused.is_error and (reused.meta or {}).get(OUTCOME) == "rejected"

    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    report = await client.call_tool("long_report", {"steps": 3, "step_seconds": 0.01}, progress_callback=on_progress)
    assert text(report) == "report with 3 sections"
    assert [p[0] for p in progress] == [1, 2, 3]


@pytest.mark.parametrize("mode", MODES)
async def test_dex_server_stdio(tmp_path: Path, mode: str) -> None:
    async with stdio_client("dex_server", tmp_path, mode) as client:
        await exercise_dex_server(client, tmp_path, f"stdio-{mode}")


@pytest.mark.parametrize("mode", MODES)
async def test_dex_server_http_sse(tmp_path: Path, mode: str) -> None:
    with start_http_server("dex_server", state_dir=tmp_path) as server:
        async with Client(server.url, mode=mode, cache=None) as client:
            await exercise_dex_server(client, tmp_path, f"http-{mode}")


async def test_dex_server_http_json_stateful_and_paging(tmp_path: Path) -> None:
    with start_http_server("dex_server", state_dir=tmp_path, json_response=True, stateful=True,
                           args=["--page-size", "4"]) as server:
        async with Client(server.url, mode="legacy", cache=None) as client:
            tools, pages = await all_tools(client)
            assert len(tools) == len(DEX_EFFECTS) and pages == 4
            memo = await client.call_tool("set_memo", {"payment_id": "p1", "memo": "rent"}, meta={KEY: "m1"})
            assert not memo.is_error


async def test_fence_survives_server_restart(tmp_path: Path) -> None:
    args = {"order": "5521", "amount": 40}
    with start_http_server("dex_server", state_dir=tmp_path) as server:
        async with Client(server.url, mode="legacy") as client:
            first = await client.call_tool("refund", args, meta={KEY: "r1"})
        server.kill()
    with start_http_server("dex_server", state_dir=tmp_path) as server:
        async with Client(server.url, mode="legacy") as client:
            again = await client.call_tool("refund", args, meta={KEY: "r1"})
    assert text(again) == text(first)
    assert count_executions(tmp_path, tool="refund") == 1


async def test_outcomes_unknown_and_rejected_error(tmp_path: Path) -> None:
    async with stdio_client("dex_server", tmp_path, "legacy") as client:
        unsure = await client.call_tool("settle_uncertain", {"payment_id": "p9"}, meta={KEY: "s1"})
        assert unsure.is_error and (unsure.meta or {}).get(OUTCOME) == "unknown"
        for _ in range(2):  # the error is the key's answer; a retry gets it again
            with pytest.raises(MCPError) as raised:
                await client.call_tool("refund", {"order": "1", "amount": 900}, meta={KEY: "big"})
            assert raised.value.data == {"_meta": {OUTCOME: "rejected"}}
        with pytest.raises(MCPError) as raised:
            await client.call_tool("close_account", {"account": "main"}, meta={KEY: "c1"})
        assert raised.value.data["_meta"][OUTCOME] == "rejected"


async def test_hold_blocks_until_released_and_retry_waits(tmp_path: Path) -> None:
    with start_http_server("dex_server", state_dir=tmp_path) as server:
        answers: list[str] = []

        async def call() -> None:
            async with Client(server.url, mode="legacy") as client:
                result = await client.call_tool("hold_memo", {"gate": "g1"}, meta={KEY: "h1"})
                answers.append(text(result))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await anyio.to_thread.run_sync(lambda: wait_for_executions(tmp_path, 1, tool="hold_memo"))
                # The server decides under an exclusive flock of its fence file, synchronously on
                # its event loop. Holding that lock, see the retry block on it: the retry reached
                # the fence while the first call runs.
                fence_lock = FlockWatch(tmp_path / "fence.jsonl.lock")
                try:
                    tg.start_soon(call)  # the same key while the first runs: waits for its answer
                    await anyio.to_thread.run_sync(lambda: fence_lock.wait_for_blocked(server.pid))
                    assert answers == []
                    # Open the gate before letting the retry decide: the first call cannot finish
                    # before the (blocked) event loop has run that decision, so the retry sees it
                    # running, whenever the gate is noticed.
                    release_gate(tmp_path, "g1")
                finally:
                    fence_lock.release()
        assert answers == ["hold_memo released at gate g1"] * 2
        assert count_executions(tmp_path, tool="hold_memo") == 1


async def test_interrupted_writes_after_a_crash(tmp_path: Path) -> None:
    """Server died mid-call: a non-idempotent write is `unknown` on retry, an idempotent one runs again."""
    for tool, args in (("crash_payment", {"tag": "p"}), ("crash_memo", {"tag": "m", "crash_times": 1})):
        async with stdio_client("dex_server", tmp_path, "legacy") as client:
            with pytest.raises(MCPError, match="Connection closed"):
                await client.call_tool(tool, args, meta={KEY: tool})
    async with stdio_client("dex_server", tmp_path, "legacy") as client:
        payment = await client.call_tool("crash_payment", {"tag": "p"}, meta={KEY: "crash_payment"})
        assert payment.is_error and (payment.meta or {}).get(OUTCOME) == "unknown"
        memo = await client.call_tool("crash_memo", {"tag": "m", "crash_times": 1}, meta={KEY: "crash_memo"})
        assert not memo.is_error and "survived" in text(memo)
    assert count_executions(tmp_path, tool="crash_payment") == 1
    assert count_executions(tmp_path, tool="crash_memo") == 2


async def test_resources_and_prompts(tmp_path: Path) -> None:
    async with stdio_client("dex_server", tmp_path, "legacy") as client:
        resources = await client.list_resources()
        assert [str(r.uri) for r in resources.resources] == ["payments://policy"]
        templates = await client.list_resource_templates()
        assert [t.uri_template for t in templates.resource_templates] == ["payments://accounts/{account}"]
        policy = await client.read_resource("payments://policy")
        assert "Refunds" in policy.contents[0].text  # type: ignore[union-attr]
        account = await client.read_resource("payments://accounts/main")
        assert "1000.00" in account.contents[0].text  # type: ignore[union-attr]
        prompt = await client.get_prompt("dispute_letter", {"payment_id": "p7"})
        assert "p7" in prompt.messages[0].content.text  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", MODES)
async def test_plain_server(tmp_path: Path, mode: str) -> None:
    async with stdio_client("plain_server", tmp_path, mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        hints: dict[str, dict[str, Any]] = {
            name: (t.annotations.model_dump(by_alias=True, exclude_none=True) if t.annotations else {})
            for name, t in tools.items()
        }
        assert hints["list_notes"]["readOnlyHint"] is True and hints["read_note"]["readOnlyHint"] is True
        assert hints["put_note"]["idempotentHint"] is True
        assert hints["delete_note"]["destructiveHint"] is True
        assert hints["append_log"] == {}
        assert all(not (t.meta or {}).get(EFFECT) for t in tools.values())
        await client.call_tool("put_note", {"name": "a", "text": "hello"})
        assert text(await client.call_tool("read_note", {"name": "a"})) == "hello"
        assert (await client.call_tool("read_note", {"name": "zz"})).is_error
    assert [r["tool"] for r in read_executions(tmp_path)] == ["put_note", "read_note", "read_note"]


async def test_broken_server_lists_its_broken_declarations(tmp_path: Path) -> None:
    with start_http_server("broken_server", state_dir=tmp_path) as server:
        async with Client(server.url, mode="legacy") as client:
            metas = {t.name: t.meta or {} for t in (await client.list_tools()).tools}
            assert metas["bad_effect"][EFFECT] == "maybe"
            assert metas["bad_approval"][APPROVAL] == "always"
            first = await client.call_tool("double_write", {"item": "x"}, meta={KEY: "d"})
            again = await client.call_tool("double_write", {"item": "x"}, meta={KEY: "d"})
            assert text(first) != text(again)
    assert count_executions(tmp_path, tool="double_write") == 2
