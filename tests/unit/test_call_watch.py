"""What watches a fast-path call while it runs, without a task per call: the pings during silence
(a timer) and the client's disconnect (a callback from the gateway's HTTP protocol)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.front import fastpath
from gateway.http.uvicorn_protocol import Disconnect

anyio_tests = pytest.mark.anyio


class _Recorder:
    def __init__(self) -> None:
        self.pings = 0

    async def ping(self) -> None:
        self.pings += 1


@anyio_tests
async def test_pings_come_every_interval_until_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fastpath, "PING_INTERVAL", 0.02)
    exchange = _Recorder()
    pings = fastpath._Pings(exchange)  # type: ignore[arg-type]
    await asyncio.sleep(0.11)
    seen = exchange.pings
    assert 3 <= seen <= 6
    pings.cancel()
    await asyncio.sleep(0.06)
    assert exchange.pings == seen  # none after the call ended


@anyio_tests
async def test_no_ping_for_a_call_that_ends_in_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fastpath, "PING_INTERVAL", 0.05)
    exchange = _Recorder()
    fastpath._Pings(exchange).cancel()  # type: ignore[arg-type]
    await asyncio.sleep(0.08)
    assert exchange.pings == 0


def test_a_disconnect_calls_back_once() -> None:
    calls: list[str] = []
    disconnect = Disconnect()
    disconnect.on_lost(lambda: calls.append("lost"))
    disconnect._lose()
    disconnect._lose()
    assert calls == ["lost"] and disconnect.lost


def test_a_client_already_gone_is_told_at_once() -> None:
    calls: list[str] = []
    disconnect = Disconnect()
    disconnect._lose()  # the client went away while the body was read
    disconnect.on_lost(lambda: calls.append("lost"))
    assert calls == ["lost"]


def test_a_call_that_ended_is_not_called_back() -> None:
    calls: list[str] = []
    disconnect = Disconnect()
    disconnect.on_lost(lambda: calls.append("lost"))
    disconnect.on_lost(None)  # the call ended first
    disconnect._lose()
    assert calls == []
