"""Policy rules over the caller's claims (docs/policy.md), through the gateway's own front and
pipeline below authentication, against a real stdio upstream that records every call.

Static tokens carry no claims, so an Identity with claims (as the OAuth resource server makes
one from a verified token) is handed to the front where both entries hand theirs after
authentication: `ToolCalls.result` and `ToolListing.result` of the running gateway
(`create_app`, its lifespan, its catalog). What is checked: a rule on `claims.groups` hides and
denies per caller; callers whose claims differ get different listings from the one cache (its
key holds the claims the rules read); a caller without the claim is denied (fail closed).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.auth.principals import Identity
from gateway.config.model import GatewayConfig
from gateway.errors import UnknownToolError
from gateway.front.tools import ToolCallRequest
from gateway.protocol import Era
from gateway.server.app import Runtime, create_app
from tests.support.scripted_server import SCRIPT_FILE, SCRIPT_PATH, STATE_ENV, read_attempts
from tests.support.servers import REPO_ROOT

pytestmark = pytest.mark.anyio

RULES = [
    # Static (reads no arguments): only the finance group sees and calls export.
    {"name": "exports-for-finance", "tools": ["billing__export"], "when": '!("finance" in claims.groups)',
     "effect": "deny"},
    # Per call: over 5,000 only for admins.
    {"name": "large-refunds-for-admins", "tools": ["billing__refund"],
     "when": 'arguments.amount > 5000 && !("admins" in claims.groups)', "effect": "deny"},
]

FINANCE = Identity("alice", claims={"sub": "alice", "groups": ["finance", "staff"], "jti": "a1"}, scopes=frozenset({"mcp"}))
# Another token of the same person: other jti, same groups (the listing cache entry is shared).
FINANCE_AGAIN = Identity("alice", claims={"sub": "alice", "groups": ["finance", "staff"], "jti": "a2"})
STAFF = Identity("bob", claims={"sub": "bob", "groups": ["staff"]})
ADMIN = Identity("carol", claims={"sub": "carol", "groups": ["admins"]})
NO_CLAIMS = Identity("static-token")


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[tuple[Runtime, Path]]:
    state = tmp_path / "billing"
    state.mkdir()
    (state / SCRIPT_FILE).write_text(json.dumps({"tools": [
        {"name": "refund", "effect": "read", "events": []},
        {"name": "export", "effect": "read", "events": []},
    ]}))
    config = GatewayConfig.model_validate({
        "upstreams": [{"name": "billing", "transport": "stdio", "command": sys.executable, "args": [str(SCRIPT_PATH)],
                       "env": {STATE_ENV: str(state)}, "cwd": str(REPO_ROOT)}],
        "fences": {"store": f"sqlite:///{tmp_path / 'fences.db'}"},
        "policy": {"rules": RULES},
    })
    app = create_app(config)
    async with app.router.lifespan_context(app):
        with anyio.fail_after(20):
            while not app.state.runtime.catalog_listed:
                await anyio.sleep(0.02)
        yield app.state.runtime, state


async def _listed(runtime: Runtime, identity: Identity, era: Era) -> set[str]:
    assert runtime.front is not None and runtime.front.listing is not None
    result = await runtime.front.listing.result(identity, era=era)
    return {t["name"] for t in result["tools"]}


async def _call(runtime: Runtime, identity: Identity, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    assert runtime.front is not None and runtime.front.tool_calls is not None
    return await runtime.front.tool_calls.result(identity, ToolCallRequest(name, arguments, {}), None, era=Era.HANDSHAKE)


def _runs(state: Path) -> list[tuple[str, str]]:
    return [(a["tool"], a["run"]) for a in read_attempts(state)]


@pytest.mark.parametrize("era", [Era.HANDSHAKE, Era.MODERN])
async def test_a_claims_rule_hides_a_tool_per_caller(runtime: tuple[Runtime, Path], era: Era) -> None:
    rt, _ = runtime
    assert await _listed(rt, FINANCE, era) == {"billing__export", "billing__refund"}
    assert await _listed(rt, FINANCE_AGAIN, era) == {"billing__export", "billing__refund"}
    assert await _listed(rt, STAFF, era) == {"billing__refund"}
    # No groups claim at all (a static token): the rule cannot be evaluated, so it denies.
    assert await _listed(rt, NO_CLAIMS, era) == {"billing__refund"}
    # Asked again, in another order: the cache gave each caller its own answer.
    assert await _listed(rt, STAFF, era) == {"billing__refund"}
    assert await _listed(rt, FINANCE, era) == {"billing__export", "billing__refund"}


async def test_a_claims_rule_denies_the_call_as_an_unknown_tool(runtime: tuple[Runtime, Path]) -> None:
    rt, state = runtime
    answer = await _call(rt, FINANCE, "billing__export", {"run": "finance"})
    assert answer["isError"] is False, answer
    for who in (STAFF, NO_CLAIMS):
        with pytest.raises(UnknownToolError) as denied:
            await _call(rt, who, "billing__export", {"run": who.principal})
        with pytest.raises(UnknownToolError) as missing:
            await _call(rt, who, "billing__exports", {"run": who.principal})
        assert (denied.value.code, denied.value.message) == (
            missing.value.code, missing.value.message.replace("billing__exports", "billing__export"))
    assert _runs(state) == [("export", "finance")]


async def test_arguments_and_claims_together(runtime: tuple[Runtime, Path]) -> None:
    rt, state = runtime
    with pytest.raises(UnknownToolError):
        await _call(rt, STAFF, "billing__refund", {"run": "staff-6000", "amount": 6000})
    assert (await _call(rt, STAFF, "billing__refund", {"run": "staff-100", "amount": 100}))["isError"] is False
    assert (await _call(rt, ADMIN, "billing__refund", {"run": "admin-6000", "amount": 6000}))["isError"] is False
    # No groups claim, an amount over: the rule cannot be evaluated for this call, so it denies.
    with pytest.raises(UnknownToolError):
        await _call(rt, NO_CLAIMS, "billing__refund", {"run": "static-6000", "amount": 6000})
    assert _runs(state) == [("refund", "staff-100"), ("refund", "admin-6000")]


async def test_callers_with_the_same_hidden_tools_share_one_encoded_listing(runtime: tuple[Runtime, Path]) -> None:
    """Many users from an identity provider must not make a 300 KB listing each."""
    rt, _ = runtime
    assert rt.front is not None and rt.front.listing is not None
    for who in (FINANCE, FINANCE_AGAIN, STAFF, NO_CLAIMS, ADMIN):
        await _listed(rt, who, Era.HANDSHAKE)
    assert len(rt.front.listing._cache) == 2  # export listed, export hidden
