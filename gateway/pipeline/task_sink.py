"""What a running gateway task hears from the upstream task that does its work (a protocol, so the
call pipeline can hand it down without knowing the task machinery)."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["UpstreamTaskSink"]


class UpstreamTaskSink(Protocol):
    """Handed down with a call that runs as a gateway task (`ToolCall.sink`: gateway/pipeline/stages.py)."""

    # Set when another process resumes polling an upstream task it took over (no new upstream task).
    resume_task_id: str | None
    # Whether the client can answer input requests itself (2026-07-28 `tasks/update`).
    carries_input: bool
    # The TTL the client asked for (milliseconds), passed to the upstream.
    ttl_ms: int | None

    async def created(self, task_id: str, *, era: str | None, stateless: bool, poll_interval_ms: int | None,
                      ttl_ms: int | None) -> None:
        """The upstream made its task: stored so any replica (stateless upstreams) can poll it."""

    async def status(self, status: str, message: str | None, input_requests: dict[str, Any] | None) -> None:
        """The upstream task's status changed (or its message did)."""

    async def failed(self, error: dict[str, Any]) -> None:
        """The upstream task failed with this JSON-RPC error object."""
