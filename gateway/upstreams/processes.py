"""A stdio upstream's process, started in its own process group and stopped as one.

A launcher such as `npx` starts the real server as a child of its own (node); signalling only the
launcher leaves that grandchild running, orphaned, until it notices its stdin is gone. So the
upstream starts in a new session (its own process group), and stopping it signals the whole group:
SIGTERM, then SIGKILL for whatever is still there. After the launcher exits, the group is
signalled once more, so no grandchild outlives the gateway's connection to it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Mapping

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

__all__ = ["ProcessGroup", "start_process_group"]

logger = logging.getLogger(__name__)

_GRACE_SECONDS = 2.0


class ProcessGroup:
    """The `ProcessHandle` of a real stdio upstream: the group leader and its whole group."""

    def __init__(self, process: Process) -> None:
        self._process = process
        self._group = process.pid  # a new session: the child leads its own group

    @property
    def stdin(self) -> ByteSendStream:
        assert self._process.stdin is not None
        return self._process.stdin

    @property
    def stdout(self) -> ByteReceiveStream:
        assert self._process.stdout is not None
        return self._process.stdout

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    async def wait(self) -> int:
        """The leader's exit status, once it and every other member of its group are gone."""
        code = await self._process.wait()
        await self._stop_stragglers()
        with anyio.CancelScope(shield=True):
            await self._process.aclose()  # its pipes and transport, while the event loop runs
        return code

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._group, sig)

    def _alive(self) -> bool:
        try:
            os.killpg(self._group, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    async def _stop_stragglers(self) -> None:
        """Members of the group left after the leader exited (a launcher's child): TERM, then KILL."""
        if not self._alive():
            return
        logger.debug("process group %d outlived its leader: stopping it", self._group)
        self.terminate()
        with anyio.move_on_after(_GRACE_SECONDS):
            while self._alive():
                await anyio.sleep(0.05)
            return
        self.kill()


async def start_process_group(argv: list[str], env: Mapping[str, str], cwd: str) -> ProcessGroup:
    """Start `argv` with pipes for stdin and stdout (stderr inherited), as a new process group."""
    process = await anyio.open_process(argv, env=dict(env), cwd=cwd, stderr=None, start_new_session=True)
    return ProcessGroup(process)
