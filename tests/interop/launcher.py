"""A stdio upstream started through a launcher, as `npx` starts node: this process stays the
parent, runs the real server (the conformance reference server) as its child, and leaves a helper
process running (`sleep`) that never exits by itself. Every pid it starts goes to the file named
by LAUNCHER_PIDS, so a test can check that stopping the upstream left none of them behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

helper = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
server = subprocess.Popen([sys.executable, str(ROOT / "conformance" / "reference_server.py"), "--transport", "stdio"])
Path(os.environ["LAUNCHER_PIDS"]).write_text(f"{os.getpid()} {helper.pid} {server.pid}\n")
sys.exit(server.wait())
