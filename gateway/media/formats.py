"""What kind of image some bytes are, from their structure alone (no decoding of pixels).

    PNG   the 8-byte signature, an IHDR chunk first (length 13, non-zero width and height),
          and the IEND chunk as the last 12 bytes (so a truncated PNG is refused)
    JPEG  SOI (FF D8), then a marker (FF xx), and EOI (FF D9) as the last two bytes
    GIF   the GIF87a / GIF89a header and the 7-byte logical screen descriptor after it
    WebP  RIFF, a size that matches the length, WEBP, then a VP8 / VP8L / VP8X chunk that fits

`image_type(data)` answers the MIME type or raises InvalidImage naming the broken rule.
"""

from __future__ import annotations

import struct

from ..errors import InvalidImage

__all__ = ["EXTENSIONS", "MIME_TYPES", "image_type"]

PNG, JPEG, GIF, WEBP = "image/png", "image/jpeg", "image/gif", "image/webp"
MIME_TYPES = (PNG, JPEG, GIF, WEBP)
EXTENSIONS = {PNG: "png", JPEG: "jpg", GIF: "gif", WEBP: "webp"}

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"  # length 0, type, CRC of "IEND"
_JPEG_SOI = b"\xff\xd8"
_JPEG_EOI = b"\xff\xd9"
_GIF_HEADERS = (b"GIF87a", b"GIF89a")
_WEBP_CHUNKS = (b"VP8 ", b"VP8L", b"VP8X")


def image_type(data: bytes) -> str:
    """The MIME type of an image of one of the four formats; InvalidImage otherwise."""
    if data.startswith(_PNG_SIGNATURE):
        _check_png(data)
        return PNG
    if data.startswith(_JPEG_SOI):
        _check_jpeg(data)
        return JPEG
    if data[:6] in _GIF_HEADERS:
        _check_gif(data)
        return GIF
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        _check_webp(data)
        return WEBP
    raise InvalidImage(f"its bytes are not a PNG, JPEG, GIF or WebP image (they begin with {data[:8].hex(' ') or 'nothing'})")


def _check_png(data: bytes) -> None:
    header = data[8:33]  # length, "IHDR", 13 bytes of header, CRC
    if len(header) < 25 or header[4:8] != b"IHDR" or struct.unpack(">I", header[:4])[0] != 13:
        raise InvalidImage("a PNG whose first chunk is not a complete IHDR header")
    width, height = struct.unpack(">II", header[8:16])
    if width == 0 or height == 0:
        raise InvalidImage(f"a PNG of {width}x{height} pixels (its IHDR header needs a width and a height)")
    if not data.endswith(_PNG_IEND):
        raise InvalidImage("a truncated PNG (it does not end with the IEND chunk)")


def _check_jpeg(data: bytes) -> None:
    if len(data) < 6 or data[2] != 0xFF or data[3] in (0x00, 0xFF, 0xD8, 0xD9):
        raise InvalidImage("a JPEG without a marker after its start of image (FF D8)")
    if not data.endswith(_JPEG_EOI):
        raise InvalidImage("a JPEG without its end of image marker (FF D9) at the end (truncated?)")


def _check_gif(data: bytes) -> None:
    if len(data) < 13:
        raise InvalidImage("a GIF without its logical screen descriptor (the 7 bytes after the header)")


def _check_webp(data: bytes) -> None:
    declared = struct.unpack("<I", data[4:8])[0]
    if declared != len(data) - 8:
        raise InvalidImage(f"a WebP whose RIFF size ({declared}) does not match its length ({len(data) - 8} bytes after the size)")
    chunk = data[12:16]
    if chunk not in _WEBP_CHUNKS:
        raise InvalidImage("a WebP without a VP8, VP8L or VP8X chunk after its header")
    size = struct.unpack("<I", data[16:20])[0] if len(data) >= 20 else None
    if size is None or 20 + size > len(data):
        raise InvalidImage(f"a WebP whose {chunk.decode().strip()} chunk does not fit in the file")
