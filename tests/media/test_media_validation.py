"""The image rules, from the bytes: types by structure, canonical base64, size, count, uri."""

from __future__ import annotations

import base64
import hashlib
import struct

import pytest

from gateway.errors import InvalidImage
from gateway.media.formats import image_type
from gateway.media.references import media_uri, sha256_of_path, sha256_of_uri
from gateway.media.validation import ImageRules, check_count, check_image, check_uri, decode_canonical
from tests.support import images

RULES = ImageRules()


@pytest.mark.parametrize(
    ("data", "mime_type"),
    [(images.png(), "image/png"), (images.jpeg(), "image/jpeg"), (images.gif(), "image/gif"), (images.webp(), "image/webp")],
)
def test_each_type_is_found_in_the_bytes_whatever_was_declared(data: bytes, mime_type: str) -> None:
    checked = check_image(images.image_block(data, "image/svg+xml"), RULES)
    assert (checked.mime_type, checked.size, checked.sha256) == (mime_type, len(data), hashlib.sha256(data).hexdigest())


@pytest.mark.parametrize("name", sorted(images.BAD_IMAGES))
def test_the_bad_image_corpus_is_refused_naming_the_rule(name: str) -> None:
    text, words = images.BAD_IMAGES[name]
    with pytest.raises(InvalidImage, match=words):
        check_image({"type": "image", "data": text, "mimeType": "image/png"}, RULES)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"<svg xmlns='http://www.w3.org/2000/svg'/>", "not a PNG, JPEG, GIF or WebP"),
        (images.png()[:30], "not a complete IHDR"),
        (images.png().replace(struct.pack(">II", 1, 1), struct.pack(">II", 0, 1), 1), "0x1 pixels"),
        (b"\xff\xd8\x00\x00\xff\xd9", "without a marker"),
        (images.webp()[:12] + b"ABCD" + images.webp()[16:], "without a VP8"),
        (b"RIFF" + struct.pack("<I", 8) + b"WEBPVP8L", "does not fit"),
    ],
)
def test_structural_checks(data: bytes, words: str) -> None:
    with pytest.raises(InvalidImage, match=words):
        image_type(data)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("QR==", "bits that encoding never sets"),  # decodes like QQ==, but is not what encoding gives
        ("QQ", "not a multiple of 4"),
        ("Q Q==", "no spaces or line breaks"),
        ("-_-_", "only A-Z"),  # the URL-safe alphabet
        ("", "empty"),
    ],
)
def test_only_canonical_base64(text: str, words: str) -> None:
    with pytest.raises(InvalidImage, match=words):
        decode_canonical(text, 100)


def test_size_is_checked_on_the_text_before_decoding() -> None:
    assert len(check_image(images.image_block(images.png_of_size(3_750_000)), RULES).data) == 3_750_000
    with pytest.raises(InvalidImage, match="3,750,003 bytes"):
        decode_canonical("!" * 5_000_004, RULES.max_image_bytes)  # not even base64: the size speaks first
    small = ImageRules(max_image_bytes=69)
    with pytest.raises(InvalidImage, match="70 bytes, over the limit of 69"):
        check_image(images.image_block(images.png()), small)


def test_count_and_uri_limits() -> None:
    check_count(20, RULES)
    with pytest.raises(InvalidImage, match="21 images, over the limit of 20"):
        check_count(21, RULES)
    check_uri("x" * 1024, RULES)
    with pytest.raises(InvalidImage, match="1025 bytes"):
        check_uri("x" * 1023 + "é", RULES)


def test_media_uri_and_path_name_only_a_sha256() -> None:
    digest = hashlib.sha256(b"x").hexdigest()
    assert sha256_of_uri(media_uri(digest)) == digest
    assert sha256_of_path(f"/media/sha256/{digest}") == digest
    for bad in (media_uri(digest.upper()), media_uri(digest) + "/x", media_uri(digest[:-1]), "file:///etc/passwd"):
        assert sha256_of_uri(bad) is None
    assert sha256_of_path("/media/sha256/../../etc/passwd") is None
    assert base64.b64decode(images.b64(images.png())) == images.png()
