"""Fence identity: which fence a call belongs to, and what call first claimed it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def _length_prefixed(*fields: str) -> bytes:
    # Each field is preceded by its byte length so no two field lists share an encoding:
    # ("a", "bc") and ("ab", "c") hash differently, whatever characters keys contain.
    out = bytearray()
    for value in fields:
        raw = value.encode("utf-8")
        out += len(raw).to_bytes(8, "big")
        out += raw
    return bytes(out)


def fence_id(principal: str, key: str) -> str:
    """The fence of one idempotency key as sent by one authenticated principal.

    The principal is part of the hash, so a principal can never name (read, block or
    replay) another principal's fence, even with the same key.
    """
    return hashlib.sha256(b"dex-fence-v1\x00" + _length_prefixed(principal, key)).hexdigest()


# One encoder, built once: `encode` keeps no state between calls (json.dumps would build one per call).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> str:
    """JSON text that is the same for equal values, whatever the key order."""
    return _CANONICAL.encode(value)


def arguments_digest(arguments: Mapping[str, Any] | None) -> str:
    """SHA-256 (hex) of the arguments' canonical JSON, missing arguments as `{}` (docs/audit.md
    shows how to compute it): what an approval is bound to and what an audit row names.

    Arguments with no JSON form (NaN, infinities; the HTTP edge refuses them) have no digest:
    ValueError, as for `fingerprint`.
    """
    return hashlib.sha256(canonical_json(dict(arguments or {})).encode("utf-8")).hexdigest()


def fingerprint(tool: str, arguments: Mapping[str, Any] | None) -> str:
    """The hash of (tool, canonical arguments): a key reused for another call differs here.

    Missing arguments and an empty object are the same call (MCP clients send either).
    """
    args_text = canonical_json(dict(arguments or {}))
    return hashlib.sha256(b"dex-call-v1\x00" + _length_prefixed(tool, args_text)).hexdigest()
