"""Example connector service: the `billing` and `tickets` connectors over the Dex HTTP binding.

    python examples/connectors/service.py --port 9100

`POST /<connector>/<operation>` with `{connector, operation, input, callId, idempotencyKey,
attempt}` answers `{branch, value}` or `{branch, error: {kind, message}}`. Every request that
reaches an operation is appended, fsynced, to `$DEX_EXAMPLE_STATE_DIR/connector-executions.jsonl`
so tests can count real executions across processes. With `$DEX_EXAMPLE_CONNECTOR_TOKEN` set,
requests need `Authorization: Bearer <token>`.

Test hooks: `POST /_test/script {"connector", "operation", "actions": [...]}` queues one action
per coming request of that operation:
    {"drop": true}           execute, then break the connection mid-answer
    {"drop_before": true}    break the connection without executing
    {"delay": 2.5}           wait, then execute (slower than a short executeMethodTimeout)
    {"status": 500}          execute, then answer HTTP 500
    {"big": 100000}          answer success with a value of about that many bytes
    {"branch": "x", "error": {...}} or {"branch": "x", "value": ...}   answer that, without executing
`POST /_test/reset` clears the scripts, the data and the executions file.
A plain script (run as `python examples/connectors/service.py`), so it needs no gateway import.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

STATE_DIR_ENV = "DEX_EXAMPLE_STATE_DIR"
TOKEN_ENV = "DEX_EXAMPLE_CONNECTOR_TOKEN"
EXECUTIONS_FILE = "connector-executions.jsonl"
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")

Result = dict[str, Any]


def _initial_invoices() -> dict[str, dict[str, Any]]:
    return {
        "inv-1001": {"id": "inv-1001", "customer": "Ada Lovelace", "amount_cents": 12000, "refunded_cents": 0, "memo": "", "status": "paid"},
        "inv-1002": {"id": "inv-1002", "customer": "Alan Turing", "amount_cents": 4500, "refunded_cents": 0, "memo": "", "status": "paid"},
        "inv-1003": {"id": "inv-1003", "customer": "Grace Hopper", "amount_cents": 99000, "refunded_cents": 0, "memo": "", "status": "open"},
    }


def _initial_tickets() -> dict[str, dict[str, Any]]:
    return {f"T-{n}": {"id": f"T-{n}", "status": "open" if n % 3 else "closed", "resolution": None} for n in range(1, 8)}


@dataclass
class ServiceState:
    """Everything the service remembers; created once per process in `build_app`."""

    log_path: Path
    token: str | None
    invoices: dict[str, dict[str, Any]] = field(default_factory=_initial_invoices)
    tickets: dict[str, dict[str, Any]] = field(default_factory=_initial_tickets)
    refunds_by_call: dict[str, dict[str, Any]] = field(default_factory=dict)
    scripts: dict[tuple[str, str], deque[dict[str, Any]]] = field(default_factory=lambda: defaultdict(deque))

    def record(self, body: dict[str, Any], note: str) -> None:
        line = json.dumps({
            "ts": time.time(), "pid": os.getpid(), "connector": body.get("connector"), "operation": body.get("operation"),
            "callId": body.get("callId"), "idempotencyKey": body.get("idempotencyKey"), "attempt": body.get("attempt"),
            "input": body.get("input"), "note": note,
        }, sort_keys=True)
        # Appended and fsynced before answering, so a count read after the answer is exact.
        with self.log_path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def reset(self) -> None:
        self.log_path.write_text("")
        self.invoices = _initial_invoices()
        self.tickets = _initial_tickets()
        self.refunds_by_call.clear()
        self.scripts.clear()


def ok(value: Any, branch: str) -> Result:
    return {"branch": branch, "value": value}


def err(branch: str, kind: str, message: str) -> Result:
    return {"branch": branch, "error": {"kind": kind, "message": message}}


# --- billing ----------------------------------------------------------------------------------


def get_invoice(state: ServiceState, body: dict[str, Any]) -> Result:
    invoice = state.invoices.get(body["input"].get("invoice_id", ""))
    if invoice is None:
        return err("notFound", "not_found", f"no invoice {body['input'].get('invoice_id')!r}")
    return ok(invoice, "found")


def set_invoice_memo(state: ServiceState, body: dict[str, Any]) -> Result:
    invoice = state.invoices.get(body["input"].get("invoice_id", ""))
    if invoice is None:
        return err("notFound", "not_found", f"no invoice {body['input'].get('invoice_id')!r}")
    invoice["memo"] = body["input"].get("memo", "")
    return ok(invoice, "updated")


def create_refund(state: ServiceState, body: dict[str, Any]) -> Result:
    # A provider that dedupes on the Call ID: a resent request gets the first refund back.
    previous = state.refunds_by_call.get(body.get("callId", ""))
    if previous is not None:
        return ok(previous, "refunded")
    data = body["input"]
    invoice = state.invoices.get(data.get("invoice_id", ""))
    if invoice is None:
        return err("declined", "not_found", f"no invoice {data.get('invoice_id')!r}")
    amount = int(data.get("amount_cents", 0))
    if amount == 999:
        # Stands for a card processor that took the request and then timed out.
        return err("uncertain", "processor_timeout", "the card processor accepted the refund but did not confirm it")
    if invoice["refunded_cents"] + amount > invoice["amount_cents"]:
        left = invoice["amount_cents"] - invoice["refunded_cents"]
        return err("declined", "over_refundable", f"only {left} cents of {invoice['id']} can still be refunded")
    invoice["refunded_cents"] += amount
    refund = {"id": f"re_{uuid.uuid4().hex[:12]}", "invoice_id": invoice["id"], "amount_cents": amount, "reason": data.get("reason", "")}
    state.refunds_by_call[body.get("callId", "")] = refund
    return ok(refund, "refunded")


# --- tickets ----------------------------------------------------------------------------------


def list_ticket_ids(state: ServiceState, body: dict[str, Any]) -> Result:
    status = body["input"].get("status")
    limit = int(body["input"].get("limit", 20))
    ids = [t["id"] for t in reversed(state.tickets.values()) if status is None or t["status"] == status]
    return ok({"ticket_ids": ids[:limit]}, "listed")


def close_ticket(state: ServiceState, body: dict[str, Any]) -> Result:
    ticket = state.tickets.get(body["input"].get("ticket_id", ""))
    if ticket is None:
        return err("notFound", "not_found", f"no ticket {body['input'].get('ticket_id')!r}")
    if ticket["status"] == "closed":
        return err("alreadyClosed", "already_closed", f"{ticket['id']} was closed before")
    ticket.update(status="closed", resolution=body["input"].get("resolution"))
    return ok(ticket, "closed")


OPERATIONS: dict[tuple[str, str], Callable[[ServiceState, dict[str, Any]], Result]] = {
    ("billing", "getInvoice"): get_invoice,
    ("billing", "setInvoiceMemo"): set_invoice_memo,
    ("billing", "createRefund"): create_refund,
    ("tickets", "listTicketIDs"): list_ticket_ids,
    ("tickets", "closeTicket"): close_ticket,
}


class OperationApp:
    """A raw ASGI endpoint, so the test hooks can break a connection mid-answer."""

    def __init__(self, state: ServiceState) -> None:
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        if self.state.token is not None and request.headers.get("authorization") != f"Bearer {self.state.token}":
            await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
            return
        connector, operation = request.path_params["connector"], request.path_params["operation"]
        handler = OPERATIONS.get((connector, operation))
        if handler is None:
            await JSONResponse({"error": f"no operation {connector}/{operation}"}, status_code=404)(scope, receive, send)
            return
        try:
            body = json.loads(await request.body())
            assert isinstance(body.get("input"), dict)
        except (ValueError, AssertionError):
            await JSONResponse({"error": "body must be JSON with an input object"}, status_code=400)(scope, receive, send)
            return
        body = {**body, "connector": connector, "operation": operation}
        script = self.state.scripts.get((connector, operation))
        action = script.popleft() if script else {}
        if action.get("drop_before"):
            await _break(send)
        if "branch" in action:
            self.state.record(body, "scripted")
            result: Result = {k: action[k] for k in ("branch", "value", "error") if k in action}
        else:
            if action.get("delay"):
                await anyio.sleep(float(action["delay"]))
            result = handler(self.state, body)
            self.state.record(body, "executed")
            if action.get("big"):
                result = ok({"blob": "x" * int(action["big"])}, result["branch"])
        if action.get("drop"):
            await _break(send)
        if action.get("status"):
            await JSONResponse({"error": "scripted failure"}, status_code=int(action["status"]))(scope, receive, send)
            return
        await JSONResponse(result)(scope, receive, send)


async def _break(send: Send) -> None:
    """Start an answer and fail mid-body: uvicorn then closes the connection, so the client
    sees the request go out and no complete answer come back."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json"), (b"content-length", b"1000")]})
    await send({"type": "http.response.body", "body": b'{"branch":', "more_body": True})
    raise ConnectionAbortedError("test hook: connection dropped")


