"""Upstreams and readers of the media end-to-end tests.

    image_upstream(state_dir)     tests/support/image_server.py over stdio (good and bad images)
    everything_upstream()         @modelcontextprotocol/server-everything over stdio (installed
                                  into conformance/node_modules the way conformance/run.sh does);
                                  pytest.skip only when node or npm is missing
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys
from pathlib import Path
from typing import Any

from mcp_types import CallToolResult

from tests.support.everything import EVERYTHING as EVERYTHING_JS
from tests.support.everything import everything_stdio, require_everything
from tests.support.servers import REPO_ROOT, STATE_DIR_ENV

IMAGE_META_KEY = "dex-gateway/image"
CONFORMANCE = REPO_ROOT / "conformance"
EVERYTHING = EVERYTHING_JS.parent
TOKENS = {"alice": "alice-media-token", "bob": "bob-media-token"}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def auth_config() -> dict[str, Any]:
    return {"tokens": [{"principal": p, "token_sha256": sha(t)} for p, t in TOKENS.items()]}


def image_upstream(state_dir: Path, **options: Any) -> dict[str, Any]:
    return {
        "name": "img", "transport": "stdio", "command": sys.executable,
        "args": [str(REPO_ROOT / "tests" / "support" / "image_server.py"), "--transport", "stdio"],
        "env": {STATE_DIR_ENV: str(state_dir)}, "cwd": str(REPO_ROOT), **options,
    }


def everything_upstream() -> dict[str, Any]:
    """server-everything over stdio (no port at all); skips when node/npm are unavailable."""
    return everything_stdio(node=require_everything(), cwd=str(CONFORMANCE))


def tiny_image() -> bytes:
    """The PNG server-everything's get-tiny-image returns, read from its own source."""
    source = (EVERYTHING / "tools" / "get-tiny-image.js").read_text()
    match = re.search(r'MCP_TINY_IMAGE\s*=\s*"([A-Za-z0-9+/=]+)"', source)
    assert match is not None, "MCP_TINY_IMAGE not found in server-everything"
    return base64.b64decode(match.group(1))


def wire(result: CallToolResult) -> dict[str, Any]:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def references(result: CallToolResult) -> list[dict[str, Any]]:
    return [b["_meta"][IMAGE_META_KEY] for b in wire(result)["content"] if b["type"] == "resource_link"]


def objects(media_root: Path) -> list[str]:
    directory = media_root / "sha256"
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith(".")) if directory.exists() else []
