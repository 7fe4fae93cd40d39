"""The local-directory media store: `<root>/sha256/<hash>`, one file per image.

Writes are atomic and durable: the bytes go to a temporary file in the same directory, which
is fsynced, renamed onto its final name, and the directory is fsynced after the rename, so a
crash leaves either no object or the whole object (and at worst a `.tmp-*` file, removed at the
next start once it is an hour old). Directories are 0700 and files 0600 whatever the umask
(gateway/storage/private_files.py). Only plain files are objects: a symlink, a special file (FIFO,
device, socket) or a file with extra hard links under `sha256/` is refused, never read or
served. All file work runs in worker threads, off the event loop.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import secrets
import stat
import time
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from ...errors import MediaStoreError
from ...storage.private_files import private_dir
from ..validation import ValidImage
from .base import checked_bytes

__all__ = ["LocalMediaStore"]

logger = logging.getLogger(__name__)

_TEMP_PREFIX = ".tmp-"
_STALE_TEMP_SECONDS = 3600.0


class LocalMediaStore:
    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root.absolute()
        self.directory = self.root / "sha256"
        self._max_bytes = max_bytes
        self._limiter = anyio.CapacityLimiter(4)

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await anyio.to_thread.run_sync(partial(fn, *args), limiter=self._limiter)

    async def open(self) -> None:
        await self._run(self._open)

    async def close(self) -> None:
        return None

    def object_uri(self, sha256: str) -> str:
        return (self.directory / sha256).as_uri()

    async def put(self, image: ValidImage) -> bool:
        written: bool = await self._run(self._put, image)
        return written

    async def get(self, sha256: str) -> bytes | None:
        data: bytes | None = await self._run(self._get, sha256)
        return data

    # -- in a worker thread ---------------------------------------------------------------

    def _open(self) -> None:
        try:
            private_dir(self.directory)
            info = os.lstat(self.directory)
        except OSError as exc:
            raise MediaStoreError(f"media store {self.directory}: {exc.strerror or exc}") from None
        if not stat.S_ISDIR(info.st_mode):
            raise MediaStoreError(f"media store {self.directory} is not a directory (a symlink or a file): refused")
        now = time.time()
        for entry in os.scandir(self.directory):
            if entry.name.startswith(_TEMP_PREFIX) and entry.is_file(follow_symlinks=False):
                if now - entry.stat(follow_symlinks=False).st_mtime > _STALE_TEMP_SECONDS:
                    os.unlink(entry.path)  # an upload interrupted by a crash

    def _object(self, sha256: str) -> os.stat_result | None:
        """The object's stat when it is a plain file; None when missing; refused otherwise."""
        path = self.directory / sha256
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return None
        return _plain_file(path, info)

    def _put(self, image: ValidImage) -> bool:
        path = self.directory / image.sha256
        existing = self._object(image.sha256)
        if existing is not None and existing.st_size == image.size and self._hash_of(path) == image.sha256:
            return False
        if existing is not None:
            logger.warning("media store: %s does not hold the bytes of its name; writing it again", path)
        temp = self.directory / f"{_TEMP_PREFIX}{image.sha256[:16]}-{secrets.token_hex(6)}"
        try:
            self._write_temp(temp, image.data)
            os.rename(temp, path)
            _fsync_directory(self.directory)
        except OSError as exc:
            _unlink_quietly(temp)
            raise MediaStoreError(f"media store: writing {path} failed: {exc.strerror or exc}") from None
        return True

    @staticmethod
    def _write_temp(temp: Path, data: bytes) -> None:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)  # the umask may have taken bits away; it never adds any
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)

    def _hash_of(self, path: Path) -> str | None:
        data = self._read(path)
        return None if data is None else hashlib.sha256(data).hexdigest()

    def _get(self, sha256: str) -> bytes | None:
        path = self.directory / sha256
        data = self._read(path)
        return None if data is None else checked_bytes(sha256, data, self._max_bytes, str(path))

    def _read(self, path: Path) -> bytes | None:
        try:
            # O_NOFOLLOW: a symlink fails to open (ELOOP); O_NONBLOCK: a FIFO does not hang the open.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise MediaStoreError(f"media store: {path} is a symbolic link: refused") from None
            raise MediaStoreError(f"media store: reading {path} failed: {exc.strerror or exc}") from None
        try:
            info = _plain_file(path, os.fstat(fd))
            if info.st_size > self._max_bytes:
                raise MediaStoreError(f"media store: {path} is {info.st_size} bytes, over the limit of {self._max_bytes}")
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)


def _plain_file(path: Path, info: os.stat_result) -> os.stat_result:
    if stat.S_ISLNK(info.st_mode):
        raise MediaStoreError(f"media store: {path} is a symbolic link: refused")
    if not stat.S_ISREG(info.st_mode):
        raise MediaStoreError(f"media store: {path} is not a regular file (a FIFO, device or socket): refused")
    # More than one link: another name can change these bytes. None: a concurrent upload of the
    # same bytes renamed its file onto this name after we opened ours (same hash, same bytes).
    if info.st_nlink > 1:
        raise MediaStoreError(f"media store: {path} has {info.st_nlink} hard links: refused")
    return info


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
