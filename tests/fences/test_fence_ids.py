from __future__ import annotations

import hashlib

from gateway.fences import fence_id, fingerprint


def test_fence_id_is_deterministic_sha256_hex() -> None:
    fid = fence_id("alice", "key-1")
    assert fid == fence_id("alice", "key-1")
    assert len(fid) == 64 and int(fid, 16) >= 0


def test_fence_id_fields_are_length_prefixed() -> None:
    assert fence_id("a", "bc") != fence_id("ab", "c")
    assert fence_id("", "ab") != fence_id("a", "b")


def test_fence_id_depends_on_principal() -> None:
    assert fence_id("alice", "k") != fence_id("bob", "k")


def test_fence_id_is_not_a_plain_hash_of_the_concatenation() -> None:
    assert fence_id("a", "b") != hashlib.sha256(b"ab").hexdigest()


def test_fingerprint_is_canonical() -> None:
    assert fingerprint("t", {"a": 1, "b": [1, 2]}) == fingerprint("t", {"b": [1, 2], "a": 1})
    assert fingerprint("t", {"a": {"y": 1, "x": 2}}) == fingerprint("t", {"a": {"x": 2, "y": 1}})
    assert fingerprint("t", None) == fingerprint("t", {})


def test_fingerprint_distinguishes_tool_and_arguments() -> None:
    assert fingerprint("t", {"a": 1}) != fingerprint("u", {"a": 1})
    assert fingerprint("t", {"a": 1}) != fingerprint("t", {"a": "1"})
    assert fingerprint("t", {"a": "é"}) != fingerprint("t", {"a": "e"})
    # The tool/arguments boundary is length-prefixed too.
    assert fingerprint("t{", {}) != fingerprint("t", {"{": 1})
