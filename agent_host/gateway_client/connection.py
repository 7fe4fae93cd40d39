"""A fresh MCP session with the gateway per exchange (Streamable HTTP, the SDK client).

Why not one long-lived client: a fresh `initialize` proves the gateway reachable before the
request leaves, which is how "never sent" (safe to call again) is told apart from "sent, then
interrupted"; it also rides over a gateway restart for free.

The session is entered with `async with`, so the SDK's own task group sees the exception in
flight and ends the way the SDK means it to; a stray cancellation is still possible and is
handled by `cancel_guard`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.session import ClientRequestContext, ElicitationFnT
from mcp.client.streamable_http import streamable_http_client

from gateway.internals import FormOnlyElicitationClient, off_the_request_clock

from ..domain.credentials import TOKEN_ENV, TOKEN_FILE_FLAG
from .credential import Credential, CredentialError, StaticToken, as_credential

_REFUSED = frozenset({401, 403})


# An upstream's form question during a request: (message, requested schema) -> (action, content),
# action `accept` (with the form's values), `decline` or `cancel`.
FormAsker = Callable[[str, dict[str, Any]], Awaitable[tuple[str, dict[str, Any] | None]]]


def elicitation_callback(ask: FormAsker) -> ElicitationFnT:
    """The SDK client's elicitation handler: a form goes to `ask`; a URL request (not offered to
    the user) is declined."""

    async def callback(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        if not isinstance(params, types.ElicitRequestFormParams):
            return types.ElicitResult(action="decline")
        with off_the_request_clock():  # the call's timeout measures the gateway, not the person
            action, content = await ask(params.message, dict(params.requested_schema))
        if action == "accept":
            return types.ElicitResult(action="accept", content=content)
        return types.ElicitResult(action="decline" if action == "decline" else "cancel")

    return callback


class GatewayUnavailable(Exception):
    """The gateway could not be reached (nothing was sent)."""


class GatewayRefused(GatewayUnavailable):
    """The gateway answered the handshake with 401/403: the agent's token is missing or wrong."""


def describe(exc: BaseException, limit: int = 200) -> str:
    """`Type: message` of the first real exception inside (nested) exception groups, one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    message = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Statuses:
    """The HTTP statuses of one session's responses (to tell a refused token from a failure)."""

    def __init__(self) -> None:
        self.refused: int | None = None

    async def record(self, response: httpx2.Response) -> None:
        if response.status_code in _REFUSED and self.refused is None:
            self.refused = response.status_code


class GatewayConnection:
    def __init__(
        self,
        url: str,
        token: str | Credential | None,
        connect_timeout: float = 30.0,
        call_timeout: float = 60.0,
        connect_attempts: int = 3,
    ) -> None:
        self.url = url
        self.credential = as_credential(token)
        self.call_timeout = call_timeout
        self._connect_timeout = connect_timeout
        self._connect_attempts = connect_attempts

    def _refused(self, status: int, exc: BaseException) -> GatewayRefused:
        credential = self.credential
        static = isinstance(credential, StaticToken)
        how = "without a token" if isinstance(credential, StaticToken) and not credential.token else f"with {credential.described}"
        detail = describe(exc).removeprefix("MCPError: ")
        fix = (f"set ${TOKEN_ENV} or {TOKEN_FILE_FLAG} to a token the gateway accepts" if static else
               "check that the issuer is one the gateway trusts and that the token's scope is enough")
        return GatewayRefused(f"the gateway at {self.url} refused the connection {how} (HTTP {status}: {detail}); {fix}")

    @asynccontextmanager
    async def session(self, ask_form: FormAsker | None = None) -> AsyncIterator[Client]:
        """An initialized MCP session; GatewayUnavailable when no attempt could connect. With
        `ask_form`, the session declares elicitation and the gateway's (an upstream's) form
        questions during its requests go to it."""
        try:
            token = await self.credential.bearer()
        except CredentialError as exc:
            raise GatewayRefused(f"no token for the gateway at {self.url}: {exc}") from None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        timeout = httpx2.Timeout(self._connect_timeout, read=self.call_timeout + 5)
        last: BaseException | None = None
        for _ in range(self._connect_attempts):
            statuses = _Statuses()
            async with AsyncExitStack() as stack:
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(headers=headers, timeout=timeout, event_hooks={"response": [statuses.record]})
                )
                client = FormOnlyElicitationClient(
                    streamable_http_client(self.url, http_client=http),
                    mode="legacy",
                    cache=None,
                    read_timeout_seconds=self.call_timeout,
                    elicitation_callback=elicitation_callback(ask_form) if ask_form is not None else None,
                )
                try:
                    await stack.enter_async_context(client)
                except Exception as exc:  # noqa: BLE001 - any failure before the handshake ends means nothing was sent
                    if statuses.refused is not None:
                        raise self._refused(statuses.refused, exc) from None
                    last = exc
                    continue
                yield client
                return
        reason = describe(last) if last is not None else "no attempt"
        raise GatewayUnavailable(f"cannot reach the gateway at {self.url}: {reason}")
