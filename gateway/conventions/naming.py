"""Exposed tool names (SPEC sections 2 and 7): sanitised, prefixed, at most 64 characters."""

from __future__ import annotations

import hashlib
import re

MAX_NAME_LENGTH = 64
SERVER_SEPARATOR = "__"
HASH_LENGTH = 8

_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_-]")
_SEPARATORS = re.compile(r"[^A-Za-z0-9]+")
# One word of a camelCase identifier, tried in order: an acronym with a plural "s" (IDs),
# an acronym run not followed by a lowercase letter (URL in getURLFor), a capitalised or
# lowercase word, a bare number. Digits stay with the word before them (v2, base64).
_WORD = re.compile(r"[A-Z]{2,}s(?![a-z])[0-9]*|[A-Z]+(?![a-z])[0-9]*|[A-Z]?[a-z]+[0-9]*|[0-9]+")


def sanitize(name: str) -> str:
    """Every character other than an ASCII letter, digit, `_` or `-` becomes `_`."""
    return _NOT_ALLOWED.sub("_", name)


def exposed_tool_name(server: str, tool: str, prefix: str | None = None) -> str:
    """`<server>__<tool>`, or `<prefix><tool>` when the upstream sets a prefix ("" = none)."""
    full = (f"{server}{SERVER_SEPARATOR}" if prefix is None else prefix) + tool
    return fit_name(full)


def connector_tool_name(connector: str, operation: str) -> str:
    """`<connector>_<operation in snake_case>`; an acronym run stays one word."""
    return fit_name(f"{connector}_{snake_case(operation)}")


def snake_case(identifier: str) -> str:
    """listStoryIDs -> list_story_ids, getURLForID -> get_url_for_id."""
    words = [w for part in _SEPARATORS.split(identifier) for w in _WORD.findall(part)]
    return "_".join(w.lower() for w in words)


def fit_name(full: str) -> str:
    """Sanitise `full`; over the limit, cut it and end with a hash of the unsanitised name, so
    two long names that differ only after the cut (or only in replaced characters) differ."""
    name = sanitize(full)
    if len(name) <= MAX_NAME_LENGTH:
        return name
    digest = hashlib.sha256(full.encode("utf-8")).hexdigest()[:HASH_LENGTH]
    return f"{name[: MAX_NAME_LENGTH - HASH_LENGTH - 1]}_{digest}"
