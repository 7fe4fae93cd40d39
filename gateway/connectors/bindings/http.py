"""The HTTP binding: one POST per attempt; knows whether any byte of the request left.

Every new connection is checked on the address it actually reached (the peer), before the
request is written: a link-local or metadata address the operator did not list is refused
there, whatever the name resolved to at registration (DNS rebinding). Redirects are never
followed and proxy environment variables are ignored (the peer must be the service itself).

The client gets short texts; addresses and exception details go to the log.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any, Protocol

import anyio
import httpcore
import httpx
from pydantic import ValidationError

from ...conventions.outcomes import Interrupted, NotSent
from ...telemetry.tracing import inject_headers
from .config import HttpBindingConfig
from .policy import BindingPolicy
from .protocol import ConnectorRequest, ConnectorResponse

log = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 16 * 1024 * 1024

UNREACHABLE = "the connector's service could not be reached"
REFUSED_ADDRESS = "the gateway's connector policy does not allow the address the connector's service resolved to"
BROKEN = "the connection to the connector's service broke before it answered"
FAILED = "the request to the connector's service failed"


class PeerGuard(Protocol):
    def peer_refusal(self, peer: str) -> str | None:
        """Why a connection to `peer` (an IP address) must not be used; None: it may."""
        ...


def binding_http_client(limits: httpx.Limits | None = None) -> httpx.AsyncClient:
    """The client HTTP bindings use: no proxies from the environment (the transport is given, so
    httpx mounts none; the peer must be the service itself, for the connect-time check), no
    redirects. `SSL_CERT_FILE` / `SSL_CERT_DIR` are still honoured for TLS verification."""
    transport = httpx.AsyncHTTPTransport(trust_env=True, limits=limits or httpx.Limits())
    return httpx.AsyncClient(transport=transport, trust_env=False, follow_redirects=False)


class HttpBinding:
    """POSTs to `<base_url>/<operation>`. `client` is shared (the registry's pool); without
    one each attempt opens its own. `guard` checks each new connection's peer address
    (default: the policy that grants nothing, which refuses link-local and metadata addresses)."""

    def __init__(
        self,
        config: HttpBindingConfig,
        *,
        client: httpx.AsyncClient | None = None,
        environ: Mapping[str, str] | None = None,
        guard: PeerGuard | None = None,
    ) -> None:
        self.config = config
        self._client = client
        self._environ = environ
        self._guard: PeerGuard = guard if guard is not None else BindingPolicy()

    async def attempt(self, request: ConnectorRequest, timeout: float) -> ConnectorResponse | NotSent | Interrupted:
        headers = {"content-type": "application/json", "accept": "application/json"}
        credential = self.config.credential
        if credential is not None:
            secret = (self._environ if self._environ is not None else os.environ).get(credential.env)
            if not secret:
                return NotSent(f"the credential environment variable {credential.env} is not set")
            value = f"{credential.scheme} {secret}" if credential.scheme else secret
            if not _header_safe(value):
                return NotSent(f"the credential environment variable {credential.env} does not hold a valid header value")
            headers[credential.header] = value
        inject_headers(headers)  # traceparent of this attempt's span, when traced
        sent = _SendWatch(self._guard)
        url = f"{self.config.base_url}/{request.operation}"
        body = json.dumps(request.wire(), separators=(",", ":")).encode("utf-8")
        http_timeout = httpx.Timeout(timeout, connect=min(timeout, self.config.connect_timeout))
        try:
            # httpx's timeouts are per read; the deadline bounds the whole attempt.
            with anyio.fail_after(timeout):
                response = await self._post(url, body, headers, http_timeout, sent)
        except TimeoutError:
            return sent.result(f"no answer within the {timeout:g} s executeMethodTimeout")
        except httpx.HTTPError as exc:
            return sent.result(self._explain(request, url, exc, sent))
        if not 200 <= response.status_code < 300:
            if 300 <= response.status_code < 400:
                log.warning("connector %s %s: %s answered a redirect (HTTP %s to %r), which is not followed",
                            request.connector, request.operation, url, response.status_code,
                            response.headers.get("location"))
            return Interrupted(f"the service answered HTTP {response.status_code}")
        try:
            return ConnectorResponse.model_validate_json(response.content)
        except ValidationError as exc:
            return Interrupted(f"unreadable answer: {exc.errors()[0]['msg']}")

    @staticmethod
    def _explain(request: ConnectorRequest, url: str, exc: httpx.HTTPError, sent: "_SendWatch") -> str:
        """The client's text for a failed request; the detail (address, exception) is logged."""
        if sent.refused is not None:
            log.warning("connector %s %s: refused the connection to %s: %s", request.connector, request.operation,
                        url, sent.refused)
            return REFUSED_ADDRESS
        log.warning("connector %s %s: POST %s failed: %s: %s", request.connector, request.operation, url,
                    type(exc).__name__, exc)
        if isinstance(exc, httpx.TimeoutException):
            return "the connector's service did not answer in time"
        if isinstance(exc, httpx.ConnectError) or not sent.started:
            return UNREACHABLE
        if isinstance(exc, httpx.TransportError):
            return BROKEN
        return FAILED

    async def _post(
        self, url: str, body: bytes, headers: dict[str, str], timeout: httpx.Timeout, sent: "_SendWatch"
    ) -> httpx.Response:
        extensions = {"trace": sent.trace}
        if self._client is not None:
            return await self._read(self._client, url, body, headers, timeout, extensions)
        async with binding_http_client() as client:
            return await self._read(client, url, body, headers, timeout, extensions)

    @staticmethod
    async def _read(
        client: httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str],
        timeout: httpx.Timeout, extensions: dict[str, Any],
    ) -> httpx.Response:
        request = client.build_request("POST", url, content=body, headers=headers, timeout=timeout, extensions=extensions)
        response = await client.send(request, stream=True, follow_redirects=False)
        try:
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise httpx.DecodingError(f"answer over {MAX_RESPONSE_BYTES} bytes")
                chunks.append(chunk)
        finally:
            await response.aclose()
        return httpx.Response(response.status_code, headers=response.headers, content=b"".join(chunks))


def _header_safe(value: str) -> bool:
    return value.isascii() and not any(c in value for c in "\r\n\0")


class _SendWatch:
    """httpcore's trace events: whether the request started to go out, and the peer check.

    Until the request headers start to be written nothing can have reached the service (a
    refused or timed-out connect, or a peer the guard refused), which is the only proof that
    lets a mutation's call be retried as new."""

    def __init__(self, guard: PeerGuard) -> None:
        self.started = False
        self.refused: str | None = None
        self._guard = guard

    async def trace(self, event_name: str, info: dict[str, Any]) -> None:
        if event_name == "connection.connect_tcp.complete":
            await self._check_peer(info.get("return_value"))
        elif event_name.endswith("send_request_headers.started"):
            self.started = True

    async def _check_peer(self, stream: Any) -> None:
        peer = stream.get_extra_info("server_addr") if stream is not None else None
        reason = self._guard.peer_refusal(str(peer[0])) if isinstance(peer, tuple) and peer else "no peer address"
        if reason is None:
            return
        self.refused = reason
        if stream is not None:
            await stream.aclose()
        # httpx turns this into httpx.ConnectError; nothing was written to the connection.
        raise httpcore.ConnectError(f"connection refused by the gateway's connector policy: {reason}")

    def result(self, reason: str) -> NotSent | Interrupted:
        return Interrupted(reason) if self.started else NotSent(reason)
