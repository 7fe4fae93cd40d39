"""Child processes for tests: start one, collect its stderr in a thread (so it never blocks on
a full pipe), wait for its `listening on <url>` line; stop it (SIGTERM) or crash it (SIGKILL)."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

LISTENING = re.compile(r"listening on (http://\S+)")


def spawn_listening(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    name: str,
    lines: list[str],
    ready_timeout: float,
    new_session: bool = False,
) -> tuple[subprocess.Popen[str], str | None]:
    """Start `argv`; stderr lines go to `lines`. Returns the process and the URL it listens on
    (None when no `listening on` line came within `ready_timeout`; the process keeps running)."""
    process = subprocess.Popen(
        list(argv), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, start_new_session=new_session,
    )
    found = threading.Event()
    url_box: list[str] = []

    def drain() -> None:
        # Keep reading after the ready line so a chatty process never blocks on a full pipe.
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line.rstrip("\n"))
            match = LISTENING.search(line)
            if match and not found.is_set():
                url_box.append(match.group(1))
                found.set()
        found.set()

    threading.Thread(target=drain, name=f"{name}-stderr", daemon=True).start()
    deadline = time.monotonic() + ready_timeout
    while not found.wait(0.05):
        if time.monotonic() > deadline:
            break
    return process, (url_box[0] if url_box else None)


def sigkill(process: subprocess.Popen[str]) -> None:
    """A crash, not a shutdown: SIGKILL and reap."""
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


def terminate(process: subprocess.Popen[str], timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL if it lingers."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            sigkill(process)
