"""The S3 media store against a real S3-compatible server process (moto, loopback), through a
recording proxy: conditional writes (200, 412, 409), two concurrent uploads, HEAD-first mode,
and reads that check Content-Length, size and hash."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest

from gateway.errors import MediaStoreError
from gateway.storage.media_urls import S3StoreUrl, parse_media_store_url
from gateway.media.stores import media_store
from gateway.media.stores.s3 import S3MediaStore
from gateway.media.validation import ImageRules, check_image
from tests.support import images
from tests.support.s3 import MotoS3, S3Proxy

pytestmark = pytest.mark.anyio

MAX = ImageRules().max_image_bytes


def valid(seed: int = 0):
    return check_image(images.image_block(images.png(seed)), ImageRules())


@pytest.fixture
def bucket(s3_server: MotoS3) -> str:
    name = f"media-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(name)
    return name


@pytest.fixture
def proxy(s3_server: MotoS3) -> Iterator[S3Proxy]:
    with S3Proxy(s3_server.url) as running:
        yield running


def store_for(proxy: S3Proxy, bucket: str, *, head_first: bool = False) -> S3MediaStore:
    url = f"s3://{bucket}/gw/media?endpoint_url={proxy.url}&region=us-east-1&head_first={str(head_first).lower()}"
    store = media_store(parse_media_store_url(url), MAX)
    assert isinstance(store, S3MediaStore)
    return store


@pytest.fixture
async def store(proxy: S3Proxy, bucket: str, aws_env: None) -> AsyncIterator[S3MediaStore]:
    opened = store_for(proxy, bucket)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


async def test_upload_is_one_object_under_prefix_sha256_hash(store: S3MediaStore, s3_server: MotoS3, bucket: str, proxy: S3Proxy) -> None:
    image = valid()
    assert await store.put(image) is True
    key = f"gw/media/sha256/{image.sha256}"
    assert s3_server.objects(bucket) == {key: image.size}
    head = s3_server.client().head_object(Bucket=bucket, Key=key)
    assert head["ContentType"] == "image/png"
    put = [e for e in proxy.exchanges if e.method == "PUT"]
    assert put[0].headers["if-none-match"] == "*" and "content-md5" in put[0].headers
    assert store.object_uri(image.sha256) == f"s3://{bucket}/{key}"
    assert await store.get(image.sha256) == image.data


async def test_second_upload_is_412_already_there_success(store: S3MediaStore, s3_server: MotoS3, bucket: str, proxy: S3Proxy) -> None:
    image = valid(1)
    assert await store.put(image) is True
    assert await store.put(image) is False  # the retried upload: nothing new written
    assert proxy.statuses("PUT") == [200, 412]
    assert len(s3_server.objects(bucket)) == 1


async def test_two_concurrent_uploads_of_the_same_bytes(proxy: S3Proxy, bucket: str, aws_env: None, s3_server: MotoS3) -> None:
    """Two replicas (two stores, two clients) upload the same image at the same moment."""
    image = valid(2)
    first, second = store_for(proxy, bucket), store_for(proxy, bucket)
    await first.open()
    await second.open()
    results: list[bool] = []

    async def upload(store: S3MediaStore) -> None:
        results.append(await store.put(image))

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(upload, first)
            tg.start_soon(upload, second)
    finally:
        await first.close()
        await second.close()
    assert sorted(results) == [False, True]
    assert sorted(proxy.statuses("PUT")) == [200, 412]
    assert s3_server.objects(bucket) == {f"gw/media/sha256/{image.sha256}": image.size}


async def test_409_is_retried_twice(store: S3MediaStore, proxy: S3Proxy, s3_server: MotoS3, bucket: str) -> None:
    proxy.conflicts = 2
    assert await store.put(valid(3)) is True
    assert proxy.statuses("PUT") == [409, 409, 200]
    assert len(s3_server.objects(bucket)) == 1


async def test_409_three_times_then_head_decides(store: S3MediaStore, proxy: S3Proxy) -> None:
    image = valid(4)
    proxy.conflicts = 3
    with pytest.raises(MediaStoreError, match="conflicted"):
        await store.put(image)  # HEAD: not there
    assert await store.put(image) is True
    proxy.conflicts = 3
    assert await store.put(image) is False  # HEAD: there
    assert proxy.statuses("PUT") == [409, 409, 409, 200, 409, 409, 409]
    assert proxy.statuses("HEAD")[-2:] == [404, 200]


async def test_head_first_mode_never_sends_a_conditional_put(proxy: S3Proxy, bucket: str, aws_env: None, s3_server: MotoS3) -> None:
    store = store_for(proxy, bucket, head_first=True)
    await store.open()
    try:
        image = valid(5)
        assert await store.put(image) is True
        assert await store.put(image) is False
    finally:
        await store.close()
    puts = [e for e in proxy.exchanges if e.method == "PUT"]
    assert len(puts) == 1 and "if-none-match" not in puts[0].headers
    assert proxy.statuses("HEAD")[-2:] == [404, 200]
    assert len(s3_server.objects(bucket)) == 1


async def test_reads_check_hash_size_and_content_length(store: S3MediaStore, s3_server: MotoS3, bucket: str, proxy: S3Proxy) -> None:
    assert await store.get("0" * 64) is None
    # Another program wrote other bytes under a hash's name.
    other = valid(6)
    s3_server.client().put_object(Bucket=bucket, Key=f"gw/media/sha256/{other.sha256}", Body=images.png(7))
    with pytest.raises(MediaStoreError, match="do not have the SHA-256"):
        await store.get(other.sha256)
    # An object over the size limit is refused from its Content-Length, before its body is read.
    big = b"x" * (MAX + 1)
    big_hash = hashlib.sha256(big).hexdigest()
    s3_server.client().put_object(Bucket=bucket, Key=f"gw/media/sha256/{big_hash}", Body=big)
    with pytest.raises(MediaStoreError, match="over the limit"):
        await store.get(big_hash)
    # A body cut short of its Content-Length.
    image = valid(8)
    await store.put(image)
    proxy.cut_gets = True
    with pytest.raises(MediaStoreError):
        await store.get(image.sha256)


async def test_a_missing_bucket_is_refused_at_open(proxy: S3Proxy, aws_env: None) -> None:
    store = store_for(proxy, "no-such-bucket-here")
    with pytest.raises(MediaStoreError, match="bucket cannot be used"):
        await store.open()


def test_store_url_options() -> None:
    url = parse_media_store_url("s3://my-bucket/a/b/?endpoint_url=http://127.0.0.1:9000&region=eu-west-1&head_first=true")
    assert url == S3StoreUrl("my-bucket", "a/b", "http://127.0.0.1:9000", "eu-west-1", True, "auto")
    assert url.key("ab" * 32) == "a/b/sha256/" + "ab" * 32
    assert parse_media_store_url("s3://my-bucket").key("cd" * 32) == "sha256/" + "cd" * 32
    for bad, words in [
        ("s3://key:secret@my-bucket/p", "no credentials"),
        ("s3://my-bucket/p?aws_secret_access_key=x", "unknown s3:// option"),
        ("s3://B/p", "not an S3 bucket name"),
        ("s3://my-bucket/p?head_first=maybe", "head_first"),
    ]:
        with pytest.raises(ValueError, match=words):
            parse_media_store_url(bad)
