"""The session id rule (Collie's id rule): 1 to 128 bytes of UTF-8, no control character, no
whitespace, and none of `/`, `?` or `#` (an id travels in URL paths: /sessions/{id},
/ui/sessions/{id}). Checked wherever an id enters: the command line, the HTTP API, the store."""

from __future__ import annotations

import unicodedata

from . import texts

__all__ = ["MAX_SESSION_ID_BYTES", "check_session_id", "session_id_problem"]

MAX_SESSION_ID_BYTES = 128
_FORBIDDEN = "/?#"


def session_id_problem(value: str) -> str | None:
    """None for a valid session id, else what is wrong with it (one line, naming the id)."""
    size = len(value.encode("utf-8", "surrogatepass"))
    if size == 0:
        return texts.SESSION_ID_EMPTY
    shown = ascii(value[:40]) + ("…" if len(value) > 40 else "")
    if size > MAX_SESSION_ID_BYTES:
        return texts.session_id_too_long(shown, size, MAX_SESSION_ID_BYTES)
    for char in value:
        if char in _FORBIDDEN:
            return texts.session_id_forbidden(shown, char)
        if char.isspace():
            return texts.session_id_whitespace(shown)
        if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            return texts.session_id_control(shown, ord(char))
    return None


def check_session_id(value: str) -> str:
    """The id, or ValueError saying what is wrong with it."""
    problem = session_id_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value
