"""The rules an image of a tool result must keep, checked from its bytes (SPEC 6).

    canonical base64    the standard alphabet, `=` padding, nothing else (no line breaks, no
                        spaces, no URL-safe letters, no stray bits in the last character):
                        exactly what encoding the bytes gives, so one image has one spelling
    size                at most `max_image_bytes` (3,750,000) bytes once decoded, checked on the
                        length of the text before anything is decoded
    type                PNG, JPEG, GIF or WebP by structure (formats.py); the type found in the
                        bytes is the image's type, whatever `mimeType` the upstream declared
    count               at most `max_images` (20) image blocks in one result
    uri                 a reference uri at most `max_uri_bytes` (1024) bytes of UTF-8

A rule that does not hold raises InvalidImage with a text that names it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass

from ..protocol import ContentBlock
from ..errors import InvalidImage
from .formats import image_type

__all__ = ["ImageRules", "ValidImage", "check_count", "check_image", "check_uri", "decode_canonical"]

DEFAULT_MAX_IMAGE_BYTES = 3_750_000
DEFAULT_MAX_IMAGES = 20
DEFAULT_MAX_URI_BYTES = 1024
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


@dataclass(frozen=True, slots=True)
class ImageRules:
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    max_images: int = DEFAULT_MAX_IMAGES
    max_uri_bytes: int = DEFAULT_MAX_URI_BYTES


@dataclass(frozen=True, slots=True)
class ValidImage:
    """An image that keeps every rule: its bytes, the type found in them, their SHA-256."""

    data: bytes
    mime_type: str
    sha256: str

    @property
    def size(self) -> int:
        return len(self.data)


def decode_canonical(text: str, max_bytes: int) -> bytes:
    """The bytes of canonical base64 `text`, refused over `max_bytes` before decoding."""
    # 4 characters carry 3 bytes; the padding says how many of the last 3 are real.
    size = len(text) // 4 * 3 - (len(text) - len(text.rstrip("=")) if len(text) % 4 == 0 else 0)
    if size > max_bytes:
        raise InvalidImage(f"it is {size:,} bytes, over the limit of {max_bytes:,} bytes per image")
    if not _BASE64.fullmatch(text):
        raise InvalidImage(
            "its data is not canonical base64 (only A-Z, a-z, 0-9, + and / with = padding; no spaces or line breaks)"
        )
    if len(text) % 4:
        raise InvalidImage("its data is not canonical base64 (its length is not a multiple of 4: padding missing?)")
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidImage("its data is not canonical base64") from None
    if base64.b64encode(data).decode("ascii") != text:
        raise InvalidImage("its data is not canonical base64 (the last character carries bits that encoding never sets)")
    if not data:
        raise InvalidImage("its data is empty")
    return data


def check_image(block: ContentBlock, rules: ImageRules) -> ValidImage:
    """An `image` content block checked against every rule; InvalidImage otherwise."""
    text = block.get("data")
    if not isinstance(text, str):
        raise InvalidImage("its data is not a base64 string")
    data = decode_canonical(text, rules.max_image_bytes)
    return ValidImage(data=data, mime_type=image_type(data), sha256=hashlib.sha256(data).hexdigest())


def check_count(count: int, rules: ImageRules) -> None:
    if count > rules.max_images:
        raise InvalidImage(f"the result holds {count} images, over the limit of {rules.max_images} per result")


def check_uri(uri: str, rules: ImageRules) -> None:
    size = len(uri.encode("utf-8"))
    if size > rules.max_uri_bytes:
        raise InvalidImage(f"its uri is {size} bytes of UTF-8, over the limit of {rules.max_uri_bytes}")
