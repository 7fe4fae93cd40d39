"""The host API's guards, applied once as Starlette middleware around every route.

* `LocalOriginGuard` (the whole app): the `Host` header must name this host's own address
  (127.0.0.1, localhost or [::1] with the bound port, the bound address, or an
  `--api-allowed-host`), else 421: a DNS-rebinding page reaching the loopback port under its own
  name is refused. A request with an `Origin` that is not one of those addresses is refused with
  403 (a browser on another site); requests without `Origin` (CLI clients, and the page's own
  same-origin GETs) pass.
* `BearerGuard` (the data routes' Mount): the approver token is checked from the headers before
  any byte of the body is read; a refusal closes the connection, so an unread body is never
  taken in (closed in stages by the server's protocol, `gateway/http/lingering.py`: what is
  still arriving is dropped unparsed, so the client reads the refusal, not a reset).
* `BodyCap` (the same Mount, after the token): a body announced or streamed beyond
  `--api-max-body-bytes` (default 1 MiB) is refused with 413 and a JSON error while it arrives,
  never read whole first. (Starlette's own body limit answers an announced excess in plain text,
  whatever the route would have said; this API answers JSON everywhere.)
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .safe_json import SafeJSONResponse
from ..domain.safe_text import terminal_text

MAX_BODY_BYTES = 1024 * 1024
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
ALLOWED_HOST_FLAG = "--api-allowed-host"
MAX_BODY_FLAG = "--api-max-body-bytes"
_HOST = re.compile(r"^(?:[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?$")
CLOSE = {"Connection": "close"}  # a refused request's unread body is never taken in

Refuse = Callable[[Request], Response | None]


class ApiGuardSettings(BaseModel):
    """What the host API accepts beyond its loopback names, and how large a body may be."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_body_bytes: int = Field(default=MAX_BODY_BYTES, ge=1024)
    allowed_hosts: tuple[str, ...] = ()

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, hosts: tuple[str, ...]) -> tuple[str, ...]:
        for host in hosts:
            if not _HOST.match(host.lower()):
                raise ValueError(f"{host!r} is not NAME or NAME:PORT (no scheme, path or spaces)")
        return tuple(h.lower() for h in hosts)


def add_api_guard_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(ALLOWED_HOST_FLAG, action="append", default=[], metavar="NAME[:PORT]", dest="api_allowed_hosts",
                        help="a further Host the host API answers to (e.g. behind a proxy; repeatable); "
                             "a NAME without a port also matches NAME:<the API's port>")
    parser.add_argument(MAX_BODY_FLAG, type=int, default=MAX_BODY_BYTES, metavar="BYTES", dest="api_max_body_bytes",
                        help=f"the largest request body the host API takes (default {MAX_BODY_BYTES})")


def api_guard_settings(args: argparse.Namespace) -> ApiGuardSettings:
    """The settings from the command line; ValueError naming the flag when one is wrong."""
    try:
        return ApiGuardSettings(max_body_bytes=args.api_max_body_bytes, allowed_hosts=tuple(args.api_allowed_hosts))
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        flag = MAX_BODY_FLAG if error["loc"][0] == "max_body_bytes" else ALLOWED_HOST_FLAG
        raise ValueError(f"{flag}: {error['msg'].removeprefix('Value error, ')}") from None


def own_hosts(scope: Scope, allowed: Sequence[str]) -> frozenset[str]:
    """The `Host` values (and origins' host:port) that name this server."""
    server = scope.get("server")
    address, port = (server[0], server[1]) if server else (None, None)
    names = list(LOOPBACK_NAMES)
    if address:
        names.append(f"[{address}]" if ":" in address else address)
    with_port = {h for h in allowed if ":" in h.rsplit("]", 1)[-1]}
    configured = [h for h in allowed if h not in with_port]  # as given, and on the API's port
    hosts = {*with_port, *configured}
    if port is not None:
        hosts.update(f"{name}:{port}".lower() for name in [*names, *configured])
    if port in (None, 80):
        hosts.update(name.lower() for name in names)
    return frozenset(hosts)


def _origin_host(origin: str) -> str | None:
    parts = urlsplit(origin.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or "@" in parts.netloc:
        return None
    return parts.netloc.lower()


class LocalOriginGuard:
    """421 for a `Host` that is not this host's; 403 for an `Origin` from elsewhere."""

    def __init__(self, app: ASGIApp, allowed_hosts: Sequence[str] = ()) -> None:
        self.app = app
        self.allowed_hosts = tuple(allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        hosts = own_hosts(scope, self.allowed_hosts)
        host = headers.get("host", "").strip().lower()
        refusal: Response | None = None
        if host not in hosts:
            shown = ", ".join(sorted(hosts))
            refusal = SafeJSONResponse({
                "error": f"Host {terminal_text(host, 100)!r} is not this host's address ({shown}); "
                         f"a name in front of it must be given with {ALLOWED_HOST_FLAG}",
            }, status_code=421, headers=CLOSE)
        elif (origin := headers.get("origin")) is not None and _origin_host(origin) not in hosts:
            refusal = SafeJSONResponse({
                "error": f"cross-origin request refused: Origin {terminal_text(origin, 100)!r} is not this host's own",
            }, status_code=403, headers=CLOSE)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)


class BearerGuard:
    """The token is checked from the headers alone, before the route reads any of the body."""

    def __init__(self, app: ASGIApp, refuse: Refuse) -> None:
        self.app = app
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (refusal := self.refuse(Request(scope))) is not None:
            refusal.headers.update(CLOSE)
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)


class _BodyTooLarge(Exception):
    """Raised from `receive` once a body passes the cap; `BodyCap` answers 413."""


class BodyCap:
    """413 for a body announced beyond `max_bytes` (before reading any of it), or counted beyond
    it while it streams in (a length-less, chunked body): at most the cap is ever held."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        announced = Headers(scope=scope).get("content-length", "")
        if announced.isdigit() and int(announced) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        received = 0
        started = False

        async def capped_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _BodyTooLarge
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, capped_receive, watched_send)
        except _BodyTooLarge:
            if started:
                raise
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = SafeJSONResponse({
            "error": f"request body too large: the host API takes at most {self.max_bytes} bytes (set with {MAX_BODY_FLAG})",
        }, status_code=413, headers=CLOSE)
        await response(scope, receive, send)


def guarded_app(data_routes: Sequence[BaseRoute], open_routes: Sequence[BaseRoute], refuse: Refuse,
                settings: ApiGuardSettings) -> Starlette:
    """The app: every request checked by `LocalOriginGuard`; the data routes (one Mount) behind
    the token, then the body cap; the open routes (the page's files, which hold no data) first."""
    data = Mount("", routes=list(data_routes), middleware=[
        Middleware(BearerGuard, refuse=refuse), Middleware(BodyCap, max_bytes=settings.max_body_bytes),
    ])
    return Starlette(routes=[*open_routes, data],
                     middleware=[Middleware(LocalOriginGuard, allowed_hosts=settings.allowed_hosts)])
