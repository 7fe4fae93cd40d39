"""Start with many upstreams (reliability issue, item 5): the catalog is rebuilt once per settled
batch of listing changes, not once per upstream per list kind, and `tools/list` stays fast while
the gateway lists every upstream's tools, prompts and resources.

Real processes: bench/many_tools_server.py serves 20 MCP servers of 20 tools each over
Streamable HTTP (each also answers the prompt and resource lists, with nothing), and a real
`dex-gateway serve` fronts them as 20 upstreams."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.gateway import RunningGateway, http_upstream, start_gateway, write_config
from tests.support.processes import spawn_listening, terminate
from tests.support.servers import REPO_ROOT

pytestmark = pytest.mark.timeout(120)

UPSTREAMS, TOOLS = 20, 20
HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream",
           "mcp-protocol-version": "2025-11-25"}
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


@pytest.fixture
def servers() -> Iterator[str]:
    lines: list[str] = []
    argv = [sys.executable, str(REPO_ROOT / "bench" / "many_tools_server.py"), "--http", "--servers", str(UPSTREAMS),
            "--tools", str(TOOLS), "--empty-lists"]
    process, url = spawn_listening(argv, cwd=REPO_ROOT, env={"PATH": "/usr/bin:/bin"}, name="many-tools", lines=lines,
                                   ready_timeout=60)
    try:
        assert url is not None, "\n".join(lines)
        yield url
    finally:
        terminate(process)


def tool_count(response: httpx.Response) -> int:
    text = response.text
    if not response.headers.get("content-type", "").startswith("application/json"):
        text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
    return len(json.loads(text)["result"]["tools"])


def catalog_rebuilds(gateway: RunningGateway) -> float:
    text = httpx.get(f"{gateway.base}/metrics", timeout=30).text
    match = re.search(r"^dex_gateway_catalog_rebuilds_total (\S+)$", text, re.M)
    assert match, "no dex_gateway_catalog_rebuilds_total in /metrics"
    return float(match.group(1))


def test_start_rebuilds_the_catalog_a_bounded_number_of_times(servers: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": [
        http_upstream(f"u{i:02d}", f"{servers}/s{i:02d}/mcp") for i in range(UPSTREAMS)
    ]})
    expected = UPSTREAMS * TOOLS
    with start_gateway(config) as gateway, httpx.Client(timeout=60) as client:
        listed_at: float | None = None
        slow: list[float] = []
        deadline = time.monotonic() + 60
        # Until every tool is listed, and 3 s more while the prompt and resource lists arrive.
        while listed_at is None or time.monotonic() < listed_at + 3:
            assert time.monotonic() < deadline, "not every tool was listed within 60 s"
            started = time.monotonic()
            response = client.post(gateway.url, json=LIST, headers=HEADERS)
            elapsed = time.monotonic() - started
            if response.status_code == 503:  # the runtime is being built
                time.sleep(0.05)
                continue
            assert response.status_code == 200, response.text[:300]
            if listed_at is not None and elapsed > 1.0:
                slow.append(elapsed)
            if listed_at is None and tool_count(response) == expected:
                listed_at = time.monotonic()
        rebuilds = catalog_rebuilds(gateway)
    # One rebuild at most per tools listing that changed (and the first build); an empty prompt
    # or resource list changes nothing, and changes arriving together make one rebuild.
    assert rebuilds <= UPSTREAMS + 2, f"{rebuilds:.0f} catalog rebuilds for {UPSTREAMS} upstreams"
    assert not slow, f"tools/list answers slower than 1 s once the tools were listed: {slow}"
