"""Policy rules over real token claims (docs/policy.md, docs/auth.md): a real `dex-gateway serve`
as an OAuth resource server, tokens signed by a loopback issuer (tests/support/jwks_issuer.py),
a real stdio upstream that records every call, the official MCP SDK client in both eras.

* `!("finance" in claims.groups)` (reads no arguments): the tool is absent from a staff user's
  listing and answered as an unknown tool, present and run for a finance user;
* `arguments.amount > 5000 && !("admins" in claims.groups)`: a staff user's refund of 6,000 is
  refused with nothing sent upstream, an admin's runs, a refund of 100 runs for both.

Skipped where the gateway has no OAuth resource server (`auth.oauth`, issue 23 items 1-2).
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from tests.gateway.helpers import ERAS, all_tools, connect, text_of
from tests.support.gateway import RunningGateway, start_oauth_gateway
from tests.support.scripted_server import SCRIPT_FILE, SCRIPT_PATH, STATE_ENV, read_attempts
from tests.support.servers import REPO_ROOT

jwks_issuer = pytest.importorskip("tests.support.jwks_issuer", reason="no OAuth resource server in this gateway yet")

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

RULES = [
    {"name": "exports-for-finance", "tools": ["billing__export"], "when": '!("finance" in claims.groups)',
     "effect": "deny"},
    {"name": "large-refunds-for-admins", "tools": ["billing__refund"],
     "when": 'arguments.amount > 5000 && !("admins" in claims.groups)', "effect": "deny"},
]


@dataclass
class Setup:
    gateway: RunningGateway
    idp: "jwks_issuer.JwksIssuer"
    key: "jwks_issuer.SigningKey"
    resource: str
    state: Path

    def token(self, sub: str, groups: list[str]) -> str:
        return self.idp.token(self.key, sub=sub, groups=groups, aud=self.resource, scope="mcp")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("policy-oauth")
    state = root / "billing"
    state.mkdir()
    (state / SCRIPT_FILE).write_text(json.dumps({"tools": [
        {"name": "refund", "effect": "read", "events": []},
        {"name": "export", "effect": "read", "events": []},
    ]}))
    with jwks_issuer.JwksIssuer() as idp:
        key = idp.add_key("k1")
        config = {
            "upstreams": [{"name": "billing", "transport": "stdio", "command": sys.executable,
                           "args": [str(SCRIPT_PATH)], "env": {STATE_ENV: str(state)}, "cwd": str(REPO_ROOT)}],
            "policy": {"rules": RULES},
        }
        with start_oauth_gateway(root, idp.url, config) as (gateway, resource):
            yield Setup(gateway, idp, key, resource, state)


def _runs(setup: Setup) -> list[str]:
    return [a["run"] for a in read_attempts(setup.state)]


@pytest.mark.parametrize("era", ERAS)
async def test_a_claims_rule_hides_and_denies_per_user(setup: Setup, era: str) -> None:
    run = f"export-{era}-{uuid.uuid4().hex[:6]}"
    async with connect(setup.gateway.url, era, token=setup.token("fiona", ["finance"])) as finance:
        assert {t.name for t in await all_tools(finance)} == {"billing__export", "billing__refund"}
        result = await finance.call_tool("billing__export", {"run": run})
        assert not result.is_error, text_of(result)
    async with connect(setup.gateway.url, era, token=setup.token("sam", ["staff"])) as staff:
        assert {t.name for t in await all_tools(staff)} == {"billing__refund"}
        with pytest.raises(MCPError) as denied:
            await staff.call_tool("billing__export", {"run": run + "-staff"})
        with pytest.raises(MCPError) as missing:
            await staff.call_tool("billing__exprt", {"run": run + "-staff"})
    assert denied.value.error.code == missing.value.error.code
    assert denied.value.error.message == missing.value.error.message.replace("billing__exprt", "billing__export")
    assert _runs(setup).count(run) == 1 and _runs(setup).count(run + "-staff") == 0


@pytest.mark.parametrize("era", ERAS)
async def test_arguments_and_claims_together(setup: Setup, era: str) -> None:
    run = f"refund-{era}-{uuid.uuid4().hex[:6]}"
    async with connect(setup.gateway.url, era, token=setup.token("sam", ["staff"])) as staff:
        with pytest.raises(MCPError) as denied:
            await staff.call_tool("billing__refund", {"run": run + "-staff-6000", "amount": 6000})
        assert "unknown tool" in denied.value.error.message
        assert not (await staff.call_tool("billing__refund", {"run": run + "-staff-100", "amount": 100})).is_error
    async with connect(setup.gateway.url, era, token=setup.token("ada", ["admins"])) as admin:
        assert not (await admin.call_tool("billing__refund", {"run": run + "-admin-6000", "amount": 6000})).is_error
    runs = _runs(setup)
    assert run + "-staff-6000" not in runs
    assert runs.count(run + "-staff-100") == 1 and runs.count(run + "-admin-6000") == 1
