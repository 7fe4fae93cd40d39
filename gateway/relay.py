"""The call relay: where what an upstream says *during* one request goes (back to its caller).

The pipeline hands a `CallRelay` down with every request; upstream connections call it for
progress, log messages and server-to-client requests (elicitation, sampling, roots). Each
front entry supplies its own implementation (an SDK session, or the fast path's stream).
"""

from __future__ import annotations

from typing import Any, Protocol

from mcp_types import METHOD_NOT_FOUND

__all__ = ["CallRelay", "RelayRefused"]


class RelayRefused(Exception):
    """The calling client cannot answer a server-to-client request; sent upstream as an error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @classmethod
    def no_session(cls, method: str) -> "RelayRefused":
        """A client served statelessly has no channel for requests from the server."""
        return cls(
            METHOD_NOT_FOUND,
            f"{method} needs a live session with the client; the gateway serves this client statelessly",
        )


class CallRelay(Protocol):
    """Where messages an upstream sends during one request go: back to the calling client."""

    async def progress(self, progress: float, total: float | None, message: str | None) -> None: ...

    async def log(self, params: dict[str, Any]) -> None: ...

    async def request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """Ask the calling client (elicitation, sampling, roots); raises RelayRefused."""
        ...
