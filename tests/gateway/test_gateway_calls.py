"""tools/call through a real gateway: keys reach the upstream unchanged, retries are replayed from
the fence, keyless and reused keys are refused, reads need no key, upstream outcomes are kept,
and progress is relayed, from a stdio and an HTTP upstream, in both protocol eras."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from tests.gateway.helpers import KEY, OUTCOME, REPLAYED, connect, meta_of, new_key, text_of
from tests.support.gateway import RunningGateway, http_upstream, start_gateway, stdio_upstream, write_config
from tests.support.servers import count_executions, read_executions, start_http_server

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@dataclass
class Setup:
    gateway: RunningGateway
    states: dict[str, Path]  # upstream name -> its state dir


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("calls")
    states = {name: root / name for name in ("pay", "hpay", "notes")}
    for d in states.values():
        d.mkdir()
    with start_http_server("dex_server", state_dir=states["hpay"]) as hpay:
        config = write_config(root, {"upstreams": [
            stdio_upstream("pay", "dex_server", state_dir=states["pay"]),
            http_upstream("hpay", hpay.url),
            # A plain MCP upstream whose operator lets keyless writes through, unfenced.
            stdio_upstream("notes", "plain_server", state_dir=states["notes"], keyless_writes="pass"),
        ]})
        with start_gateway(config) as gateway:
            yield Setup(gateway, states)


@pytest.fixture(params=["pay", "hpay"])
def upstream(request: pytest.FixtureRequest) -> str:
    """The same Dex server behind a stdio (pay) and a Streamable-HTTP (hpay) connection."""
    return str(request.param)


async def test_keyed_write_reaches_upstream_with_the_same_key_and_retry_is_replayed(
    setup: Setup, era: str, upstream: str
) -> None:
    key = new_key(f"{era}-{upstream}")
    args = {"to": f"alice-{key}", "amount": 12.5}
    async with connect(setup.gateway.url, era) as client:
        first = await client.call_tool(f"{upstream}__send_payment", args, meta={KEY: key})
        assert first.is_error is False, text_of(first)
        assert REPLAYED not in meta_of(first)
        records = read_executions(setup.states[upstream], tool="send_payment", key=key)
        assert len(records) == 1
        assert records[0]["idempotency_key"] == key  # byte for byte what the client sent
        assert records[0]["arguments"] == args

        again = await client.call_tool(f"{upstream}__send_payment", args, meta={KEY: key})
    assert again.is_error is False
    assert meta_of(again)[REPLAYED] is True
    assert text_of(again) == text_of(first)
    assert again.structured_content == first.structured_content
    assert count_executions(setup.states[upstream], tool="send_payment", key=key) == 1


async def test_retry_from_another_connection_is_replayed(setup: Setup, era: str) -> None:
    """A fence outlives the client connection: a new client with the same key gets the first answer."""
    key = new_key(f"reconnect-{era}")
    args = {"payment_id": f"p-{key}", "memo": "rent"}
    async with connect(setup.gateway.url, era) as client:
        first = await client.call_tool("pay__set_memo", args, meta={KEY: key})
    other_era = "legacy" if era != "legacy" else "2026-07-28"
    async with connect(setup.gateway.url, other_era) as client:
        again = await client.call_tool("pay__set_memo", args, meta={KEY: key})
    assert first.is_error is False and again.is_error is False
    assert meta_of(again)[REPLAYED] is True
    assert text_of(again) == text_of(first)
    assert count_executions(setup.states["pay"], tool="set_memo", key=key) == 1


async def test_keyless_write_is_rejected_and_never_sent(setup: Setup, era: str, upstream: str) -> None:
    to = f"keyless-{era}-{upstream}"
    async with connect(setup.gateway.url, era) as client:
        result = await client.call_tool(f"{upstream}__send_payment", {"to": to, "amount": 1})
    assert result.is_error is True
    assert meta_of(result)[OUTCOME] == "rejected"
    text = text_of(result)
    assert KEY in text and "idempotency key" in text
    assert not [r for r in read_executions(setup.states[upstream]) if r["arguments"].get("to") == to]


async def test_same_key_other_arguments_is_rejected(setup: Setup, era: str, upstream: str) -> None:
    key = new_key(f"reuse-{era}-{upstream}")
    async with connect(setup.gateway.url, era) as client:
        first = await client.call_tool(f"{upstream}__send_payment", {"to": "bob", "amount": 5}, meta={KEY: key})
        other = await client.call_tool(f"{upstream}__send_payment", {"to": "bob", "amount": 500}, meta={KEY: key})
        other_tool = await client.call_tool(f"{upstream}__set_memo", {"payment_id": "x", "memo": "y"},
                                            meta={KEY: key})
    assert first.is_error is False
    for refused in (other, other_tool):
        assert refused.is_error is True
        assert meta_of(refused)[OUTCOME] == "rejected"
        assert "reused" in text_of(refused)
    assert count_executions(setup.states[upstream], key=key) == 1


async def test_read_needs_no_key(setup: Setup, era: str, upstream: str) -> None:
    account = f"acct-{era}-{upstream}"
    async with connect(setup.gateway.url, era) as client:
        result = await client.call_tool(f"{upstream}__get_balance", {"account": account})
    assert result.is_error is False, text_of(result)
    assert result.structured_content == {"account": account, "balance": 1000.0, "currency": "EUR"}
    assert OUTCOME not in meta_of(result)
    assert [r["arguments"] for r in read_executions(setup.states[upstream], tool="get_balance")
            if r["arguments"]["account"] == account] == [{"account": account}]


async def test_upstream_outcomes_are_kept(setup: Setup, era: str, upstream: str) -> None:
    async with connect(setup.gateway.url, era) as client:
        # isError result carrying outcome unknown
        uncertain = await client.call_tool(f"{upstream}__settle_uncertain", {"payment_id": "p1"},
                                           meta={KEY: new_key("settle")})
        # JSON-RPC error carrying outcome rejected
        refused = await client.call_tool(f"{upstream}__refund", {"order": "5521", "amount": 900},
                                         meta={KEY: new_key("refund")})
    assert uncertain.is_error is True and meta_of(uncertain)[OUTCOME] == "unknown"
    assert refused.is_error is True and meta_of(refused)[OUTCOME] == "rejected"
    assert text_of(refused).startswith("MCP error -32050: refund of 900 is over the limit")


async def test_key_reaches_a_plain_upstream_and_keyless_pass_through(setup: Setup, era: str) -> None:
    key = new_key(f"notes-{era}")
    async with connect(setup.gateway.url, era) as client:
        keyed = await client.call_tool("notes__put_note", {"name": f"n-{era}", "text": "hello"}, meta={KEY: key})
        keyless = await client.call_tool("notes__append_log", {"line": f"line-{era}"})
        replay = await client.call_tool("notes__put_note", {"name": f"n-{era}", "text": "hello"}, meta={KEY: key})
    assert keyed.is_error is False and keyless.is_error is False, (text_of(keyed), text_of(keyless))
    assert meta_of(replay)[REPLAYED] is True
    assert count_executions(setup.states["notes"], tool="put_note", key=key) == 1
    # `keyless_writes: pass`: sent upstream unfenced, no key invented.
    logged = [r for r in read_executions(setup.states["notes"], tool="append_log")
              if r["arguments"]["line"] == f"line-{era}"]
    assert len(logged) == 1 and logged[0]["idempotency_key"] is None


async def test_progress_is_relayed(setup: Setup, era: str, upstream: str) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with connect(setup.gateway.url, era) as client:
        result = await client.call_tool(f"{upstream}__long_report", {"steps": 5, "step_seconds": 0.05},
                                        progress_callback=on_progress)
    assert result.is_error is False, text_of(result)
    assert text_of(result) == "report with 5 sections"
    assert seen == [(float(i), 5.0, f"section {i} of 5") for i in range(1, 6)]


async def test_concurrent_progress_stays_with_its_call(setup: Setup, era: str) -> None:
    seen: dict[int, list[float]] = {3: [], 4: []}

    def recorder(steps: int):
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            assert total == steps
            seen[steps].append(progress)
        return on_progress

    async with connect(setup.gateway.url, era) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: client.call_tool("pay__long_report", {"steps": 3, "step_seconds": 0.05},
                                                   progress_callback=recorder(3)))
            tg.start_soon(lambda: client.call_tool("hpay__long_report", {"steps": 4, "step_seconds": 0.05},
                                                   progress_callback=recorder(4)))
    assert seen == {3: [1.0, 2.0, 3.0], 4: [1.0, 2.0, 3.0, 4.0]}
