"""A hostile stdio upstream: during a call it floods the gateway with `ping` requests.

Hand-written newline-delimited JSON-RPC (stdlib only, run as a script by path), since an SDK
server awaits each of its requests' answers and cannot flood:

    flood(count)   writes `count` ping requests to stdout without waiting for their answers, then
                   answers the call "flood: sent <count> pings"
    stats()        how the gateway answered the pings so far, as JSON text:
                   {"answered": n, "refused": n, "refusal": "<the first error message>"}

Its stdin is read by a thread all along, so the gateway's answers never fill the pipe.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

_lock = threading.Lock()
_out = sys.stdout.buffer
_stats: dict[str, Any] = {"answered": 0, "refused": 0, "refusal": None}
_calls: list[dict[str, Any]] = []
_wake = threading.Condition()

TOOLS = [
    {"name": "flood", "description": "Flood the client with pings, then answer.",
     "inputSchema": {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}},
    {"name": "stats", "description": "How the pings were answered.", "inputSchema": {"type": "object"}},
]


def _write(lines: list[bytes]) -> None:
    with _lock:
        _out.write(b"".join(lines))
        _out.flush()


def _send(message: dict[str, Any]) -> None:
    _write([json.dumps(message).encode() + b"\n"])


def _reader() -> None:
    """Read stdin: count the answers to our pings, queue the gateway's requests for the main thread."""
    for raw in sys.stdin.buffer:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        if str(message.get("id", "")).startswith("ping-") and "method" not in message:
            with _wake:
                if "error" in message:
                    _stats["refused"] += 1
                    _stats["refusal"] = _stats["refusal"] or message["error"].get("message")
                else:
                    _stats["answered"] += 1
            continue
        with _wake:
            _calls.append(message)
            _wake.notify()
    with _wake:
        _calls.append({"method": "exit"})
        _wake.notify()


def _answer(message: dict[str, Any]) -> None:
    method, request_id = message.get("method"), message.get("id")
    if method == "initialize":
        _send({"jsonrpc": "2.0", "id": request_id, "result": {
            "protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
            "serverInfo": {"name": "ping-flood", "version": "1"}}})
    elif method == "tools/list":
        _send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        params = message.get("params") or {}
        if params.get("name") == "flood":
            count = int((params.get("arguments") or {}).get("count", 0))
            batch: list[bytes] = []
            for n in range(count):
                batch.append(b'{"jsonrpc":"2.0","id":"ping-%d","method":"ping"}\n' % n)
                if len(batch) == 1000:
                    _write(batch)
                    batch = []
            _write(batch)
            text = f"flood: sent {count} pings"
        else:
            with _wake:
                text = json.dumps(_stats)
        _send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": text}]}})
    elif request_id is not None:
        _send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"no {method}"}})


def main() -> None:
    threading.Thread(target=_reader, daemon=True).start()
    while True:
        with _wake:
            while not _calls:
                _wake.wait()
            message = _calls.pop(0)
        if message.get("method") == "exit":
            return
        _answer(message)


if __name__ == "__main__":
    main()
