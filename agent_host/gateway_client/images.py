"""Images in a session: kept as references, shown to the model with bytes loaded per model call.

A reference is the gateway's wire form (`gateway.media.references.ImageReference`: type, uri,
mime_type, sha256, size_bytes). Where the bytes come from:

    dex-gateway://media/sha256/<hash>   an image a tool returned through a gateway with a media
                                        store: fetched from that gateway (`GET /media/sha256/<hash>`
                                        on the gateway URL's origin, with the agent's token)
    dex-agent://images/sha256/<hash>    an image the host keeps itself, in the session store
                                        (`host_images`, SQLite or PostgreSQL, so every host process
                                        on the store reads it): the user's (`--image PATH`) and
                                        inline images from a gateway without a media store
    file:///…/sha256/<hash>             the same, kept by an older host in a directory next to a
                                        SQLite store (still read from there)

Sessions hold only references (on user messages and tool-call records); the bytes are loaded
again at each model call and checked against the hash, never written into a session's records.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import ValidationError

from gateway.conventions.answers import Answer
from gateway.errors import InvalidImage, MediaStoreError
from gateway.media.references import IMAGE_META_KEY, ImageReference, image_blocks, sha256_of_uri
from gateway.media.stores.base import MediaStore, checked_bytes
from gateway.media.stores.local import LocalMediaStore
from gateway.media.validation import ImageRules, ValidImage, check_image
from gateway.media.formats import image_type

from ..domain import texts
from ..domain.safe_text import terminal_text
from ..models.base import ModelRequest
from ..store.session_store import SessionStore
from .credential import Credential, CredentialError, as_credential

__all__ = ["ImageLibrary", "ImageReference", "SessionImages", "block_text", "image_line", "references_in"]

log = logging.getLogger(__name__)


def references_in(answer: Answer) -> list[ImageReference]:
    """The image references of a result, in order (resource_link blocks carrying one)."""
    found = []
    for block in answer.content:
        meta = block.get("_meta") if block.get("type") == "resource_link" else None
        if isinstance(meta, dict) and IMAGE_META_KEY in meta:
            try:
                found.append(ImageReference.model_validate(meta[IMAGE_META_KEY]))
            except ValidationError:
                log.warning("a tool result carried a malformed image reference; left out")
    return found


def block_text(block: dict[str, Any]) -> str | None:
    """What the model reads of one result block: a text as itself; an image's resource_link
    nothing (its `[image <n>]` line comes before it, the image goes as an image part); an image
    the host did not keep a placeholder, never its base64; anything else as JSON."""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "resource_link" and IMAGE_META_KEY in (block.get("_meta") or {}):
        return None
    if kind == "image":
        return f"[image: {block.get('mimeType', 'unknown type')}, not kept by the host]"
    return texts.as_json(block)


def size_text(size: int) -> str:
    if size < 1000:
        return f"{size} B"
    if size < 1_000_000:
        return f"{size / 1000:.1f} KB"
    return f"{size / 1_000_000:.1f} MB"


def image_line(n: int, reference: ImageReference) -> str:
    """`[image 1: image/png, 2.1 KB, sha256 1f2e…]`, safe for a terminal."""
    return terminal_text(f"[image {n}: {reference.mime_type}, {size_text(reference.size_bytes)}, sha256 {reference.sha256[:4]}…]", 200)


SESSION_IMAGE_PREFIX = "dex-agent://images/sha256/"


class SessionImages:
    """The images the host keeps, in the session store (`store/sqlite_images.py`), as a media store
    (`gateway.media.stores.base.MediaStore`)."""

    def __init__(self, store: SessionStore, max_bytes: int) -> None:
        self._session_store = store
        self._max_bytes = max_bytes

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def object_uri(self, sha256: str) -> str:
        return SESSION_IMAGE_PREFIX + sha256

    async def put(self, image: ValidImage) -> bool:
        return await self._session_store.put_image(image.sha256, image.mime_type, image.data)

    async def get(self, sha256: str) -> bytes | None:
        data = await self._session_store.get_image(sha256)
        return None if data is None else checked_bytes(sha256, data, self._max_bytes, f"image {sha256[:12]} of the session store")


class ImageLibrary:
    """The host's images: its own store (user and inline images) and the gateway's media route.

    `kept` is where the host keeps its images: the session store (`dex-agent run`/`serve`), or a
    local directory (a Path). `legacy_root`: the directory an older host kept them in (read only)."""

    def __init__(self, kept: SessionStore | Path, gateway_url: str | None = None, token: str | Credential | None = None,
                 *, rules: ImageRules | None = None, timeout_seconds: float = 30.0, legacy_root: Path | None = None) -> None:
        self.rules = rules or ImageRules()
        self._store: MediaStore = (LocalMediaStore(kept, self.rules.max_image_bytes) if isinstance(kept, Path)
                                   else SessionImages(kept, self.rules.max_image_bytes))
        self._files = (self._store if isinstance(kept, Path) else
                       LocalMediaStore(legacy_root, self.rules.max_image_bytes) if legacy_root is not None else None)
        self._origin = _origin(gateway_url) if gateway_url else None
        self._credential = as_credential(token)
        self._timeout = timeout_seconds
        self._opened = False

    async def _kept(self, image: ValidImage) -> ImageReference:
        if not self._opened:
            await self._store.open()
            self._opened = True
        await self._store.put(image)
        return ImageReference(uri=self._store.object_uri(image.sha256), mime_type=image.mime_type,
                              sha256=image.sha256, size_bytes=image.size)

    async def add_file(self, path: Path) -> ImageReference:
        """A user's image file, checked by the gateway's rules and kept; ValueError naming the rule."""
        try:
            size = path.stat().st_size
            if size > self.rules.max_image_bytes:  # refused before reading it
                raise ValueError(f"--image {path}: {size:,} bytes, over the limit of {self.rules.max_image_bytes:,}")
            data = path.read_bytes()
        except OSError as exc:
            raise ValueError(f"--image {path}: {exc.strerror or exc}") from None
        try:
            image = ValidImage(data, image_type(data), hashlib.sha256(data).hexdigest())
        except InvalidImage as exc:
            raise ValueError(f"--image {path}: {exc}") from None
        return await self._kept(image)

    async def keep_inline(self, answer: Answer) -> Answer:
        """A result whose inline image blocks (a gateway without a media store) became references
        to images kept here: `[image <n>]` + a resource_link, as a gateway with a store gives them."""
        if not any(b.get("type") == "image" for b in answer.content):
            return answer
        content: list[dict[str, Any]] = []
        n = 0
        for block in answer.content:
            if block.get("type") != "image":
                content.append(block)
                continue
            n += 1
            try:
                content.extend(image_blocks(n, await self._kept(check_image(block, self.rules))))
            except (InvalidImage, MediaStoreError) as exc:
                content.append({"type": "text", "text": f"[image {n} not kept: {exc}]"})
        return Answer(content, answer.structured_content, answer.is_error, answer.meta)

    async def load(self, references: Iterable[ImageReference]) -> dict[str, bytes]:
        """The bytes of each reference that can be had now, by SHA-256 (checked); the others
        are left out (logged) and the model is told the image is not available."""
        loaded: dict[str, bytes] = {}
        wanted = {r.sha256: r for r in references}
        if not wanted:
            return loaded
        try:
            token = await self._credential.bearer()
        except CredentialError as exc:
            log.warning("images: no token for the gateway's media: %s", exc)
            token = None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient(headers=headers, timeout=self._timeout) as http:
            for sha256, reference in wanted.items():
                try:
                    loaded[sha256] = await self._bytes(http, reference)
                except (MediaStoreError, httpx.HTTPError, ValueError) as exc:
                    log.warning("image %s (%s) could not be loaded: %s", sha256[:12], reference.uri, exc)
        return loaded

    async def with_bytes(self, request: ModelRequest) -> ModelRequest:
        """The request with the bytes of its messages' images (those that can be had now)."""
        references = [ref for message in request.messages for ref in message.images]
        if not references:
            return request
        return request.model_copy(update={"image_data": await self.load(references)})

    async def _bytes(self, http: httpx.AsyncClient, reference: ImageReference) -> bytes:
        if reference.uri.startswith(("file:", SESSION_IMAGE_PREFIX)):
            own = reference.uri.startswith(SESSION_IMAGE_PREFIX) or isinstance(self._store, LocalMediaStore)
            where = self._store if own else self._files
            data = await where.get(reference.sha256) if where is not None else None
            if data is None:
                raise ValueError("not among the images the host keeps")
            return data
        if sha256_of_uri(reference.uri) != reference.sha256 or self._origin is None:
            raise ValueError("not an image this host can fetch")
        response = await http.get(f"{self._origin}/media/sha256/{reference.sha256}")
        if response.status_code != 200:
            raise ValueError(f"the gateway answered HTTP {response.status_code}")
        if hashlib.sha256(response.content).hexdigest() != reference.sha256:
            raise ValueError("the bytes do not have the image's SHA-256")
        return response.content


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def image_library(store: SessionStore, local: Path, gateway_url: str, token: str | Credential | None) -> ImageLibrary:
    """The host's images: kept in the session store (those an older host kept in a directory next
    to the local store file are still read), and the gateway's /media."""
    return ImageLibrary(store, gateway_url, token, legacy_root=local.with_name(local.stem + "-media"))
