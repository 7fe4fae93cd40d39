"""`dex-agent serve` as a real process for the tests, and a small client of its API."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from tests.agent_host.host_support import Proc, Stack, dex_agent

TOKEN = "approver-token-serve-tests"
MODEL = "scripted:tests.agent_host.serve_scripts:flow"


def start_serve(stack: Stack, store: Path | str, log: Path, *extra: str) -> tuple[Proc, str]:
    """A serve process on the store (port 0 is refused by nobody: a free port is bound by it)."""
    proc = dex_agent("serve", "--store", str(store), "--gateway", stack.gateway_url, "--port", "0", "--model", MODEL,
                     *extra, env={"DEX_APPROVER_TOKEN": TOKEN, "DEX_TEST_MODEL_LOG": str(log),
                                  "DEX_AGENT_LOCAL_STORE": str(log.with_name("local.db"))})
    url = proc.wait_for(r"API on (http://127\.0\.0\.1:\d+)").group(1)
    return proc, url


class Api:
    def __init__(self, url: str) -> None:
        self.client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)

    def new_session(self, **body: Any) -> str:
        response = self.client.post("/sessions", json=body)
        assert response.status_code == 201, response.text
        return str(response.json()["session_id"])

    def send(self, session: str, text: str) -> dict[str, Any]:
        response = self.client.post(f"/sessions/{session}/messages", json={"text": text})
        assert response.status_code == 202, response.text
        return dict(response.json())

    def messages(self, session: str, **params: Any) -> dict[str, Any]:
        response = self.client.get(f"/sessions/{session}/messages", params=params)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def turns(self, session: str) -> list[dict[str, Any]]:
        return list(self.client.get(f"/sessions/{session}").json()["turns"])

    def wait_turns(self, session: str, count: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        """Until `count` turns of the session ended."""
        deadline = time.monotonic() + timeout
        while True:
            turns = self.turns(session)
            if len([t for t in turns if t["status"] != "running"]) >= count:
                return turns
            assert time.monotonic() < deadline, f"{session}: {turns}"
            time.sleep(0.1)

    def pending_approval(self, session: str, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            pending = [a for a in self.client.get("/approvals").json()["approvals"] if a["session_id"] == session]
            if pending:
                return str(pending[0]["id"])
            assert time.monotonic() < deadline, "no approval came"
            time.sleep(0.1)

    def approve(self, approval_id: str) -> None:
        response = self.client.post(f"/approvals/{approval_id}", json={"decision": "allow"})
        assert response.status_code == 200, response.text


def model_calls(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def calls_per_turn(log: Path) -> Counter[tuple[str, int]]:
    return Counter((c["text"], c["call"]) for c in model_calls(log))
