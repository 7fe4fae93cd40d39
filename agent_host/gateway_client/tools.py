"""The gateway as the host's only tool source: list its tools, call one by the re-issue rules.

Every call carries its idempotency key in request `_meta` (and, when the host is traced, the
SDK's dispatcher adds `traceparent` for its client span, a child of the `execute_tool` span). Each attempt runs in its own task
(`cancel_guard`), so whatever the MCP client raises — an answer, a JSON-RPC error, a broken
connection, or its own bare cancellation — comes back as one attempt event of the conventions
(`Replied`, `RpcError`, `NotSent`, `Interrupted`), and `reissue` decides from the counted
attempts whether the call is answered, sent again with the same key, or given up.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import mcp_types as types
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, Field

from gateway.conventions.answers import Answer
from gateway.conventions.effects import listed_tool_classification
from gateway.conventions.keys import IDEMPOTENCY_KEY, REPLAYED_KEY, Effect, Outcome
from gateway.conventions.outcomes import (
    AttemptEvent, Interrupted, NotSent, Replied, RpcError, SendAgain, outcome_of, resolve_attempt,
)

from ..domain import texts
from ..domain.records import CallStatus
from .cancel_guard import TransportCancelled, outside_transport_cancels
from .credential import Credential
from .connection import (
    HANDSHAKE, MODERN, FormAsker, GatewayConnection, GatewayRefused, GatewayUnavailable, Protocol, describe,
)
from .modern_tasks import TasksExtension
from .images import ImageLibrary, ImageReference, block_text, references_in
from .resources import GatewayResources
from .reissue import PriorAttempts, give_up, plan_attempts, resolve
from .rounds import KeptRound, RoundAsker, call_in_rounds
from .tasks import HostTasks, TaskCaller

log = logging.getLogger(__name__)

SEARCH_TOOLS = "search_tools"  # the gateway's discovery tool (docs/discovery.md)

# JSON-RPC codes the SDK client raises itself when the exchange broke after the request left
# (its read timeout, a closed connection): not answers from the gateway.
_CLIENT_SIDE_CODES = frozenset({types.REQUEST_TIMEOUT, types.CONNECTION_CLOSED})

OnAttempt = Callable[[int], Awaitable[None]]
OnProgress = ProgressFnT  # async (progress, total, message) -> None

__all__ = [
    "CallRequest", "CallResult", "GatewayRefused", "GatewayTool", "GatewayToolSource", "GatewayUnavailable", "OnAttempt", "OnProgress",
    "PriorAttempts",
]


class GatewayTool(BaseModel):
    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    effect: Effect
    requires_approval: bool
    task_support: str = "forbidden"  # execution.taskSupport: a "required" tool is called as a task


@dataclass(frozen=True)
class CallRequest:
    """One gateway tool call as the loop hands it over: `prior` is what the session store says
    about its earlier attempts."""

    name: str
    arguments: dict[str, Any]
    key: str
    effect: Effect
    prior: PriorAttempts = PriorAttempts()
    ask_form: FormAsker | None = None  # an upstream's form questions during the call go to the user
    # On 2026-07-28: the asker of each `input_required` round's questions (the round is kept with
    # them, rounds.py), and what finds the round an earlier run of the host kept (sent first).
    ask_round: RoundAsker | None = None
    kept_round: KeptRound | None = None
    on_task: Callable[[], Awaitable[None]] | None = None  # the call is a task now (its id is recorded)


class CallResult(BaseModel):
    status: CallStatus
    text: str
    replayed: bool = False
    attempts: int = 0
    images: list[ImageReference] = Field(default_factory=list)  # references, never bytes
    # Discovery (docs/discovery.md): the tool definitions a search_tools answer carried; the turn
    # loop keeps them in the session store, and they join the session's tools from then on.
    found: list[GatewayTool] = Field(default_factory=list)


def answer_text(answer: Answer) -> str:
    """Text blocks joined with newlines; images by their `[image <n>]` line; other content as JSON."""
    parts = [p for p in (block_text(b) for b in answer.content) if p is not None]
    if not parts and answer.structured_content is not None:
        parts.append(texts.as_json(answer.structured_content))
    return "\n".join(parts)


def call_result(tool: str, answer: Answer, attempts: int) -> CallResult:
    """A final answer as the host records it and the model reads it (the outcome key wins)."""
    replayed = (answer.meta or {}).get(REPLAYED_KEY) is True
    text = answer_text(answer)
    outcome = outcome_of(tool, answer.meta)
    if outcome is Outcome.UNKNOWN:
        status, text = CallStatus.OUTCOME_UNKNOWN, texts.outcome_unknown(text)
    elif outcome is Outcome.REJECTED:
        status, text = CallStatus.REJECTED, texts.rejected(text)
    elif answer.is_error:
        status, text = CallStatus.FAILED, texts.failed(text)
    else:
        status = CallStatus.SUCCEEDED
    return CallResult(status=status, text=text, replayed=replayed, attempts=attempts, images=references_in(answer))


def found_tools(tool: str, answer: Answer) -> list[GatewayTool]:
    """The definitions of a search_tools answer (`structuredContent.tools`) as the host offers
    them; an invalid one is left out with a warning; none for any other tool or an error."""
    found = (answer.structured_content or {}).get("tools") if tool == SEARCH_TOOLS else None
    if answer.is_error or not isinstance(found, list):
        return []
    tools: list[GatewayTool] = []
    for definition in found:
        try:
            tools.append(_listed(types.Tool.model_validate(definition)))
        except ValueError:
            log.warning("search_tools answered a tool definition that is not valid; left out")
    return tools


def _mcp_error(exc: BaseException) -> MCPError | None:
    if isinstance(exc, MCPError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _mcp_error(inner)) is not None:
                return found
    return None


@dataclass
class _Exchange:
    """How far one attempt got: `sent` once the request may have left."""

    sent: bool = False
    result: types.CallToolResult | None = None


def _event(exchange: _Exchange, exc: Exception) -> AttemptEvent:
    """What a failed exchange means: never sent, an answer (JSON-RPC error), or interrupted."""
    if exchange.result is not None:
        return Replied(_answer(exchange.result))  # answered; only closing the session failed
    if isinstance(exc, GatewayUnavailable) or not exchange.sent:
        return NotSent(str(exc) if isinstance(exc, GatewayUnavailable) else describe(exc))
    if isinstance(exc, TransportCancelled):
        return Interrupted(texts.TRANSPORT_CANCELLED)
    error = _mcp_error(exc)
    if error is not None and error.code not in _CLIENT_SIDE_CODES:
        return RpcError(error.code, error.message, error.data)
    return Interrupted(texts.no_answer(describe(exc)))


def _answer(result: types.CallToolResult) -> Answer:
    return Answer.from_wire(result.model_dump(mode="json", by_alias=True, exclude_none=True))


class GatewayToolSource:
    def __init__(
        self,
        url: str,
        token: str | Credential | None = None,
        connect_timeout: float = 30.0,
        call_timeout: float = 60.0,
        connect_attempts: int = 3,
        clock: Callable[[], float] = time.time,
        images: ImageLibrary | None = None,
        tasks: HostTasks | None = None,
        park_tasks: bool = False,
        protocol: Protocol = "auto",
    ) -> None:
        self.url = url
        self._connection = GatewayConnection(url, token, connect_timeout, call_timeout, connect_attempts, protocol)
        # The gateway's resources and prompts, for the model's mcp_* tools.
        self.resources = GatewayResources(self._connection)
        # Tools that need a task are called as one; their task ids are kept in `tasks` (agent_host/gateway_client/tasks.py).
        # `park_tasks` (`dex-agent serve`): a running task parks its turn (the service polls it).
        self.task_caller = TaskCaller(self._connection, tasks, park=park_tasks) if tasks is not None else None
        self._task_tools: set[str] = set()  # need a task (`execution.taskSupport: required`)
        self._clock = clock
        self._images = images  # keeps the inline images of a gateway without a media store

    async def list_tools(self, found: Sequence[GatewayTool] = ()) -> list[GatewayTool]:
        """Every page of the gateway's tools/list, then the `found` tools (the session's, from
        search_tools: docs/discovery.md) it did not list; GatewayUnavailable (GatewayRefused for a
        bad token) when the listing cannot be had."""

        async def list_all() -> list[GatewayTool]:
            return await self._list_all(found)

        try:
            return await outside_transport_cancels(list_all)
        except GatewayUnavailable:
            raise
        except TransportCancelled:
            raise GatewayUnavailable(f"the connection to the gateway at {self.url} broke while listing its tools") from None
        except Exception as exc:  # noqa: BLE001 - any failure of the listing is the gateway's, told in one line
            raise GatewayUnavailable(f"listing the tools of the gateway at {self.url} failed: {describe(exc)}") from None

    async def _list_all(self, found: Sequence[GatewayTool]) -> list[GatewayTool]:
        tools: list[GatewayTool] = []
        # Listed on 2025-11-25 whatever the era of calls: only that listing names the tools that
        # need a task (`execution`; a 2026-07-28 listing has none, the server decides per call).
        async with self._connection.session(era=HANDSHAKE) as client:
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor)
                tools.extend(_listed(tool) for tool in page.tools)
                cursor = page.next_cursor
                if not cursor:
                    listed = {t.name for t in tools}
                    tools += [t for t in found if t.name not in listed]
                    self._task_tools = {t.name for t in tools if t.task_support == "required"}
                    return tools

    async def call(
        self, request: CallRequest, on_attempt: OnAttempt | None = None, on_progress: OnProgress | None = None
    ) -> CallResult:
        """Call one tool by the re-issue rules (`reissue`); `on_attempt(n)` commits attempt n
        before its request leaves."""
        name, effect, prior = request.name, request.effect, request.prior
        # A tool that needs a task: called as a 2025-11-25 task (its id kept in the store, so a
        # restarted host or another `serve` resumes it, and `serve` parks the turn while it runs),
        # unless the operator pinned `--protocol 2026-07-28`: then called declaring the tasks
        # extension (modern_tasks.py: its questions reach the user through a stateless gateway too,
        # but a restart sends the call again under its key). A 2025-11-25 task of the key wins.
        if self.task_caller is not None and (await self.task_caller.known(request.key) or
                                             (name in self._task_tools and self._connection.protocol != MODERN)):
            return await self._call_as_task(request, on_attempt, on_progress)
        plan = plan_attempts(effect, prior, self._clock())
        if not plan.sends:
            return call_result(name, give_up(name, effect, prior), prior.count)
        notes: list[str] = []  # what the transcript should know of how the answer came (rounds.py)
        for attempt in range(plan.first, plan.last + 1):
            event = await self._attempt(request, attempt, on_attempt, on_progress, notes)
            if isinstance(event, NotSent) and attempt == 1:
                return CallResult(status=CallStatus.NOT_RUN, text=texts.not_run(event.reason), attempts=0)
            resolved = resolve(name, effect, attempt, plan, event)
            if not isinstance(resolved, SendAgain):
                sent = attempt - 1 if isinstance(event, NotSent) else attempt
                kept = resolved if self._images is None else await self._images.keep_inline(resolved)
                result = call_result(name, kept, sent)
                result.found = found_tools(name, kept)
                if notes:
                    result.text = "\n".join([*dict.fromkeys(notes), result.text])
                return result
            log.info("%s (key %s): attempt %d interrupted (%s); sending again", name, request.key, attempt, resolved.reason)
        raise AssertionError("resolve_attempt sends again only below the plan's last attempt")

    async def _call_as_task(
        self, request: CallRequest, on_attempt: OnAttempt | None, on_progress: OnProgress | None
    ) -> CallResult:
        """A tool that needs a task: one task per key (a restart resumes it, a retry finds it)."""
        assert self.task_caller is not None
        caller, attempt = self.task_caller, request.prior.count + 1

        async def sent() -> None:
            if on_attempt is not None:
                await on_attempt(attempt)

        async def run() -> AttemptEvent:
            return await caller.call(request.name, request.arguments, request.key, on_progress, sent, request.ask_form,
                                     request.on_task)

        try:
            event = await outside_transport_cancels(run)
        except TransportCancelled:
            event = Interrupted(texts.TRANSPORT_CANCELLED)
        if isinstance(event, NotSent) and attempt == 1:
            return CallResult(status=CallStatus.NOT_RUN, text=texts.not_run(event.reason), attempts=0)
        answer = resolve_attempt(request.name, request.effect, 1, event, max_attempts=1)
        assert isinstance(answer, Answer)
        kept = answer if self._images is None else await self._images.keep_inline(answer)
        return call_result(request.name, kept, attempt)

    async def _attempt(
        self, request: CallRequest, attempt: int, on_attempt: OnAttempt | None, on_progress: OnProgress | None,
        notes: list[str],
    ) -> AttemptEvent:
        exchange = _Exchange()
        # A tool that needs a task, on 2026-07-28: the call declares the tasks extension; a task
        # answer is polled to its end by the extension (its questions asked like any other). Not
        # declared for other calls: a client that takes tasks is answered differently (a
        # 2026-07-28 upstream's call becomes a provisional task, a handshake-era one is not parked).
        as_task = self._connection.era == MODERN and request.name in self._task_tools
        extensions = [TasksExtension(request.ask_form, on_progress)] if as_task else []

        async def run() -> AttemptEvent:
            async with self._connection.session(request.ask_form, extensions=extensions) as client:
                if on_attempt is not None:
                    await on_attempt(attempt)  # counted (committed) before the request leaves
                exchange.sent = True
                meta = cast(types.RequestParamsMeta, {IDEMPOTENCY_KEY: request.key})
                if client.protocol_version == MODERN and not as_task and request.ask_round is not None:
                    # On 2026-07-28 an `input_required` answer is not the end: each round's
                    # questions are kept with its requestState before they are asked, and the next
                    # round goes with the gateway's requestState and this same `_meta` (the same
                    # idempotency key); a restarted host sends the kept round (rounds.py).
                    exchange.result = await call_in_rounds(
                        client, request.name, request.arguments, meta, self._connection.call_timeout, on_progress,
                        request.ask_round, request.kept_round if attempt == request.prior.count + 1 else None, notes)
                else:
                    # The SDK client's own round driver: `ask_form` answers, rounds in memory.
                    exchange.result = await client.call_tool(
                        request.name,
                        request.arguments,
                        read_timeout_seconds=self._connection.call_timeout,
                        progress_callback=on_progress,
                        meta=meta,
                    )
            return Replied(_answer(exchange.result))

        try:
            return await outside_transport_cancels(run)
        except Exception as exc:  # noqa: BLE001 - every failure of one attempt is sorted into an attempt event
            return _event(exchange, exc)


def _listed(tool: types.Tool) -> GatewayTool:
    """A listed tool as any Dex client reads it (`listed_tool_classification`)."""
    annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else None
    classification = listed_tool_classification(tool.meta, annotations)
    return GatewayTool(
        name=tool.name,
        description=tool.description or "",
        input_schema=tool.input_schema or {"type": "object"},
        effect=classification.effect,
        requires_approval=classification.requires_approval,
        task_support=tool.execution.task_support if tool.execution is not None and tool.execution.task_support else "forbidden",
    )
