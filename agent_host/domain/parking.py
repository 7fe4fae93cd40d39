"""Parking a turn: a turn that waits for something outside its process (an approval, an answer,
the end of a `durable_wait`, the end of an upstream task) is let go by a host that drives
sessions by itself (`dex-agent serve`) instead of waiting in memory. Everything it waits for is
stored (the approval, the question, the call's `wait_until`, the task id and its last polled
status), so the service picks the turn up again when it is due (`store/sqlite_service.py`,
`due_sessions`).
"""

from __future__ import annotations


class TurnParked(Exception):
    """Raised by a wait in parking mode; `until` is the stored wake-up time or deadline (None: an
    answer with no deadline)."""

    def __init__(self, what: str, until: float | None) -> None:
        super().__init__(f"turn parked: waits for {what}")
        self.what = what
        self.until = until
