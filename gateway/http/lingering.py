"""A staged close for uvicorn's HTTP/1.1 protocol (RFC 9112 §9.6, "Tear-down").

A server that closes a connection while its client may still be sending loses its own answer.
A request refused before its body is read (a wrong token, a body over the cap, too many
connections) is answered and closed at once; the body's bytes then reach a closed socket, or
wait unread in it as it closes, and the server's kernel answers with a reset. A reset that
reaches the client before it read the answer discards the answer: the client sees "connection
reset by peer", not the 401 or the 413 it was sent.

`LingeringHttpProtocol.close_connection` closes in stages instead: what was written goes out,
the write side is shut (the client reads the whole answer, then an end of file), and what the
client still sends is read and dropped, never parsed, until it closes its side, for at most
`linger_seconds` and `linger_bytes`; then the connection closes. uvicorn closes a response's
connection (`Connection: close`, an app that failed mid-answer) through the transport it gives
each request, which here is one that closes this way. A transport that cannot shut its write
side alone (TLS) is closed at once, as before.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["LINGER_BYTES", "LINGER_SECONDS", "LingeringHttpProtocol", "StagedClose"]

LINGER_SECONDS = 2.0
LINGER_BYTES = 16 * 1024 * 1024


class LingeringHttpProtocol(HttpToolsProtocol):
    """uvicorn's protocol, closing a connection in stages (`close_connection`)."""

    linger_seconds: float = LINGER_SECONDS
    linger_bytes: int = LINGER_BYTES
    _linger: asyncio.TimerHandle | None = None
    _dropped: int = 0

    @property
    def lingering(self) -> bool:
        """The write side is shut; what arrives is dropped until the connection closes."""
        return self._linger is not None

    @property
    def closing(self) -> bool:
        """Nothing more may be written: the connection is closing or lingering."""
        return self.lingering or self.transport.is_closing()

    def close_connection(self) -> None:
        """Close this connection in stages: the write side now, the rest when the client closes
        its own, or after `linger_seconds`, or past `linger_bytes` more."""
        transport = self.transport
        if self.closing:
            return
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self._linger = self.loop.call_later(self.linger_seconds, transport.close)
        self.flow.resume_reading()  # uvicorn pauses reading while a body waits for the app

    def data_received(self, data: bytes) -> None:
        if self._linger is None:
            super().data_received(data)
            return
        self._dropped += len(data)
        if self._dropped > self.linger_bytes:
            self.transport.close()

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        if self.cycle is not None:
            self.cycle.transport = self.request_transport()  # type: ignore[assignment]

    def request_transport(self) -> StagedClose:
        """The transport one request's response is written through."""
        return StagedClose(self)

    def on_response_complete(self) -> None:
        if self._linger is None:  # else: no further request on this connection
            super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._linger is not None:
            self._linger.cancel()
        super().connection_lost(exc)


class StagedClose:
    """A request's transport: writes go to the connection, `close` closes it in stages."""

    __slots__ = ("_protocol",)

    def __init__(self, protocol: LingeringHttpProtocol) -> None:
        self._protocol = protocol

    def write(self, data: bytes) -> None:
        self._protocol.transport.write(data)

    def close(self) -> None:
        self._protocol.close_connection()

    def is_closing(self) -> bool:
        return self._protocol.closing
