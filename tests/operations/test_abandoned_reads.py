"""Clients that disconnect mid-read: their reads are cancelled upstream, never sent again.

Each case opens N raw connections, sends one slow read on each, waits until the upstream has
started all of them, then closes every connection. Asserted after the reads would have ended:
the upstream started exactly N executions (no re-sent attempt: a cancelled read is not an
interrupted one), and, for the stdio upstream, it received N `notifications/cancelled` and
stopped all N reads. Through the fast path and through the SDK's server. An HTTP upstream
(the example server, stateless) also sees exactly N executions.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from tests.operations.support import HANDSHAKE, events, ops_upstream, tool_call, wait_for
from tests.support.gateway import http_upstream, start_gateway, write_config
from tests.support.servers import read_executions, start_http_server

CLIENTS = 40
SECONDS = 2.0


def _open_reads(url: str, tool: str, arguments: dict[str, object]) -> list[socket.socket]:
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    sockets = []
    for n in range(CLIENTS):
        body = json.dumps(tool_call(tool, arguments, request_id=n + 1)).encode()
        head = (f"POST /mcp HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
                f"accept: application/json, text/event-stream\r\nmcp-protocol-version: {HANDSHAKE}\r\n"
                f"content-length: {len(body)}\r\n\r\n").encode()
        sock = socket.create_connection((host, int(port)))
        sock.sendall(head + body)
        sockets.append(sock)
    return sockets


@pytest.mark.parametrize("entry", ["fast", "sdk"])
def test_abandoned_reads_are_cancelled_not_resent(tmp_path: Path, entry: str) -> None:
    log = tmp_path / "ops.jsonl"
    cfg = write_config(tmp_path, {"server": {"fast_tool_calls": entry == "fast"}, "upstreams": [ops_upstream("ops", log)]})
    with start_gateway(cfg) as gw:
        sockets = _open_reads(gw.url, "ops__slow_read", {"seconds": SECONDS})
        wait_for(lambda: len(events(log, "start", "slow_read")) == CLIENTS, what="every read to start")
        for sock in sockets:
            sock.close()
        wait_for(lambda: len(events(log, "cancelled", "slow_read")) == CLIENTS, timeout=10,
                 what="every read to be cancelled upstream")
        time.sleep(SECONDS + 1.0)  # past the reads' own end: any re-sent attempt would show now
    assert len(events(log, "start", "slow_read")) == CLIENTS
    assert len(events(log, "cancel_received")) == CLIENTS
    assert not events(log, "end", "slow_read")


def test_abandoned_reads_on_an_http_upstream_are_not_resent(tmp_path: Path) -> None:
    state = tmp_path / "upstream"
    with start_http_server("dex_server", state_dir=state) as upstream:
        cfg = write_config(tmp_path, {"upstreams": [http_upstream("pay", upstream.url)]})
        with start_gateway(cfg) as gw:
            sockets = _open_reads(gw.url, "pay__sleep", {"seconds": SECONDS})
            wait_for(lambda: len(read_executions(state, tool="sleep")) == CLIENTS, what="every read to start")
            for sock in sockets:
                sock.close()
            time.sleep(SECONDS + 1.5)
    assert len(read_executions(state, tool="sleep")) == CLIENTS
