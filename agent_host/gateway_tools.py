"""The gateway as the host's only tool source: an MCP client over Streamable HTTP.

Every call carries its idempotency key in request `_meta`; interrupted calls are sent again
by effect (read / idempotent_write up to 3 attempts with the same key; others never, and an
interrupted one is outcome unknown). The fence in the gateway makes a re-send after a host
restart safe: it replays the first answer or says the outcome is unknown.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, Field

from gateway.conventions.keys import APPROVAL_KEY, EFFECT_KEY, IDEMPOTENCY_KEY, OUTCOME_KEY, REPLAYED_KEY, Effect, Outcome

from . import texts
from .store import CallStatus

log = logging.getLogger(__name__)

TOKEN_ENV = "DEX_AGENT_TOKEN"
MAX_ATTEMPTS = 3
INTERNAL_ERROR = -32603
# Codes the SDK client itself raises when the exchange broke after the request left.
_INTERRUPTED_CODES = frozenset({INTERNAL_ERROR, types.REQUEST_TIMEOUT, types.CONNECTION_CLOSED})


class GatewayTool(BaseModel):
    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    effect: Effect
    requires_approval: bool


class CallResult(BaseModel):
    status: CallStatus
    text: str
    replayed: bool = False
    attempts: int = 0


class GatewayUnavailable(Exception):
    """The gateway could not be reached (nothing was sent)."""


class _Interrupted(Exception):
    """The request may have reached the gateway, and no usable answer came back."""


def effect_of(meta: dict[str, Any] | None) -> Effect:
    value = (meta or {}).get(EFFECT_KEY)
    try:
        effect = Effect(value) if isinstance(value, str) else Effect.UNCLASSIFIED
    except ValueError:
        effect = Effect.UNCLASSIFIED
    # The gateway never publishes "unclassified" as a value; treat it like an unknown one.
    return effect


def requires_approval_of(meta: dict[str, Any] | None, effect: Effect) -> bool:
    meta = meta or {}
    # Any value of the approval key asks (unknown values fail closed); without the key only
    # an unclassified tool asks, which is what the gateway itself publishes for one.
    return APPROVAL_KEY in meta or effect is Effect.UNCLASSIFIED


def attempts_for(effect: Effect) -> int:
    return MAX_ATTEMPTS if effect.resendable else 1


def result_text(result: types.CallToolResult) -> str:
    """Text blocks joined with newlines; other content (image references...) as JSON."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        else:
            parts.append(texts.as_json(block.model_dump(mode="json", by_alias=True, exclude_none=True)))
    if not parts and result.structured_content is not None:
        parts.append(texts.as_json(result.structured_content))
    return "\n".join(parts)


def _outcome(meta: dict[str, Any] | None) -> Outcome | None:
    value = (meta or {}).get(OUTCOME_KEY)
    try:
        return Outcome(value) if value is not None else None
    except ValueError:
        log.warning("ignoring reserved outcome value %r", value)
        return None


def classify_result(result: types.CallToolResult) -> CallResult:
    meta = result.meta or {}
    text = result_text(result)
    replayed = meta.get(REPLAYED_KEY) is True
    # The outcome key wins over isError.
    outcome = _outcome(meta)
    if outcome is Outcome.UNKNOWN:
        return CallResult(status=CallStatus.OUTCOME_UNKNOWN, text=texts.outcome_unknown(text), replayed=replayed)
    if outcome is Outcome.REJECTED:
        return CallResult(status=CallStatus.REJECTED, text=texts.rejected(text), replayed=replayed)
    if result.is_error:
        return CallResult(status=CallStatus.FAILED, text=texts.failed(text), replayed=replayed)
    return CallResult(status=CallStatus.SUCCEEDED, text=text, replayed=replayed)


def classify_error(error: MCPError) -> CallResult:
    """A JSON-RPC error answer; raises _Interrupted for the ones a gateway gives after a send."""
    data = error.data if isinstance(error.data, dict) else {}
    meta = data.get("_meta") if isinstance(data.get("_meta"), dict) else None
    message = f"MCP error {error.code}: {error.message}"
    outcome = _outcome(meta)
    if outcome is Outcome.UNKNOWN:
        return CallResult(status=CallStatus.OUTCOME_UNKNOWN, text=texts.outcome_unknown(message))
    if outcome is Outcome.REJECTED:
        return CallResult(status=CallStatus.REJECTED, text=texts.rejected(message))
    if error.code in _INTERRUPTED_CODES:
        raise _Interrupted(message)
    return CallResult(status=CallStatus.FAILED, text=texts.failed(message))


