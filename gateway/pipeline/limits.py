"""The last check of a result before it is recorded: it can be sent, and it is not too large.

One serialization answers both: a result with text that is not valid Unicode (a lone UTF-16
surrogate, which JSON escapes can carry but UTF-8 cannot) cannot be sent to any client, and a
result over `server.max_result_bytes` (counted on the answer the client gets) is refused. Either
way the call fails with a text that says why (with both sizes), and the fence records that
failed answer, so a retry gets the same text instead of the unsendable result.

An HTTP upstream's answer is not even read past `upstream_answer_cap` bytes (the result limit plus
room for framing, JSON escapes and images a media store takes out): the call then fails with the
same text (`answer_over_cap`), and the gateway never holds more than the cap of one answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pydantic_core

from ..conventions.answers import Answer

if TYPE_CHECKING:
    from ..config.model import GatewayConfig

__all__ = ["answer_over_cap", "over_result_limit", "upstream_answer_cap"]

# Room for the JSON-RPC envelope and SSE framing of a result at the limit.
_FRAMING_BYTES = 64 * 1024


def upstream_answer_cap(config: "GatewayConfig") -> int:
    """The most bytes read of one upstream answer (a body, or one SSE event).

    The result limit counts the answer the client gets; the upstream's own serialization may be
    up to twice as long (JSON `\\uXXXX` escapes of non-ASCII text), plus its framing, plus the
    images a media store takes out of the result (their base64, at the media limits)."""
    limit = config.server.max_result_bytes
    cap = 2 * limit + _FRAMING_BYTES
    media = config.media
    if media.store is not None:
        cap += media.max_images_per_result * (4 * -(-media.max_image_bytes // 3))
    return cap


def over_result_limit(tool: str, answer: Answer, limit: int) -> Answer | None:
    """The failed answer that replaces `answer` when it cannot be sent or is over `limit` bytes, else None."""
    try:
        size = len(pydantic_core.to_json(answer.to_wire()))
    except pydantic_core.PydanticSerializationError:
        return Answer.error_text(
            f"The result of {tool} contains text that is not valid Unicode (a lone surrogate), so it cannot be "
            "passed on. The tool ran: if it writes, check the target system before calling it again."
        )
    if size <= limit:
        return None
    return _too_large(tool, f"{size} bytes", limit)


def answer_over_cap(tool: str, read: int, limit: int) -> Answer:
    """The failed answer of a call whose upstream answer passed `upstream_answer_cap` (reading stopped
    after `read` bytes): the result limit's text."""
    return _too_large(tool, f"more than {read} bytes", limit)


def _too_large(tool: str, size: str, limit: int) -> Answer:
    return Answer.error_text(
        f"The result of {tool} is {size}, over this gateway's limit of {limit} bytes "
        "(server.max_result_bytes), so it was not passed on. The tool ran: if it writes, check the target "
        "system before calling it again."
    )
