"""The TCP connections this test process holds open, read from /proc (Linux)."""

from __future__ import annotations

import os
from pathlib import Path


def _own_socket_inodes() -> set[str]:
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def established_to(port: int) -> int:
    """How many ESTABLISHED TCP connections of this process go to `port` on any address."""
    mine = _own_socket_inodes()
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01" and fields[9] in mine:
                count += 1
    return count
