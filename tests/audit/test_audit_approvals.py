"""The audit log of calls held for approval (docs/approvals.md), on a real gateway through the plain
MCP SDK client: the row of an allowed write carries who allowed it, how and when; a declined one is a
`rejected` row with the same, and nothing ran."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest

from tests.gateway.helpers import KEY, OUTCOME, meta_of, new_key, text_of
from tests.support.approvals import Asked, connect, count_executions, refund
from tests.support.gateway import start_gateway, stdio_upstream, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

ALICE, ADMIN = "audit-alice-token", "audit-approvals-admin"


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def test_rows_carry_the_decision(tmp_path: Path) -> None:
    state = tmp_path / "pay"
    config = write_config(tmp_path, {
        "server": {"stateful": True},
        "auth": {"tokens": [{"principal": "alice", "token_sha256": sha(ALICE), "approvals": "gateway"}],
                 "admin_token_sha256": sha(ADMIN)},
        "upstreams": [stdio_upstream("pay", "dex_server", state_dir=state)],
    })
    allowed, declined = new_key("allow"), new_key("decline")
    with start_gateway(config) as gateway:
        async with connect(gateway.url, "legacy", ALICE, Asked("accept")) as client:
            ran = await client.call_tool("pay__refund", refund(40), meta={KEY: allowed})
        async with connect(gateway.url, "legacy", ALICE, Asked("decline")) as client:
            refused = await client.call_tool("pay__refund", refund(41), meta={KEY: declined})
        assert ran.is_error is False, text_of(ran)
        assert meta_of(refused)[OUTCOME] == "rejected"
        response = httpx.get(f"{gateway.base}/admin/audit", headers={"authorization": f"Bearer {ADMIN}"}, timeout=10)
    assert response.status_code == 200, response.text
    rows = {e["idempotency_key"]: e for e in response.json()["entries"]}
    assert (rows[allowed]["outcome"], rows[allowed]["fence_state"]) == ("ok", "claimed")
    assert (rows[declined]["outcome"], rows[declined]["fence_state"]) == ("rejected", "none")
    for key in (allowed, declined):
        approval = rows[key]["approval"]
        assert (approval["by"], approval["how"]) == ("the user of alice", "elicitation")
        assert approval["at"] <= rows[key]["time"]  # decided before the row's call went on (or was refused)
    assert count_executions(state, tool="refund", key=allowed) == 1
    assert count_executions(state, tool="refund", key=declined) == 0
