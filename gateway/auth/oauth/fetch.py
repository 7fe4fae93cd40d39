"""One JSON document from an authorization server: a GET (metadata, JWKS) or a form POST
(introspection), with a timeout and a size cap, never following redirects."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

__all__ = ["FetchFailed", "fetch_json"]

MAX_DOCUMENT_BYTES = 1024 * 1024


class FetchFailed(Exception):
    """The document could not be had; the message says why (never holds a credential)."""


async def fetch_json(
    url: str, *, timeout: float, form: Mapping[str, str] | None = None, auth: tuple[str, str] | None = None
) -> dict[str, Any]:
    """The JSON object at `url` (POSTing `form` when given)."""
    try:
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=False,
                                     auth=httpx.BasicAuth(*auth) if auth else None) as http:
            request = http.build_request(
                "POST" if form is not None else "GET", url, data=dict(form) if form is not None else None,
                headers={"accept": "application/json"},
            )
            response = await http.send(request, stream=True)
            try:
                if response.status_code != 200:
                    raise FetchFailed(f"{url} answered HTTP {response.status_code}")
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_DOCUMENT_BYTES:
                        raise FetchFailed(f"{url} answered more than {MAX_DOCUMENT_BYTES} bytes")
            finally:
                await response.aclose()
    except httpx.HTTPError as exc:
        raise FetchFailed(f"{url}: {type(exc).__name__}: {exc}") from None
    try:
        document = json.loads(bytes(body))
    except ValueError:
        raise FetchFailed(f"{url} answered something that is not JSON") from None
    if not isinstance(document, dict):
        raise FetchFailed(f"{url} answered JSON that is not an object")
    return document
