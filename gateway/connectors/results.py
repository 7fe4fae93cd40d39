"""How a connector's value and errors become text: compact JSON, and the 64 KiB cut."""

from __future__ import annotations

import json
from typing import Any

from ..conventions.keys import GATEWAY_PREFIX

MAX_RESULT_BYTES = 64 * 1024
TRUNCATED_BYTES_KEY = GATEWAY_PREFIX + "truncatedOutputBytes"


def compact_json(value: Any) -> str:
    """The value as compact JSON with sorted keys (stable, so replays compare equal)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def truncation_note(full_bytes: int, limit: int) -> str:
    return f"\n[result truncated: the full result was {full_bytes} bytes of UTF-8; the first {limit} bytes are shown]"


def cut(text: str, limit: int = MAX_RESULT_BYTES) -> tuple[str, int | None]:
    """`text` cut to `limit` UTF-8 bytes plus the note, and the full size; (text, None) when
    it fits. The cut never splits a character, so the result stays valid UTF-8."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text, None
    head = data[:limit].decode("utf-8", errors="ignore")
    return head + truncation_note(len(data), limit), len(data)
