"""Lines from stdin for every prompt of the host, read by one daemon thread.

Why one reader for the whole process: a prompt can be cancelled while it waits (an approval
decided through the HTTP API or by its deadline). A read per prompt in a worker thread cannot
be cancelled: it stays blocked on stdin and swallows the next line typed, which then never
reaches the `you>` prompt. Here the thread hands every line to a queue, so a cancelled prompt
loses nothing. The thread is a daemon, so it never holds up the exit (Ctrl-C at an idle prompt
acts at once).

On a real file descriptor the thread reads with `os.read`, not through `sys.stdin`'s buffered
reader: a daemon thread blocked inside that reader holds its lock, and the interpreter would
fail to close stdin at exit.

Each line carries the time it arrived: an approval prompt takes only lines typed after its
card was shown (`since`), so type-ahead can never answer a card nobody has read; earlier lines
stay queued for the next prompt.

A *background* reader (chat's steering while a turn runs) takes a line only while no prompt
waits: a card or a question being answered always gets the line first.
"""

from __future__ import annotations

import codecs
import io
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TextIO

import anyio
import anyio.from_thread
import anyio.lowlevel


@dataclass(frozen=True)
class _Line:
    text: str | None  # None: end of input
    at: float


def _fd_lines(fd: int) -> Iterator[str]:
    """Lines (with their newline; the last may lack one) read from a file descriptor."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    while chunk := os.read(fd, 4096):
        pending += decoder.decode(chunk)
        while (end := pending.find("\n")) >= 0:
            yield pending[: end + 1]
            pending = pending[end + 1 :]
    pending += decoder.decode(b"", final=True)
    if pending:
        yield pending


def _stream_lines(stream: TextIO) -> Iterator[str]:
    try:
        fd = stream.fileno()
    except (OSError, io.UnsupportedOperation):
        yield from iter(stream.readline, "")  # an in-memory stream (tests)
        return
    yield from _fd_lines(fd)


class LineReader:
    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lines: list[_Line] = []
        self._arrived = anyio.Event()
        self._thread: threading.Thread | None = None
        self._prompts = 0  # prompts waiting for a line (they come before background readers)

    def _start(self) -> None:
        if self._thread is not None:
            return
        token = anyio.lowlevel.current_token()

        def pump() -> None:
            for text in _stream_lines(self._stream):
                if not self._hand_over(_Line(text.rstrip("\n"), time.monotonic()), token):
                    return
            self._hand_over(_Line(None, time.monotonic()), token)

        self._thread = threading.Thread(target=pump, name="dex-agent-stdin", daemon=True)
        self._thread.start()

    def _hand_over(self, line: _Line, token: anyio.lowlevel.EventLoopToken) -> bool:
        """Queue the line in the event loop; False once the loop is gone (the host is exiting)."""
        try:
            anyio.from_thread.run_sync(self._push, line, token=token)
        except RuntimeError:
            return False
        return True

    def _push(self, line: _Line) -> None:
        self._lines.append(line)
        self._wake()

    def _wake(self) -> None:
        self._arrived.set()
        self._arrived = anyio.Event()

    def unread(self, text: str) -> None:
        """Put a line back in front (a background reader took it, and it was not for it)."""
        self._lines.insert(0, _Line(text, time.monotonic()))
        self._wake()

    def _take(self, since: float | None, background: bool) -> _Line | None:
        if background and self._prompts:
            return None
        for index, line in enumerate(self._lines):
            if since is None or line.at >= since or line.text is None:
                if line.text is not None:
                    del self._lines[index]
                return line  # end of input stays queued: every later prompt sees it too
        return None

    async def readline(self, since: float | None = None, background: bool = False) -> str | None:
        """The next line (arrived at or after `since`, when given); None at end of input. A
        `background` reader waits while any prompt waits."""
        self._start()
        if not background:
            self._prompts += 1
        try:
            while (line := self._take(since, background)) is None:
                await self._arrived.wait()
        finally:
            if not background:
                self._prompts -= 1
                self._wake()  # a background reader may take what this prompt left
        return line.text
