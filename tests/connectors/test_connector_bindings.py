"""Binding error handling (respx for the HTTP binding's answers; the real service covers
dropped connections and timeouts) and the Python binding."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
import respx

from gateway.connectors.bindings import (
    ConnectorRequest,
    ConnectorResponse,
    HttpBinding,
    HttpBindingConfig,
    NothingSent,
    PythonBinding,
    PythonBindingConfig,
    parse_binding,
)
from gateway.connectors.errors import BindingConfigError
from gateway.conventions.outcomes import Interrupted, NotSent

URL = "http://127.0.0.1:9100/billing"
REQUEST = ConnectorRequest(connector="billing", operation="getInvoice", input={"invoice_id": "inv-1"},
                           call_id="c-1", idempotency_key="k-1", attempt=2)


def http(environ: dict[str, str] | None = None, **extra: Any) -> HttpBinding:
    return HttpBinding(parse_binding({"type": "http", "base_url": URL, **extra}, where="t"), environ=environ or {})  # type: ignore[arg-type]


@pytest.mark.anyio
@respx.mock
async def test_http_request_wire_and_answer() -> None:
    route = respx.post(f"{URL}/getInvoice").mock(return_value=httpx.Response(200, json={"branch": "found", "value": {"a": 1}}))
    binding = http({"TOKEN": "t0k"}, credential={"env": "TOKEN"})
    result = await binding.attempt(REQUEST, 5)
    assert result == ConnectorResponse(branch="found", value={"a": 1})
    sent = route.calls.last.request
    assert sent.headers["authorization"] == "Bearer t0k"
    import json

    assert json.loads(sent.content) == {"connector": "billing", "operation": "getInvoice", "input": {"invoice_id": "inv-1"},
                                        "callId": "c-1", "idempotencyKey": "k-1", "attempt": 2}


@pytest.mark.anyio
@pytest.mark.parametrize("response, reason", [
    (httpx.Response(500, text="boom"), "HTTP 500"),
    (httpx.Response(401, json={"error": "no"}), "HTTP 401"),
    (httpx.Response(200, text="not json"), "unreadable answer"),
    (httpx.Response(200, json={"value": 1}), "unreadable answer"),
    (httpx.Response(200, json={"branch": ""}), "unreadable answer"),
])
@respx.mock
async def test_http_bad_answers_are_interrupted(response: httpx.Response, reason: str) -> None:
    respx.post(f"{URL}/getInvoice").mock(return_value=response)
    result = await http().attempt(REQUEST, 5)
    assert isinstance(result, Interrupted) and reason in result.reason


@pytest.mark.anyio
@respx.mock
async def test_http_connect_error_is_not_sent() -> None:
    respx.post(f"{URL}/getInvoice").mock(side_effect=httpx.ConnectError("refused"))
    assert isinstance(await http().attempt(REQUEST, 5), NotSent)


@pytest.mark.anyio
async def test_http_missing_credential_is_not_sent() -> None:
    result = await http({}, credential={"env": "BILLING_TOKEN", "scheme": None, "header": "X-Api-Key"}).attempt(REQUEST, 5)
    assert isinstance(result, NotSent) and "BILLING_TOKEN" in result.reason


def test_binding_config_errors() -> None:
    for bad, where in [({"type": "ftp"}, "type"), ({"type": "http"}, "base_url"), ({"type": "http", "base_url": URL, "x": 1}, "x"),
                       ({"type": "python", "callable": "nocolon"}, "callable"),
                       ({"type": "http", "base_url": URL, "credential": {"env": "A-B"}}, "env")]:
        with pytest.raises(BindingConfigError, match=where):
            parse_binding(bad, where="binding.yaml")
    assert isinstance(parse_binding({"type": "python", "callable": "a.b:c"}, where="x"), PythonBindingConfig)
    assert parse_binding({"type": "http", "base_url": URL + "/"}, where="x").base_url == URL  # type: ignore[union-attr]


CONFIG = PythonBindingConfig(type="python", callable="tests.fake:fn")


@pytest.mark.anyio
async def test_python_sync_function_runs_off_the_loop() -> None:
    def sync(request: ConnectorRequest) -> dict[str, Any]:
        time.sleep(0.05)
        return {"branch": "found", "value": request.attempt}

    assert await PythonBinding(CONFIG, sync).attempt(REQUEST, 5) == ConnectorResponse(branch="found", value=2)


@pytest.mark.anyio
async def test_python_outcomes() -> None:
    async def raises(request: ConnectorRequest) -> Any:
        raise RuntimeError("provider reset")

    async def nothing(request: ConnectorRequest) -> Any:
        raise NothingSent("rate limited locally")

    async def slow(request: ConnectorRequest) -> Any:
        import anyio

        await anyio.sleep(5)

    async def garbage(request: ConnectorRequest) -> Any:
        return {"nope": 1}

    assert isinstance(await PythonBinding(CONFIG, raises).attempt(REQUEST, 5), Interrupted)
    assert await PythonBinding(CONFIG, nothing).attempt(REQUEST, 5) == NotSent("rate limited locally")
    assert "executeMethodTimeout" in (await PythonBinding(CONFIG, slow).attempt(REQUEST, 0.1)).reason  # type: ignore[union-attr]
    assert isinstance(await PythonBinding(CONFIG, garbage).attempt(REQUEST, 5), Interrupted)


def test_python_callable_import() -> None:
    binding = PythonBinding(PythonBindingConfig(type="python", callable="json:dumps"))
    assert binding.config.callable == "json:dumps"
    with pytest.raises(BindingConfigError, match="cannot import"):
        PythonBinding(PythonBindingConfig(type="python", callable="json:nope"))


def test_http_binding_config_type() -> None:
    assert HttpBindingConfig(type="http", base_url=URL).connect_timeout == 5.0
