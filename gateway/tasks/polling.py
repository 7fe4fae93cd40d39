"""How often an upstream task is polled: the server's pollInterval, or, when that is shorter,
double the previous interval, never more than a minute (SPEC 5)."""

from __future__ import annotations

__all__ = ["MAX_POLL_SECONDS", "next_interval"]

MAX_POLL_SECONDS = 60.0
DEFAULT_POLL_SECONDS = 1.0


def next_interval(previous: float | None, server_ms: int | float | None) -> float:
    """Seconds until the next poll. The first poll waits the server's interval (1 s if it names none);
    later ones back off by doubling up to a minute, but never poll faster than the server asks."""
    server = server_ms / 1000 if isinstance(server_ms, (int, float)) and server_ms > 0 else None
    if previous is None:
        return server if server is not None else DEFAULT_POLL_SECONDS
    doubled = min(previous * 2, MAX_POLL_SECONDS)
    return max(server, doubled) if server is not None else doubled
