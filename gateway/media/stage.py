"""The media stage of the tools/call tail: an answer in, an answer out (SPEC 6).

    an error (isError, or outcome rejected / unknown)
        each image block becomes the text `[image <n> omitted]`, store or no store: no error
        holds image bytes
    a result, every image valid
        with a store: each image is uploaded (once per hash), granted to the principal, and its
        block becomes `[image <n>]` + a resource_link carrying the reference
        without a store: the image blocks pass through inline, `mimeType` set to the type
        found in the bytes
    a result with an invalid image, or too many
        the call fails with a text naming the image and the rule; nothing of it is stored

It runs after the outcome and before the result size limit and the fence, so a fence stores
(and a retry replays) references, never the bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ..protocol import ContentBlock
from ..conventions.answers import Answer
from ..conventions.keys import Outcome
from ..errors import InvalidImage, MediaStoreError
from .grants import GrantStore
from .references import ImageReference, image_blocks, media_uri
from .stores import MediaStore
from .validation import ImageRules, ValidImage, check_count, check_image, check_uri

__all__ = ["MediaStage"]

logger = logging.getLogger(__name__)

_ERROR_OUTCOMES = (Outcome.REJECTED, Outcome.UNKNOWN)


class MediaStage:
    def __init__(self, rules: ImageRules, store: MediaStore | None = None, grants: GrantStore | None = None) -> None:
        if (store is None) != (grants is None):
            raise ValueError("a media store needs its grants table, and grants need a store")
        self.rules = rules
        self._store = store
        self._grants = grants

    async def apply(self, tool: str, principal: str, answer: Answer) -> Answer:
        positions = [i for i, block in enumerate(answer.content) if block.get("type") == "image"]
        if not positions:
            return answer
        if answer.is_error or answer.outcome in _ERROR_OUTCOMES:
            return _replaced(answer, {i: [_text(f"[image {n} omitted]")] for n, i in enumerate(positions, 1)})
        try:
            check_count(len(positions), self.rules)
        except InvalidImage as exc:
            return Answer.error_text(_refused_text(tool, str(exc), self.rules))
        images: list[ValidImage] = []
        for n, i in enumerate(positions, 1):
            try:
                images.append(check_image(answer.content[i], self.rules))
            except InvalidImage as exc:
                return Answer.error_text(_refused_text(tool, f"image {n} is refused: {exc}", self.rules))
        if self._store is None or self._grants is None:
            return _replaced(answer, {i: [{**answer.content[i], "mimeType": image.mime_type}] for i, image in zip(positions, images)})
        try:
            references = await self._keep(principal, images)
        except (MediaStoreError, InvalidImage) as exc:
            logger.error("tool %s: storing an image of its result failed: %s", tool, exc)
            return Answer.error_text(_store_failed_text(tool))
        return _replaced(
            answer,
            {i: image_blocks(n, ref, answer.content[i].get("annotations")) for n, (i, ref) in enumerate(zip(positions, references), 1)},
        )

    async def _keep(self, principal: str, images: list[ValidImage]) -> list[ImageReference]:
        """Upload each distinct image once, grant them all, and name them."""
        assert self._store is not None and self._grants is not None
        references: dict[str, ImageReference] = {}
        for image in images:
            if image.sha256 in references:
                continue
            uri = media_uri(image.sha256)
            check_uri(uri, self.rules)
            if await self._store.put(image):
                logger.info("media: stored %s (%s, %d bytes)", self._store.object_uri(image.sha256), image.mime_type, image.size)
            references[image.sha256] = ImageReference(
                uri=uri, mime_type=image.mime_type, sha256=image.sha256, size_bytes=image.size
            )
        await self._grants.grant(principal, list(references))
        return [references[image.sha256] for image in images]


def _replaced(answer: Answer, replacements: dict[int, list[ContentBlock]]) -> Answer:
    content: Iterable[list[ContentBlock]] = (replacements.get(i, [block]) for i, block in enumerate(answer.content))
    return Answer([b for blocks in content for b in blocks], answer.structured_content, answer.is_error, answer.meta)


def _text(text: str) -> ContentBlock:
    return {"type": "text", "text": text}


def _refused_text(tool: str, problem: str, rules: ImageRules) -> str:
    return (
        f"The tool {tool} ran, but its result was not passed on: {problem}. The gateway passes on PNG, JPEG, GIF "
        f"and WebP images in canonical base64, each at most {rules.max_image_bytes:,} bytes, at most "
        f"{rules.max_images} per result; nothing of this result was stored. If the tool writes, check the target "
        "system before calling it again."
    )


def _store_failed_text(tool: str) -> str:
    return (
        f"The tool {tool} ran, but the gateway could not store the images of its result, so the result was not "
        "passed on (the reason is in the gateway log). If the tool writes, check the target system before calling "
        "it again."
    )
