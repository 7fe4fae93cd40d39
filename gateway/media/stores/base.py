"""What every media store does: keep one object per image, named by its SHA-256.

`put` is idempotent: the same bytes under the same hash, written once; a retried upload (after
a crash, by another replica, concurrently) writes or finds the same object. `get` returns bytes
only after checking them against the hash they are stored under.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

from ...errors import MediaStoreError
from ..validation import ValidImage

__all__ = ["MediaStore", "checked_bytes"]


class MediaStore(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    def object_uri(self, sha256: str) -> str:
        """The store's own uri of an object (`file:///…`, `s3://…`): for logs and operators."""
        ...

    async def put(self, image: ValidImage) -> bool:
        """Keep the image; True when it was written now, False when it was already there."""
        ...

    async def get(self, sha256: str) -> bytes | None:
        """The checked bytes stored under `sha256`; None when there is no such object."""
        ...


def checked_bytes(sha256: str, data: bytes, max_bytes: int, where: str) -> bytes:
    """`data` when it is what `sha256` names; MediaStoreError (naming `where`) otherwise."""
    if len(data) > max_bytes:
        raise MediaStoreError(f"{where}: {len(data)} bytes, over the limit of {max_bytes} per image")
    if hashlib.sha256(data).hexdigest() != sha256:
        raise MediaStoreError(f"{where}: the bytes do not have the SHA-256 they are stored under")
    return data
