"""An in-process host for the turn loop's tests: the session store, a scripted model and a fake
gateway whose tools answer after a delay (or never), with every send counted."""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from agent_host.approvals.gate import ApprovalGate
from agent_host.turn.builtins import Builtins
from agent_host.turn.continuation import Hook
from agent_host.turn.events import LoopEvents
from agent_host.gateway_client.tools import CallRequest, CallResult, GatewayTool, OnAttempt, OnProgress
from agent_host.turn.loop import AgentConfig, TurnLoop
from agent_host.models.base import ModelRequest, ModelResponse
from agent_host.models.scripted import ScriptedModelClient
from agent_host.domain.records import CallStatus, TurnRecord, UsageRecord
from agent_host.store.session_store import SessionStore
from gateway.conventions.keys import Effect

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "text": {"type": "string"}}}
Script = Callable[[ModelRequest], ModelResponse | Awaitable[ModelResponse]]


def tool(name: str, effect: Effect, approval: bool = False) -> GatewayTool:
    return GatewayTool(name=name, input_schema=SCHEMA, effect=effect, requires_approval=approval)


@dataclass
class Tools:
    """The gateway as the loop sees it: `delays[name]` seconds before an answer (inf: never)."""

    tools: list[GatewayTool]
    delays: dict[str, float] = field(default_factory=dict)
    results: dict[str, str] = field(default_factory=dict)
    sent: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)

    async def list_tools(self, found: Sequence[GatewayTool] = ()) -> list[GatewayTool]:
        return self.tools

    async def call(self, request: CallRequest, on_attempt: OnAttempt | None = None,
                   on_progress: OnProgress | None = None) -> CallResult:
        if on_attempt is not None:
            await on_attempt(request.prior.count + 1)
        self.sent.append(request.name)
        delay = self.delays.get(request.name, 0.0)
        await (anyio.sleep_forever() if math.isinf(delay) else anyio.sleep(delay))
        self.finished.append(request.name)
        text = self.results.get(request.name, f"{request.name} ok")
        return CallResult(status=CallStatus.SUCCEEDED, text=text, attempts=request.prior.count + 1)


class Seen(LoopEvents):
    """Keeps what the loop reported at the end of each turn."""

    def __init__(self) -> None:
        self.finished: list[tuple[TurnRecord, UsageRecord, UsageRecord]] = []
        self.steer_messages: list[str] = []
        self.compactions = 0

    async def turn_finished(self, turn: TurnRecord, turn_usage: UsageRecord, session_usage: UsageRecord) -> None:
        self.finished.append((turn, turn_usage, session_usage))

    async def steered(self, turn: TurnRecord, messages: list[str]) -> None:
        self.steer_messages.extend(messages)

    async def compacted(self, turn: TurnRecord, replaced_messages: int, replaced_tokens: int) -> None:
        self.compactions += 1


@dataclass
class Host:
    loop: TurnLoop
    store: SessionStore
    tools: Tools
    seen: Seen
    session_id: str = "s1"


@asynccontextmanager
async def host(
    tmp_path: Path, script: Script, tools: Tools | None = None, *, approve: str = "api", timeout: float = 30.0,
    max_calls: int = 100, hook: Hook | None = None, settings: dict[str, Any] | None = None,
    config: AgentConfig | None = None, models: Callable[[str], Any] | None = None,
) -> AsyncIterator[Host]:
    tools = tools or Tools([])
    async with SessionStore(tmp_path / "host.db") as store:
        gate = ApprovalGate(store, approve, timeout_seconds=timeout, poll_seconds=0.01)  # type: ignore[arg-type]
        builtins = Builtins(store, None, question_timeout=timeout, poll_seconds=0.01, api_answers=True)
        config = config or AgentConfig(max_model_calls=max_calls, control_poll_seconds=0.02)
        seen = Seen()
        loop = TurnLoop(store, ScriptedModelClient(script), tools, gate, builtins, config, seen, models=models, continuation=hook)
        await store.create_session("scripted", "fake", "s1", settings)
        yield Host(loop, store, tools, seen)


async def eventually(probe: Callable[[], Awaitable[Any]], timeout: float = 10.0) -> Any:
    """The first truthy value of `probe()`, polled until the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s")
        await anyio.sleep(0.01)


def last_user(request: ModelRequest) -> str:
    return (ScriptedModelClient.user_texts(request) or [""])[-1]


async def turn_with(h: Host, message: str, meanwhile: Callable[[], Awaitable[Any]]) -> TurnRecord:
    """Run a turn and, while it runs, `meanwhile()` (a steer, a cancel...); the finished turn."""
    done: list[TurnRecord] = []
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            done.append(await h.loop.run_turn(h.session_id, message))

        tg.start_soon(run)
        await meanwhile()
    return done[0]
