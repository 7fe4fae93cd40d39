"""Registrations: the config directory, admin changes, and two replicas sharing a database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from connector_support import REPO_ROOT, ExampleService
from starlette.applications import Starlette
from starlette.requests import Request

from gateway.connectors import (
    BindingConfigError,
    ConnectorRegistry,
    ManifestError,
    RegistrationError,
    RegistrationNotFound,
)
from gateway.connectors.admin_api import admin_routes
from gateway.connectors.bindings import BindingPolicy
from tests.support.postgres import fresh_schema, schema_url
from tests.support.sockets import established_to

BILLING_TEXT = (REPO_ROOT / "examples/connectors/billing/connector.yaml").read_text()
TICKETS_TEXT = (REPO_ROOT / "examples/connectors/tickets/connector.yaml").read_text()
HTTP_BINDING = {"type": "http", "base_url": "http://127.0.0.1:9/billing"}
# What these tests register through the admin path (the default policy grants nothing).
POLICY = BindingPolicy.of(python_modules=["connector_support"], allowed_hosts=["127.0.0.1"])


def _renamed(text: str, name: str) -> str:
    return text.replace("name: billing", f"name: {name}", 1).replace("name: tickets", f"name: {name}", 1)


@pytest.mark.anyio
async def test_config_dir() -> None:
    async with ConnectorRegistry("memory://", policy=POLICY) as registry:
        version = registry.version
        await registry.load_dir(REPO_ROOT / "config/connectors")
        assert registry.version != version
        assert sorted(t.name for t in registry.tools()) == [
            "billing_create_refund", "billing_get_invoice", "billing_set_invoice_memo",
            "tickets_close_ticket", "tickets_list_ticket_ids",
        ]
        listed = await registry.list()
        assert [(r.connector_id, r.source) for r in listed] == [("billing", "config"), ("tickets", "config")]
        assert listed[0].binding == {"type": "http", "base_url": "http://127.0.0.1:9100/billing",
                                     "credential": {"header": "Authorization", "env": "BILLING_TOKEN", "scheme": "Bearer"},
                                     "connect_timeout": 5.0}
        with pytest.raises(RegistrationError, match="config directory"):
            await registry.remove("billing")
        with pytest.raises(RegistrationError, match="config directory"):
            await registry.add(BILLING_TEXT, "billing.yaml", HTTP_BINDING)


@pytest.mark.anyio
async def test_config_dir_flat_files_and_bindings_override(tmp_path: Path) -> None:
    (tmp_path / "pay.yaml").write_text(_renamed(BILLING_TEXT, "pay"))
    (tmp_path / "pay.binding.yaml").write_text("type: http\nbase_url: http://127.0.0.1:1/pay\n")
    (tmp_path / "tix.yaml").write_text(_renamed(TICKETS_TEXT, "tix"))
    async with ConnectorRegistry("memory://", {"tix": {"type": "http", "base_url": "http://127.0.0.1:2/tix"}}) as registry:
        regs = {r.connector_id: r for r in await registry.load_dir(tmp_path)}
        assert regs["pay"].binding["base_url"] == "http://127.0.0.1:1/pay"
        assert regs["tix"].binding["base_url"] == "http://127.0.0.1:2/tix"
    (tmp_path / "pay.binding.yaml").unlink()
    async with ConnectorRegistry("memory://", {"tix": HTTP_BINDING}) as registry:
        with pytest.raises(BindingConfigError, match="exposed but connector 'pay' has no binding"):
            await registry.load_dir(tmp_path)


@pytest.mark.anyio
async def test_add_refusals() -> None:
    async with ConnectorRegistry("memory://", policy=POLICY) as registry:
        with pytest.raises(ManifestError, match="key 'agent.retry'"):
            await registry.add(BILLING_TEXT.replace("retry: safe", "retry: maybe"), "billing.yaml", HTTP_BINDING)
        with pytest.raises(BindingConfigError, match="base_url"):
            await registry.add(BILLING_TEXT, "billing.yaml", {"type": "http", "base_url": "ftp://x"})
        with pytest.raises(BindingConfigError, match="has no binding"):
            await registry.add(BILLING_TEXT, "billing.yaml", None)
        with pytest.raises(BindingConfigError, match="cannot import"):
            await registry.add(BILLING_TEXT, "billing.yaml", {"type": "python", "callable": "connector_support:no_such_fn"})
        await registry.add(BILLING_TEXT, "billing.yaml", HTTP_BINDING)
        # "billing_get" + "invoice" collides with "billing" + "getInvoice".
        clash = BILLING_TEXT.replace("name: billing", "name: billing_get", 1).replace("name: getInvoice", "name: invoice")
        with pytest.raises(RegistrationError, match="duplicate tool name 'billing_get_invoice'"):
            await registry.add(clash, "clash.yaml", HTTP_BINDING)
        with pytest.raises(RegistrationNotFound):
            await registry.remove("nope")
        with pytest.raises(RegistrationNotFound):
            await registry.show("nope")
        assert len(registry.tools()) == 3


@pytest.mark.anyio
async def test_python_binding_registration() -> None:
    async with ConnectorRegistry("memory://", policy=POLICY) as registry:
        await registry.add(BILLING_TEXT, "billing.yaml", {"type": "python", "callable": "connector_support:echo_operation"})
        tool = registry.tool("billing_get_invoice")
        assert tool is not None
        answer = await tool.call({"invoice_id": "inv-1"}, idempotency_key=None, fence_id=None, takeover=False)
        assert answer.text == '{"echo":{"invoice_id":"inv-1"}}'


async def _shared(url_a: str, url_b: str) -> None:
    """An add and a remove on replica A reach replica B's tools() and its watch callback."""
    a = ConnectorRegistry(url_a, poll_interval=0.1, policy=POLICY)
    b = ConnectorRegistry(url_b, poll_interval=0.1, policy=POLICY)
    await a.open()
    await b.open()
    changes: list[list[str]] = []
    try:
        async with anyio.create_task_group() as tg:
            async def on_change() -> None:
                changes.append(sorted(t.name for t in b.tools()))

            tg.start_soon(b.watch, on_change)
            await anyio.sleep(0.2)
            assert changes == []
            await a.add(TICKETS_TEXT, "tickets.yaml", {"type": "http", "base_url": "http://127.0.0.1:9/tickets"})
            with anyio.fail_after(5):
                while not changes:
                    await anyio.sleep(0.05)
            assert changes[-1] == ["tickets_close_ticket", "tickets_list_ticket_ids"]
            assert (await b.show("tickets")).source == "api"
            await a.remove("tickets")
            with anyio.fail_after(5):
                while len(changes) < 2:
                    await anyio.sleep(0.05)
            assert changes[-1] == [] and b.tools() == []
            tg.cancel_scope.cancel()
    finally:
        await a.close()
        await b.close()