def _leaf(exc: BaseException) -> BaseException:
    """The first real exception inside (nested) exception groups, for a readable reason."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _find_mcp_error(exc: BaseException) -> MCPError | None:
    if isinstance(exc, MCPError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find_mcp_error(inner)
            if found is not None:
                return found
    return None


class GatewayToolSource:
    def __init__(
        self,
        url: str,
        token: str | None = None,
        connect_timeout: float = 30.0,
        call_timeout: float = 60.0,
        connect_attempts: int = 3,
    ) -> None:
        self.url = url
        self.token = token if token is not None else os.environ.get(TOKEN_ENV)
        self._connect_timeout = connect_timeout
        self._call_timeout = call_timeout
        self._connect_attempts = connect_attempts

    @asynccontextmanager
    async def _session(self) -> AsyncIterator[Client]:
        """A fresh MCP session per exchange.

        Why not one long-lived client: a fresh `initialize` proves the gateway reachable
        before the request leaves, which is how "never sent" (safe to call again) is told
        apart from "sent, then interrupted"; it also survives a gateway restart for free.
        """
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        timeout = httpx2.Timeout(self._connect_timeout, read=self._call_timeout + 5)
        last: BaseException | None = None
        for _ in range(self._connect_attempts):
            http = httpx2.AsyncClient(headers=headers, timeout=timeout)
            client = Client(
                streamable_http_client(self.url, http_client=http),
                mode="legacy",
                cache=None,
                read_timeout_seconds=self._call_timeout,
            )
            try:
                await client.__aenter__()
            except Exception as exc:  # noqa: BLE001 - any failure here means nothing was sent
                last = exc
                await http.aclose()
                continue
            try:
                yield client
            finally:
                try:
                    await client.__aexit__(None, None, None)
                except Exception:  # noqa: BLE001 - closing a finished exchange cannot change its answer
                    log.debug("closing the MCP session failed", exc_info=True)
                await http.aclose()
            return
        reason = type(_leaf(last)).__name__ if last is not None else "no attempt"
        raise GatewayUnavailable(f"cannot reach the gateway at {self.url}: {reason}")

    async def list_tools(self) -> list[GatewayTool]:
        """Every page of the gateway's tools/list, with effect and approval from `_meta`."""
        tools: list[GatewayTool] = []
        async with self._session() as client:
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor)
                for tool in page.tools:
                    effect = effect_of(tool.meta)
                    tools.append(
                        GatewayTool(
                            name=tool.name,
                            description=tool.description or "",
                            input_schema=tool.input_schema or {"type": "object"},
                            effect=effect,
                            requires_approval=requires_approval_of(tool.meta, effect),
                        )
                    )
                cursor = page.next_cursor
                if not cursor:
                    return tools

    async def _call_once(self, name: str, arguments: dict[str, Any], key: str) -> CallResult:
        result: types.CallToolResult | None = None
        try:
            async with self._session() as client:
                result = await client.call_tool(
                    name, arguments, read_timeout_seconds=self._call_timeout, meta={IDEMPOTENCY_KEY: key}
                )
        except GatewayUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - sorted below into an answer or an interruption
            if result is None:
                error = _find_mcp_error(exc)
                if error is None:
                    raise _Interrupted(type(_leaf(exc)).__name__) from exc
                return classify_error(error)
        assert result is not None
        return classify_result(result)

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        key: str,
        effect: Effect,
        attempts_done: int = 0,
        on_attempt: Callable[[int], None] | None = None,
    ) -> CallResult:
        """Call one tool, retrying by effect. `attempts_done` > 0 means a request may have
        left before (a resumed call): it is sent once more with the same key, whatever the
        effect, so the gateway's fence answers instead of a guess.
        """
        limit = max(attempts_for(effect), attempts_done + 1)
        reason = ""
        for attempt in range(attempts_done + 1, limit + 1):
            if on_attempt is not None:
                on_attempt(attempt)  # recorded before the request leaves
            try:
                answer = await self._call_once(name, arguments, key)
                return answer.model_copy(update={"attempts": attempt})
            except GatewayUnavailable as exc:
                if attempt == 1:
                    return CallResult(status=CallStatus.NOT_RUN, text=texts.not_run(str(exc)), attempts=attempt)
                reason = str(exc)  # an earlier attempt may have been sent: not provably unsent
            except _Interrupted as exc:
                reason = str(exc) or "interrupted"
            if not effect.resendable:
                break
        if effect is Effect.READ:
            return CallResult(status=CallStatus.FAILED, text=texts.failed(f"interrupted: {reason}"), attempts=limit)
        return CallResult(status=CallStatus.OUTCOME_UNKNOWN, text=texts.outcome_unknown(), attempts=limit)