def build_app(state: ServiceState) -> Starlette:
    async def script(request: Request) -> JSONResponse:
        data = await request.json()
        state.scripts[(data["connector"], data["operation"])].extend(data["actions"])
        return JSONResponse({"queued": len(data["actions"])})

    async def reset(request: Request) -> JSONResponse:
        state.reset()
        return JSONResponse({"reset": True})

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    return Starlette(routes=[
        Route("/_test/script", script, methods=["POST"]),
        Route("/_test/reset", reset, methods=["POST"]),
        Route("/healthz", health),
        Route("/{connector}/{operation}", OperationApp(state), methods=["POST"]),
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="loopback only")
    parser.add_argument("--port", type=int, default=9100)
    args = parser.parse_args(argv)
    if args.host not in LOOPBACK_HOSTS:
        parser.error("the example service binds to loopback only")
    state_dir = Path(os.environ.get(STATE_DIR_ENV) or "var/example-connectors")
    state_dir.mkdir(parents=True, exist_ok=True)
    state = ServiceState(log_path=state_dir / EXECUTIONS_FILE, token=os.environ.get(TOKEN_ENV) or None)
    config = uvicorn.Config(build_app(state), host=args.host, port=args.port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)

    async def serve() -> None:
        # Bind first so the printed port is the real one (also for --port 0).
        sockets = [config.bind_socket()]
        port = sockets[0].getsockname()[1]
        print(f"listening on http://{args.host}:{port}", file=sys.stderr, flush=True)
        await server.serve(sockets=sockets)

    anyio.run(serve)
    return 0


if __name__ == "__main__":
    sys.exit(main())