@pytest.mark.anyio
async def test_two_replicas_on_one_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/gateway.db"
    await _shared(url, url)


@pytest.fixture
async def pg_schema() -> AsyncIterator[str]:
    async with fresh_schema("dex_conn") as schema:
        yield schema


@pytest.mark.anyio
async def test_two_replicas_on_one_postgres_schema(pg_schema: str) -> None:
    url = schema_url(pg_schema)
    await _shared(url, url)


@pytest.mark.anyio
async def test_local_change_reaches_own_watch() -> None:
    async with ConnectorRegistry("memory://", poll_interval=5, policy=POLICY) as registry:
        seen = anyio.Event()

        async def on_change() -> None:
            seen.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(registry.watch, on_change)
            await anyio.sleep(0.05)
            await registry.add(TICKETS_TEXT, "t.yaml", HTTP_BINDING)
            with anyio.fail_after(1):  # well before the 5 s poll
                await seen.wait()
            tg.cancel_scope.cancel()


# --- admin API ------------------------------------------------------------------------------

ADMIN = "Bearer admin-secret"


def _app(registry: ConnectorRegistry) -> Starlette:
    async def authorize(request: Request) -> bool:
        return request.headers.get("authorization") == ADMIN

    return Starlette(routes=admin_routes(registry, authorize))


@pytest.mark.anyio
async def test_admin_api() -> None:
    async with ConnectorRegistry("memory://", policy=POLICY) as registry:
        transport = httpx.ASGITransport(app=_app(registry))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            assert (await http.get("/admin/connectors")).status_code == 401
            denied = await http.get("/admin/connectors", headers={"authorization": "Bearer nope"})
            assert denied.status_code == 403 and "error" in denied.json()
            h = {"authorization": ADMIN}
            bad = await http.post("/admin/connectors", headers=h, json={
                "manifest": BILLING_TEXT.replace("approval: recommended", "approval: sometimes"), "filename": "billing.yaml",
                "binding": HTTP_BINDING})
            assert bad.status_code == 400
            assert bad.json()["key"] == "agent.approval" and bad.json()["operation"] == "createRefund"
            assert "billing.yaml:" in bad.json()["error"]
            assert (await http.post("/admin/connectors", headers=h, json={"manifest": "x", "extra": 1})).status_code == 400
            created = await http.post("/admin/connectors", headers=h, json={"manifest": BILLING_TEXT, "binding": HTTP_BINDING})
            assert created.status_code == 201, created.text
            body = created.json()
            assert body["connector_id"] == "billing" and body["source"] == "api"
            assert [t["name"] for t in body["tools"]] == ["billing_get_invoice", "billing_set_invoice_memo", "billing_create_refund"]
            assert body["not_exposed"] == ["voidInvoice"]
            listed = (await http.get("/admin/connectors", headers=h)).json()["connectors"]
            assert [c["connector_id"] for c in listed] == ["billing"]
            shown = (await http.get("/admin/connectors/billing", headers=h)).json()
            assert shown["manifest"] == BILLING_TEXT
            assert (await http.get("/admin/connectors/nope", headers=h)).status_code == 404
            assert (await http.delete("/admin/connectors/billing", headers=h)).json() == {"removed": "billing"}
            assert (await http.delete("/admin/connectors/billing", headers=h)).status_code == 404
            assert registry.tools() == []


@pytest.mark.anyio
async def test_registered_tool_calls_the_service(fresh_service: ExampleService) -> None:
    async with ConnectorRegistry("memory://", policy=POLICY) as registry:
        await registry.add(BILLING_TEXT, "billing.yaml", {"type": "http", "base_url": f"{fresh_service.base}/billing"})
        tool = registry.tool("billing_get_invoice")
        assert tool is not None
        port = urlsplit(fresh_service.base).port
        assert port is not None
        for _ in range(3):  # the registry's pooled client, reused: one connection for all three calls
            answer = await tool.call({"invoice_id": "inv-1003"}, idempotency_key=None, fence_id=None, takeover=False)
            assert '"customer":"Grace Hopper"' in answer.text
            assert established_to(port) == 1


