"""Images through a real `dex-gateway serve` with a local media store: server-everything's
get-tiny-image uploaded once, referenced, and served back byte-identical (GET and
resources/read) only to the principal it reached; the bad-image corpus refused with clear
texts; failed results without image bytes; the fence replaying references, never bytes."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.gateway.helpers import KEY, connect, new_key, text_of
from tests.media.media_support import (
    TOKENS,
    auth_config,
    everything_upstream,
    image_upstream,
    objects,
    references,
    tiny_image,
    wire,
)
from tests.support import images
from tests.support.gateway import RunningGateway, start_gateway, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]


@dataclass
class Setup:
    gateway: RunningGateway
    root: Path

    @property
    def media(self) -> Path:
        return self.root / "media"

    def get(self, sha256: str, token: str | None = TOKENS["alice"], **headers: str) -> httpx.Response:
        if token:
            headers["authorization"] = f"Bearer {token}"
        return httpx.get(f"{self.gateway.base}/media/sha256/{sha256}", headers=headers, timeout=30)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("media")
    config = write_config(root, {
        "auth": auth_config(),
        "upstreams": [image_upstream(root / "state"), everything_upstream()],
        "media": {"store": (root / "media").as_uri()},
    })
    with start_gateway(config) as gateway:
        gateway.wait_for_log("catalog ready")
        yield Setup(gateway, root)


async def test_tiny_image_uploaded_once_referenced_and_served_back(setup: Setup, era: str) -> None:
    expected = tiny_image()
    digest = hashlib.sha256(expected).hexdigest()
    async with connect(setup.gateway.url, era, token=TOKENS["alice"]) as client:
        first = await client.call_tool("everything__get-tiny-image", {})
        second = await client.call_tool("everything__get-tiny-image", {})
        read = await client.read_resource(f"dex-gateway://media/sha256/{digest}")
    content = wire(first)["content"]
    assert [b["type"] for b in content] == ["text", "text", "resource_link", "text"]
    assert content[1]["text"] == "[image 1]"
    assert references(first) == references(second) == [{
        "type": "image", "uri": f"dex-gateway://media/sha256/{digest}", "mime_type": "image/png",
        "sha256": digest, "size_bytes": len(expected),
    }]
    assert base64.b64encode(expected).decode() not in json.dumps(wire(first))
    # Uploaded once: one object, and the second call wrote nothing.
    assert objects(setup.media) == [digest]
    path = setup.media / "sha256" / digest
    assert path.read_bytes() == expected
    mtime = os.stat(path).st_mtime_ns
    # Fetched back byte-identical, both ways.
    blob = wire(read)["contents"][0]
    assert (base64.b64decode(blob["blob"]), blob["mimeType"], blob["uri"]) == (expected, "image/png", content[2]["uri"])
    response = setup.get(digest)
    assert response.status_code == 200 and response.content == expected
    assert response.headers["content-type"] == "image/png"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["content-security-policy"].startswith("default-src 'none'")
    assert response.headers["content-disposition"].startswith("attachment;")
    assert os.stat(path).st_mtime_ns == mtime


async def test_a_principal_reads_only_images_that_reached_it(setup: Setup) -> None:
    async with connect(setup.gateway.url, "legacy", token=TOKENS["alice"]) as client:
        result = await client.call_tool("img__image", {"name": "png:4242"})
    digest = references(result)[0]["sha256"]
    assert setup.get(digest).status_code == 200
    never_received, missing = setup.get(digest, TOKENS["bob"]), setup.get("0" * 64)
    assert never_received.status_code == missing.status_code == 404
    assert never_received.content == missing.content  # nothing tells "exists" from "not yours"
    assert setup.get(digest, token=None).status_code == 401
    assert setup.get(digest, token="wrong").status_code == 401
    assert setup.get(digest, origin="http://evil.example").status_code == 403
    assert httpx.post(f"{setup.gateway.base}/media/sha256/{digest}", headers={"authorization": f"Bearer {TOKENS['alice']}"}).status_code == 405
    async with connect(setup.gateway.url, "legacy", token=TOKENS["bob"]) as client:
        with pytest.raises(Exception, match="resource not found"):
            await client.read_resource(f"dex-gateway://media/sha256/{digest}")


CORPUS = {name: (name, words) for name, (_, words) in images.BAD_IMAGES.items()}
CORPUS["21_images"] = ("many:21", "the result holds 21 images, over the limit of 20 per result")


@pytest.mark.parametrize("case", sorted(CORPUS))
async def test_the_bad_image_corpus_is_refused_and_nothing_stored(setup: Setup, case: str) -> None:
    name, words = CORPUS[case]
    before = objects(setup.media)
    async with connect(setup.gateway.url, "legacy", token=TOKENS["alice"]) as client:
        result = await client.call_tool("img__image", {"name": name})
    text = text_of(result)
    assert result.is_error and words in text and "img__image" in text, text
    if case != "21_images":
        assert "image 1 is refused" in text
    assert objects(setup.media) == before


@pytest.mark.parametrize("name", ["error", "unknown", "rejected"])
async def test_failed_results_hold_no_image_bytes(setup: Setup, name: str) -> None:
    before = objects(setup.media)
    async with connect(setup.gateway.url, "legacy", token=TOKENS["alice"]) as client:
        result = await client.call_tool("img__image", {"name": name})
    assert result.is_error and "[image 1 omitted]" in text_of(result)
    assert all(b["type"] == "text" for b in wire(result)["content"])
    assert objects(setup.media) == before


async def test_every_type_and_the_fence_replays_the_reference(setup: Setup) -> None:
    async with connect(setup.gateway.url, "legacy", token=TOKENS["alice"]) as client:
        kinds = [references(await client.call_tool("img__image", {"name": n}))[0]["mime_type"] for n in ("gif", "webp", "jpeg")]
        key = new_key("snap")
        first = await client.call_tool("img__snapshot", {"seed": 77}, meta={KEY: key})
        again = await client.call_tool("img__snapshot", {"seed": 77}, meta={KEY: key})
    assert kinds == ["image/gif", "image/webp", "image/jpeg"]
    assert references(first) == references(again)
    assert (again.meta or {}).get("dex-gateway/replayed") is True
    # The fence holds the reference, never the bytes.
    with sqlite3.connect(setup.root / "fences.db") as db:
        answers = [row[0] for row in db.execute("SELECT answer FROM fences WHERE answer IS NOT NULL")]
    assert any(references(first)[0]["uri"] in a for a in answers)
    assert not any(images.b64(images.png(77)) in a for a in answers)


async def test_without_a_store_images_pass_inline(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": [image_upstream(tmp_path / "state")]})
    with start_gateway(config) as gateway:
        async with connect(gateway.url, "legacy") as client:
            good = await client.call_tool("img__image", {"name": "webp"})
            bad = await client.call_tool("img__image", {"name": "jpeg_without_eoi"})
            failed = await client.call_tool("img__image", {"name": "error"})
        served = httpx.get(f"{gateway.base}/media/sha256/{hashlib.sha256(images.webp()).hexdigest()}")
    assert wire(good)["content"][1] == {"type": "image", "data": images.b64(images.webp()), "mimeType": "image/webp"}
    assert bad.is_error and "JPEG without its end of image marker" in text_of(bad)
    assert "[image 1 omitted]" in text_of(failed)
    assert served.status_code == 404
