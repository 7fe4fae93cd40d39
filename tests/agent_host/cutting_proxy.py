"""A loopback TCP proxy that lets a `tools/call` request through and cuts its connection before
the answer comes back: the host's request reaches the gateway, the gateway runs the call to its
end, and the host never reads the answer.

Everything else (initialize, tools/list, notifications, DELETE) is forwarded untouched, so the
host can prove the gateway reachable before it sends, which is what makes the call "sent, then
interrupted" rather than "never sent".

    async with CuttingProxy("127.0.0.1", gateway_port) as proxy:
        url = proxy.url("/mcp")
        ... proxy.cuts ...

Runs in the caller's asyncio loop (`ThreadedCuttingProxy` runs one in a thread, for tests that
drive a `dex-agent` process).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType

CALL_MARKER = b'"tools/call"'
ANSWER_MARKERS = (b'"result"', b'"error"')
CHUNK = 65536


@dataclass
class _Connection:
    """One client connection: armed once a tools/call request went through it."""

    armed: bool = False
    held: bytearray = field(default_factory=bytearray)


class CuttingProxy:
    def __init__(self, target_host: str, target_port: int, *, cut_limit: int | None = None,
                 answer_wait: float = 10.0, forward_headers: bool = False) -> None:
        self._target = (target_host, target_port)
        self._cut_limit = cut_limit  # None: cut every tools/call; n: the first n only
        self._answer_wait = answer_wait
        # True: the answer's HTTP headers reach the host, then the connection is cut mid-body.
        self._forward_headers = forward_headers
        self._server: asyncio.Server | None = None
        self.cuts = 0
        self.calls_seen = 0

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def url(self, path: str = "/mcp") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def __aenter__(self) -> "CuttingProxy":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    def _may_cut(self) -> bool:
        return self._cut_limit is None or self.cuts < self._cut_limit

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            upstream_r, upstream_w = await asyncio.open_connection(*self._target)
        except OSError:
            client_w.transport.abort()
            return
        state = _Connection()
        tasks = [
            asyncio.create_task(self._client_to_upstream(client_r, upstream_w, state)),
            asyncio.create_task(self._upstream_to_client(upstream_r, client_w, state)),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            client_w.transport.abort()
            upstream_w.transport.abort()

    async def _client_to_upstream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                                  state: _Connection) -> None:
        window = b""
        while data := await reader.read(CHUNK):
            window = (window + data)[-(CHUNK + len(CALL_MARKER)):]
            if CALL_MARKER in window and not state.armed:
                self.calls_seen += 1
                state.armed = self._may_cut()
                window = b""
            writer.write(data)
            await writer.drain()

    async def _upstream_to_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                                  state: _Connection) -> None:
        while True:
            if state.armed:
                await self._hold_answer(reader, state)
                if self._forward_headers and (end := state.held.find(b"\r\n\r\n")) >= 0:
                    writer.write(bytes(state.held[: end + 4]))
                    await writer.drain()
                    await asyncio.sleep(0.05)
                self.cuts += 1
                return  # the caller aborts both sides: the answer never reaches the host
            data = await reader.read(CHUNK)
            if not data:
                return
            writer.write(data)
            await writer.drain()

    async def _hold_answer(self, reader: asyncio.StreamReader, state: _Connection) -> None:
        """Read (and keep) the gateway's answer until it is complete: the call ran to its end."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._answer_wait):
                while not any(marker in state.held for marker in ANSWER_MARKERS):
                    data = await reader.read(CHUNK)
                    if not data:
                        return
                    state.held += data


class ThreadedCuttingProxy:
    """A `CuttingProxy` on its own event loop in a daemon thread (for process-driven tests)."""

    def __init__(self, target_host: str, target_port: int, **options: object) -> None:
        self._args = (target_host, target_port)
        self._options = options
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self.proxy: CuttingProxy | None = None
        self._thread = threading.Thread(target=self._run, name="cutting-proxy", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        async with CuttingProxy(*self._args, **self._options) as proxy:  # type: ignore[arg-type]
            self.proxy = proxy
            self._ready.set()
            await self._stop.wait()

    @contextlib.contextmanager
    def running(self) -> Iterator[CuttingProxy]:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the cutting proxy did not start")
        assert self.proxy is not None
        try:
            yield self.proxy
        finally:
            assert self._stop is not None
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)
