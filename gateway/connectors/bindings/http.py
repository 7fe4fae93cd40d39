"""The HTTP binding: one POST per attempt; knows whether any byte of the request left."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import anyio
import httpx
from pydantic import ValidationError

from ...conventions.outcomes import Interrupted, NotSent
from .config import HttpBindingConfig
from .protocol import ConnectorRequest, ConnectorResponse

MAX_RESPONSE_BYTES = 16 * 1024 * 1024


class HttpBinding:
    """POSTs to `<base_url>/<operation>`. `client` is shared (the registry's pool); without
    one each attempt opens its own."""

    def __init__(
        self,
        config: HttpBindingConfig,
        *,
        client: httpx.AsyncClient | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self._client = client
        self._environ = environ

    async def attempt(self, request: ConnectorRequest, timeout: float) -> ConnectorResponse | NotSent | Interrupted:
        headers = {"content-type": "application/json", "accept": "application/json"}
        credential = self.config.credential
        if credential is not None:
            secret = (self._environ if self._environ is not None else os.environ).get(credential.env)
            if not secret:
                return NotSent(f"the credential environment variable {credential.env} is not set")
            headers[credential.header] = f"{credential.scheme} {secret}" if credential.scheme else secret
        sent = _SendWatch()
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
            return sent.result(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        if not 200 <= response.status_code < 300:
            return Interrupted(f"the service answered HTTP {response.status_code}")
        try:
            return ConnectorResponse.model_validate_json(response.content)
        except ValidationError as exc:
            return Interrupted(f"unreadable answer: {exc.errors()[0]['msg']}")

    async def _post(
        self, url: str, body: bytes, headers: dict[str, str], timeout: httpx.Timeout, sent: "_SendWatch"
    ) -> httpx.Response:
        extensions = {"trace": sent.trace}
        if self._client is not None:
            return await self._read(self._client, url, body, headers, timeout, extensions)
        async with httpx.AsyncClient() as client:
            return await self._read(client, url, body, headers, timeout, extensions)

    @staticmethod
    async def _read(
        client: httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str],
        timeout: httpx.Timeout, extensions: dict[str, Any],
    ) -> httpx.Response:
        request = client.build_request("POST", url, content=body, headers=headers, timeout=timeout, extensions=extensions)
        response = await client.send(request, stream=True)
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


class _SendWatch:
    """httpcore's trace events tell whether the request started to go out. Until the request
    headers start to be written nothing can have reached the service (a refused or timed-out
    connect), which is the only proof that lets a mutation's call be retried as new."""

    def __init__(self) -> None:
        self.started = False

    async def trace(self, event_name: str, info: dict[str, Any]) -> None:
        if event_name.endswith("send_request_headers.started"):
            self.started = True

    def result(self, reason: str) -> NotSent | Interrupted:
        return Interrupted(reason) if self.started else NotSent(reason)
