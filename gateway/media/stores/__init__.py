"""Media stores, keyed by SHA-256: local directory, S3-compatible, in-memory (tests)."""

from __future__ import annotations

from ...storage.media_urls import LocalStoreUrl, MemoryStoreUrl, S3StoreUrl, StoreUrl
from .base import MediaStore

__all__ = ["MediaStore", "media_store"]


def media_store(url: StoreUrl, max_bytes: int) -> MediaStore:
    """The store a parsed `media.store` URL names (not yet opened)."""
    if isinstance(url, LocalStoreUrl):
        from .local import LocalMediaStore

        return LocalMediaStore(url.root, max_bytes)
    if isinstance(url, S3StoreUrl):
        from .s3 import S3MediaStore  # loads botocore: only when an S3 store is configured

        return S3MediaStore(url, max_bytes)
    if isinstance(url, MemoryStoreUrl):
        from .memory import MemoryMediaStore

        return MemoryMediaStore(max_bytes)
    raise TypeError(f"not a media store URL: {url!r}")
