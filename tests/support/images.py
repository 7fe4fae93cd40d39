"""Small real images and the bad-image corpus, built from bytes (no imaging library).

    png(seed)          a 1x1 RGBA PNG (decodable; `seed` picks the colour, so the hash)
    gif() / webp()     the smallest well-formed GIF and lossless WebP
    jpeg()             a baseline JPEG's frame: SOI, APP0 (JFIF), ..., EOI
    png_of_size(n)     a well-formed PNG of exactly n bytes (a padding chunk)
    BAD_IMAGES         name -> (base64 text, the words the gateway's refusal must contain)
"""

from __future__ import annotations

import base64
import struct
import zlib

MAX_IMAGE_BYTES = 3_750_000


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(seed: int = 0, *, padding: int = 0) -> bytes:
    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0)  # 1x1, 8 bits, RGBA
    pixel = bytes([0, seed & 0xFF, (seed >> 8) & 0xFF, (seed >> 16) & 0xFF, 255])  # filter byte + RGBA
    chunks = [_chunk(b"IHDR", ihdr)]
    if padding:
        chunks.append(_chunk(b"tEXt", b"pad\x00" + b"x" * padding))
    chunks += [_chunk(b"IDAT", zlib.compress(pixel)), _chunk(b"IEND", b"")]
    return b"\x89PNG\r\n\x1a\n" + b"".join(chunks)


def png_of_size(size: int) -> bytes:
    base = len(png(padding=1)) - 1
    data = png(padding=size - base)
    assert len(data) == size
    return data


def gif() -> bytes:
    return base64.b64decode("R0lGODlhAQABAIAAAP///wAAACH5BAEAAAAALAAAAAABAAEAAAICRAEAOw==")


def webp() -> bytes:
    return base64.b64decode("UklGRhoAAABXRUJQVlA4TA0AAAAvAAAAEAcQERGIiP4HAA==")


def jpeg() -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    dqt = b"\xff\xdb" + struct.pack(">H", 67) + b"\x00" + bytes(range(1, 65))
    return b"\xff\xd8" + app0 + dqt + b"\xff\xd9"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def image_block(data: bytes, mime_type: str = "image/png") -> dict[str, str]:
    return {"type": "image", "data": b64(data), "mimeType": mime_type}


def _webp_wrong_riff() -> bytes:
    data = bytearray(webp())
    data[4:8] = struct.pack("<I", len(data) - 8 + 4)
    return bytes(data)


def _with_line_break(text: str) -> str:
    return text[:40] + "\n" + text[40:]


# name -> (base64 of one image, words the refusal must contain)
BAD_IMAGES: dict[str, tuple[str, str]] = {
    "truncated_png": (b64(png()[:-20]), "truncated PNG"),
    "jpeg_without_eoi": (b64(jpeg()[:-2]), "JPEG without its end of image marker"),
    "webp_wrong_riff_size": (b64(_webp_wrong_riff()), "WebP whose RIFF size"),
    "gif_without_screen_descriptor": (b64(b"GIF89a"), "GIF without its logical screen descriptor"),
    "non_canonical_base64": (_with_line_break(b64(png())), "not canonical base64"),
    "too_large": (b64(png_of_size(MAX_IMAGE_BYTES + 1)), "3,750,001 bytes, over the limit of 3,750,000"),
}
