"""The local-directory store on a real file system: layout, modes, atomic idempotent writes,
and refusal of symlinks, special files and hard-linked files."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import anyio
import pytest

from gateway.errors import MediaStoreError
from gateway.storage.media_urls import LocalStoreUrl, parse_media_store_url
from gateway.media.stores import media_store
from gateway.media.stores.local import LocalMediaStore
from gateway.media.validation import ImageRules, ValidImage, check_image
from tests.support import images

pytestmark = pytest.mark.anyio

MAX = ImageRules().max_image_bytes


def valid(seed: int = 0) -> ValidImage:
    return check_image(images.image_block(images.png(seed)), ImageRules())


async def opened(root: Path) -> LocalMediaStore:
    store = media_store(parse_media_store_url(root.as_uri()), MAX)
    assert isinstance(store, LocalMediaStore)
    await store.open()
    return store


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


async def test_layout_modes_and_file_uri(tmp_path: Path) -> None:
    old = os.umask(0)  # the store's modes must not depend on the umask
    try:
        store = await opened(tmp_path / "media")
        image = valid()
        assert await store.put(image) is True
    finally:
        os.umask(old)
    path = tmp_path / "media" / "sha256" / image.sha256
    assert path.read_bytes() == image.data
    assert (mode(tmp_path / "media"), mode(tmp_path / "media" / "sha256"), mode(path)) == (0o700, 0o700, 0o600)
    assert store.object_uri(image.sha256) == path.as_uri()
    assert await store.get(image.sha256) == image.data
    assert await store.get("0" * 64) is None


async def test_a_second_upload_writes_nothing(tmp_path: Path) -> None:
    store = await opened(tmp_path)
    image = valid()
    await store.put(image)
    path = tmp_path / "sha256" / image.sha256
    before = os.stat(path)
    assert await store.put(image) is False
    after = os.stat(path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


async def test_concurrent_uploads_of_the_same_bytes_leave_one_whole_object(tmp_path: Path) -> None:
    store = await opened(tmp_path)
    image = check_image(images.image_block(images.png_of_size(2_000_000)), ImageRules())
    async with anyio.create_task_group() as tg:
        for _ in range(6):
            tg.start_soon(store.put, image)
    assert os.listdir(tmp_path / "sha256") == [image.sha256]  # no temporary file left
    assert await store.get(image.sha256) == image.data


async def test_an_upload_retried_after_a_crash_writes_the_same_object(tmp_path: Path) -> None:
    store = await opened(tmp_path)
    image = valid(3)
    # A crash mid-upload leaves a temporary file (never the object's name); the retry writes the object.
    stale = tmp_path / "sha256" / f".tmp-{image.sha256[:16]}-dead"
    stale.write_bytes(image.data[:10])
    assert await store.put(image) is True
    assert await store.get(image.sha256) == image.data
    # At the next start, temporary files older than an hour are removed, fresher ones kept.
    fresh = tmp_path / "sha256" / ".tmp-fresh"
    fresh.write_bytes(b"x")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    await opened(tmp_path)
    assert not stale.exists() and fresh.exists()


async def test_a_damaged_object_is_refused_on_read_and_rewritten_on_upload(tmp_path: Path) -> None:
    store = await opened(tmp_path)
    image = valid(4)
    await store.put(image)
    path = tmp_path / "sha256" / image.sha256
    path.write_bytes(images.png(5))
    with pytest.raises(MediaStoreError, match="do not have the SHA-256"):
        await store.get(image.sha256)
    assert await store.put(image) is True
    assert await store.get(image.sha256) == image.data


async def test_symlinks_special_files_and_hard_links_are_refused(tmp_path: Path) -> None:
    store = await opened(tmp_path / "media")
    directory = tmp_path / "media" / "sha256"
    secret = tmp_path / "secret"
    secret.write_bytes(images.png(6))
    linked, fifo, hard = valid(6), valid(7), valid(8)
    (directory / linked.sha256).symlink_to(secret)
    os.mkfifo(directory / fifo.sha256)
    (tmp_path / "elsewhere").write_bytes(hard.data)
    os.link(tmp_path / "elsewhere", directory / hard.sha256)
    for image, words in [(linked, "symbolic link"), (fifo, "not a regular file"), (hard, "2 hard links")]:
        with pytest.raises(MediaStoreError, match=words):
            await store.get(image.sha256)
        with pytest.raises(MediaStoreError, match=words):
            await store.put(image)
    assert secret.read_bytes() == images.png(6)  # never written through


async def test_a_symlinked_object_directory_is_refused_at_open(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "media").mkdir()
    (tmp_path / "media" / "sha256").symlink_to(tmp_path / "real")
    with pytest.raises(MediaStoreError, match="not a directory"):
        await opened(tmp_path / "media")


def test_file_urls() -> None:
    assert parse_media_store_url("file:///var/lib/dex/media") == LocalStoreUrl(Path("/var/lib/dex/media"))
    assert parse_media_store_url("file:var/media") == LocalStoreUrl(Path("var/media"))
    for bad in ("file://host/x", "file:///", "file:///x?y=1", "ftp://x", "sqlite:///x"):
        with pytest.raises(ValueError):
            parse_media_store_url(bad)
