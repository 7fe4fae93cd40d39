"""Connectors end to end (issue 5): real `dex-gateway serve` processes in front of the example
connector service, reached over HTTP with the official SDK client in both protocol eras.

    service (examples/connectors/service.py, token-checked)
        ^  POST /billing/<op>, /tickets/<op>  (Bearer from the gateway's BILLING_TOKEN / TICKETS_TOKEN)
    gateway A (stateless)  --- one database (SQLite file, or a PostgreSQL schema) ---  gateway B (stateful)
        ^ admin API (/admin/connectors, admin token)             ^ live session: tools/list_changed

The service appends every request that reaches an operation to `connector-executions.jsonl`,
so "ran exactly once" / "never reached the connector" are counted at the service itself.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
import yaml
from connector_support import PUBLISHED, REPO_ROOT, ExampleService, start_service
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from tests.support.gateway import RunningGateway, start_gateway, write_config
from tests.support.postgres import fresh_schema_url

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

EFFECT = "io.superdurable.dex/effect"
APPROVAL = "io.superdurable.dex/approval"
OUTCOME = "io.superdurable.dex/outcome"
KEY = "io.superdurable.dex/idempotencyKey"
REPLAYED = "dex-gateway/replayed"
CONNECTOR_CALL = "dex-gateway/connectorCall"
TRUNCATED = "dex-gateway/truncatedOutputBytes"

ERAS = ["legacy", "2026-07-28"]
AGENT_TOKEN = "agent-e2e-token"
ADMIN_TOKEN = "admin-e2e-token"
SERVICE_TOKEN = "service-e2e-token"
GATEWAY_ENV = {"BILLING_TOKEN": SERVICE_TOKEN, "TICKETS_TOKEN": SERVICE_TOKEN}

BILLING_TEXT = (REPO_ROOT / "examples/connectors/billing/connector.yaml").read_text()
TICKETS_TEXT = (REPO_ROOT / "examples/connectors/tickets/connector.yaml").read_text()
BILLING_TOOLS = {"billing_get_invoice", "billing_set_invoice_memo", "billing_create_refund"}
TICKETS_TOOLS = {"tickets_list_ticket_ids", "tickets_close_ticket"}
SETTLE = 10.0  # seconds for a change on one replica to reach the other (watch polls about every second)
NOTIFY_WAIT = 6.0  # seconds for list_changed to reach a live session on the other replica


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def new_key(label: str) -> str:
    return f"e2e-{label}/{uuid.uuid4().hex[:8]}/1"


def text_of(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def meta_of(result: CallToolResult) -> dict[str, Any]:
    return dict(result.meta or {})


def http_binding(service: ExampleService, connector: str, env: str) -> dict[str, Any]:
    return {"type": "http", "base_url": f"{service.base}/{connector}",
            "credential": {"header": "Authorization", "env": env, "scheme": "Bearer"}}


# --- processes ------------------------------------------------------------------------------


@dataclass
class Pair:
    """Two gateway processes on one database: A stateless, B stateful."""

    a: RunningGateway
    b: RunningGateway
    store: str


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExampleService]:
    with start_service(tmp_path_factory.mktemp("e2e-service"), token=SERVICE_TOKEN) as service:
        yield service


@pytest.fixture(scope="module")
def connectors_dir(tmp_path_factory: pytest.TempPathFactory, svc: ExampleService) -> Path:
    """The config directory: billing, bound to the service with $BILLING_TOKEN."""
    root = tmp_path_factory.mktemp("e2e-connectors")
    (root / "billing").mkdir()
    shutil.copy(REPO_ROOT / "examples/connectors/billing/connector.yaml", root / "billing" / "connector.yaml")
    (root / "billing" / "binding.yaml").write_text(yaml.safe_dump(http_binding(svc, "billing", "BILLING_TOKEN")))
    return root


def gateway_config(directory: Path, store: str, connectors_dir: Path, *, stateful: bool) -> Path:
    return write_config(directory, {
        "server": {"stateful": stateful},
        "auth": {"tokens": [{"principal": "agent", "token_sha256": sha(AGENT_TOKEN)}],
                 "admin_token_sha256": sha(ADMIN_TOKEN)},
        # What these tests register through the admin API (the default grants nothing).
        "connectors": {"dir": str(connectors_dir), "allowed_hosts": ["127.0.0.1"],
                       "credential_env": ["BILLING_TOKEN", "TICKETS_TOKEN", "DEX_E2E_UNSET_TOKEN"]},
        # A short lease keeps the crash test quick when a restarted replica must wait for it.
        "fences": {"store": store, "lease_seconds": 4},
    })


@contextmanager
def run_pair(root: Path, store: str, connectors_dir: Path) -> Iterator[Pair]:
    a_cfg = gateway_config(root / "a", store, connectors_dir, stateful=False)
    b_cfg = gateway_config(root / "b", store, connectors_dir, stateful=True)
    with start_gateway(a_cfg, env=GATEWAY_ENV) as a, start_gateway(b_cfg, env=GATEWAY_ENV) as b:
        yield Pair(a, b, store)


@pytest.fixture(scope="module")
def sqlite_pair(tmp_path_factory: pytest.TempPathFactory, connectors_dir: Path) -> Iterator[Pair]:
    root = tmp_path_factory.mktemp("e2e-sqlite")
    with run_pair(root, f"sqlite:///{root / 'shared.db'}", connectors_dir) as pair:
        yield pair


@pytest.fixture(scope="module")
def postgresql_pair(tmp_path_factory: pytest.TempPathFactory, connectors_dir: Path) -> Iterator[Pair]:
    root = tmp_path_factory.mktemp("e2e-pg")
    with fresh_schema_url("dex_e2e") as url, run_pair(root, url, connectors_dir) as pair:
        yield pair


@pytest.fixture(params=["sqlite", "postgresql"])
def pair(request: pytest.FixtureRequest) -> Pair:
    return request.getfixturevalue(f"{request.param}_pair")


@pytest.fixture
def gw(sqlite_pair: Pair, svc: ExampleService) -> RunningGateway:
    """Gateway A of the SQLite pair, with a fresh service (data, scripts, executions file)."""
    svc.reset()
    return sqlite_pair.a


# --- clients ---------------------------------------------------------------------------------


@asynccontextmanager
async def connect(url: str, mode: str = "legacy", *, token: str = AGENT_TOKEN,
                  on_message: Callable[[Any], Any] | None = None) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=60))
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode, cache=None,
                            read_timeout_seconds=30, message_handler=on_message) as client:
        yield client


@asynccontextmanager
async def admin(gateway: RunningGateway, token: str | None = ADMIN_TOKEN) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=gateway.base, headers=headers, timeout=10) as http:
        yield http


async def tool_names(client: Client) -> set[str]:
    return {t.name for t in (await client.list_tools()).tools}


async def wait_for_tools(gateway: RunningGateway, probe: Callable[[set[str]], bool]) -> set[str]:
    """tools/list on `gateway` (a new client each time) until `probe` holds."""
    names: set[str] = set()
    with anyio.move_on_after(SETTLE):
        while True:
            async with connect(gateway.url) as client:
                names = await tool_names(client)
            if probe(names):
                return names
            await anyio.sleep(0.1)
    raise AssertionError(f"tools/list on {gateway.url} never matched within {SETTLE} s; it lists {sorted(names)}")


async def register(gateway: RunningGateway, manifest: str, filename: str, binding: dict[str, Any] | None) -> dict[str, Any]:
    async with admin(gateway) as http:
        response = await http.post("/admin/connectors", json={"manifest": manifest, "filename": filename, "binding": binding})
    assert response.status_code == 201, response.text
    return response.json()


async def unregister(gateway: RunningGateway, connector_id: str) -> None:
    async with admin(gateway) as http:
        response = await http.delete(f"/admin/connectors/{connector_id}")
    assert response.status_code == 200, response.text
    assert response.json() == {"removed": connector_id}


async def get_invoice(client: Client, invoice_id: str) -> dict[str, Any]:
    result = await client.call_tool("billing_get_invoice", {"invoice_id": invoice_id})
    assert not result.is_error, text_of(result)
    return json.loads(text_of(result))


# --- (1) query ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_query_answers_compact_sorted_json(gw: RunningGateway, svc: ExampleService, mode: str) -> None:
    async with connect(gw.url, mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert BILLING_TOOLS <= set(tools) and "billing_void_invoice" not in tools
        assert (tools["billing_get_invoice"].meta or {}).get(EFFECT) == "read"
        assert (tools["billing_set_invoice_memo"].meta or {}).get(EFFECT) == "idempotent_write"
        refund_meta = tools["billing_create_refund"].meta or {}
        assert refund_meta.get(EFFECT) == "non_idempotent_write" and refund_meta.get(APPROVAL) == "recommended"
        assert APPROVAL not in (tools["billing_get_invoice"].meta or {})
        assert tools["billing_get_invoice"].input_schema["required"] == ["invoice_id"]

        result = await client.call_tool("billing_get_invoice", {"invoice_id": "inv-1001"})
    expected = {"amount_cents": 12000, "customer": "Ada Lovelace", "id": "inv-1001", "memo": "",
                "refunded_cents": 0, "status": "paid"}
    assert not result.is_error, text_of(result)
    assert text_of(result) == compact(expected)
    assert text_of(result).startswith('{"amount_cents":12000,"customer":"Ada Lovelace",')
    meta = meta_of(result)
    assert OUTCOME not in meta
    assert meta[CONNECTOR_CALL]["branch"] == "found" and meta[CONNECTOR_CALL]["attempts"] == 1
    rows = svc.executions(operation="getInvoice")
    assert len(rows) == 1 and rows[0]["input"] == {"invoice_id": "inv-1001"} and rows[0]["attempt"] == 1


async def test_query_listed_rejected_branch(gw: RunningGateway, svc: ExampleService) -> None:
    async with connect(gw.url) as client:
        result = await client.call_tool("billing_get_invoice", {"invoice_id": "inv-4040"})
    assert result.is_error
    assert meta_of(result)[OUTCOME] == "rejected"
    assert text_of(result) == "billing getInvoice returned notFound: not_found: no invoice 'inv-4040'"


# --- (2) safe mutation retried after a dropped connection -------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_safe_mutation_retried_after_drop_and_fenced(gw: RunningGateway, svc: ExampleService, mode: str) -> None:
    key = new_key("memo")
    args = {"invoice_id": "inv-1002", "memo": f"paid by wire ({mode})"}
    svc.script("billing", "setInvoiceMemo", {"drop": True})  # execute, then break the connection
    async with connect(gw.url, mode) as client:
        first = await client.call_tool("billing_set_invoice_memo", args, meta={KEY: key})
        assert not first.is_error, text_of(first)
        expected = {"amount_cents": 4500, "customer": "Alan Turing", "id": "inv-1002", "memo": args["memo"],
                    "refunded_cents": 0, "status": "paid"}
        assert text_of(first) == compact(expected)
        call = meta_of(first)[CONNECTOR_CALL]
        assert call["attempts"] == 2 and call["branch"] == "updated"
        assert REPLAYED not in meta_of(first)

        rows = svc.executions(operation="setInvoiceMemo")
        assert [r["attempt"] for r in rows] == [1, 2]
        assert {r["callId"] for r in rows} == {call["callId"]}  # the same call id on every attempt
        assert {r["idempotencyKey"] for r in rows} == {key}

        # The client retries with the same key: the fence replays the stored answer.
        again = await client.call_tool("billing_set_invoice_memo", args, meta={KEY: key})
        assert not again.is_error
        assert text_of(again) == text_of(first)
        assert meta_of(again).get(REPLAYED) is True
        assert len(svc.executions(operation="setInvoiceMemo")) == 2

        # The same key with other arguments is refused, and nothing is sent.
        reused = await client.call_tool("billing_set_invoice_memo", {**args, "memo": "other"}, meta={KEY: key})
        assert reused.is_error and meta_of(reused)[OUTCOME] == "rejected"
        assert len(svc.executions(operation="setInvoiceMemo")) == 2

        # A write without a key is refused before it reaches the connector.
        keyless = await client.call_tool("billing_set_invoice_memo", args)
        assert keyless.is_error and meta_of(keyless)[OUTCOME] == "rejected"
        assert KEY in text_of(keyless)
        assert len(svc.executions(operation="setInvoiceMemo")) == 2


# --- (3) unsafe mutation interrupted -------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_unsafe_mutation_interrupted_is_unknown_and_never_resent(gw: RunningGateway, svc: ExampleService, mode: str) -> None:
    key = new_key("refund")
    args = {"invoice_id": "inv-1001", "amount_cents": 2500, "reason": "damaged"}
    svc.script("billing", "createRefund", {"drop": True})
    async with connect(gw.url, mode) as client:
        first = await client.call_tool("billing_create_refund", args, meta={KEY: key})
        assert first.is_error
        assert meta_of(first)[OUTCOME] == "unknown"
        assert "interrupted" in text_of(first)
        assert meta_of(first)[CONNECTOR_CALL]["attempts"] == 1
        rows = svc.executions(operation="createRefund")
        assert len(rows) == 1 and rows[0]["idempotencyKey"] == key and rows[0]["note"] == "executed"

        # The client's retry with the same key: unknown again, and nothing is sent.
        again = await client.call_tool("billing_create_refund", args, meta={KEY: key})
        assert again.is_error
        assert meta_of(again)[OUTCOME] == "unknown"
        assert len(svc.executions(operation="createRefund")) == 1

        # The money moved exactly once.
        assert (await get_invoice(client, "inv-1001"))["refunded_cents"] == 2500


async def test_unsafe_mutation_declined_is_rejected(gw: RunningGateway, svc: ExampleService) -> None:
    async with connect(gw.url) as client:
        result = await client.call_tool("billing_create_refund", {"invoice_id": "inv-1002", "amount_cents": 999999},
                                        meta={KEY: new_key("declined")})
    assert result.is_error and meta_of(result)[OUTCOME] == "rejected"
    assert text_of(result) == ("billing createRefund returned declined: over_refundable: "
                               "only 4500 cents of inv-1002 can still be refunded")


# --- a call never sent -----------------------------------------------------------------------


async def test_call_never_sent_may_be_retried_with_the_same_key(gw: RunningGateway, svc: ExampleService) -> None:
    """A connector call the gateway proves it never sent ("safe to call it again") releases its
    fence (SPEC 4: never sent -> release), so the retry with the same key runs once the
    operator fixed the binding, instead of replaying the failure forever."""
    ledger = BILLING_TEXT.replace("name: billing", "name: ledger", 1)
    await register(gw, ledger, "ledger.yaml", http_binding(svc, "billing", "DEX_E2E_UNSET_TOKEN"))
    try:
        key = new_key("not-sent")
        args = {"invoice_id": "inv-1002", "amount_cents": 100}
        async with connect(gw.url) as client:
            first = await client.call_tool("ledger_create_refund", args, meta={KEY: key})
            assert first.is_error and OUTCOME not in meta_of(first)
            assert "DEX_E2E_UNSET_TOKEN is not set" in text_of(first) and "safe to call it again" in text_of(first)
            assert svc.executions() == []
            # The operator fixes the credential; the agent retries the same call, as it was told it may.
            await register(gw, ledger, "ledger.yaml", http_binding(svc, "billing", "BILLING_TOKEN"))
            again = await client.call_tool("ledger_create_refund", args, meta={KEY: key})
            assert REPLAYED not in meta_of(again), f"the never-sent failure was fenced and replayed: {text_of(again)}"
            assert not again.is_error, text_of(again)
            assert len(svc.executions(operation="createRefund", idempotencyKey=key)) == 1
    finally:
        await unregister(gw, "ledger")


# --- (4) schema violations never reach the connector ------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_schema_violation_never_reaches_the_connector(gw: RunningGateway, svc: ExampleService, mode: str) -> None:
    before = svc.log_path.read_bytes()
    bad_calls = [
        ("billing_get_invoice", {"invoice_id": "INV-1"}, None),                                   # pattern
        ("billing_get_invoice", {}, None),                                                        # required
        ("billing_set_invoice_memo", {"invoice_id": "inv-1001", "memo": "x", "extra": 1}, new_key("schema")),
        ("billing_set_invoice_memo", {"invoice_id": "inv-1001", "memo": "m" * 501}, new_key("schema")),  # maxLength
        ("billing_create_refund", {"invoice_id": "inv-1001", "amount_cents": 0}, new_key("schema")),     # minimum
        ("billing_create_refund", {"invoice_id": "inv-1001", "amount_cents": "12"}, new_key("schema")),  # type
    ]
    async with connect(gw.url, mode) as client:
        for name, args, key in bad_calls:
            result = await client.call_tool(name, args, meta={KEY: key} if key else None)
            assert result.is_error, (name, args)
            assert meta_of(result).get(OUTCOME) == "rejected", (name, args, meta_of(result))
            assert "inputSchema" in text_of(result) and "did not run" in text_of(result)
    assert svc.log_path.read_bytes() == before


# --- (5) truncation ------------------------------------------------------------------------------


async def test_result_over_64_kib_is_cut_with_a_note(gw: RunningGateway, svc: ExampleService) -> None:
    svc.script("billing", "getInvoice", {"big": 70_000})
    async with connect(gw.url) as client:
        result = await client.call_tool("billing_get_invoice", {"invoice_id": "inv-1003"})
    full = len(compact({"blob": "x" * 70_000}).encode())
    assert full == 70_011
    note = f"\n[result truncated: the full result was {full} bytes of UTF-8; the first 65536 bytes are shown]"
    text = text_of(result)
    assert not result.is_error
    assert text.endswith(note)
    head = text[: -len(note)]
    assert len(head.encode()) == 65536 and head.startswith('{"blob":"xxx')
    assert meta_of(result)[TRUNCATED] == full


# --- (6) the uncertain branch -------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_uncertain_branch_is_unknown(gw: RunningGateway, svc: ExampleService, mode: str) -> None:
    key = new_key("uncertain")
    args = {"invoice_id": "inv-1003", "amount_cents": 999}
    async with connect(gw.url, mode) as client:
        result = await client.call_tool("billing_create_refund", args, meta={KEY: key})
        assert result.is_error and meta_of(result)[OUTCOME] == "unknown"
        assert "billing createRefund returned uncertain: processor_timeout" in text_of(result)
        assert meta_of(result)[CONNECTOR_CALL]["branch"] == "uncertain"
        assert len(svc.executions(operation="createRefund")) == 1
        again = await client.call_tool("billing_create_refund", args, meta={KEY: key})
        assert again.is_error and meta_of(again)[OUTCOME] == "unknown"
    assert len(svc.executions(operation="createRefund")) == 1


# --- (7) run-time registration shared by replicas -------------------------------------------------


async def test_registration_on_a_is_served_by_b(pair: Pair, svc: ExampleService) -> None:
    svc.reset()
    body = await register(pair.a, TICKETS_TEXT, "tickets.yaml", http_binding(svc, "tickets", "TICKETS_TOKEN"))
    assert body["connector_id"] == "tickets" and body["source"] == "api"
    assert {t["name"] for t in body["tools"]} == TICKETS_TOOLS
    try:
        for gateway in (pair.b, pair.a):
            names = await wait_for_tools(gateway, lambda n: TICKETS_TOOLS <= n)
            assert BILLING_TOOLS <= names
        async with admin(pair.b) as http:
            listed = (await http.get("/admin/connectors")).json()["connectors"]
        assert [(c["connector_id"], c["source"]) for c in listed] == [("billing", "config"), ("tickets", "api")]
        # B calls the service with the stored binding and its own $TICKETS_TOKEN.
        async with connect(pair.b.url) as client:
            result = await client.call_tool("tickets_list_ticket_ids", {"status": "open"})
        assert not result.is_error, text_of(result)
        assert text_of(result) == compact({"ticket_ids": ["T-7", "T-5", "T-4", "T-2", "T-1"]})
        assert len(svc.executions(operation="listTicketIDs")) == 1
    finally:
        await unregister(pair.a, "tickets")
    for gateway in (pair.b, pair.a):
        names = await wait_for_tools(gateway, lambda n: not (TICKETS_TOOLS & n))
        assert BILLING_TOOLS <= names
    async with admin(pair.b) as http:
        assert (await http.get("/admin/connectors/tickets")).status_code == 404


async def test_replica_waits_for_a_live_replicas_call(pair: Pair, svc: ExampleService) -> None:
    """The same key on B while A's call is still running: B must wait for A's answer (A is
    alive and holds the lease), not take the fence over and send the write a second time."""
    svc.reset()
    key = new_key("in-flight")
    args = {"invoice_id": "inv-1001", "memo": "one writer"}
    svc.script("billing", "setInvoiceMemo", {"delay": 1.5})
    results: dict[str, CallToolResult] = {}

    async def call_on(name: str, gateway: RunningGateway) -> None:
        async with connect(gateway.url) as client:
            results[name] = await client.call_tool("billing_set_invoice_memo", args, meta={KEY: key})

    async with anyio.create_task_group() as tg:
        tg.start_soon(call_on, "a", pair.a)
        await anyio.sleep(0.5)  # A has claimed the fence; the service is sleeping on the request
        tg.start_soon(call_on, "b", pair.b)
    rows = svc.executions(operation="setInvoiceMemo", idempotencyKey=key)
    assert len(rows) == 1, f"the write ran {len(rows)} times: {[(r['pid'], r['attempt']) for r in rows]}"
    assert not results["a"].is_error and not results["b"].is_error, (text_of(results["a"]), text_of(results["b"]))
    assert text_of(results["b"]) == text_of(results["a"])
    assert meta_of(results["b"]).get(REPLAYED) is True


# --- (8) list_changed on a live stateful session ------------------------------------------------


async def test_live_session_on_b_gets_list_changed(pair: Pair, svc: ExampleService) -> None:
    changed: list[Any] = []
    arrived = anyio.Event()

    async def on_message(message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            changed.append(message)
            arrived.set()

    async with connect(pair.b.url, "legacy", on_message=on_message) as live:
        caps = live.server_capabilities
        assert caps.tools is not None and caps.tools.list_changed is True
        assert not (TICKETS_TOOLS & await tool_names(live))
        await register(pair.a, TICKETS_TEXT, "tickets.yaml", http_binding(svc, "tickets", "TICKETS_TOKEN"))
        try:
            with anyio.fail_after(NOTIFY_WAIT):
                await arrived.wait()
            assert TICKETS_TOOLS <= await tool_names(live)
            arrived = anyio.Event()
        finally:
            await unregister(pair.a, "tickets")
        with anyio.fail_after(NOTIFY_WAIT):
            await arrived.wait()
        assert not (TICKETS_TOOLS & await tool_names(live))
        assert len(changed) == 2


# --- (9) admin API refusals -----------------------------------------------------------------------


async def test_admin_api_refusals(gw: RunningGateway, svc: ExampleService) -> None:
    renamed = BILLING_TEXT.replace("name: billing", "name: payments", 1)
    binding = http_binding(svc, "billing", "BILLING_TOKEN")
    payload = {"manifest": renamed, "filename": "payments.yaml", "binding": binding}
    async with admin(gw, token=None) as http:
        missing = await http.post("/admin/connectors", json=payload)
        assert missing.status_code == 401 and "error" in missing.json()
        assert (await http.get("/admin/connectors")).status_code == 401
    async with admin(gw, token=AGENT_TOKEN) as http:
        for response in (await http.post("/admin/connectors", json=payload), await http.get("/admin/connectors"),
                         await http.delete("/admin/connectors/billing")):
            assert response.status_code == 403, response.text
            assert "error" in response.json()
    async with admin(gw, token="not-the-admin-token") as http:
        assert (await http.get("/admin/connectors")).status_code == 403

    cases = [
        (renamed.replace("approval: recommended", "approval: sometimes"), "createRefund", "agent.approval"),
        (renamed.replace("retry: safe", "retry: safe\n        retries: 3"), "setInvoiceMemo", "agent.retries"),
        (renamed.replace("branches: {declined: rejected}", "branches: {refunded: rejected}"), "createRefund",
         "agent.branches.refunded"),
        (renamed.replace('pattern: "^inv-[0-9]+$", description', 'format: invoice-id, description'), "getInvoice",
         "inputSchema.properties.invoice_id.format"),
    ]
    async with admin(gw) as http:
        for manifest, operation, key in cases:
            assert manifest != renamed, key
            response = await http.post("/admin/connectors", json={**payload, "manifest": manifest})
            assert response.status_code == 400, response.text
            error = response.json()
            assert (error["operation"], error["key"], error["file"]) == (operation, key, "payments.yaml"), error
            assert isinstance(error["line"], int) and error["line"] > 1
            assert error["error"].startswith(f"payments.yaml:{error['line']}: operation {operation!r}: key {key!r}: "), error
        # An exposed operation without a binding, and a body that is not the API's shape.
        no_binding = await http.post("/admin/connectors", json={**payload, "binding": None})
        assert no_binding.status_code == 400 and "binding" in no_binding.json()["error"]
        assert (await http.post("/admin/connectors", json={"manifest": renamed, "surprise": 1})).status_code == 400
        # A config-directory connector cannot be replaced or removed through the API.
        assert (await http.post("/admin/connectors", json={**payload, "manifest": BILLING_TEXT})).status_code == 409
        assert (await http.delete("/admin/connectors/billing")).status_code == 409
        listed = (await http.get("/admin/connectors")).json()["connectors"]
    assert [c["connector_id"] for c in listed] == ["billing"]
    # The admin token is not an agent token.
    async with httpx.AsyncClient(timeout=10) as http:
        refused = await http.post(gw.url, headers={"authorization": f"Bearer {ADMIN_TOKEN}",
                                                   "accept": "application/json, text/event-stream"},
                                  json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert refused.status_code == 401


# --- (10) published manifests expose nothing -------------------------------------------------------


@pytest.mark.parametrize("name", ["hubspot", "slack"])
async def test_published_manifest_registered_exposes_nothing(sqlite_pair: Pair, name: str) -> None:
    text = (PUBLISHED / name / "connector.yaml").read_text()
    operations = [op["name"] for op in yaml.safe_load(text)["spec"]["operations"]]
    async with connect(sqlite_pair.b.url) as client:
        before_b = await tool_names(client)
    async with connect(sqlite_pair.a.url) as client:
        before_a = await tool_names(client)
    body = await register(sqlite_pair.a, text, "connector.yaml", None)
    try:
        assert body["connector_id"] == name and body["tools"] == []
        assert body["not_exposed"] == operations and operations
        # Wait until B has read the registration, then compare its tools.
        async with admin(sqlite_pair.b) as http:
            with anyio.fail_after(SETTLE):
                while (await http.get(f"/admin/connectors/{name}")).status_code != 200:
                    await anyio.sleep(0.1)
        async with connect(sqlite_pair.b.url) as client:
            assert await tool_names(client) == before_b
        async with connect(sqlite_pair.a.url) as client:
            assert await tool_names(client) == before_a
        assert not any(n.startswith(f"{name}_") for n in before_a | before_b)
    finally:
        await unregister(sqlite_pair.a, name)


# --- a gateway killed mid-call (last: it restarts gateway A) ----------------------------------------


async def _call_swallowing_the_crash(url: str, name: str, args: dict[str, Any], key: str) -> None:
    try:
        async with connect(url) as client:
            await client.call_tool(name, args, meta={KEY: key}, read_timeout_seconds=5)
    except BaseException as exc:  # noqa: BLE001 - the gateway is killed under this call
        if isinstance(exc, anyio.get_cancelled_exc_class()):
            raise


@pytest.mark.parametrize(("tool", "operation", "args", "resent"), [
    ("billing_set_invoice_memo", "setInvoiceMemo", {"invoice_id": "inv-1003", "memo": "after the crash"}, True),
    ("billing_create_refund", "createRefund", {"invoice_id": "inv-1003", "amount_cents": 700}, False),
])
async def test_gateway_killed_mid_call(gw: RunningGateway, svc: ExampleService, tool: str, operation: str,
                                       args: dict[str, Any], resent: bool) -> None:
    """The gateway dies while the service is executing. After a restart, the client's retry
    with the same key takes over the pending fence: a safe mutation is sent again with the same
    call id and succeeds; an unsafe one is answered unknown and never sent again."""
    key = new_key("crash")
    svc.script("billing", operation, {"delay": 1.0})
    async with anyio.create_task_group() as tg:
        tg.start_soon(_call_swallowing_the_crash, gw.url, tool, args, key)
        await anyio.sleep(0.5)  # the request is at the service, which is still sleeping
        gw.kill()
    with anyio.fail_after(5):
        while not svc.executions(operation=operation, idempotencyKey=key):
            await anyio.sleep(0.05)
    gw.start()
    async with connect(gw.url) as client:
        again = await client.call_tool(tool, args, meta={KEY: key})
    rows = svc.executions(operation=operation, idempotencyKey=key)
    if resent:
        assert not again.is_error, text_of(again)
        assert json.loads(text_of(again))["memo"] == "after the crash"
        assert len(rows) == 2 and len({r["callId"] for r in rows}) == 1
    else:
        assert again.is_error and meta_of(again)[OUTCOME] == "unknown", text_of(again)
        assert len(rows) == 1
        async with connect(gw.url) as client:
            assert (await get_invoice(client, "inv-1003"))["refunded_cents"] == 700
