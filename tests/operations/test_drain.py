"""SIGTERM with a write in flight: /readyz 503 at once, new requests refused, the write finishes
(or stays fenced past the deadline), the process exits 0, nothing is lost."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.operations.support import events, headers, new_key, ops_upstream, post, tool_call, wait_for
from tests.support.gateway import RunningGateway, start_gateway, write_config

OUTCOME = "io.superdurable.dex/outcome"
REPLAYED = "dex-gateway/replayed"


def _config(tmp_path: Path, log: Path, **server: Any) -> Path:
    return write_config(tmp_path, {
        "server": server,
        "upstreams": [ops_upstream("ops", log)],
        "fences": {"store": f"sqlite:///{tmp_path / 'fences.db'}"},
    })


def _call_in_thread(url: str, message: dict[str, Any]) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        with httpx.Client(timeout=60) as client:
            try:
                box["answer"] = post(client, url, message)
            except httpx.HTTPError as exc:
                box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, box


def _wait_exit(gw: RunningGateway, timeout: float) -> int:
    assert gw.process is not None
    return gw.process.wait(timeout=timeout)


def test_sigterm_lets_the_write_finish_and_exits_0(tmp_path: Path) -> None:
    log = tmp_path / "ops.jsonl"
    key = new_key()
    with start_gateway(_config(tmp_path, log)) as gw, httpx.Client(timeout=10) as client:
        assert client.get(f"{gw.base}/readyz").status_code == 200
        thread, box = _call_in_thread(gw.url, tool_call("ops__slow_write", {"seconds": 2.5}, key=key))
        wait_for(lambda: events(log, "start", "slow_write"), what="the write to reach the upstream")
        signalled = time.monotonic()
        gw.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]

        # /readyz turns 503 at once, while the write still runs; new requests are refused.
        wait_for(lambda: client.get(f"{gw.base}/readyz").status_code == 503, timeout=2, what="/readyz 503")
        assert time.monotonic() - signalled < 1.5
        assert client.get(f"{gw.base}/readyz").json() == {"status": "draining"}
        refused = client.post(gw.url, json=tool_call("ops__write", {"text": "late"}, key=new_key()), headers=headers())
        assert refused.status_code == 503 and refused.json()["error"]["code"] == -32030
        assert not events(log, "end", "slow_write")

        assert _wait_exit(gw, 20) == 0
        thread.join(10)
    assert box.get("answer", {}).get("result", {}).get("content") == [{"type": "text", "text": "slow_write done"}], box
    assert len(events(log, "start", "slow_write")) == 1
    assert not events(log, "start", "write")  # the refused request was never sent
    assert "drained: closing connections and stores" in gw.log

    # Nothing lost: a restarted gateway replays the stored answer; the upstream ran it once.
    with start_gateway(_config(tmp_path, log)) as gw2, httpx.Client(timeout=30) as client:
        retry = post(client, gw2.url, tool_call("ops__slow_write", {"seconds": 2.5}, key=key))
    assert retry["result"]["_meta"][REPLAYED] is True
    assert retry["result"]["content"] == box["answer"]["result"]["content"]
    assert len(events(log, "start", "slow_write")) == 1


def test_the_deadline_ends_it_and_the_write_stays_fenced(tmp_path: Path) -> None:
    log = tmp_path / "ops.jsonl"
    key = new_key()
    cfg = _config(tmp_path, log, drain_seconds=0.5)
    with start_gateway(cfg) as gw:
        port = gw.port
        thread, box = _call_in_thread(gw.url, tool_call("ops__slow_write", {"seconds": 4}, key=key))
        wait_for(lambda: events(log, "start", "slow_write"), what="the write to reach the upstream")
        signalled = time.monotonic()
        gw.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        assert _wait_exit(gw, 10) == 0
        assert time.monotonic() - signalled < 3
        thread.join(10)
    assert "error" in box  # the client lost its connection mid-call
    assert "exiting with 1 request(s) in flight" in gw.log
    # Same port, same replica id: the restarted gateway knows its old claim died with it. A
    # non-idempotent write that may have run is answered unknown, never sent again.
    with start_gateway(cfg, port=port) as gw2, httpx.Client(timeout=30) as client:
        retry = post(client, gw2.url, tool_call("ops__slow_write", {"seconds": 4}, key=key))
    assert retry["result"]["_meta"][OUTCOME] == "unknown"
    assert len(events(log, "start", "slow_write")) == 1


def test_a_second_sigterm_ends_it_at_once(tmp_path: Path) -> None:
    log = tmp_path / "ops.jsonl"
    with start_gateway(_config(tmp_path, log)) as gw:
        thread, _ = _call_in_thread(gw.url, tool_call("ops__slow_write", {"seconds": 10}, key=new_key()))
        wait_for(lambda: events(log, "start", "slow_write"), what="the write to reach the upstream")
        gw.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        time.sleep(0.3)
        signalled = time.monotonic()
        gw.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        assert _wait_exit(gw, 5) == 0
        assert time.monotonic() - signalled < 2
        thread.join(10)
    assert "second SIGTERM: stopping at once" in gw.log
