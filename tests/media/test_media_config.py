"""`media:` in gateway.yaml: validated, errors with file, line and key; limits only lowered."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config.model import MediaConfig, config_from_text
from gateway.conventions.answers import Answer
from gateway.storage.database import Database
from gateway.errors import ConfigError, MediaStoreError
from gateway.media.runtime import open_media, rules_of
from tests.support import images


def test_defaults_are_the_spec_limits_and_no_store() -> None:
    media = config_from_text("server: {port: 0}\n").media
    assert media.store is None
    rules = rules_of(media)
    assert (rules.max_image_bytes, rules.max_images, rules.max_uri_bytes) == (3_750_000, 20, 1024)


def test_store_urls_and_lowered_limits_are_accepted() -> None:
    for store in ("file:///var/lib/dex/media", "file:var/media", "memory://",
                  "s3://dex-media/prod?endpoint_url=http://127.0.0.1:9000&region=eu-west-1&head_first=true"):
        text = f"media:\n  store: \"{store}\"\n  max_image_bytes: 1000000\n  max_images_per_result: 5\n"
        media = config_from_text(text).media
        assert (media.store, media.max_image_bytes, media.max_images_per_result) == (store, 1_000_000, 5)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("server: {port: 0}\nmedia:\n  store: \"ftp://x/y\"\n", "gw.yaml:3: media.store: must be file:///ABSOLUTE/DIR"),
        ("media:\n  store: \"s3://key:secret@dex-media/p\"\n", "gw.yaml:2: media.store: an s3:// media store URL holds no credentials"),
        ("media:\n  store: \"s3://dex-media/p?secret=1\"\n", "gw.yaml:2: media.store: unknown s3:// option(s) secret"),
        ("media:\n  max_image_bytes: 4000000\n", "gw.yaml:2: media.max_image_bytes: Input should be less than or equal to 3750000"),
        ("media:\n  max_images_per_result: 0\n", "gw.yaml:2: media.max_images_per_result"),
        ("media:\n  stores: \"memory://\"\n", "gw.yaml:2: media.stores: unknown key 'stores'"),
    ],
)
def test_errors_name_file_line_and_key(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_text(text, "gw.yaml")
    assert expected in str(caught.value), str(caught.value)


@pytest.mark.anyio
async def test_the_lifespan_opens_store_and_grants_and_refuses_an_unusable_store(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'gateway.db'}")
    async with open_media(MediaConfig(store=(tmp_path / "media").as_uri()), database) as media:
        answer = await media.stage.apply("t", "alice", Answer(content=[images.image_block(images.png())]))
        uri = answer.content[1]["uri"]
        assert (await media.reader.read_resource("alice", uri))["contents"][0]["mimeType"] == "image/png"
    (tmp_path / "a-file").write_text("not a directory")
    with pytest.raises(MediaStoreError):
        async with open_media(MediaConfig(store=(tmp_path / "a-file" / "media").as_uri()), database):
            pass
