"""Helpers of the interop tests: real upstreams (@modelcontextprotocol/server-everything over stdio
and Streamable HTTP, the conformance reference server in either era set), real `dex-gateway serve`
processes, and the official SDK client of each era."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.everything import EVERYTHING, require_everything  # noqa: F401 (re-exported)
from tests.support.gateway import RunningGateway, start_gateway, write_config
from tests.support.processes import spawn_listening, terminate
from tests.support.servers import REPO_ROOT

CONFORMANCE = REPO_ROOT / "conformance"
REFERENCE = CONFORMANCE / "reference_server.py"
ROOT_URI = "file:///work/project"


@contextmanager
def reference_http(*, handshake_only: bool = False, state_dir: Path) -> Iterator[str]:
    """The conformance reference server (both eras, or the handshake era only); yields its URL."""
    argv = [sys.executable, str(REFERENCE), "--port", "0", *(["--handshake-only"] if handshake_only else [])]
    lines: list[str] = []
    process, url = spawn_listening(argv, cwd=REPO_ROOT, env={**os.environ, "DEX_EXAMPLE_STATE_DIR": str(state_dir)},
                                   name="reference", lines=lines, ready_timeout=30)
    assert url is not None, "the reference server did not start:\n" + "\n".join(lines)
    try:
        yield url
    finally:
        terminate(process)


def reference_stdio(state_dir: Path, **options: Any) -> dict[str, Any]:
    return {"name": "ref", "transport": "stdio", "command": sys.executable, "args": [str(REFERENCE), "--transport", "stdio"],
            "env": {"DEX_EXAMPLE_STATE_DIR": str(state_dir)}, "cwd": str(REPO_ROOT), "prefix": "",
            "keyless_writes": "pass", **options}


@contextmanager
def gateway_for(directory: Path, upstream: dict[str, Any], *, stateful: bool = True) -> Iterator[RunningGateway]:
    """`dex-gateway serve` fronting one upstream, once its catalog is ready."""
    config = write_config(directory, {"server": {"stateful": stateful}, "upstreams": [upstream]})
    with start_gateway(config) as gateway:
        gateway.wait_for_log("catalog ready", timeout=30)
        yield gateway


class Recorder:
    """What a handshake-era client is sent outside its requests, and how it answers the server."""

    def __init__(self) -> None:
        self.notifications: list[types.ServerNotification] = []
        self.asked: list[str] = []

    async def roots(self, context: Any) -> types.ListRootsResult:
        self.asked.append("roots/list")
        return types.ListRootsResult(roots=[types.Root(uri=ROOT_URI, name="project")])

    async def elicit(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append("elicitation/create")
        return types.ElicitResult(action="accept", content={"name": "Ada", "response": "yes", "confirm": True})

    async def sample(self, context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.asked.append("sampling/createMessage")
        return types.CreateMessageResult(role="assistant", content=types.TextContent(text="sampled"), model="test")

    async def message(self, message: Any) -> None:
        if isinstance(message, (types.ResourceUpdatedNotification, types.ToolListChangedNotification,
                                types.ResourceListChangedNotification, types.PromptListChangedNotification,
                                types.LoggingMessageNotification)):
            self.notifications.append(message)

    def updated(self, uri: str) -> int:
        return sum(1 for n in self.notifications if isinstance(n, types.ResourceUpdatedNotification) and n.params.uri == uri)


def client(url: str, *, mode: str, recorder: Recorder | None = None, answers: bool = True) -> Client:
    """The SDK client: `legacy` (2025-11-25, a session with sampling, elicitation and roots) or `2026-07-28`
    (the same capabilities in each request's `_meta`). `answers=False`: a client without those callbacks,
    which declares none of those capabilities."""
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=120))
    recorder = recorder or Recorder()
    callbacks: dict[str, Any] = dict(list_roots_callback=recorder.roots, elicitation_callback=recorder.elicit,
                                     sampling_callback=recorder.sample) if answers else {}
    return Client(streamable_http_client(url, http_client=http), mode=mode, read_timeout_seconds=60,  # type: ignore[arg-type]
                  message_handler=recorder.message, cache=None, **callbacks)


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))
