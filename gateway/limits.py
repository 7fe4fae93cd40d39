"""The last check of a result before it is recorded: it can be sent, and it is not too large.

One serialization answers both: a result with text that is not valid Unicode (a lone UTF-16
surrogate, which JSON escapes can carry but UTF-8 cannot) cannot be sent to any client, and a
result over `server.max_result_bytes` (counted on the answer the client gets) is refused. Either
way the call fails with a text that says why (with both sizes), and the fence records that
failed answer, so a retry gets the same text instead of the unsendable result.
"""

from __future__ import annotations

import pydantic_core

from .conventions.answers import Answer

__all__ = ["over_result_limit"]


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
    return Answer.error_text(
        f"The result of {tool} is {size} bytes, over this gateway's limit of {limit} bytes "
        "(server.max_result_bytes), so it was not passed on. The tool ran: if it writes, check the target "
        "system before calling it again."
    )
