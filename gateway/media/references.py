"""How a stored image is named to clients: the reference and the gateway's media uri.

The uri a client gets is the gateway's own, `dex-gateway://media/sha256/<hash>`, never the
store's (`file:///…`, `s3://…`): a client resolves it through the gateway that gave it out —
`resources/read` of the uri, or `GET /media/sha256/<hash>` with its bearer token — so an agent
host on another machine, without store credentials, can show the image; the uri is the same
whichever store or replica holds the bytes, and it tells a client nothing about the gateway's
disks or buckets.

The reference travels as `_meta["dex-gateway/image"]` of a `resource_link` block:
`{"type": "image", "uri", "mime_type", "sha256", "size_bytes"}`.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..protocol import ContentBlock
from .formats import EXTENSIONS

__all__ = [
    "IMAGE_META_KEY",
    "MEDIA_PATH_PREFIX",
    "MEDIA_URI_PREFIX",
    "ImageReference",
    "image_blocks",
    "media_uri",
    "sha256_of_path",
    "sha256_of_uri",
]

IMAGE_META_KEY = "dex-gateway/image"
MEDIA_URI_PREFIX = "dex-gateway://media/sha256/"
MEDIA_PATH_PREFIX = "/media/sha256/"
SHA256_HEX = re.compile(r"[0-9a-f]{64}\Z")


class ImageReference(BaseModel):
    """The wire form of a stored image (SPEC 6)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["image"] = "image"
    uri: str
    mime_type: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size_bytes: int = Field(ge=1)

    @property
    def file_name(self) -> str:
        return f"sha256-{self.sha256}.{EXTENSIONS.get(self.mime_type, 'bin')}"


def media_uri(sha256: str) -> str:
    return MEDIA_URI_PREFIX + sha256


def sha256_of_uri(uri: str) -> str | None:
    """The hash a gateway media uri names; None for any other uri."""
    return _hash_after(uri, MEDIA_URI_PREFIX)


def sha256_of_path(path: str) -> str | None:
    """The hash a `/media/sha256/<hash>` request path names; None for any other path."""
    return _hash_after(path, MEDIA_PATH_PREFIX)


def _hash_after(text: str, prefix: str) -> str | None:
    if not text.startswith(prefix):
        return None
    rest = text[len(prefix):]
    return rest if SHA256_HEX.match(rest) else None


def image_blocks(n: int, reference: ImageReference, annotations: Any = None) -> list[ContentBlock]:
    """What one stored image becomes in a result: `[image <n>]`, then its resource_link."""
    link: ContentBlock = {
        "type": "resource_link",
        "uri": reference.uri,
        "name": reference.file_name,
        "mimeType": reference.mime_type,
        "size": reference.size_bytes,
        "_meta": {IMAGE_META_KEY: reference.model_dump()},
    }
    if annotations is not None:
        link["annotations"] = annotations
    return [{"type": "text", "text": f"[image {n}]"}, link]
