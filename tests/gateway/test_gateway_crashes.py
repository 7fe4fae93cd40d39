"""An upstream killed mid-call, answered per the effect rules (SPEC 3), and used again after it
came back: a stdio upstream that exits inside the call (crash_* tools: the execution is recorded,
then the process dies), and an HTTP upstream SIGKILLed while a call blocks."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from mcp_types import CallToolResult

from gateway.fences.ids import fence_id
from tests.gateway.helpers import KEY, OUTCOME, REPLAYED, connect, meta_of, new_key, text_of
from tests.support.gateway import RunningGateway, http_upstream, start_gateway, stdio_upstream, write_config
from tests.support.inflight import SentRequests, wait_until_read
from tests.support.servers import (
    start_http_server,
    count_executions,
    free_port,
    read_executions,
    release_gate,
    spawn_http_server,
    wait_for_executions,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@dataclass
class Setup:
    gateway: RunningGateway
    state: Path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("crashes")
    state = root / "pay"
    state.mkdir()
    config = write_config(root, {"upstreams": [stdio_upstream("pay", "dex_server", state_dir=state)]})
    with start_gateway(config) as gateway:
        yield Setup(gateway, state)


def tagged(state: Path, tool: str, tag: str) -> list[dict]:
    return [r for r in read_executions(state, tool=tool) if r["arguments"].get("tag") == tag]


async def assert_upstream_works_again(url: str, era: str, state: Path) -> None:
    """The gateway started a new upstream process: a read and a keyed write both work."""
    account = f"after-{uuid.uuid4().hex[:6]}"
    key = new_key("after")
    async with connect(url, era) as client:
        read = await client.call_tool("pay__get_balance", {"account": account})
        write = await client.call_tool("pay__set_memo", {"payment_id": account, "memo": "ok"}, meta={KEY: key})
    assert read.is_error is False, text_of(read)
    assert write.is_error is False, text_of(write)
    assert count_executions(state, tool="set_memo", key=key) == 1


def assert_failed_without_outcome(result: CallToolResult) -> None:
    assert result.is_error is True
    assert OUTCOME not in meta_of(result), meta_of(result)


def assert_unknown(result: CallToolResult) -> None:
    assert result.is_error is True
    assert meta_of(result)[OUTCOME] == "unknown"
    assert "may have taken effect" in text_of(result)


async def test_read_is_sent_again_up_to_three_attempts_then_fails(setup: Setup, era: str) -> None:
    tag = f"read-{era}-{uuid.uuid4().hex[:6]}"
    async with connect(setup.gateway.url, era) as client:
        result = await client.call_tool("pay__crash_read", {"tag": tag, "crash_times": 0})
    assert_failed_without_outcome(result)
    assert "all 3 attempts" in text_of(result), text_of(result)
    assert len(tagged(setup.state, "crash_read", tag)) == 3
    await assert_upstream_works_again(setup.gateway.url, era, setup.state)


async def test_idempotent_write_is_sent_again_with_the_same_key_then_unknown(setup: Setup, era: str) -> None:
    tag = f"memo-{era}-{uuid.uuid4().hex[:6]}"
    key = new_key(tag)
    async with connect(setup.gateway.url, era) as client:
        result = await client.call_tool("pay__crash_memo", {"tag": tag, "crash_times": 0}, meta={KEY: key})
        assert_unknown(result)
        records = tagged(setup.state, "crash_memo", tag)
        assert len(records) == 3
        assert {r["idempotency_key"] for r in records} == {key}
        # The fence remembers: the same key is answered unknown again and never sent again.
        again = await client.call_tool("pay__crash_memo", {"tag": tag, "crash_times": 0}, meta={KEY: key})
    assert_unknown(again)
    assert len(tagged(setup.state, "crash_memo", tag)) == 3
    await assert_upstream_works_again(setup.gateway.url, era, setup.state)


async def test_idempotent_write_succeeds_on_the_second_attempt(setup: Setup, era: str) -> None:
    tag = f"memo-once-{era}-{uuid.uuid4().hex[:6]}"
    key = new_key(tag)
    async with connect(setup.gateway.url, era) as client:
        result = await client.call_tool("pay__crash_memo", {"tag": tag, "crash_times": 1}, meta={KEY: key})
    assert result.is_error is False, text_of(result)
    assert OUTCOME not in meta_of(result)
    records = tagged(setup.state, "crash_memo", tag)
    assert len(records) == 2
    assert {r["idempotency_key"] for r in records} == {key}


async def test_non_idempotent_write_is_unknown_at_once(setup: Setup, era: str) -> None:
    tag = f"pay-{era}-{uuid.uuid4().hex[:6]}"
    key = new_key(tag)
    async with connect(setup.gateway.url, era) as client:
        result = await client.call_tool("pay__crash_payment", {"tag": tag, "crash_times": 0}, meta={KEY: key})
        assert_unknown(result)
        assert len(tagged(setup.state, "crash_payment", tag)) == 1
        again = await client.call_tool("pay__crash_payment", {"tag": tag, "crash_times": 0}, meta={KEY: key})
    # The fence remembers: the retry is the stored unknown answer itself, and is never sent.
    assert_unknown(again)
    assert (again.content, meta_of(again)) == (result.content, meta_of(result))
    assert len(tagged(setup.state, "crash_payment", tag)) == 1
    await assert_upstream_works_again(setup.gateway.url, era, setup.state)


# -- an HTTP upstream SIGKILLed mid-call, then restarted on the same port ----------------------

HTTP_VARIANTS = {
    # A stateless upstream; the gateway picks the protocol (2026-07-28 against the examples).
    "stateless-auto": ({"stateful": False}, {}),
    # A stateful upstream on the handshake era: after the restart the old Mcp-Session-Id is
    # unknown (404), and the gateway must initialize again.
    "stateful-handshake": ({"stateful": True}, {"protocol": "handshake"}),
}


@pytest.mark.timeout(90)
@pytest.mark.parametrize("variant", list(HTTP_VARIANTS))
async def test_http_upstream_killed_mid_call_then_restarted(tmp_path: Path, era: str, variant: str) -> None:
    server_opts, upstream_opts = HTTP_VARIANTS[variant]
    state = tmp_path / "hpay"
    server = spawn_http_server("dex_server", state_dir=state, **server_opts)
    try:
        config = write_config(tmp_path, {"upstreams": [http_upstream("hpay", server.url, **upstream_opts)]})
        with start_gateway(config) as gateway:
            key = new_key("hold")
            gate = f"gate-{uuid.uuid4().hex[:6]}"
            results: list[CallToolResult] = []
            async with connect(gateway.url, era) as client:
                warm = await client.call_tool("hpay__get_balance", {"account": "warm"})
                assert warm.is_error is False, text_of(warm)

                async def hold() -> None:
                    results.append(await client.call_tool("hpay__hold_payment", {"gate": gate}, meta={KEY: key}))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(hold)
                    await anyio.to_thread.run_sync(
                        lambda: wait_for_executions(state, 1, tool="hold_payment", key=key))
                    server.kill()
                assert_unknown(results[0])
                assert count_executions(state, tool="hold_payment", key=key) == 1

                # Same port, same state dir: a restarted upstream.
                server = spawn_http_server("dex_server", state_dir=state, port=server.port, **server_opts)
                read = await client.call_tool("hpay__get_balance", {"account": "after-restart"})
                assert read.is_error is False, text_of(read)
                key2 = new_key("after")
                write = await client.call_tool("hpay__send_payment", {"to": "carol", "amount": 3}, meta={KEY: key2})
                assert write.is_error is False, text_of(write)
                assert count_executions(state, tool="send_payment", key=key2) == 1

                # The interrupted payment is never sent again, whatever the client retries.
                retry = await client.call_tool("hpay__hold_payment", {"gate": gate}, meta={KEY: key})
                assert_unknown(retry)
                assert count_executions(state, tool="hold_payment", key=key) == 1
            release_gate(state, gate)
    finally:
        server.stop()


# -- the gateway itself SIGKILLed mid-call, restarted on the same port and store ----------------


@pytest.mark.timeout(90)
async def test_gateway_killed_mid_call_then_restarted(tmp_path: Path) -> None:
    """A retry after a gateway crash: a non-idempotent write is unknown and never sent again; an
    idempotent write is taken over and sent again with the same key."""
    state = tmp_path / "hpay"
    with start_http_server("dex_server", state_dir=state) as server:
        config = write_config(tmp_path, {"upstreams": [http_upstream("hpay", server.url)]})
        # A fixed port: the replica id (host:port) survives the restart.
        with start_gateway(config, port=free_port()) as gateway:
            pay_key, memo_key = new_key("gw-pay"), new_key("gw-memo")
            pay_gate, memo_gate = f"gwpay-{uuid.uuid4().hex[:6]}", f"gwmemo-{uuid.uuid4().hex[:6]}"
            errors: list[BaseException] = []

            async def call(tool: str, gate: str, key: str) -> None:
                try:
                    async with connect(gateway.url, "legacy") as client:
                        await client.call_tool(tool, {"gate": gate}, meta={KEY: key})
                except BaseException as exc:  # noqa: BLE001 - the gateway dies under this call
                    errors.append(exc)

            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(call, "hpay__hold_payment", pay_gate, pay_key)
                    tg.start_soon(call, "hpay__hold_memo", memo_gate, memo_key)
                    await anyio.to_thread.run_sync(lambda: wait_for_executions(state, 1, key=pay_key))
                    await anyio.to_thread.run_sync(lambda: wait_for_executions(state, 1, key=memo_key))
                    gateway.kill()
            assert len(errors) == 2  # both callers saw the gateway go away

            gateway.start()
            try:
                release_gate(state, memo_gate)
                async with connect(gateway.url, "legacy") as client:
                    with anyio.fail_after(40):
                        started = time.monotonic()
                        pay = await client.call_tool("hpay__hold_payment", {"gate": pay_gate}, meta={KEY: pay_key})
                        pay_seconds = time.monotonic() - started
                        memo = await client.call_tool("hpay__hold_memo", {"gate": memo_gate}, meta={KEY: memo_key})
                        memo_again = await client.call_tool("hpay__hold_memo", {"gate": memo_gate},
                                                            meta={KEY: memo_key})
                assert_unknown(pay)
                assert count_executions(state, tool="hold_payment", key=pay_key) == 1
                # Same replica id (host and port) under a new boot id: its old claims are dead at
                # once, no waiting for their lease to run out.
                assert pay_seconds < 5, pay_seconds
                assert memo.is_error is False, text_of(memo)
                assert OUTCOME not in meta_of(memo)
                assert meta_of(memo_again)[REPLAYED] is True
                # Taken over: the restarted gateway says so, and sent the call again with the same
                # key. (The first execution was cancelled when its connection died, so
                # dex_server's own fence let the resend run: two executions, one key.)
                gateway.wait_for_log(rf"fence {fence_id('anonymous', memo_key)}: took over from dead owner")
                memo_runs = read_executions(state, tool="hold_memo", key=memo_key)
                assert len(memo_runs) == 2, memo_runs
                # The payment was not taken over: made unknown, for good.
                gateway.wait_for_log(rf"fence {fence_id('anonymous', pay_key)}: owner .* died mid-call; "
                                     "non_idempotent_write call is now unknown")
                assert f"fence {fence_id('anonymous', pay_key)}: took over" not in gateway.log
            finally:
                release_gate(state, pay_gate)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("replica_ids", [None, ("replica-a", "replica-b")], ids=["port-0-default", "explicit-ids"])
async def test_second_gateway_waits_for_a_live_first_one(tmp_path: Path, replica_ids: tuple[str, str] | None) -> None:
    """Two gateways sharing one fence store, both started with `--port 0`: a retry at the second
    while the first still runs the call must wait for the first answer (its owner is alive and
    renewing its lease), not declare the first gateway dead, with explicit `fences.replica_id`s
    and with the default ids (host and the port each one really bound)."""
    state = tmp_path / "hpay"
    with start_http_server("dex_server", state_dir=state) as server:
        configs = []
        for i in range(2):
            fences = {"store": f"sqlite:///{tmp_path / 'shared.db'}", "wait_seconds": 20}
            if replica_ids:
                fences["replica_id"] = replica_ids[i]
            configs.append(write_config(tmp_path, {"upstreams": [http_upstream("hpay", server.url)],
                                                   "fences": fences}, name=f"gateway-{i}.yaml"))
        with start_gateway(configs[0]) as first, start_gateway(configs[1]) as second:
            assert first.port != second.port
            key, gate = new_key("two"), f"two-{uuid.uuid4().hex[:6]}"
            results: dict[str, CallToolResult] = {}
            sent = SentRequests()

            async def call(name: str, url: str, sent: SentRequests | None = None) -> None:
                async with connect(url, "legacy", sent=sent) as client:
                    results[name] = await client.call_tool("hpay__hold_payment", {"gate": gate}, meta={KEY: key})

            try:
                with anyio.fail_after(40):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(call, "first", first.url)
                        await anyio.to_thread.run_sync(lambda: wait_for_executions(state, 1, key=key))
                        tg.start_soon(call, "second", second.url, sent)
                        # The retry is inside the second gateway while the first call still runs.
                        await sent.wait_for(1)
                        await wait_until_read([second.port])
                        assert results == {}, "a call answered while the first one was still running"
                        release_gate(state, gate)
            finally:
                release_gate(state, gate)
    assert results["first"].is_error is False, text_of(results["first"])
    assert results["second"].is_error is False, text_of(results["second"])
    assert meta_of(results["second"])[REPLAYED] is True
    assert text_of(results["second"]) == text_of(results["first"])
    assert count_executions(state, tool="hold_payment", key=key) == 1
