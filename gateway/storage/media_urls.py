"""The media store URL (`media.store`), parsed without touching the store.

    file:///var/lib/dex/media          a local directory (absolute path)
    file:var/media                     a local directory relative to the working directory
    s3://bucket/prefix?endpoint_url=http://127.0.0.1:9000&region=eu-west-1&head_first=true
    memory://                          in-process, for tests only

S3 options: `endpoint_url` (an S3-compatible service; default AWS), `region`, `head_first`
(`true` for services without conditional writes: HEAD, then a plain PUT when missing) and
`addressing_style` (`auto`, `path`, `virtual`). Credentials never go in the URL: they come
from the standard AWS chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN,
AWS_PROFILE and ~/.aws/config, instance or container roles).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["LocalStoreUrl", "MemoryStoreUrl", "S3StoreUrl", "StoreUrl", "parse_media_store_url"]

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_S3_OPTIONS = frozenset({"endpoint_url", "region", "head_first", "addressing_style"})
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


@dataclass(frozen=True)
class LocalStoreUrl:
    root: Path


@dataclass(frozen=True)
class S3StoreUrl:
    bucket: str
    prefix: str  # without leading or trailing "/"; "" for the bucket's top
    endpoint_url: str | None = None
    region: str | None = None
    head_first: bool = False
    addressing_style: str = "auto"

    def key(self, sha256: str) -> str:
        return f"{self.prefix}/sha256/{sha256}" if self.prefix else f"sha256/{sha256}"


@dataclass(frozen=True)
class MemoryStoreUrl:
    pass


StoreUrl = LocalStoreUrl | S3StoreUrl | MemoryStoreUrl


def parse_media_store_url(url: str) -> StoreUrl:
    """The parsed URL; ValueError with a text that says what is wrong."""
    scheme = url.partition(":")[0].lower()
    if scheme == "file":
        return _local(url)
    if scheme == "s3":
        return _s3(url)
    if url == "memory://":
        return MemoryStoreUrl()
    raise ValueError("must be file:///ABSOLUTE/DIR, file:RELATIVE/DIR, s3://BUCKET/PREFIX?... or memory://")


def _local(url: str) -> LocalStoreUrl:
    rest = url[len("file:"):]
    if rest.startswith("//"):
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"a file:// media store is on this machine: no host ({parts.netloc!r}) in the URL")
        if parts.query or parts.fragment:
            raise ValueError("a file:// media store URL takes no query or fragment")
        path = unquote(parts.path)
    else:
        path = unquote(rest)
    if not path or path == "/":
        raise ValueError("a file media store needs a directory: file:///ABSOLUTE/DIR or file:RELATIVE/DIR")
    return LocalStoreUrl(Path(path))


def _s3(url: str) -> S3StoreUrl:
    parts = urlsplit(url)
    if "@" in parts.netloc:
        raise ValueError("an s3:// media store URL holds no credentials: they come from the AWS environment or config")
    bucket = parts.netloc
    if not _BUCKET.match(bucket):
        raise ValueError(f"{bucket!r} is not an S3 bucket name (3-63 lowercase letters, digits, '.' and '-')")
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(options) - _S3_OPTIONS)
    if unknown:
        raise ValueError(f"unknown s3:// option(s) {', '.join(unknown)}: use {', '.join(sorted(_S3_OPTIONS))}")
    head_first = options.get("head_first", "false").lower()
    if head_first not in _TRUE + _FALSE:
        raise ValueError(f"head_first must be true or false, not {head_first!r}")
    style = options.get("addressing_style", "auto")
    if style not in ("auto", "path", "virtual"):
        raise ValueError(f"addressing_style must be auto, path or virtual, not {style!r}")
    endpoint = options.get("endpoint_url") or None
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise ValueError("endpoint_url must be an http:// or https:// URL")
    return S3StoreUrl(
        bucket=bucket,
        prefix=unquote(parts.path).strip("/"),
        endpoint_url=endpoint,
        region=options.get("region") or None,
        head_first=head_first in _TRUE,
        addressing_style=style,
    )
