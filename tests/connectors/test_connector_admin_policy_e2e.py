"""Attacking a real `dex-gateway serve` process through its admin API (issue 14, items 1 and 2).

    gateway (admin token; connectors.python_modules: [dex_e2e_allowed],
             credential_env: [DEX_E2E_GRANTED], allowed_hosts: [127.0.0.1])
        -> a loopback listener that records every request it receives

Every module under test appends its name to `imports.log` when it is imported, so "nothing was
imported" is read from a file the gateway process writes, not assumed.
"""

from __future__ import annotations

import hashlib
import json
import os
import textwrap
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from connector_support import REPO_ROOT, RecordingListener, recording_listener
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from tests.support.gateway import RunningGateway, start_gateway, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

AGENT_TOKEN = "agent-policy-token"
ADMIN_TOKEN = "admin-policy-token"
GRANTED_SECRET = "granted-secret-5e1f"
HIDDEN_SECRET = "hidden-secret-9a7c"
OUTCOME = "io.superdurable.dex/outcome"
KEY = "io.superdurable.dex/idempotencyKey"
BILLING_TEXT = (REPO_ROOT / "examples/connectors/billing/connector.yaml").read_text()

MODULES = {
    "dex_e2e_allowed/__init__.py": "",
    "dex_e2e_allowed/ops.py": """
        import asyncio
        import os
        import sys

        class Custom(BaseException):
            pass

        def exit_now(request):
            sys.exit(3)

        async def raise_base(request):
            raise Custom("not an Exception")

        async def answer(request):
            return {"branch": "found", "value": {"pid": os.getpid()}}
    """,
    # Outside the allowlist: importing them would be the bug.
    "dex_e2e_probe.py": "print('PROBE MODULE RAN', flush=True)\ndef fn(request):\n    return None\n",
    "dex_e2e_allowedx.py": "def fn(request):\n    return None\n",  # `dex_e2e_allowed` does not allow `dex_e2e_allowedx`
    # Shadows the standard library's `this` (PYTHONPATH comes first), so its import is recorded too.
    "this.py": "s = 'the zen, shadowed'\n",
}


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def renamed(name: str) -> str:
    return BILLING_TEXT.replace("name: billing", f"name: {name}", 1)


def text_of(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


# -- the listener -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def listener() -> Iterator[RecordingListener]:
    with recording_listener() as running:
        yield running


# -- the gateway ----------------------------------------------------------------------------------------


@dataclass
class Setup:
    gateway: RunningGateway
    imports_log: Path

    def imported(self) -> list[str]:
        return self.imports_log.read_text().split() if self.imports_log.exists() else []


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("admin-policy")
    imports_log = root / "imports.log"
    modules = root / "modules"
    marker = f"open({str(imports_log)!r}, 'a').write(__name__ + '\\n')\n"
    for relative, body in MODULES.items():
        path = modules / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(marker + textwrap.dedent(body))
    config = write_config(root, {
        "auth": {"tokens": [{"principal": "agent", "token_sha256": sha(AGENT_TOKEN)}], "admin_token_sha256": sha(ADMIN_TOKEN)},
        "connectors": {"python_modules": ["dex_e2e_allowed"], "credential_env": ["DEX_E2E_GRANTED"],
                       "allowed_hosts": ["127.0.0.1"]},
    })
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(modules), os.environ.get("PYTHONPATH")])),
           "DEX_E2E_GRANTED": GRANTED_SECRET, "DEX_E2E_NOT_GRANTED": HIDDEN_SECRET}
    with start_gateway(config, env=env) as gateway:
        yield Setup(gateway, imports_log)


@asynccontextmanager
async def admin(gateway: RunningGateway) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=gateway.base, headers={"authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10) as http:
        yield http


@asynccontextmanager
async def agent(url: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {AGENT_TOKEN}"}, timeout=httpx2.Timeout(30, read=60))
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy", cache=None,
                            read_timeout_seconds=30) as client:
        yield client


async def post(gateway: RunningGateway, name: str, binding: dict[str, Any]) -> httpx.Response:
    async with admin(gateway) as http:
        return await http.post("/admin/connectors", json={"manifest": renamed(name), "filename": f"{name}.yaml",
                                                          "binding": binding})


async def remove(gateway: RunningGateway, name: str) -> None:
    async with admin(gateway) as http:
        assert (await http.delete(f"/admin/connectors/{name}")).status_code == 200


async def assert_alive(gateway: RunningGateway) -> None:
    assert gateway.process is not None and gateway.process.poll() is None, gateway.log
    async with httpx.AsyncClient(timeout=5) as http:
        assert (await http.get(f"{gateway.base}/healthz")).status_code == 200


# -- (1) Python bindings ------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["os:system", "builtins:exec", "subprocess:run", "sys:exit", "this:s",
                                  "dex_e2e_probe:fn", "dex_e2e_allowedx:fn"])
