"""A fresh MCP session with the gateway per exchange (Streamable HTTP, the SDK client).

Why not one long-lived client: a fresh `initialize` (or, on 2026-07-28, a fresh `server/discover`)
proves the gateway reachable before the request leaves, which is how "never sent" (safe to call
again) is told apart from "sent, then interrupted"; it also rides over a gateway restart for free.

The protocol era (`--protocol`, docs/agent-host.md "Protocol era"):

* `2025-11-25`: the `initialize` handshake; an upstream's question reaches the host as
  `elicitation/create` on the session (a stateful gateway only);
* `2026-07-28`: no session; an upstream's question comes back as an `input_required` result, and
  the host sends the same request again with the answer and the gateway's `requestState` (the
  same `_meta`, so the same idempotency key; rounds.py keeps each round across a restart); a
  gateway that does not offer 2026-07-28 is refused with a clear error;
* `auto` (the default): the handshake first; a gateway that opens no session (a stateless one,
  where the handshake era can be asked nothing) is spoken to on 2026-07-28 from then on, before
  the exchange's request leaves. A stateful gateway keeps the handshake era.

The session is entered with `async with`, so the SDK's own task group sees the exception in
flight and ends the way the SDK means it to; a stray cancellation is still possible and is
handled by `cancel_guard`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Literal, get_args

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.extension import ClientExtension
from mcp.client.session import ClientRequestContext, ElicitationFnT
from mcp.client.streamable_http import streamable_http_client

from gateway.internals import FormOnlyElicitationClient, off_the_request_clock

from ..domain.credentials import TOKEN_ENV, TOKEN_FILE_FLAG
from .credential import Credential, CredentialError, StaticToken, as_credential

log = logging.getLogger(__name__)

_REFUSED = frozenset({401, 403})
_SESSION_HEADER = "mcp-session-id"

Protocol = Literal["auto", "2026-07-28", "2025-11-25"]
PROTOCOLS: tuple[str, ...] = get_args(Protocol)
MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"


# An upstream's form question during a request: (message, requested schema) -> (action, content),
# action `accept` (with the form's values), `decline` or `cancel`.
FormAsker = Callable[[str, dict[str, Any]], Awaitable[tuple[str, dict[str, Any] | None]]]


async def answer_form(ask: FormAsker, params: types.ElicitRequestParams) -> types.ElicitResult:
    """An upstream's elicitation, answered by the user through `ask`: a form goes to `ask`; a URL
    request (not offered to the user) is declined."""
    if not isinstance(params, types.ElicitRequestFormParams):
        return types.ElicitResult(action="decline")
    with off_the_request_clock():  # the call's timeout measures the gateway, not the person
        action, content = await ask(params.message, dict(params.requested_schema))
    if action == "accept":
        return types.ElicitResult(action="accept", content=content)
    return types.ElicitResult(action="decline" if action == "decline" else "cancel")


_ELICIT = "elicitation/create"


async def answer_input_request(ask: FormAsker | None, request: Any) -> dict[str, Any]:
    """One embedded input request's response (a task's, or an `input_required` round's): an
    elicitation asked of the user through `ask`; anything else (the host declares only
    elicitation), or no `ask`, declined."""
    if ask is None or not isinstance(request, dict) or request.get("method") != _ELICIT:
        return {"action": "decline"}
    try:
        params = types.ElicitRequest.model_validate(request).params
    except ValueError as exc:
        log.warning("an elicitation that is not valid was asked (%s): declined", describe(exc))
        return {"action": "decline"}
    result = await answer_form(ask, params)
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def elicitation_callback(ask: FormAsker) -> ElicitationFnT:
    """The SDK client's elicitation handler (an `elicitation/create` on 2025-11-25, an elicitation
    in an `input_required` round on 2026-07-28): `answer_form`."""

    async def callback(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        return await answer_form(ask, params)

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
    """The HTTP statuses of one session's responses (to tell a refused token from a failure), and
    whether the gateway opened a session (`Mcp-Session-Id`)."""

    def __init__(self) -> None:
        self.refused: int | None = None
        self.session = False

    async def record(self, response: httpx2.Response) -> None:
        if response.status_code in _REFUSED and self.refused is None:
            self.refused = response.status_code
        if _SESSION_HEADER in response.headers:
            self.session = True


class GatewayConnection:
    def __init__(
        self,
        url: str,
        token: str | Credential | None,
        connect_timeout: float = 30.0,
        call_timeout: float = 60.0,
        connect_attempts: int = 3,
        protocol: Protocol = "auto",
    ) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol {protocol!r}: must be one of {', '.join(PROTOCOLS)}")
        self.url = url
        self.credential = as_credential(token)
        self.call_timeout = call_timeout
        self.protocol: Protocol = protocol
        self._connect_timeout = connect_timeout
        self._connect_attempts = connect_attempts
        # What `auto` learnt: the era this gateway is spoken to on (None until the first session).
        self._learnt: str | None = None

    @property
    def era(self) -> str | None:
        """The era sessions open on: the chosen one, or what `auto` learnt (None: not yet known)."""
        return self._learnt if self.protocol == "auto" else self.protocol

    def _refused(self, status: int, exc: BaseException) -> GatewayRefused:
        credential = self.credential
        static = isinstance(credential, StaticToken)
        how = "without a token" if isinstance(credential, StaticToken) and not credential.token else f"with {credential.described}"
        detail = describe(exc).removeprefix("MCPError: ")
        fix = (f"set ${TOKEN_ENV} or {TOKEN_FILE_FLAG} to a token the gateway accepts" if static else
               "check that the issuer is one the gateway trusts and that the token's scope is enough")
        return GatewayRefused(f"the gateway at {self.url} refused the connection {how} (HTTP {status}: {detail}); {fix}")

    @asynccontextmanager
    async def session(self, ask_form: FormAsker | None = None, era: str | None = None,
                      extensions: Sequence[ClientExtension] = ()) -> AsyncIterator[Client]:
        """An MCP session (initialized, or discovered on 2026-07-28); GatewayUnavailable when no
        attempt could connect. With `ask_form`, the session declares elicitation (form mode) and
        the gateway's (an upstream's) form questions during its requests go to it, in either era.
        `era` pins this session's era (`2025-11-25` for the host's 2025-11-25 tasks); `extensions`
        are the SDK client extensions it declares (on 2026-07-28: the tasks extension of a call)."""
        try:
            token = await self.credential.bearer()
        except CredentialError as exc:
            raise GatewayRefused(f"no token for the gateway at {self.url}: {exc}") from None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        timeout = httpx2.Timeout(self._connect_timeout, read=self.call_timeout + 5)
        callback = elicitation_callback(ask_form) if ask_form is not None else None
        last: BaseException | None = None
        attempts = 0
        while attempts < self._connect_attempts:
            attempts += 1
            wanted = era or self.era or HANDSHAKE  # `auto` starts with the handshake
            statuses = _Statuses()
            async with AsyncExitStack() as stack:
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(headers=headers, timeout=timeout, event_hooks={"response": [statuses.record]})
                )
                client = FormOnlyElicitationClient(
                    streamable_http_client(self.url, http_client=http),
                    # 2026-07-28 through `auto`: `server/discover` first, so the gateway is known to
                    # answer before the request leaves (a pinned version would send nothing first).
                    mode="auto" if wanted == MODERN else "legacy",
                    cache=None,
                    read_timeout_seconds=self.call_timeout,
                    elicitation_callback=callback,
                    extensions=list(extensions),
                )
                try:
                    await stack.enter_async_context(client)
                except Exception as exc:  # noqa: BLE001 - any failure before the handshake ends means nothing was sent
                    if statuses.refused is not None:
                        raise self._refused(statuses.refused, exc) from None
                    last = exc
                    continue
                offered = client.protocol_version
                if wanted != MODERN or offered == MODERN:
                    if self.protocol == "auto" and self._learnt is None and wanted == HANDSHAKE:
                        self._learnt = HANDSHAKE if statuses.session else MODERN
                        if era is None and self._learnt == MODERN:  # a stateless gateway: this exchange moves too
                            attempts -= 1
                            continue
                    yield client
                    return
            # Raised once the session is closed (not from inside it, where it would come in a group).
            raise GatewayUnavailable(f"the gateway at {self.url} does not offer protocol 2026-07-28 (it answered "
                                     f"{offered}); use --protocol auto or 2025-11-25")
        reason = describe(last) if last is not None else "no attempt"
        raise GatewayUnavailable(f"cannot reach the gateway at {self.url}: {reason}")
