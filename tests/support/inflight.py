"""Events that say a request really reached a server process, for tests that must not release
a held call before the calls they race with are in flight.

* `SentRequests`: an httpx2 transport (for the SDK client) that records each JSON-RPC request
  once its whole body has been written to the connection.
* `wait_until_read(port)`: every byte that reached a loopback server's sockets has been read by
  the server process (the kernel's receive queues of its connections are empty).
* `FlockWatch`: hold an exclusive flock on a file that a server locks, and wait until the server
  blocks on it (its request reached that lock).

Linux only (/proc/net/tcp, /proc/locks), as are the tests' servers.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
import anyio
import httpx2

# -- requests written by the client ------------------------------------------------------------


class _SignallingStream(httpx2.AsyncByteStream):
    """A request body that reports when its last byte was handed to the connection."""

    def __init__(self, inner: httpx2.AsyncByteStream, done: Callable[[], None]) -> None:
        self._inner = inner
        self._done = done

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            yield chunk
        # The connection asks for the next chunk only after it wrote the previous one.
        self._done()

    async def aclose(self) -> None:
        await self._inner.aclose()


class SentRequests:
    """Counts the JSON-RPC requests (by method) whose body was fully written to a socket, over
    any number of HTTP clients (one transport each).

        sent = SentRequests()
        async with httpx2.AsyncClient(transport=sent.transport()) as http: ...
        await sent.wait_for(10, method="tools/call")
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.methods: list[str] = []

    def transport(self, inner: httpx2.AsyncBaseTransport | None = None) -> httpx2.AsyncBaseTransport:
        """A transport for one HTTP client (closed with it) that reports here."""
        return _RecordingTransport(inner or httpx2.AsyncHTTPTransport(), self._record)

    def _record(self, method: str) -> None:
        with self._lock:
            self.methods.append(method)

    def count(self, method: str | None = None) -> int:
        with self._lock:
            return sum(1 for m in self.methods if method is None or m == method)

    async def wait_for(self, count: int, *, method: str | None = "tools/call", timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while self.count(method) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.count(method)} of {count} {method or 'any'} requests sent after {timeout} s")
            await anyio.sleep(0.005)


class _RecordingTransport(httpx2.AsyncBaseTransport):
    def __init__(self, inner: httpx2.AsyncBaseTransport, record: Callable[[str], None]) -> None:
        self._inner = inner
        self._record = record

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        method = _jsonrpc_method(request)
        if method is not None and isinstance(request.stream, httpx2.AsyncByteStream):
            request.stream = _SignallingStream(request.stream, lambda: self._record(method))
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _jsonrpc_method(request: httpx2.Request) -> str | None:
    if request.method != "POST":
        return None
    try:
        message = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead):
        return None
    return message.get("method") if isinstance(message, dict) else None


# -- bytes read by the server ------------------------------------------------------------------

_TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
_LISTEN = "0A"


def unread_bytes(port: int) -> int:
    """Bytes received on `port`'s connections that the server process has not read yet."""
    total = 0
    for table in _TCP_TABLES:
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            local, state, queues = fields[1], fields[3], fields[4]
            if state == _LISTEN or int(local.rsplit(":", 1)[1], 16) != port:
                continue
            total += int(queues.split(":")[1], 16)
    return total


async def wait_until_read(ports: Iterable[int], *, timeout: float = 20.0) -> None:
    """Wait until the servers on `ports` have read every byte sent to them so far.

    With `SentRequests.wait_for` first, this says the requests are inside the server process
    (parsed and dispatched by its HTTP server), not on the wire."""
    ports = list(ports)
    deadline = time.monotonic() + timeout
    while any(unread_bytes(port) for port in ports):
        if time.monotonic() > deadline:
            raise TimeoutError(f"servers on {ports} left bytes unread for {timeout} s")
        await anyio.sleep(0.005)


# -- a server blocked on a file lock -----------------------------------------------------------


class FlockWatch:
    """Hold an exclusive flock on `path` (a file a server flocks); see who blocks on it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        st = os.fstat(self._fd)
        # /proc/locks names a file as "<major>:<minor>:<inode>", the device numbers in hex.
        self._file_id = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"

    def blocked_pids(self) -> list[int]:
        """Processes waiting for this lock right now."""
        pids = []
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if len(fields) > 6 and fields[1] == "->" and fields[6] == self._file_id:
                pids.append(int(fields[5]))
        return pids

    def wait_for_blocked(self, pid: int, *, timeout: float = 20.0) -> None:
        """Wait until process `pid` is blocked on this lock."""
        deadline = time.monotonic() + timeout
        while pid not in self.blocked_pids():
            if time.monotonic() > deadline:
                raise TimeoutError(f"process {pid} did not block on {self.path} within {timeout} s")
            time.sleep(0.005)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
