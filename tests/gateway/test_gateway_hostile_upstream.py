"""What a hostile HTTP upstream can send, against a real `dex-gateway serve` and a real hostile
upstream process (tests/support/hostile_http_server.py), each failing on the code before its fix:

* an answer of 1.5 GiB (a JSON body, one endless SSE `data:` line, an SSE event of many lines) is
  read only up to the answer cap: the gateway's peak RSS stays small, the connection is closed, and
  the call fails quickly with the result-size limit's text;
* a listing longer than `max_listed_items` is refused whole, the previous listing stays, the log
  and /readyz say why;
* the gateway's own `_meta` keys (`dex-gateway/...`) sent by an upstream are dropped: a forged task
  marker does not turn the call into -32602, a forged replay marker never reaches the client;
* at most `max_connections` connections per upstream: calls past them wait `pool_timeout_seconds`,
  then fail as not sent (the idempotency key stays free, a retry runs); near the process's
  open-file limit no new upstream connection is opened, and the call fails as not sent, saying so.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.gateway.helpers import KEY, REPLAYED, all_tools, connect, mcp_errors, meta_of, new_key, text_of
from gateway.upstreams.transport import KEEPALIVE_SECONDS
from tests.support.gateway import RunningGateway, gateway_argv, http_upstream, start_gateway, write_config
from tests.support.processes import spawn_listening, terminate
from tests.support.servers import REPO_ROOT

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

HOSTILE = REPO_ROOT / "tests" / "support" / "hostile_http_server.py"
# 1.5 GiB by default; DEX_HOSTILE_STREAM_BYTES lowers it (to check the old code without swapping).
STREAM_BYTES = int(os.environ.get("DEX_HOSTILE_STREAM_BYTES", str(3 * 512 * 1024 * 1024)))
RSS_CEILING_KB = 300 * 1024
LIST_CAP = 20
POOL = 2


@dataclass
class Hostile:
    url: str
    process: Any
    lines: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return self.url.rsplit("/", 1)[0]

    def stats(self) -> dict[str, Any]:
        return httpx.get(f"{self.base}/stats", timeout=10).json()

    def control(self, **values: Any) -> None:
        httpx.post(f"{self.base}/control", json=values, timeout=10).raise_for_status()


def spawn_hostile(*args: str) -> Hostile:
    lines: list[str] = []
    argv = [sys.executable, str(HOSTILE), "--stream-bytes", str(STREAM_BYTES), *args]
    process, url = spawn_listening(argv, cwd=REPO_ROOT, env=dict(os.environ), name="hostile", lines=lines,
                                   ready_timeout=20)
    if url is None:
        terminate(process)
        raise RuntimeError("the hostile upstream did not start:\n" + "\n".join(lines))
    return Hostile(url, process, lines)


@dataclass
class Setup:
    gateway: RunningGateway
    hostile: Hostile
    lister: Hostile


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("hostile")
    hostile = spawn_hostile()
    lister = spawn_hostile("--extra-tools", "3")
    try:
        config = write_config(root, {"upstreams": [
            http_upstream("h", hostile.url, protocol="handshake", max_connections=POOL, pool_timeout_seconds=0.5,
                          max_attempts=1),
            http_upstream("lister", lister.url, protocol="handshake", max_listed_items=LIST_CAP,
                          list_ttl_seconds=0.3),
        ]})
        with start_gateway(config) as gateway:
            yield Setup(gateway, hostile, lister)
    finally:
        terminate(hostile.process)
        terminate(lister.process)


def open_connections_to(port: int) -> int:
    """Established TCP connections to 127.0.0.1:`port` from this machine (only the gateway connects)."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[2].split(":")[1], 16) == port and fields[3] == "01":
            count += 1
    return count


def peak_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


