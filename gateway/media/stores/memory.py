"""The in-memory media store: unit tests only (nothing is shared, nothing survives)."""

from __future__ import annotations

from ..validation import ValidImage
from .base import checked_bytes

__all__ = ["MemoryMediaStore"]


class MemoryMediaStore:
    def __init__(self, max_bytes: int) -> None:
        self.objects: dict[str, bytes] = {}
        self.writes = 0
        self._max_bytes = max_bytes

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def object_uri(self, sha256: str) -> str:
        return f"memory://sha256/{sha256}"

    async def put(self, image: ValidImage) -> bool:
        if image.sha256 in self.objects:
            return False
        self.objects[image.sha256] = image.data
        self.writes += 1
        return True

    async def get(self, sha256: str) -> bytes | None:
        data = self.objects.get(sha256)
        return None if data is None else checked_bytes(sha256, data, self._max_bytes, self.object_uri(sha256))
