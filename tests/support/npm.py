"""Node packages the tests run (the test identity provider, the TypeScript SDK client), installed
from each folder's package-lock.json the first time a test needs them (`make idp` does the same)."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

import pytest

__all__ = ["npm_installed"]


def npm_installed(directory: Path, package: str, purpose: str) -> str:
    """The node binary, with `directory`'s locked packages installed (`npm ci`, once; concurrent test
    processes wait for the one that installs). Skips, saying why, only when node or npm is missing;
    fails when the install fails."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip(f"node and npm are needed to run {purpose}")
    installed = directory / "node_modules" / package / "package.json"
    if installed.exists():
        return node
    with open(directory / ".npm-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not installed.exists():
            done = subprocess.run([npm, "ci", "--prefix", str(directory), "--no-audit", "--no-fund", "--prefer-offline"],
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0 or not installed.exists():
                pytest.fail(f"npm ci in {directory} failed: {done.stderr[-2000:]}")
    return node