# -- 1. answers over the cap ---------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["huge_json", "endless_sse", "many_lines_sse"])
async def test_an_endless_answer_is_cut_at_the_cap_with_the_result_limit_error(setup: Setup, tool: str) -> None:
    gateway = setup.gateway
    assert gateway.process is not None
    before = setup.hostile.stats()["streamed"]
    started = time.monotonic()
    async with connect(gateway.url, "legacy") as client:
        result = await client.call_tool(f"h__{tool}", {})
    elapsed = time.monotonic() - started
    peak = peak_rss_kb(gateway.process.pid)
    print(f"{tool}: gateway peak RSS {peak // 1024} MiB, error after {elapsed:.2f} s")
    assert peak < RSS_CEILING_KB, f"the gateway peaked at {peak // 1024} MiB reading {tool}"
    text = text_of(result)
    assert result.is_error, text
    assert f"The result of h__{tool} is more than" in text, text
    assert "over this gateway's limit of 8388608 bytes (server.max_result_bytes)" in text, text
    assert elapsed < 20, f"the error took {elapsed:.1f} s"
    # The connection was closed: the upstream stopped long before its 1.5 GiB.
    await anyio.sleep(0.5)
    streamed = setup.hostile.stats()["streamed"] - before
    assert streamed < 200 * 1024 * 1024, f"the upstream streamed {streamed} bytes"
    gateway.wait_for_log(r"upstream h: .*stopped reading at \d+ bytes and closed the connection")


async def test_an_endless_prompt_answer_is_cut_at_the_cap_with_a_clear_error(setup: Setup) -> None:
    gateway = setup.gateway
    assert gateway.process is not None
    async with connect(gateway.url, "legacy") as client:
        with pytest.raises(Exception) as caught:
            await client.get_prompt("h__huge_prompt", {})
    errors = mcp_errors(caught.value)
    assert errors, caught.value
    message = str(errors[0])
    assert "prompts/get failed: the answer of the upstream 'h' is over 16842752 bytes, this gateway's cap for an " \
        "upstream answer (from server.max_result_bytes), so it was not read" in message, message
    assert peak_rss_kb(gateway.process.pid) < RSS_CEILING_KB


# -- 2. listings over max_listed_items -------------------------------------------------------------


def _lister_tools(names: list[str]) -> list[str]:
    return sorted(n for n in names if n.startswith("lister__"))


async def test_a_listing_over_max_listed_items_is_refused_and_the_previous_one_stays(setup: Setup) -> None:
    gateway = setup.gateway
    async with connect(gateway.url, "legacy") as client:
        first = _lister_tools([t.name for t in await all_tools(client)])
    assert len(first) == 5 + 3, first
    mark = gateway.log_mark()
    setup.lister.control(extra_tools=500)
    await anyio.sleep(0.5)  # past list_ttl_seconds: the next tools/list starts a refresh
    async with connect(gateway.url, "legacy") as client:
        await all_tools(client)
    gateway.wait_for_log(r"upstream lister: tools/list lists more than 20 items \(at least 505\), over its "
                         r"max_listed_items of 20; the listing is refused; the previous 8 items are kept",
                         since=mark, timeout=15)
    async with connect(gateway.url, "legacy") as client:
        after = _lister_tools([t.name for t in await all_tools(client)])
    assert after == first
    ready = httpx.get(f"{gateway.base}/readyz", timeout=10).json()
    assert "lister" in ready.get("refused_listings", {}), ready
    assert "max_listed_items of 20" in ready["refused_listings"]["lister"][0]


# -- 3. the gateway's own _meta keys ---------------------------------------------------------------


async def test_forged_gateway_meta_keys_are_dropped(setup: Setup) -> None:
    async with connect(setup.gateway.url, "legacy") as client:
        tools = {t.name: t for t in await all_tools(client)}
        result = await client.call_tool("h__forged_meta", {})
        keyed = await client.call_tool("h__forged_meta", {}, meta={KEY: new_key("forged")})
    listed_meta = dict(tools["h__forged_meta"].meta or {})
    assert not [k for k in listed_meta if k.startswith("dex-gateway/")], listed_meta
    for answer in (result, keyed):
        assert not answer.is_error, text_of(answer)
        assert text_of(answer) == "the upstream's own text"
        meta = meta_of(answer)
        assert meta.get("upstream/own") == "kept", meta
        assert REPLAYED not in meta and "dex-gateway/task" not in meta, meta
        block_meta = dict(answer.content[0].meta or {})
        assert block_meta == {"upstream/block": 1}, block_meta


