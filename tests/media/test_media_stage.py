"""The media stage alone (answer in, answer out), on the in-memory store and grants, and the
grants table on SQLite and PostgreSQL."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.conventions.answers import Answer
from gateway.conventions.keys import OUTCOME_KEY
from gateway.storage.database import Database
from gateway.errors import MediaStoreError, RequestError
from gateway.media.grants import MemoryGrantStore, open_grant_store
from gateway.media.references import IMAGE_META_KEY
from gateway.media.serving import MediaReader
from gateway.media.stage import MediaStage
from gateway.media.stores.memory import MemoryMediaStore
from gateway.media.validation import ImageRules, ValidImage
from tests.support import images
from tests.support.postgres import fresh_schema, schema_url

pytestmark = pytest.mark.anyio

RULES = ImageRules()


def result(*blocks: dict[str, Any], is_error: bool = False, meta: dict[str, Any] | None = None) -> Answer:
    return Answer(content=[{"type": "text", "text": "before"}, *blocks, {"type": "text", "text": "after"}],
                  is_error=is_error, meta=meta)


def stored_stage() -> tuple[MediaStage, MemoryMediaStore, MemoryGrantStore]:
    store, grants = MemoryMediaStore(RULES.max_image_bytes), MemoryGrantStore()
    return MediaStage(RULES, store, grants), store, grants


async def test_each_image_becomes_a_numbered_text_and_a_resource_link() -> None:
    stage, store, grants = stored_stage()
    png, gif = images.png(), images.gif()
    answer = await stage.apply("t", "alice", result(images.image_block(png), images.image_block(gif, "image/png")))
    kinds = [b["type"] for b in answer.content]
    assert kinds == ["text", "text", "resource_link", "text", "resource_link", "text"]
    assert [answer.content[1]["text"], answer.content[3]["text"]] == ["[image 1]", "[image 2]"]
    link = answer.content[4]
    ref = link["_meta"][IMAGE_META_KEY]
    assert ref["type"] == "image" and ref["mime_type"] == "image/gif" and ref["size_bytes"] == len(gif)
    assert link["uri"] == ref["uri"] == f"dex-gateway://media/sha256/{ref['sha256']}" and link["mimeType"] == "image/gif"
    assert set(ref) == {"type", "uri", "mime_type", "sha256", "size_bytes"}
    assert store.writes == 2 and grants.rows == {("alice", s) for s in store.objects}
    assert images.b64(png) not in json.dumps(answer.to_wire())


async def test_the_same_bytes_are_stored_once() -> None:
    stage, store, _ = stored_stage()
    block = images.image_block(images.png())
    first = await stage.apply("t", "alice", result(block, block))
    second = await stage.apply("t", "bob", result(block))
    assert store.writes == 1
    assert first.content[2]["uri"] == first.content[4]["uri"] == second.content[2]["uri"]


@pytest.mark.parametrize("meta", [None, {OUTCOME_KEY: "unknown"}, {OUTCOME_KEY: "rejected"}])
async def test_failed_results_hold_no_image(meta: dict[str, Any] | None) -> None:
    stage, store, _ = stored_stage()
    bad = {"type": "image", "data": "not base64!", "mimeType": "image/png"}
    answer = await stage.apply("t", "alice", result(images.image_block(images.png()), bad, is_error=meta is None, meta=meta))
    assert [b.get("text") for b in answer.content] == ["before", "[image 1 omitted]", "[image 2 omitted]", "after"]
    assert store.writes == 0
    inline = await MediaStage(RULES).apply("t", "alice", result(images.image_block(images.png()), is_error=True))
    assert inline.content[1] == {"type": "text", "text": "[image 1 omitted]"}


async def test_one_bad_image_fails_the_call_and_nothing_is_stored() -> None:
    stage, store, grants = stored_stage()
    text, _ = images.BAD_IMAGES["truncated_png"]
    answer = await stage.apply("pay__chart", "alice", result(images.image_block(images.png()), {"type": "image", "data": text, "mimeType": "image/png"}))
    assert answer.is_error and "pay__chart" in answer.text and "image 2 is refused: a truncated PNG" in answer.text
    assert store.writes == 0 and not grants.rows
    many = await stage.apply("t", "alice", result(*[images.image_block(images.png(i)) for i in range(21)]))
    assert many.is_error and "21 images, over the limit of 20" in many.text and store.writes == 0


async def test_without_a_store_valid_images_pass_inline() -> None:
    stage = MediaStage(RULES)
    block = images.image_block(images.webp(), "image/png")  # the declared type is wrong
    answer = await stage.apply("t", "alice", result(block))
    assert answer.content[1] == {**block, "mimeType": "image/webp"}
    plain = result()
    assert await stage.apply("t", "alice", plain) is plain  # no image: the very same answer


class _FailingStore(MemoryMediaStore):
    async def put(self, image: ValidImage) -> bool:
        raise MediaStoreError("the disk is full")


async def test_a_store_failure_fails_the_call_without_the_bytes() -> None:
    grants = MemoryGrantStore()
    stage = MediaStage(RULES, _FailingStore(RULES.max_image_bytes), grants)
    answer = await stage.apply("t", "alice", result(images.image_block(images.png())))
    assert answer.is_error and "could not store the images" in answer.text and not grants.rows


async def test_the_reader_serves_a_principal_only_what_reached_it() -> None:
    stage, store, grants = stored_stage()
    answer = await stage.apply("t", "alice", result(images.image_block(images.png())))
    uri = answer.content[2]["uri"]
    reader = MediaReader(store, grants)
    read = await reader.read_resource("alice", uri)
    assert base64.b64decode(read["contents"][0]["blob"]) == images.png() and read["contents"][0]["mimeType"] == "image/png"
    for principal, target in [("bob", uri), ("alice", "dex-gateway://media/sha256/" + "0" * 64)]:
        with pytest.raises(RequestError, match="resource not found"):
            await reader.read_resource(principal, target)


@pytest.fixture(params=["sqlite", "postgres"])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    if request.param == "sqlite":
        async with Database(f"sqlite:///{tmp_path / 'gateway.db'}") as db:
            yield db
        return
    async with fresh_schema("media_test") as schema, Database(schema_url(schema)) as db:
        yield db


async def test_grants_in_the_gateway_database_are_idempotent(database: Database) -> None:
    grants, other_replica = open_grant_store(database), open_grant_store(database)
    await grants.open()
    await other_replica.open()  # its migration finds the table there
    try:
        a, b = "a" * 64, "b" * 64
        await grants.grant("alice", [a, b])
        await grants.grant("alice", [a])  # a replayed answer: nothing new
        assert await other_replica.granted("alice", a) and await other_replica.granted("alice", b)
        assert not await other_replica.granted("bob", a)
    finally:
        await grants.close()
        await other_replica.close()
