"""Helpers of the gateway end-to-end tests: Dex keys, the SDK client in one era, result readers."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, Tool

from tests.support.inflight import SentRequests

EFFECT = "io.superdurable.dex/effect"
APPROVAL = "io.superdurable.dex/approval"
OUTCOME = "io.superdurable.dex/outcome"
KEY = "io.superdurable.dex/idempotencyKey"
REPLAYED = "dex-gateway/replayed"

# The handshake era (initialize, 2025-11-25) and the modern era (no handshake).
ERAS = ["legacy", "2026-07-28"]


@asynccontextmanager
async def connect(url: str, era: str, *, token: str | None = None,
                  sent: SentRequests | None = None) -> AsyncIterator[Client]:
    """The official SDK client on the gateway URL, in one protocol era, optionally with a token.
    `sent` records each request once its body is written to the connection."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120),
                               transport=sent.transport() if sent else None)
    async with http, Client(streamable_http_client(url, http_client=http), mode=era, cache=None,
                            read_timeout_seconds=60) as client:
        yield client


async def all_tools(client: Client) -> list[Tool]:
    tools: list[Tool] = []
    cursor: str | None = None
    for _ in range(100):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise AssertionError("tools/list never ended")


def tools_by_name(tools: list[Tool]) -> dict[str, Tool]:
    names = [t.name for t in tools]
    assert len(names) == len(set(names)), f"duplicate exposed names: {sorted(names)}"
    return {t.name: t for t in tools}


def text_of(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def meta_of(result: CallToolResult) -> dict[str, Any]:
    return dict(result.meta or {})


def mcp_errors(exc: BaseException) -> list[MCPError]:
    """Every MCPError in `exc`, looking inside exception groups (the SDK client's task groups)."""
    if isinstance(exc, MCPError):
        return [exc]
    if isinstance(exc, BaseExceptionGroup):
        return [e for sub in exc.exceptions for e in mcp_errors(sub)]
    return []


def new_key(label: str = "k") -> str:
    """A fresh idempotency key shaped like the agent host's `<session>/<turn>/<toolCallId>`."""
    return f"{label}/{uuid.uuid4().hex[:8]}/1"