async def test_python_callables_outside_the_allowlist_refused_and_never_imported(setup: Setup, spec: str) -> None:
    response = await post(setup.gateway, "attack", {"type": "python", "callable": spec})
    assert response.status_code == 403, response.text
    body = response.json()
    assert body["config_key"] == "connectors.python_modules"
    assert f"binding.callable {spec!r} is refused" in body["error"] and "connectors.python_modules" in body["error"]
    assert setup.imported() == [], "a refused module was imported"
    assert "PROBE MODULE RAN" not in setup.gateway.log and "Zen of Python" not in setup.gateway.log
    async with admin(setup.gateway) as http:
        assert (await http.get("/admin/connectors/attack")).status_code == 404
    async with agent(setup.gateway.url) as client:
        assert not any(t.name.startswith("attack_") for t in (await client.list_tools()).tools)


async def test_detour_through_an_allowed_module_refused(setup: Setup) -> None:
    response = await post(setup.gateway, "attack", {"type": "python", "callable": "dex_e2e_allowed.ops:os.system"})
    assert response.status_code == 403, response.text
    assert "leads to 'os'" in response.json()["error"]


@pytest.mark.parametrize(("spec", "name"), [("dex_e2e_allowed.ops:exit_now", "exits"),
                                            ("dex_e2e_allowed.ops:raise_base", "raises")])
async def test_allowed_callable_that_exits_is_an_interrupted_attempt(setup: Setup, spec: str, name: str) -> None:
    response = await post(setup.gateway, name, {"type": "python", "callable": spec})
    assert response.status_code == 201, response.text
    try:
        async with agent(setup.gateway.url) as client:
            query = await client.call_tool(f"{name}_get_invoice", {"invoice_id": "inv-1"})
            assert query.is_error and OUTCOME not in (query.meta or {}), text_of(query)
            assert text_of(query).startswith(f"{name} getInvoice was interrupted on all 3 attempts: "), text_of(query)
            mutation = await client.call_tool(f"{name}_create_refund", {"invoice_id": "inv-1", "amount_cents": 5},
                                              meta={KEY: f"policy-e2e/{name}/1"})
            assert mutation.is_error and (mutation.meta or {})[OUTCOME] == "unknown", text_of(mutation)
            assert "interrupted after it was sent" in text_of(mutation)
            for text in (text_of(query), text_of(mutation)):
                assert "SystemExit" not in text and "Custom" not in text and "Traceback" not in text
        await assert_alive(setup.gateway)
        # The detail is in the gateway's log, not in the agent's text.
        assert "SystemExit" in setup.gateway.log or "Custom" in setup.gateway.log
        # And the gateway keeps serving: another (well-behaved) allowed binding answers.
        assert (await post(setup.gateway, "fine", {"type": "python", "callable": "dex_e2e_allowed.ops:answer"})).status_code == 201
        async with agent(setup.gateway.url) as client:
            ok = await client.call_tool("fine_get_invoice", {"invoice_id": "inv-1"})
        assert not ok.is_error and json.loads(text_of(ok))["pid"] == setup.gateway.process.pid  # type: ignore[union-attr]
    finally:
        await remove(setup.gateway, name)


async def test_sys_exit_over_raw_http_is_not_a_500(setup: Setup) -> None:
    assert (await post(setup.gateway, "exits", {"type": "python", "callable": "dex_e2e_allowed.ops:exit_now"})).status_code == 201
    try:
        headers = {"authorization": f"Bearer {AGENT_TOKEN}", "accept": "application/json, text/event-stream",
                   "mcp-protocol-version": "2025-06-18"}
        call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": "exits_create_refund", "arguments": {"invoice_id": "inv-1", "amount_cents": 5},
                           "_meta": {KEY: "policy-e2e/raw/1"}}}
        async with httpx.AsyncClient(timeout=30) as http:
            response = await http.post(setup.gateway.url, headers=headers, json=call)
        assert response.status_code == 200, response.text
        assert "Traceback" not in response.text and '"isError":true' in response.text.replace(" ", "")
        await assert_alive(setup.gateway)
    finally:
        await remove(setup.gateway, "exits")


