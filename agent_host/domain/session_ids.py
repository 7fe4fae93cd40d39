"""The session id rule (Collie's id rule): 1 to 128 bytes of UTF-8, no control character, no
whitespace, and none of `/`, `?` or `#` (an id travels in URL paths: /sessions/{id},
/ui/sessions/{id}). Checked wherever an id enters: the command line, the HTTP API, the store."""

from __future__ import annotations

import unicodedata

__all__ = ["MAX_SESSION_ID_BYTES", "check_session_id", "session_id_problem"]

MAX_SESSION_ID_BYTES = 128
_FORBIDDEN = "/?#"


def session_id_problem(value: str) -> str | None:
    """None for a valid session id, else what is wrong with it (one line, naming the id)."""
    size = len(value.encode("utf-8", "surrogatepass"))
    if size == 0:
        return "a session id cannot be empty"
    shown = ascii(value[:40]) + ("…" if len(value) > 40 else "")
    if size > MAX_SESSION_ID_BYTES:
        return f"session id {shown} is {size} bytes long; at most {MAX_SESSION_ID_BYTES} are allowed"
    for char in value:
        if char in _FORBIDDEN:
            return f"session id {shown} contains {char!r}; a session id cannot contain /, ? or #"
        if char.isspace():
            return f"session id {shown} contains whitespace"
        if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            return f"session id {shown} contains a control or invisible character (U+{ord(char):04X})"
    return None


def check_session_id(value: str) -> str:
    """The id, or ValueError saying what is wrong with it."""
    problem = session_id_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value
