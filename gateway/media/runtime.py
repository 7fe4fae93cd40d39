"""The gateway's media, as its lifespan opens and closes it: the stage for the tools/call
tail and the reader for GET /media and resources/read, over one store and one grants table."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio

from ..config.model import MediaConfig
from ..storage.database import Database
from ..errors import MediaStoreError
from .grants import open_grant_store
from .serving import MediaReader
from .stage import MediaStage
from ..storage.media_urls import parse_media_store_url
from .stores import media_store
from .validation import ImageRules

__all__ = ["Media", "open_media", "rules_of"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Media:
    stage: MediaStage
    reader: MediaReader


def rules_of(config: MediaConfig) -> ImageRules:
    return ImageRules(
        max_image_bytes=config.max_image_bytes, max_images=config.max_images_per_result, max_uri_bytes=config.max_uri_bytes
    )


@asynccontextmanager
async def open_media(config: MediaConfig, database: Database) -> AsyncIterator[Media]:
    """Without `media.store`: images are validated and pass inline; nothing is served."""
    rules = rules_of(config)
    if config.store is None:
        yield Media(MediaStage(rules), MediaReader(None, None))
        return
    store = media_store(parse_media_store_url(config.store), rules.max_image_bytes)
    grants = open_grant_store(database)
    try:
        await store.open()
    except MediaStoreError as exc:
        logger.error("the media store cannot be used, so the gateway does not start: %s", exc)
        raise
    try:
        await grants.open()
        try:
            logger.info("media store: %s<sha256>", store.object_uri(""))
            yield Media(MediaStage(rules, store, grants), MediaReader(store, grants))
        finally:
            with anyio.CancelScope(shield=True):
                await grants.close()
    finally:
        with anyio.CancelScope(shield=True):
            await store.close()
