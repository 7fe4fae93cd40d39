"""The idempotency key of a tool call the host makes: `<session id>/<turn id>/<tool call id>`.

Session ids never contain `/` (`session_ids.py`) and turn ids are `turn-<n>`, so a key names its
call: the store files an upstream task under the session, turn and call its key names.
"""

from __future__ import annotations

from typing import NamedTuple


class CallOfKey(NamedTuple):
    session_id: str
    turn_id: str
    tool_call_id: str


def idempotency_key(session_id: str, turn_id: str, tool_call_id: str) -> str:
    return f"{session_id}/{turn_id}/{tool_call_id}"


def call_of_key(key: str) -> CallOfKey | None:
    """The call a key names; None for a key the host did not make."""
    parts = key.split("/", 2)
    return CallOfKey(*parts) if len(parts) == 3 and all(parts) else None
