"""A scripted MCP server over stdio: each tool answers each attempt of a call from a script.

Hand-written newline-delimited JSON-RPC (stdlib only, run as a script by path), so it can
answer what the SDK server would refuse to send: raw result dicts, malformed results, broken
errors, non-JSON lines. The gateway starts it as a `transport: stdio` upstream:

    {"transport": "stdio", "command": sys.executable, "args": [SCRIPT_PATH],
     "env": {STATE_ENV: "<state dir>"}}

The state dir holds `script.json`, written by the test before the gateway starts:

    {"tools": [{"name": "...", "effect": "read" | ... | null, "description"?: "...", "events": [event, ...]}]}

(read again at every `tools/list`: a test that rewrites the file changes the definitions listed next)

and everything the server keeps across its own exits (the gateway restarts it after each):

* `runs/<hash>.count`  attempts seen per call (tool + `arguments.run`), so attempt n of a call
  gets `events[n-1]`, whichever process reads it. Past the script, a plain success answers
  (`extra_text(tool, n)`): a read's retry or a released fence's new call runs again;
* `attempts.jsonl`     one record per attempt read: {tool, run, key, attempt, kind, pid};
* `pid`                the pid of the running process (removed when it exits on purpose);
* `fail-next-start`    a flag: the next process reads `initialize`, removes the flag and exits
  without answering (the gateway's handshake fails: the attempt was never sent).

Events (one per attempt):

    {"kind": "replied", "answer": {...}}                the answer dict, verbatim, as the result
    {"kind": "rpc_error", "code": c, "message": m, "data"?: d}
    {"kind": "interrupted", "fail_next_start"?: true}   exit after reading the call, no answer
                                                        (with the flag: the next start fails too)
    {"kind": "lines", "lines": ["...%ID%...", ...]}     raw stdout lines, %ID% = the request id
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

STATE_ENV = "DEX_SCRIPTED_STATE_DIR"
SCRIPT_FILE = "script.json"
ATTEMPTS_FILE = "attempts.jsonl"
PID_FILE = "pid"
FAIL_NEXT_START = "fail-next-start"
EFFECT_KEY = "io.superdurable.dex/effect"
IDEMPOTENCY_KEY = "io.superdurable.dex/idempotencyKey"
SCRIPT_PATH = Path(__file__).resolve()


def extra_text(tool: str, attempt: int) -> str:
    """The text of the plain success answered to an attempt past the end of a tool's script."""
    return f"{tool}: attempt {attempt} is past the script"


def run_file(state: Path, tool: str, run: str) -> Path:
    digest = hashlib.sha256(f"{tool}\0{run}".encode()).hexdigest()[:24]
    return state / "runs" / f"{digest}.count"


def read_attempts(state: Path) -> list[dict[str, Any]]:
    """Every attempt record of this state dir (for the test's assertions)."""
    path = state / ATTEMPTS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class _Server:
    def __init__(self, state: Path) -> None:
        self.state = state
        script = json.loads((state / SCRIPT_FILE).read_text())
        self.tools: dict[str, dict[str, Any]] = {t["name"]: t for t in script["tools"]}
        self.out = sys.stdout.buffer

    def send(self, message: dict[str, Any]) -> None:
        self.write_line(json.dumps(message, separators=(",", ":")))

    def write_line(self, line: str) -> None:
        self.out.write(line.encode("utf-8") + b"\n")
        self.out.flush()

    def exit_now(self) -> None:
        """Exit without answering: no flushing of anything but the files already closed."""
        try:
            (self.state / PID_FILE).unlink()
        except FileNotFoundError:
            pass
        os._exit(0)

    def serve(self) -> None:
        failing = self.state / FAIL_NEXT_START
        (self.state / PID_FILE).write_text(str(os.getpid()))
        stdin = sys.stdin.buffer
        while True:
            line = stdin.readline()
            if not line:
                self.exit_now()
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if not isinstance(message, dict) or "method" not in message:
                continue
            method, request_id = message["method"], message.get("id")
            if method == "initialize" and failing.exists():
                # Read the request first, so the gateway's write has surely gone through and it
                # sees "exited before answering", never a broken pipe (one text, every time).
                failing.unlink()
                self.exit_now()
            if request_id is None:
                continue  # notifications/initialized, cancellations
            if method == "initialize":
                params = message.get("params") or {}
                self.send({"jsonrpc": "2.0", "id": request_id, "result": {
                    "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "scripted", "version": "1"},
                }})
            elif method == "ping":
                self.send({"jsonrpc": "2.0", "id": request_id, "result": {}})
            elif method == "tools/list":
                self.tools = {t["name"]: t for t in json.loads((self.state / SCRIPT_FILE).read_text())["tools"]}
                self.send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": [self.definition(t) for t in self.tools.values()]}})
            elif method == "tools/call":
                self.call(request_id, message.get("params") or {})
            else:
                self.send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"{method} not found"}})

    @staticmethod
    def definition(tool: dict[str, Any]) -> dict[str, Any]:
        definition: dict[str, Any] = {
            "name": tool["name"],
            "description": tool.get("description", f"scripted: {tool['name']}"),
            "inputSchema": {"type": "object", "properties": {"run": {"type": "string"}}},
        }
        if tool.get("effect"):
            definition["_meta"] = {EFFECT_KEY: tool["effect"]}
        return definition

    def call(self, request_id: Any, params: dict[str, Any]) -> None:
        tool = self.tools.get(params.get("name"))
        if tool is None:
            self.send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": "no such tool"}})
            return
        arguments = params.get("arguments") or {}
        run = str(arguments.get("run", ""))
        meta = params.get("_meta") or {}
        counter = run_file(self.state, tool["name"], run)
        counter.parent.mkdir(exist_ok=True)
        attempt = (int(counter.read_text()) if counter.exists() else 0) + 1
        counter.write_text(str(attempt))
        events = tool["events"]
        event = events[attempt - 1] if attempt <= len(events) else {"kind": "extra"}
        record = {"tool": tool["name"], "run": run, "key": meta.get(IDEMPOTENCY_KEY), "attempt": attempt,
                  "kind": event["kind"], "pid": os.getpid()}
        with open(self.state / ATTEMPTS_FILE, "a", encoding="utf-8") as log:
            log.write(json.dumps(record) + "\n")
        kind = event["kind"]
        if kind == "interrupted":
            if event.get("fail_next_start"):
                (self.state / FAIL_NEXT_START).touch()
            self.exit_now()
        elif kind == "replied":
            self.send({"jsonrpc": "2.0", "id": request_id, "result": event["answer"]})
        elif kind == "rpc_error":
            error = {"code": event["code"], "message": event["message"]}
            if "data" in event:
                error["data"] = event["data"]
            self.send({"jsonrpc": "2.0", "id": request_id, "error": error})
        elif kind == "lines":
            for template in event["lines"]:
                self.write_line(template.replace("%ID%", json.dumps(request_id)))
        else:
            text = extra_text(tool["name"], attempt)
            self.send({"jsonrpc": "2.0", "id": request_id,
                       "result": {"content": [{"type": "text", "text": text}], "isError": False}})


if __name__ == "__main__":
    _Server(Path(os.environ[STATE_ENV])).serve()