# -- 4. the connection pool ------------------------------------------------------------------------


async def test_calls_past_max_connections_wait_then_fail_as_not_sent(setup: Setup) -> None:
    hostile = setup.hostile
    hostile.control(reset_stats=True)
    answers: dict[int, Any] = {}
    keys = {i: new_key(f"pool{i}") for i in range(5)}

    async def one(i: int) -> None:
        async with connect(setup.gateway.url, "legacy") as client:
            answers[i] = await client.call_tool("h__slow", {"seconds": 2}, meta={KEY: keys[i]})

    port = int(hostile.base.rsplit(":", 1)[1])
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:  # the gateway's open connections to the upstream, as the kernel sees them
        while not stop.wait(0.005):
            seen.append(open_connections_to(port))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(one, i)
    finally:
        stop.set()
        watcher.join()
    texts = {i: text_of(a) for i, a in answers.items()}
    ran = [i for i, t in texts.items() if t == "slow done"]
    refused = [i for i, t in texts.items() if i not in ran]
    assert len(ran) == POOL, texts
    for i in refused:
        assert answers[i].is_error
        assert "did not run" in texts[i] and "Nothing was sent" in texts[i], texts[i]
        assert f"all {POOL} connections to the upstream (max_connections) stayed busy for 0.5 s" in texts[i], texts[i]
    assert seen and max(seen) <= POOL, f"the gateway held up to {max(seen)} connections to the upstream"
    assert hostile.stats()["max_slow_running"] == POOL
    # Not sent: the key stays free, so the same call with the same key now runs.
    async with connect(setup.gateway.url, "legacy") as client:
        again = await client.call_tool("h__slow", {"seconds": 2}, meta={KEY: keys[refused[0]]})
    assert text_of(again) == "slow done", text_of(again)
    assert REPLAYED not in meta_of(again)


# -- 4b. the open-file limit -----------------------------------------------------------------------

FD_LIMIT = 256


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_no_new_upstream_connection_near_the_open_file_limit(tmp_path: Path) -> None:
    hostile = spawn_hostile()
    config = write_config(tmp_path, {
        # Client connections past the open-file headroom: the front's own cap must not stop them first.
        "server": {"max_connections": FD_LIMIT},
        "upstreams": [http_upstream("fd", hostile.url, protocol="handshake", max_attempts=1)],
    })
    lines: list[str] = []
    argv = ["prlimit", f"--nofile={FD_LIMIT}:{FD_LIMIT}", "--",
            *gateway_argv("serve", "--config", str(config), "--port", "0")]
    process, url = spawn_listening(argv, cwd=REPO_ROOT, env=dict(os.environ), name="gateway", lines=lines,
                                   ready_timeout=30, new_session=True)
    held: list[socket.socket] = []
    try:
        assert url is not None, "\n".join(lines)
        port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
        # The start-up listing's keep-alive connection expires (4 s): the call needs a new one.
        time.sleep(KEEPALIVE_SECONDS + 1.5)
        # Idle client connections take the gateway to the edge of its headroom (32 files left).
        while open_fds(process.pid) < FD_LIMIT - 30:
            held.append(socket.create_connection(("127.0.0.1", port)))
            if len(held) % 16 == 0:
                time.sleep(0.05)  # let the gateway accept them
        in_use = open_fds(process.pid)
        answer = httpx.post(url, timeout=30, headers={
            "accept": "application/json, text/event-stream", "content-type": "application/json",
            "mcp-protocol-version": "2025-11-25",
        }, json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                 "params": {"name": "fd__forged_meta", "arguments": {}}})
        assert answer.status_code == 200, answer.text
        assert "the gateway is near its open-file limit (" in answer.text, (in_use, answer.text[:500])
        assert f"of {FD_LIMIT} open files), so no new upstream connection is opened" in answer.text, answer.text[:500]
        assert "Nothing was sent" in answer.text, answer.text[:500]
        assert hostile.stats()["calls"].get("forged_meta", 0) == 0
    finally:
        for sock in held:
            sock.close()
        terminate(process)
        terminate(hostile.process)
