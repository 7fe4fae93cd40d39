"""What the tests' fake call relays say about their client (gateway/upstreams/relay.py `CallRelay`)."""

from __future__ import annotations

from typing import Any


class HandshakeClient:
    """A handshake-era client that declared no capability: it is asked (never handed input_required
    results), wants every log level from the upstream's own rule, and cannot resume a stream."""

    modern = False
    log_level: str | None = None

    def client_capabilities(self) -> dict[str, Any]:
        return {}

    async def pause_stream(self) -> None:
        pass
