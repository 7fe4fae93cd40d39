"""No stdio upstream process outlives the gateway (issue 13): a launched upstream (a launcher that
runs the real server as its child and leaves a helper running, as `npx` runs node) is stopped as a
whole process group, after `dex-gateway tools` and after a SIGTERM of `dex-gateway serve`; and the
`tools` command ends without `RuntimeError: Event loop is closed`. Also with the real `npx`
launching @modelcontextprotocol/server-everything (skipped without node/npm)."""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.interop.support import CONFORMANCE, require_everything
from tests.support.gateway import run_gateway_cli, start_gateway, write_config
from tests.support.servers import REPO_ROOT

pytestmark = pytest.mark.timeout(120)

LAUNCHER = Path(__file__).resolve().parent / "launcher.py"


def launched_upstream(marker: str, pids: Path) -> dict[str, Any]:
    return {"name": "launched", "transport": "stdio", "command": sys.executable, "args": [str(LAUNCHER)],
            "env": {"LAUNCHER_PIDS": str(pids), "DEX_TEST_MARKER": marker}, "cwd": str(REPO_ROOT)}


def npx_upstream(marker: str) -> dict[str, Any]:
    return {"name": "ev", "transport": "stdio", "command": "npx",
            "args": ["--no-install", "@modelcontextprotocol/server-everything", "stdio"],
            "env": {"DEX_TEST_MARKER": marker, "PATH": os.environ.get("PATH", "")}, "cwd": str(CONFORMANCE)}


def upstream_for(launcher: str, marker: str, directory: Path) -> dict[str, Any]:
    if launcher == "npx":
        require_everything()
        return npx_upstream(marker)
    return launched_upstream(marker, directory / "pids")


def marked(marker: str) -> list[int]:
    """The live (not zombie) processes whose environment carries `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if f"DEX_TEST_MARKER={marker}".encode() in (entry / "environ").read_bytes().split(b"\0") \
                    and (entry / "stat").read_text().split(") ")[1][0] != "Z":
                found.append(int(entry.name))
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
    return found


def wait_gone(marker: str, seconds: float = 3.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := marked(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.mark.parametrize("launcher", ["python", "npx"])
def test_tools_leaves_no_upstream_process(tmp_path: Path, launcher: str) -> None:
    marker = uuid.uuid4().hex
    config = write_config(tmp_path, {"upstreams": [upstream_for(launcher, marker, tmp_path)]})
    done = run_gateway_cli("tools", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert "Event loop is closed" not in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert ("launched__" if launcher == "python" else "ev__") in done.stdout
    assert wait_gone(marker, 1.0) == [], "upstream processes left after `dex-gateway tools`"


@pytest.mark.parametrize("launcher", ["python", "npx"])
def test_sigterm_of_serve_leaves_no_upstream_process(tmp_path: Path, launcher: str) -> None:
    marker = uuid.uuid4().hex
    config = write_config(tmp_path, {"upstreams": [upstream_for(launcher, marker, tmp_path)]})
    with start_gateway(config) as gateway:
        gateway.wait_for_log("catalog ready", timeout=60)
        running = marked(marker)
        assert len(running) >= 2, f"the launcher and its child should be running: {running}"
        assert gateway.process is not None
        gateway.process.terminate()
        assert gateway.process.wait(timeout=30) == 0
        assert "Event loop is closed" not in gateway.log
        assert wait_gone(marker, 1.0) == [], f"upstream processes left after SIGTERM: {marked(marker)}"
