"""Helpers of the chaos tests: the SDK client, holding a plain_server call mid-flight,
running many calls over a bounded set of clients, PostgreSQL schemas, summary lines."""

from __future__ import annotations

import fcntl
import os
import statistics
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from tests.support.inflight import SentRequests

KEY = "io.superdurable.dex/idempotencyKey"
OUTCOME = "io.superdurable.dex/outcome"
REPLAYED = "dex-gateway/replayed"


# Printed in the terminal summary by conftest.py.
SUMMARY_LINES: list[str] = []


def report(line: str) -> None:
    print(line, flush=True)
    SUMMARY_LINES.append(line)


# -- the SDK client ---------------------------------------------------------------------------


@asynccontextmanager
async def sdk_client(url: str, *, sent: SentRequests | None = None) -> AsyncIterator[Client]:
    """The official SDK client on the handshake era, as an agent would use it. `sent` records
    each request once its body is written to the connection."""
    if sent is None:
        async with Client(url, mode="legacy", read_timeout_seconds=60, cache=None) as client:
            yield client
        return
    # The SDK's default HTTP client timeouts (30 s, 300 s to read), over the recording transport.
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300), transport=sent.transport()) as http, \
            Client(streamable_http_client(url, http_client=http), mode="legacy", read_timeout_seconds=60,
                   cache=None) as client:
        yield client


def text_of(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def meta_of(result: CallToolResult) -> dict[str, Any]:
    return dict(result.meta or {})


def outcome_label(result: CallToolResult) -> str:
    """A short name for what a call answered: `unknown`, `rejected`, `ok`, `ok-replayed`, `error`."""
    meta = meta_of(result)
    if meta.get(OUTCOME):
        return str(meta[OUTCOME])
    if result.is_error:
        return "error"
    return "ok-replayed" if meta.get(REPLAYED) is True else "ok"


def content_of(result: CallToolResult) -> Any:
    """The answer's content and structured content, comparable across calls."""
    return (
        [block.model_dump(mode="json", exclude_none=True) for block in result.content],
        result.structured_content,
        result.is_error,
    )


# -- holding a plain_server call in flight ----------------------------------------------------


class NotesLock:
    """Hold plain_server's notes lock so its next tool call blocks *after* recording its
    execution (plain_server appends to executions.jsonl, then takes an exclusive flock on
    `<state>/notes.json.lock` to update the notes). While held, that call is in flight at
    the upstream exactly like dex_server's gated hold_* tools. The flock is blocking in
    plain_server's event loop, so the whole server pauses until `release()`."""

    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(state_dir / "notes.json.lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


# -- many calls over a bounded set of clients -------------------------------------------------


@dataclass(frozen=True)
class Call:
    tool: str
    arguments: dict[str, Any]
    key: str


@dataclass
class CallOutcome:
    call: Call
    url: str
    result: CallToolResult | None = None
    error: BaseException | None = None
    seconds: float = 0.0


async def run_calls(urls: Sequence[str], calls: Sequence[Call], *, clients: int = 16,
                    all_at_once: bool = False, started: list[CallOutcome] | None = None,
                    sent: SentRequests | None = None) -> list[CallOutcome]:
    """Send `calls` through `clients` SDK clients, client i on urls[i % len(urls)].

    Each client takes every `clients`-th call. `all_at_once`: a client sends its calls
    concurrently (every call in flight at the same moment); otherwise one after another
    (so at most `clients` calls are in flight). Outcomes are appended to `started` as they
    finish, in call order in the returned list. `sent` records the requests as they are written.
    """
    outcomes = [CallOutcome(call, urls[(i % clients) % len(urls)]) for i, call in enumerate(calls)]
    done = started if started is not None else []

    async def one(client: Client, outcome: CallOutcome) -> None:
        t0 = anyio.current_time()
        try:
            outcome.result = await client.call_tool(outcome.call.tool, outcome.call.arguments,
                                                    meta={KEY: outcome.call.key})
        except Exception as exc:  # noqa: BLE001 - reported by the caller's assertions
            outcome.error = exc
        outcome.seconds = anyio.current_time() - t0
        done.append(outcome)

    async def client_task(slot: int) -> None:
        mine = outcomes[slot::clients]
        if not mine:
            return
        async with sdk_client(urls[slot % len(urls)], sent=sent) as client:
            if all_at_once:
                async with anyio.create_task_group() as tg:
                    for outcome in mine:
                        tg.start_soon(one, client, outcome)
            else:
                for outcome in mine:
                    await one(client, outcome)

    async with anyio.create_task_group() as tg:
        for slot in range(min(clients, len(outcomes))):
            tg.start_soon(client_task, slot)
    return outcomes


def describe_failures(outcomes: Sequence[CallOutcome], limit: int = 3) -> str:
    bad = [o for o in outcomes if o.error is not None or (o.result is not None and o.result.is_error)]
    parts = []
    for o in bad[:limit]:
        what = repr(o.error) if o.error is not None else text_of(o.result)  # type: ignore[arg-type]
        parts.append(f"{o.call.key} via {o.url}: {what[:300]}")
    return f"{len(bad)} failed: " + "; ".join(parts)


# -- PostgreSQL -------------------------------------------------------------------------------


# -- crash-loop tallies -----------------------------------------------------------------------


@dataclass
class Tally:
    """What a crash loop saw, iteration by iteration."""

    name: str
    executions: Counter[int] = field(default_factory=Counter)
    first_call: Counter[str] = field(default_factory=Counter)
    retry: Counter[str] = field(default_factory=Counter)
    second_retry: Counter[str] = field(default_factory=Counter)
    takeovers: Counter[int] = field(default_factory=Counter)
    retry_seconds: list[float] = field(default_factory=list)
    iteration_seconds: list[float] = field(default_factory=list)

    @property
    def iterations(self) -> int:
        return sum(self.executions.values())

    def line(self) -> str:
        def fmt(counter: Counter[Any]) -> str:
            return "{" + ", ".join(f"{k}: {v}" for k, v in sorted(counter.items(), key=lambda kv: str(kv[0]))) + "}"

        rs = sorted(self.retry_seconds)
        return (
            f"CRASH-LOOP {self.name}: iterations={self.iterations} executions/key={fmt(self.executions)} "
            f"first call={fmt(self.first_call)} retry={fmt(self.retry)} second retry={fmt(self.second_retry)} "
            f"takeovers/key={fmt(self.takeovers)} retry s p50={statistics.median(rs):.3f} max={rs[-1]:.3f} "
            f"iteration s mean={statistics.fmean(self.iteration_seconds):.2f}"
        )
