"""Stored images back to the principals they reached: `GET /media/sha256/<hash>` and
`resources/read` of `dex-gateway://media/sha256/<hash>`.

Both ask `MediaReader`, which answers only for a hash granted to the caller's principal
(grants.py); a hash it never received is answered exactly like a missing one (404, or the
resource-not-found error), so a principal cannot probe for other principals' images. The GET
route sits behind the same Host/Origin guard and bearer auth as `/mcp` (gateway/server/app.py), and
answers with headers that keep a browser from doing anything but save the bytes:
`X-Content-Type-Options: nosniff`, `Content-Security-Policy: default-src 'none'; sandbox`,
`Content-Disposition: attachment`, `Cross-Origin-Resource-Policy: same-origin`, and the type
found in the bytes as `Content-Type`.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from dataclasses import dataclass

from mcp_types import INTERNAL_ERROR, INVALID_PARAMS
from starlette.types import Receive, Scope, Send

from ..protocol import Result
from ..errors import InvalidImage, MediaStoreError, RequestError
from ..auth.principals import ANONYMOUS, PRINCIPAL_SCOPE_KEY
from .formats import EXTENSIONS, image_type
from .grants import GrantStore
from .references import sha256_of_path, sha256_of_uri
from .stores import MediaStore

__all__ = ["MediaEndpoint", "MediaReader", "ServedImage"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServedImage:
    data: bytes
    mime_type: str
    sha256: str


class MediaReader:
    """Reads for a principal: a granted, present and intact image, or None."""

    def __init__(self, store: MediaStore | None, grants: GrantStore | None) -> None:
        self._store = store
        self._grants = grants

    async def read(self, principal: str, sha256: str) -> ServedImage | None:
        """None when the principal never received it or it is missing; MediaStoreError when
        the store fails or holds something else under the name."""
        if self._store is None or self._grants is None or not await self._grants.granted(principal, sha256):
            return None
        data = await self._store.get(sha256)
        if data is None:
            return None
        try:
            return ServedImage(data, image_type(data), sha256)
        except InvalidImage as exc:
            raise MediaStoreError(f"media store: {self._store.object_uri(sha256)} is not an image any more: {exc}") from None

    @staticmethod
    def serves(uri: str) -> bool:
        """Whether `uri` is a gateway media uri (answered here, never by an upstream)."""
        return sha256_of_uri(uri) is not None

    async def read_resource(self, principal: str, uri: str) -> Result:
        """The `resources/read` result of a media uri: one blob; RequestError when not readable."""
        sha256 = sha256_of_uri(uri)
        try:
            image = await self.read(principal, sha256) if sha256 is not None else None
        except MediaStoreError as exc:
            logger.error("resources/read %s: %s", uri, exc)
            raise RequestError(INTERNAL_ERROR, "the stored image cannot be read; see the gateway log") from None
        if image is None:
            raise RequestError(INVALID_PARAMS, f"resource not found: {uri}")
        blob = base64.b64encode(image.data).decode("ascii")
        return {"contents": [{"uri": uri, "mimeType": image.mime_type, "blob": blob}]}


class MediaEndpoint:
    """The ASGI app of `/media/…` (behind the Host/Origin guard and bearer auth)."""

    def __init__(self, reader_of: Callable[[], MediaReader | None]) -> None:
        """`reader_of`: the running gateway's reader, None while it starts."""
        self._reader_of = reader_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope.get("method", "GET")
        if method not in ("GET", "HEAD"):
            await _plain(send, 405, "only GET and HEAD are served here", [(b"allow", b"GET, HEAD")])
            return
        reader = self._reader_of()
        if reader is None:
            await _plain(send, 503, "the gateway is starting")
            return
        sha256 = sha256_of_path(scope["path"])
        principal = str(scope.get(PRINCIPAL_SCOPE_KEY, ANONYMOUS))
        try:
            image = await reader.read(principal, sha256) if sha256 is not None else None
        except MediaStoreError as exc:
            logger.error("GET %s: %s", scope["path"], exc)
            await _plain(send, 500, "the stored image cannot be read; see the gateway log")
            return
        if image is None:
            await _plain(send, 404, "no such image")
            return
        headers = [
            (b"content-type", image.mime_type.encode()),
            (b"content-length", str(len(image.data)).encode()),
            (b"etag", f'"sha256-{image.sha256}"'.encode()),
            # Authorised per principal: private; named by its hash: never changes.
            (b"cache-control", b"private, max-age=31536000, immutable"),
            (b"content-disposition", f'attachment; filename="sha256-{image.sha256}.{EXTENSIONS[image.mime_type]}"'.encode()),
            *_SAFE_HEADERS,
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else image.data})


_SAFE_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"content-security-policy", b"default-src 'none'; sandbox"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"referrer-policy", b"no-referrer"),
)


async def _plain(send: Send, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = (text + "\n").encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()), *_SAFE_HEADERS, *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
