"""The S3-compatible media store (aioboto3): `<prefix>/sha256/<hash>` in one bucket.

Writes are conditional: `PUT` with `If-None-Match: *`. 200 wrote the object; 412 means it is
already there, which is success (the same hash is the same bytes), so a retried upload — after
a crash, by another replica, or by botocore's own retries after a lost response — never
writes a second object. 409 (another conditional write of the key is in flight) is retried
twice, then the object is looked at with HEAD. Services without conditional writes use the
HEAD-first mode (`head_first=true`): HEAD, and a plain PUT only when the object is missing.

Reads check what they got: the body's length against Content-Length, the size against the
limit, and the SHA-256 of the bytes against the key. Every PUT carries Content-MD5, so the
service refuses a body damaged on the way. Credentials come from the standard AWS chain.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import anyio
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from ...errors import MediaStoreError
from ...storage.media_urls import S3StoreUrl
from ..validation import ValidImage
from .base import checked_bytes

__all__ = ["S3MediaStore"]

logger = logging.getLogger(__name__)

CONFLICT_RETRIES = 2  # a 409 is retried this many times before the object is looked at with HEAD


class S3MediaStore:
    def __init__(self, url: S3StoreUrl, max_bytes: int, *, session: Any = None) -> None:
        """`session`: an aioboto3.Session (default: one from the standard AWS chain)."""
        self.url = url
        self._max_bytes = max_bytes
        self._session = session
        self._stack = AsyncExitStack()
        self._client: Any = None

    @property
    def _s3(self) -> Any:
        if self._client is None:
            raise MediaStoreError("the S3 media store is not open")
        return self._client

    async def open(self) -> None:
        if self._client is not None:
            return
        import aioboto3  # only an S3 store loads the AWS SDK

        session = self._session or aioboto3.Session()
        config = Config(
            region_name=self.url.region,
            connect_timeout=10,
            read_timeout=60,
            retries={"max_attempts": 3, "mode": "standard"},
            s3={"addressing_style": self.url.addressing_style},
            # Content-MD5 and our own SHA-256 check guard the bytes; no aws-chunked bodies,
            # which some S3-compatible services do not read.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        client = session.client("s3", endpoint_url=self.url.endpoint_url, config=config)
        self._client = await self._stack.enter_async_context(client)
        try:
            await self._s3.head_bucket(Bucket=self.url.bucket)
        except (ClientError, BotoCoreError) as exc:
            await self.close()
            raise MediaStoreError(f"media store s3://{self.url.bucket}: the bucket cannot be used: {_describe(exc)}") from None

    async def close(self) -> None:
        self._client = None
        with anyio.CancelScope(shield=True):
            await self._stack.aclose()

    def object_uri(self, sha256: str) -> str:
        return f"s3://{self.url.bucket}/{self.url.key(sha256)}"

    async def put(self, image: ValidImage) -> bool:
        key = self.url.key(image.sha256)
        try:
            if self.url.head_first:
                if await self._head_size(key) is not None:
                    return False
                await self._put(key, image, conditional=False)
                return True
            return await self._put_conditionally(key, image)
        except (ClientError, BotoCoreError) as exc:
            raise MediaStoreError(f"media store: uploading {self.object_uri(image.sha256)} failed: {_describe(exc)}") from None

    async def _put_conditionally(self, key: str, image: ValidImage) -> bool:
        for attempt in range(CONFLICT_RETRIES + 1):
            try:
                await self._put(key, image, conditional=True)
                return True
            except ClientError as exc:
                status = _status(exc)
                if status == 412:
                    return False  # already there: the same hash is the same bytes
                if status != 409:
                    raise
                logger.info("media store: conditional write of %s conflicted (409), attempt %d", key, attempt + 1)
                await anyio.sleep(0.05 * (attempt + 1))
        if await self._head_size(key) is not None:
            return False
        raise MediaStoreError(
            f"media store: {self.object_uri(image.sha256)}: conditional writes conflicted (409) "
            f"{CONFLICT_RETRIES + 1} times and the object is not there"
        )

    async def _put(self, key: str, image: ValidImage, *, conditional: bool) -> None:
        extra = {"IfNoneMatch": "*"} if conditional else {}
        await self._s3.put_object(
            Bucket=self.url.bucket,
            Key=key,
            Body=image.data,
            ContentType=image.mime_type,
            ContentMD5=base64.b64encode(hashlib.md5(image.data).digest()).decode("ascii"),
            **extra,
        )

    async def _head_size(self, key: str) -> int | None:
        try:
            head = await self._s3.head_object(Bucket=self.url.bucket, Key=key)
        except ClientError as exc:
            if _status(exc) == 404:
                return None
            raise
        return int(head["ContentLength"])

    async def get(self, sha256: str) -> bytes | None:
        where = self.object_uri(sha256)
        try:
            response = await self._s3.get_object(Bucket=self.url.bucket, Key=self.url.key(sha256))
        except ClientError as exc:
            if _status(exc) == 404:
                return None
            raise MediaStoreError(f"media store: reading {where} failed: {_describe(exc)}") from None
        except BotoCoreError as exc:
            raise MediaStoreError(f"media store: reading {where} failed: {_describe(exc)}") from None
        length = int(response.get("ContentLength", -1))
        async with response["Body"] as body:
            if length < 0 or length > self._max_bytes:
                raise MediaStoreError(f"media store: {where} is {length} bytes (Content-Length), over the limit of {self._max_bytes}")
            try:
                data: bytes = await body.read()
            except (BotoCoreError, aiohttp.ClientError, OSError) as exc:  # a cut body, a lost connection
                raise MediaStoreError(f"media store: reading {where} failed: {_describe(exc)}") from None
        if len(data) != length:
            raise MediaStoreError(f"media store: {where}: got {len(data)} bytes of the {length} its Content-Length says")
        return checked_bytes(sha256, data, self._max_bytes, where)


def _status(exc: ClientError) -> int | None:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return f"HTTP {_status(exc)} {error.get('Code', '')}: {error.get('Message', '')}".strip()
    return f"{type(exc).__name__}: {exc}"