# -- (2) credentials and hosts --------------------------------------------------------------------------------


@pytest.mark.parametrize("env", ["PATH", "HOME", "DEX_E2E_NOT_GRANTED"])
async def test_credential_outside_the_list_refused(setup: Setup, listener: RecordingListener, env: str) -> None:
    before = len(listener.seen)
    response = await post(setup.gateway, "leak", {"type": "http", "base_url": f"{listener.base}/leak",
                                                  "credential": {"header": "X-Leak", "env": env, "scheme": None}})
    assert response.status_code == 403, response.text
    assert response.json()["config_key"] == "connectors.credential_env"
    assert f"binding.credential.env {env!r} is refused" in response.json()["error"]
    assert len(listener.seen) == before


@pytest.mark.parametrize("base_url", ["http://169.254.169.254/latest", "http://[fe80::1]/", "http://metadata.google.internal/",
                                      "http://[::ffff:169.254.169.254]/", "http://2852039166/latest",
                                      "http://10.0.0.1/svc", "http://localhost:9/svc"])
async def test_base_url_outside_the_allowed_hosts_refused(setup: Setup, base_url: str) -> None:
    response = await post(setup.gateway, "ssrf", {"type": "http", "base_url": base_url})
    assert response.status_code == 403, response.text
    assert response.json()["config_key"] == "connectors.allowed_hosts"
    assert "connectors.allowed_hosts" in response.json()["error"]


async def test_no_environment_variable_reaches_the_listener_unless_granted(setup: Setup, listener: RecordingListener) -> None:
    """The granted variable arrives where it was sent; PATH and the other secret never do."""
    response = await post(setup.gateway, "granted", {"type": "http", "base_url": f"{listener.base}/granted",
                                                     "credential": {"header": "Authorization", "env": "DEX_E2E_GRANTED"}})
    assert response.status_code == 201, response.text
    try:
        async with agent(setup.gateway.url) as client:
            result = await client.call_tool("granted_get_invoice", {"invoice_id": "inv-1"})
        assert not result.is_error, text_of(result)
        hits = [s for s in listener.seen if s["path"] == "/granted/getInvoice"]
        assert [h["headers"].get("Authorization") for h in hits] == [f"Bearer {GRANTED_SECRET}"]
    finally:
        await remove(setup.gateway, "granted")
    everything = listener.everything()
    assert HIDDEN_SECRET not in everything
    assert os.environ["PATH"] not in everything and setup.gateway.env["PATH"] not in everything


async def test_redirects_are_not_followed(setup: Setup, listener: RecordingListener) -> None:
    response = await post(setup.gateway, "bounce", {"type": "http", "base_url": f"{listener.base}/redirect"})
    assert response.status_code == 201, response.text
    try:
        async with agent(setup.gateway.url) as client:
            result = await client.call_tool("bounce_get_invoice", {"invoice_id": "inv-1"})
        assert result.is_error and "HTTP 307" in text_of(result), text_of(result)
        assert not any(s["path"].startswith("/followed") for s in listener.seen)
    finally:
        await remove(setup.gateway, "bounce")


async def test_unreachable_service_text_names_no_address(setup: Setup) -> None:
    response = await post(setup.gateway, "gone", {"type": "http", "base_url": "http://127.0.0.1:9/gone"})
    assert response.status_code == 201, response.text
    try:
        async with agent(setup.gateway.url) as client:
            result = await client.call_tool("gone_get_invoice", {"invoice_id": "inv-1"})
        text = text_of(result)
        assert result.is_error and "could not be reached" in text and "safe to call it again" in text, text
        assert "127.0.0.1" not in text and "ConnectError" not in text and "Errno" not in text
        assert "127.0.0.1:9" in setup.gateway.log  # the operator finds the detail in the log
    finally:
        await remove(setup.gateway, "gone")
