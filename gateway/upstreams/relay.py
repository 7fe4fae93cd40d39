"""The call relay: where what an upstream says *during* one request goes (back to its caller).

The pipeline hands a `CallRelay` down with every request; upstream connections call it for
progress, log messages and server-to-client requests (elicitation, sampling, roots). Each
front entry supplies its own implementation (an SDK session, or the fast path's stream).

A relay also says what the calling client is, so each hop speaks its own era:

* `modern`: the client speaks 2026-07-28, so an upstream's `input_required` result is passed
  to it as it is (it answers and calls again); a handshake-era client is asked instead, with
  server-to-client requests on its session (gateway/pipeline/rounds.py).
* `client_capabilities()`: what the client can answer through this relay (elicitation,
  sampling, roots), declared to a 2026-07-28 upstream in each request's `_meta`.
* `log_level`: the lowest log level the client wants for this request, asked of a 2026-07-28
  upstream in each request's `_meta` (a handshake-era upstream gets `logging/setLevel`).
"""

from __future__ import annotations

from typing import Any, Protocol


__all__ = ["ASKING_CAPABILITIES", "CAPABILITY_OF", "CallRelay"]

# The client capabilities that let a server ask the client something during a request, by method.
CAPABILITY_OF = {"elicitation/create": "elicitation", "sampling/createMessage": "sampling", "roots/list": "roots"}
ASKING_CAPABILITIES = tuple(CAPABILITY_OF.values())


class CallRelay(Protocol):
    """Where messages an upstream sends during one request go: back to the calling client."""

    @property
    def modern(self) -> bool:
        """The client speaks 2026-07-28: it answers `input_required` results itself."""
        ...

    @property
    def log_level(self) -> str | None:
        """The lowest log level the client wants for this request; None: no log messages."""
        ...

    def client_capabilities(self) -> dict[str, Any]:
        """The client capabilities an upstream may rely on for this request (2026 `_meta` form)."""
        ...

    async def progress(self, progress: float, total: float | None, message: str | None) -> None: ...

    async def log(self, params: dict[str, Any]) -> None: ...

    async def request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """Ask the calling client (elicitation, sampling, roots); raises RelayRefused."""
        ...

    async def pause_stream(self) -> None:
        """The upstream ended its answer stream early, to be resumed (SSE polling): end the client's
        stream likewise when the client can resume it (a stateful session's event store)."""
        ...
