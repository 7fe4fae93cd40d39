"""ConnectorTool.call against the real example service process on a loopback port."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import anyio
import pytest
from connector_support import REPO_ROOT, ExampleService, load_doc, manifest_doc

from gateway.connectors import HttpBindingConfig, load_manifest
from gateway.connectors.bindings import HttpBinding
from gateway.connectors.bindings.config import CredentialConfig
from gateway.connectors.results import TRUNCATED_BYTES_KEY
from gateway.connectors.tool import CALL_META_KEY, ConnectorTool
from gateway.conventions.keys import OUTCOME_KEY, Effect

BILLING = load_manifest(REPO_ROOT / "examples/connectors/billing/connector.yaml")
TICKETS = load_manifest(REPO_ROOT / "examples/connectors/tickets/connector.yaml")


def tool(service: ExampleService, manifest: Any, operation: str, **binding: Any) -> ConnectorTool:
    config = HttpBindingConfig(type="http", base_url=f"{service.base}/{manifest.connector_id}", **binding)
    return ConnectorTool.build(manifest, manifest.operation(operation), HttpBinding(config))


def outcome(answer: Any) -> str | None:
    return (answer.meta or {}).get(OUTCOME_KEY)


@pytest.mark.anyio
async def test_query(fresh_service: ExampleService) -> None:
    t = tool(fresh_service, BILLING, "getInvoice")
    assert (t.name, t.effect, t.requires_approval) == ("billing_get_invoice", Effect.READ, False)
    answer = await t.call({"invoice_id": "inv-1001"}, idempotency_key=None, fence_id=None, takeover=False)
    assert not answer.is_error
    assert answer.text.startswith('{"amount_cents":12000,"customer":"Ada Lovelace"')
    missing = await t.call({"invoice_id": "inv-9"}, idempotency_key=None, fence_id=None, takeover=False)
    assert (missing.is_error, outcome(missing)) == (True, "rejected")
    assert missing.text == "billing getInvoice returned notFound: not_found: no invoice 'inv-9'"


@pytest.mark.anyio
async def test_safe_mutation_retried_after_dropped_connection(fresh_service: ExampleService) -> None:
    t = tool(fresh_service, BILLING, "setInvoiceMemo")
    assert t.effect is Effect.IDEMPOTENT_WRITE
    fresh_service.script("billing", "setInvoiceMemo", {"drop": True})
    answer = await t.call({"invoice_id": "inv-1002", "memo": "paid by wire"}, idempotency_key="s1/t1/c1", fence_id="fence-1", takeover=False)
    assert not answer.is_error, answer.text
    assert '"memo":"paid by wire"' in answer.text
    runs = fresh_service.executions(operation="setInvoiceMemo")
    assert [r["attempt"] for r in runs] == [1, 2]
    assert len({r["callId"] for r in runs}) == 1
    assert runs[0]["callId"] == answer.meta[CALL_META_KEY]["callId"] == t.call_id(idempotency_key="s1/t1/c1", fence_id="fence-1")
    assert runs[0]["idempotencyKey"] == "s1/t1/c1"


@pytest.mark.anyio
async def test_unsafe_mutation_interrupted_is_unknown_and_never_resent(fresh_service: ExampleService) -> None:
    t = tool(fresh_service, BILLING, "createRefund")
    assert (t.effect, t.requires_approval) == (Effect.NON_IDEMPOTENT_WRITE, True)
    fresh_service.script("billing", "createRefund", {"drop": True})
    answer = await t.call({"invoice_id": "inv-1001", "amount_cents": 500}, idempotency_key="k-refund", fence_id=None, takeover=False)
    assert (answer.is_error, outcome(answer)) == (True, "unknown")
    assert "interrupted after it was sent" in answer.text and "may have taken effect" in answer.text
    await anyio.sleep(0.3)
    assert len(fresh_service.executions(operation="createRefund")) == 1


@pytest.mark.anyio
async def test_takeover_of_unsafe_mutation_sends_nothing(fresh_service: ExampleService) -> None:
    t = tool(fresh_service, BILLING, "createRefund")
    answer = await t.call({"invoice_id": "inv-1001", "amount_cents": 5}, idempotency_key="k", fence_id="f", takeover=True)
    assert outcome(answer) == "unknown"
    assert fresh_service.executions(operation="createRefund") == []


@pytest.mark.anyio
async def test_schema_violation_never_reaches_the_service(fresh_service: ExampleService) -> None:
    t = tool(fresh_service, BILLING, "createRefund")
    answer = await t.call({"invoice_id": "inv-1001", "amount_cents": -5, "note": "x"}, idempotency_key="k", fence_id=None, takeover=False)
    assert (answer.is_error, outcome(answer)) == (True, "rejected")
    assert "amount_cents: -5 is less than the minimum of 1" in answer.text
    assert "did not run" in answer.text
    assert fresh_service.executions() == []


@pytest.mark.anyio
async def test_big_result_is_cut_with_its_full_size(fresh_service: ExampleService) -> None:
    t = tool(fresh_service, BILLING, "getInvoice")
    fresh_service.script("billing", "getInvoice", {"big": 100_000})
    answer = await t.call({"invoice_id": "inv-1001"}, idempotency_key=None, fence_id=None, takeover=False)
    full = len('{"blob":""}') + 100_000
    body, note = answer.text.split("\n[result truncated", 1)
    assert len(body.encode()) == 64 * 1024
    assert f"the full result was {full} bytes" in note
    assert answer.meta[TRUNCATED_BYTES_KEY] == full
    assert not answer.is_error


@pytest.mark.anyio
async def test_uncertain_and_declined(fresh_service: ExampleService) -> None:
    t = tool(fresh_service, BILLING, "createRefund")
    uncertain = await t.call({"invoice_id": "inv-1001", "amount_cents": 999}, idempotency_key="a", fence_id=None, takeover=False)
    assert outcome(uncertain) == "unknown"
    assert uncertain.text.startswith("billing createRefund returned uncertain: processor_timeout:")
    declined = await t.call({"invoice_id": "inv-1002", "amount_cents": 999_999}, idempotency_key="b", fence_id=None, takeover=False)
    assert outcome(declined) == "rejected"
    assert declined.text == "billing createRefund returned declined: over_refundable: only 4500 cents of inv-1002 can still be refunded"


@pytest.mark.anyio
async def test_old_format_manifest_branches(fresh_service: ExampleService) -> None:
    close = tool(fresh_service, TICKETS, "closeTicket")
    first = await close.call({"ticket_id": "T-1", "resolution": "fixed"}, idempotency_key="x1", fence_id=None, takeover=False)
    assert not first.is_error and '"status":"closed"' in first.text
    again = await close.call({"ticket_id": "T-1", "resolution": "fixed"}, idempotency_key="x2", fence_id=None, takeover=False)
    assert outcome(again) == "rejected" and "returned alreadyClosed: already_closed" in again.text
    listed = await tool(fresh_service, TICKETS, "listTicketIDs").call({"status": "open"}, idempotency_key=None, fence_id=None, takeover=False)
    assert listed.text == '{"ticket_ids":["T-7","T-5","T-4","T-2"]}'


def _short_timeout_manifest(kind: str) -> Any:
    agent: dict[str, Any] = {"exposed": True}
    return load_doc(manifest_doc({
        "name": "getInvoice" if kind == "query" else "createRefund", "kind": kind, "branches": [{"id": "found"}, {"id": "refunded"}],
        "execution": {"executeMethodTimeout": "300ms", "retry": {"initialInterval": "10ms", "maximumAttempts": 2}},
        "agent": agent, "inputSchema": {"type": "object"},
    }))


@pytest.mark.anyio
async def test_timeouts(fresh_service: ExampleService) -> None:
    query = _short_timeout_manifest("query")
    fresh_service.script("billing", "getInvoice", {"delay": 1}, {"delay": 1})
    answer = await tool(fresh_service, query, "getInvoice").call({"invoice_id": "inv-1001"}, idempotency_key=None, fence_id=None, takeover=False)
    assert (answer.is_error, outcome(answer)) == (True, None)
    assert "interrupted on all 2 attempts" in answer.text and "300 ms" not in answer.text
    mutation = _short_timeout_manifest("mutation")
    fresh_service.script("billing", "createRefund", {"delay": 0.6})
    answer = await tool(fresh_service, mutation, "createRefund").call(
        {"invoice_id": "inv-1001", "amount_cents": 1}, idempotency_key="t", fence_id=None, takeover=False)
    assert outcome(answer) == "unknown"
    await anyio.sleep(0.8)
    assert len(fresh_service.executions(operation="createRefund")) == 1


@pytest.mark.anyio
async def test_connection_refused_is_not_sent() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = HttpBindingConfig(type="http", base_url=f"http://127.0.0.1:{port}/billing")
    t = ConnectorTool.build(BILLING, BILLING.operation("createRefund"), HttpBinding(config))
    answer = await t.call({"invoice_id": "inv-1001", "amount_cents": 5}, idempotency_key="k", fence_id=None, takeover=False)
    assert (answer.is_error, outcome(answer)) == (True, None)
    assert "did not run" in answer.text and "safe to call it again" in answer.text


@pytest.mark.anyio
async def test_credential_from_environment(tmp_path: Path) -> None:
    from connector_support import start_service

    with start_service(tmp_path, token="s3cret") as svc:
        cred = CredentialConfig(header="Authorization", env="BILLING_TOKEN", scheme="Bearer")
        config = HttpBindingConfig(type="http", base_url=f"{svc.base}/billing", credential=cred)
        ok = ConnectorTool.build(BILLING, BILLING.operation("getInvoice"), HttpBinding(config, environ={"BILLING_TOKEN": "s3cret"}))
        answer = await ok.call({"invoice_id": "inv-1001"}, idempotency_key=None, fence_id=None, takeover=False)
        assert not answer.is_error
        missing = ConnectorTool.build(BILLING, BILLING.operation("createRefund"), HttpBinding(config, environ={}))
        answer = await missing.call({"invoice_id": "inv-1001", "amount_cents": 5}, idempotency_key="k", fence_id=None, takeover=False)
        assert "did not run: the credential environment variable BILLING_TOKEN is not set" in answer.text
        assert svc.executions(operation="createRefund") == []
