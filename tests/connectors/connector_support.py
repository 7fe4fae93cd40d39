"""Helpers for the connector tests: build manifests and tools, run the example service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import yaml

from gateway.connectors.bindings import PythonBinding, PythonBindingConfig
from gateway.connectors.manifest import Manifest, parse_manifest
from gateway.connectors.tool import ConnectorTool
from tests.support.processes import spawn_listening, terminate

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVICE = REPO_ROOT / "examples" / "connectors" / "service.py"
EXECUTIONS_FILE = "connector-executions.jsonl"
PUBLISHED = REPO_ROOT.parent / "shared" / "data" / "dex-connectors"


def manifest_doc(*operations: dict[str, Any], name: str = "billing") -> dict[str, Any]:
    return {
        "apiVersion": "connectors.dex.dev/v1alpha1",
        "kind": "Connector",
        "metadata": {"name": name},
        "spec": {"operations": list(operations)},
    }


def load_doc(doc: dict[str, Any], filename: str = "connector.yaml") -> Manifest:
    text = json.dumps(doc) if filename.endswith(".json") else yaml.safe_dump(doc, sort_keys=False)
    return parse_manifest(text, filename)


def python_tool(manifest: Manifest, operation: str, fn: Callable[..., Any]) -> ConnectorTool:
    binding = PythonBinding(PythonBindingConfig(type="python", callable="tests.fake:fn"), function=fn)
    return ConnectorTool.build(manifest, manifest.operation(operation), binding)


@dataclass
class ExampleService:
    base: str
    state_dir: Path
    process: subprocess.Popen[str]
    output: list[str] = field(default_factory=list)

    @property
    def log_path(self) -> Path:
        return self.state_dir / EXECUTIONS_FILE

    def executions(self, **match: Any) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        rows = [json.loads(line) for line in self.log_path.read_text().splitlines() if line.strip()]
        return [r for r in rows if all(r.get(k) == v for k, v in match.items())]

    def script(self, connector: str, operation: str, *actions: dict[str, Any]) -> None:
        httpx.post(f"{self.base}/_test/script", json={"connector": connector, "operation": operation, "actions": list(actions)}).raise_for_status()

    def reset(self) -> None:
        httpx.post(f"{self.base}/_test/reset").raise_for_status()


@contextmanager
def start_service(state_dir: Path, *, token: str | None = None) -> Iterator[ExampleService]:
    env = {**os.environ, "DEX_EXAMPLE_STATE_DIR": str(state_dir)}
    env.pop("DEX_EXAMPLE_CONNECTOR_TOKEN", None)
    if token is not None:
        env["DEX_EXAMPLE_CONNECTOR_TOKEN"] = token
    output: list[str] = []
    proc, url = spawn_listening(
        [sys.executable, str(SERVICE), "--port", "0"], cwd=REPO_ROOT, env=env, name="connector-service",
        lines=output, ready_timeout=15,
    )
    try:
        if url is None:
            raise RuntimeError("example connector service did not start:\n" + "\n".join(output))
        yield ExampleService(url, state_dir, proc, output)
    finally:
        terminate(proc)


def wait_until(probe: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return True
        time.sleep(0.05)
    return probe()


async def echo_operation(request: Any) -> dict[str, Any]:
    """A Python-bound operation for registry tests: answers its input."""
    return {"branch": "found", "value": {"echo": request.input}}


# -- a loopback listener recording what bindings send ----------------------------------------------


@dataclass
class RecordingListener:
    """Every POST it received: path, headers, body."""

    base: str
    seen: list[dict[str, Any]] = field(default_factory=list)

    def everything(self) -> str:
        return json.dumps(self.seen)


@contextmanager
def recording_listener() -> Iterator[RecordingListener]:
    """An HTTP listener on loopback that records every POST and answers the connector's `found`
    branch; a path under /redirect is answered 307 to <base>/followed (bindings must not follow)."""
    box: list[RecordingListener] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            box[0].seen.append({"path": self.path, "headers": dict(self.headers.items()), "body": body.decode()})
            if self.path.startswith("/redirect"):
                self.send_response(307)
                self.send_header("location", f"{box[0].base}/followed")
                self.send_header("content-length", "0")
                self.end_headers()
                return
            payload = b'{"branch":"found","value":{"ok":true}}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    box.append(RecordingListener(f"http://127.0.0.1:{server.server_address[1]}"))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield box[0]
    finally:
        server.shutdown()
        server.server_close()

