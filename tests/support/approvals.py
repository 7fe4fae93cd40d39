"""The plain MCP SDK client of the approvals tests (docs/approvals.md): a bearer token, and an
elicitation callback only when the test's user answers; executions counted by the caller's key."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.servers import read_executions


@dataclass
class Asked:
    """What the client's user was asked, and how it answers."""

    action: str = "accept"
    messages: list[str] = field(default_factory=list)

    async def elicit(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.messages.append(params.message)
        return types.ElicitResult(action=self.action, content={} if self.action == "accept" else None)  # type: ignore[arg-type]


@asynccontextmanager
async def connect(url: str, era: str, token: str, asked: Asked | None = None) -> AsyncIterator[Client]:
    """The SDK client as a plain client: a bearer token, and an elicitation callback only with `asked`."""
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=120))
    options: dict[str, Any] = {"elicitation_callback": asked.elicit} if asked is not None else {}
    async with http, Client(streamable_http_client(url, http_client=http), mode=era, cache=None,  # type: ignore[arg-type]
                            read_timeout_seconds=60, **options) as client:
        yield client


def count_executions(state: Path, *, tool: str, key: str) -> int:
    """Executions of `tool` for this call: the upstream sees the key scoped to the principal (`<hash>/<key>`)."""
    return sum(1 for r in read_executions(state, tool=tool) if str(r.get("idempotency_key")).endswith("/" + key))


def refund(amount: float, order: str = "o-1") -> dict[str, Any]:
    return {"order": order, "amount": amount}
