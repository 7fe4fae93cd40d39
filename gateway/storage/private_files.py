"""Files only the gateway's user may read: its databases (fences, registrations, sessions), media.

Directories the gateway creates are 0700 and its files 0600, whatever the umask, so fence
answers, registrations and images are not readable by other users of the machine. A file that
already exists with group or other permission bits is narrowed to 0600 (and said in the log).
SQLite creates its `-wal` and `-shm` files with the database file's permissions.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

__all__ = ["private_dir", "private_file"]

logger = logging.getLogger(__name__)


def private_dir(path: Path) -> None:
    """Create `path` (and missing parents) as 0700 directories; existing ones are left as they are."""
    missing = []
    for parent in [path, *path.parents]:
        if parent.exists():
            break
        missing.append(parent)
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            continue
        os.chmod(directory, 0o700)  # mkdir's mode is filtered by the umask


def private_file(path: Path) -> None:
    """Make sure `path` exists as a 0600 regular file (its directory created 0700 if missing)."""
    private_dir(path.parent)
    # An existing file is never opened here: closing any descriptor of a SQLite database drops every
    # POSIX lock this process holds on it (its open connections' too), and another process closing
    # its last connection would then take the WAL and shared-memory files from under them.
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        mode = os.stat(path).st_mode
        if stat.S_IMODE(mode) & 0o077:
            os.chmod(path, 0o600)
            logger.info("%s: narrowed permissions to 0600 (it was %o)", path, stat.S_IMODE(mode))
        return
    os.close(fd)
