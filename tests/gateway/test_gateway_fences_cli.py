"""`dex-gateway fences stats | show | purge`: what an operator sees of the fences a real gateway wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from gateway.conventions.keys import IDEMPOTENCY_KEY
from tests.support.gateway import run_gateway_cli, start_gateway, stdio_upstream, write_config

pytestmark = pytest.mark.anyio


async def test_stats_show_and_purge(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": [stdio_upstream("pay", "dex_server", state_dir=tmp_path / "pay")]})
    with start_gateway(config) as gateway:
        async with Client(gateway.url, mode="legacy") as client:
            first = await client.call_tool(
                "pay__send_payment", {"to": "erin", "amount": 3}, meta={IDEMPOTENCY_KEY: "ops/1"}
            )
            await client.call_tool("pay__settle_uncertain", {"payment_id": "p-1"}, meta={IDEMPOTENCY_KEY: "ops/2"})
    assert first.is_error is False

    stats = run_gateway_cli("fences", "stats", "--config", str(config))
    assert stats.returncode == 0, stats.stderr
    counts = json.loads(stats.stdout)
    assert (counts["total"], counts["done"], counts["unknown"], counts["pending"]) == (2, 1, 1, 0)

    shown = run_gateway_cli("fences", "show", "ops/1", "--config", str(config))
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout)
    assert record["state"] == "done" and record["tool"] == "pay__send_payment" and record["principal"] == "anonymous"
    assert record["answer"]["content"] == [block.model_dump(mode="json", exclude_none=True) for block in first.content]

    missing = run_gateway_cli("fences", "show", "ops/1", "--principal", "someone-else", "--config", str(config))
    assert missing.returncode == 1 and "no fence for key 'ops/1' of principal 'someone-else'" in missing.stderr

    kept = run_gateway_cli("fences", "purge", "--older-than", "1h", "--config", str(config))
    assert kept.returncode == 0 and kept.stdout.startswith("purged 0 fences"), kept.stdout
    purged = run_gateway_cli("fences", "purge", "--older-than", "0s", "--config", str(config))
    assert purged.returncode == 0 and purged.stdout.startswith("purged 2 fences"), purged.stdout

    bad = run_gateway_cli("fences", "purge", "--older-than", "soon", "--config", str(config))
    assert bad.returncode == 2 and "--older-than: cannot read 'soon'" in bad.stderr
