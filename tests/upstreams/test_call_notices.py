"""A call's notification queue (gateway/upstreams/notices.py): bounded, in order, counted."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway.upstreams.notices import CallNotices


def progress(value: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": value}}


def log(text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": text}}


class Recorder:
    """A relay that records what reaches the client."""

    modern = False
    log_level = "debug"

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def client_capabilities(self) -> dict[str, Any]:
        return {}

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append(progress)

    async def log(self, params: dict[str, Any]) -> None:
        self.seen.append(params["data"])

    async def request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        raise AssertionError("not asked")

    async def pause_stream(self) -> None:
        pass


@pytest.mark.anyio
async def test_progress_is_coalesced_in_its_place_and_the_oldest_logs_dropped() -> None:
    dropped: list[str] = []
    notices = CallNotices(max_logs=3, on_drop=dropped.append)
    notices.put(log("a"))
    for value in range(1, 6):
        notices.put(progress(value))
    for text in "bcde":
        notices.put(log(text))
    notices.put({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})  # not the client's
    assert len(notices) == 4
    relay = Recorder()
    await notices.flush(relay)
    # The first progress's place, the latest value; logs past three: the oldest (a, b) dropped.
    assert relay.seen == [5.0, "c", "d", "e"]
    assert dropped.count("progress") == 4 and dropped.count("log") == 2


@pytest.mark.anyio
async def test_delivery_follows_the_queue_until_the_answer() -> None:
    notices = CallNotices()
    relay = Recorder()
    async with anyio.create_task_group() as tg:
        tg.start_soon(notices.deliver_until_closed, relay)
        notices.put(log("one"))
        with anyio.fail_after(2):
            while relay.seen != ["one"]:
                await anyio.sleep(0.01)
        notices.close()  # the task returns: the group closes
    notices.put(log("after"))
    await notices.flush(relay)
    assert relay.seen == ["one", "after"]
