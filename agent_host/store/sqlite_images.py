"""The session store's statements for the images the host keeps itself (the user's, and inline
images from a gateway without a media store): one row per image, by SHA-256, in the session
store's backend, so every host process on one store (SQLite or PostgreSQL) reads every image.
The bytes are checked against the hash when read (`gateway_client/images.py`)."""

from __future__ import annotations

import time

from .sqlite_base import SqliteBase


class SqliteImages(SqliteBase):
    def put_image(self, sha256: str, mime_type: str, data: bytes) -> bool:
        """Keep the image; True when it was written now, False when it was already there."""
        with self._tx() as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO host_images (sha256, mime_type, size_bytes, data, created_at) VALUES (?, ?, ?, ?, ?)",
                (sha256, mime_type, len(data), data, time.time()),
            )
            return bool(cursor.rowcount)

    def get_image(self, sha256: str) -> bytes | None:
        row = self._db.execute("SELECT data FROM host_images WHERE sha256 = ?", (sha256,)).fetchone()
        return None if row is None else bytes(row["data"])
