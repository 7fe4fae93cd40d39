"""The connector Call ID: the same on every attempt of one call, so the service can dedupe."""

from __future__ import annotations

import hashlib
import uuid

CALL_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://superdurable.dev/dex-connectors/call-id/v1")


def length_prefixed(*fields: str) -> bytes:
    """Each field as a 4-byte big-endian length and its UTF-8 bytes, so no two different field
    lists give the same bytes (plain joining would make ("a/b", "c") equal ("a", "b/c"))."""
    out = bytearray()
    for field in fields:
        data = field.encode("utf-8")
        out += len(data).to_bytes(4, "big") + data
    return bytes(out)


def derive_call_id(call_key: str, connector_id: str, operation: str) -> uuid.UUID:
    """UUIDv5 over the length-prefixed fields (call key, connector id, operation id).

    `call_key` is the gateway's fence id when the call is fenced, else the client's
    idempotency key. Computed by hand because uuid.uuid5 takes only `str` names before 3.12.
    """
    digest = hashlib.sha1(CALL_ID_NAMESPACE.bytes + length_prefixed(call_key, connector_id, operation)).digest()
    return uuid.UUID(bytes=digest[:16], version=5)
