"""Idempotency fences (SPEC 4): a retried write never runs twice.

This package knows fence stores and the fence record, not MCP: answers are stored as
opaque JSON dicts (the `Answer` wire form) and replayed with the REPLAYED_KEY marker.
"""

from __future__ import annotations

from .admin import purge, show, stats
from .fence import Fences
from .ids import fence_id, fingerprint
from .outcomes import BeginResult, FenceRejected, FenceUnknown, Proceed, Replay, Ticket, UnknownReason
from .records import FenceRecord, FenceState, FenceStats, Owner
from .store import FenceStore, open_fence_store

__all__ = [
    "BeginResult",
    "FenceRecord",
    "FenceRejected",
    "FenceState",
    "FenceStats",
    "FenceStore",
    "FenceUnknown",
    "Fences",
    "Owner",
    "Proceed",
    "Replay",
    "Ticket",
    "UnknownReason",
    "fence_id",
    "fingerprint",
    "open_fence_store",
    "purge",
    "show",
    "stats",
]
