"""Approvals for principals from an identity provider (docs/approvals.md#oauth-principals): a real
`dex-gateway serve` as an OAuth resource server trusting a loopback issuer
(tests/support/jwks_issuer.py), the example payments server over stdio, the official SDK client.

A grant with `approvals: gateway` holds its users' calls; `auth.oauth.approvers` names who may
decide by claim; a user who is an approver still cannot decide its own call."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest

from tests.gateway.helpers import KEY, new_key, text_of
from tests.support.approvals import connect, count_executions, refund
from tests.support.gateway import RunningGateway, start_oauth_gateway, stdio_upstream
from tests.support.jwks_issuer import JwksIssuer, SigningKey

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@dataclass
class Setup:
    gateway: RunningGateway
    idp: JwksIssuer
    key: SigningKey
    resource: str
    state: Path

    def token(self, sub: str, *groups: str) -> str:
        return self.idp.token(self.key, sub=sub, groups=list(groups), aud=self.resource, scope="mcp")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("approvals-oauth")
    state = root / "pay"
    state.mkdir()
    with JwksIssuer() as idp:
        key = idp.add_key("k1")
        config = {"upstreams": [stdio_upstream("pay", "dex_server", state_dir=state)],
                  "approvals": {"wait_seconds": 20, "poll_seconds": 0.05}}
        oauth = {"grants": [{"when": {"groups": ["contractors"]}, "tools": ["pay__*"], "approvals": "gateway"},
                            {"when": {"groups": ["staff"]}, "tools": ["pay__*"]}],
                 "approvers": {"groups": ["approvers"]}}
        with start_oauth_gateway(root, idp.url, config, oauth=oauth) as (gateway, resource):
            gateway.wait_for_log("catalog ready", timeout=30)
            yield Setup(gateway, idp, key, resource, state)


async def decide(setup: Setup, token: str, approval_id: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=setup.gateway.base, timeout=10) as http:
        return await http.post(f"/admin/approvals/{approval_id}/decision", json={"decision": "allow"},
                               headers={"authorization": f"Bearer {token}"})


async def test_a_grant_holds_its_users_calls_and_an_approver_by_claim_decides(setup: Setup) -> None:
    key = new_key("oauth")
    ann = setup.token("ann", "contractors", "approvers")  # holds calls, and is an approver herself
    results: list[types.CallToolResult] = []

    async def call() -> None:
        async with connect(setup.gateway.url, "legacy", ann) as client:
            results.append(await client.call_tool("pay__refund", refund(49), meta={KEY: key}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(10):
            while True:
                async with httpx.AsyncClient(base_url=setup.gateway.base, timeout=10) as http:
                    listed = await http.get("/admin/approvals",
                                            headers={"authorization": f"Bearer {setup.token('vic', 'approvers')}"})
                assert listed.status_code == 200, listed.text
                held: list[dict[str, Any]] = [a for a in listed.json()["approvals"] if a["idempotency_key"] == key]
                if held:
                    break
                await anyio.sleep(0.05)
        assert held[0]["principal"] == "ann" and count_executions(setup.state, tool="refund", key=key) == 0
        own = await decide(setup, ann, held[0]["id"])
        assert own.status_code == 403 and "principal whose call this is" in own.json()["error"]
        staff = await decide(setup, setup.token("sam", "staff"), held[0]["id"])
        assert staff.status_code == 403  # a user without the approvers claim
        allowed = await decide(setup, setup.token("vic", "approvers"), held[0]["id"])
        assert allowed.status_code == 200 and allowed.json()["decided_by"] == "vic"
    assert results[0].is_error is False, text_of(results[0])
    assert count_executions(setup.state, tool="refund", key=key) == 1


async def test_a_user_of_a_grant_without_gateway_approvals_is_not_held(setup: Setup) -> None:
    key = new_key("staff")
    async with connect(setup.gateway.url, "legacy", setup.token("sam", "staff")) as client:
        result = await client.call_tool("pay__refund", refund(50), meta={KEY: key})
    assert result.is_error is False, text_of(result)
    assert count_executions(setup.state, tool="refund", key=key) == 1
