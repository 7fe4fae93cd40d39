"""Text from the model, the gateway or an approver, made safe to show: on a terminal, in an approval
card (the gateway's, gateway/approvals/, and the agent host's) and in the approvals APIs' JSON.

A person decides an approval from what the card shows, so nothing in a tool call may change
how the card reads: no terminal control sequence (ESC, CSI, OSC, C1 controls), no bidi override
or isolate, no zero-width or other invisible character, no line break or tab that would move
text around. Each such character is shown as a visible escape (`\\n`, `\\u001b`, `\\u202e`),
never removed, so the card still tells the whole call. Keys that are not plain identifiers are
quoted, and very long values are cut with a marker that says how much was left out.

Which characters count: every Unicode "other" (Cc controls incl. C0/C1/DEL, Cf format incl.
bidi controls, zero-width characters, tags, soft hyphen, BOM; Cs, Co, Cn), line and paragraph
separators (Zl, Zp), and every space but U+0020 (Zs lookalikes).
"""

from __future__ import annotations

import json
import re
import unicodedata
from functools import lru_cache
from typing import Any

MAX_KEY_CHARS = 64
MAX_VALUE_CHARS = 200
MAX_ARGUMENTS = 50
MAX_LINE_CHARS = 400

_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@lru_cache(maxsize=4096)
def is_unsafe(char: str) -> bool:
    """True for a character that must never reach a terminal or a card as itself."""
    return char != " " and unicodedata.category(char) in _UNSAFE_CATEGORIES


def _escape_char(char: str) -> str:
    """A visible, JSON-valid escape (a surrogate pair beyond the BMP, as JSON spells it)."""
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _pieces(text: str, keep_newlines: bool = False) -> list[str]:
    """The text as display pieces: safe characters as themselves, unsafe ones escaped."""
    return [c if (keep_newlines and c == "\n") or not is_unsafe(c) else _escape_char(c) for c in text]


def _cut(pieces: list[str], limit: int) -> str:
    """Join pieces up to `limit` characters, never splitting an escape; mark what was left out."""
    total = sum(len(p) for p in pieces)
    if total <= limit:
        return "".join(pieces)
    kept: list[str] = []
    used = 0
    for piece in pieces:
        if used + len(piece) > limit:
            break
        kept.append(piece)
        used += len(piece)
    return "".join(kept) + f"…[+{total - used} chars]"


def terminal_text(text: str, limit: int | None = None, keep_newlines: bool = False) -> str:
    """Free text (assistant output, tool results, questions) for a terminal: unsafe characters
    escaped; with `keep_newlines`, plain `\\n` line breaks stay line breaks."""
    pieces = _pieces(text, keep_newlines)
    return "".join(pieces) if limit is None else _cut(pieces, limit)


def key_view(key: str) -> str:
    """An argument name: as itself when a plain identifier, else quoted and escaped as JSON."""
    if _IDENTIFIER.match(key) and len(key) <= MAX_KEY_CHARS:
        return key
    return _cut(_pieces(json.dumps(key, ensure_ascii=False)), MAX_KEY_CHARS)


def value_view(value: Any) -> str:
    """An argument value as JSON, unsafe characters escaped the JSON way, cut when long."""
    return _cut(_pieces(json.dumps(value, ensure_ascii=False)), MAX_VALUE_CHARS)


def arguments_view(arguments: dict[str, Any]) -> str:
    """`key: value` pairs in the call's own order, each value as JSON; unambiguous and inert."""
    shown = [f"{key_view(str(key))}: {value_view(value)}" for key, value in list(arguments.items())[:MAX_ARGUMENTS]]
    if len(arguments) > MAX_ARGUMENTS:
        shown.append(f"…[+{len(arguments) - MAX_ARGUMENTS} more arguments]")
    return ", ".join(shown)
