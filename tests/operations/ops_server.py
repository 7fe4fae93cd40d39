"""A small stdio MCP upstream for the operations tests (stdlib only, run as a script by path).

Every request's story goes to the JSON-lines file named by $OPS_SERVER_LOG, one line per event:
`start` (with the request's `_meta`), `end`, `cancelled` (a `notifications/cancelled` stopped it).

    slow_read   {seconds}  read: answers after `seconds`, or never when cancelled first
    slow_write  {seconds}  non_idempotent_write: answers after `seconds`, cancelled or not
    write       {text}     non_idempotent_write: answers at once
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

LOG_ENV = "OPS_SERVER_LOG"
EFFECT = "io.superdurable.dex/effect"
TOOLS = [
    {"name": "slow_read", "effect": "read"},
    {"name": "slow_write", "effect": "non_idempotent_write"},
    {"name": "write", "effect": "non_idempotent_write"},
]


def log(event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, "pid": os.getpid(), "t": time.time(), **fields})
    with open(os.environ[LOG_ENV], "a") as f:
        f.write(line + "\n")


def send(message: dict[str, Any]) -> None:
    sys.stdout.buffer.write(json.dumps(message).encode() + b"\n")
    sys.stdout.buffer.flush()


def tool_list() -> list[dict[str, Any]]:
    return [{"name": t["name"], "description": t["name"], "inputSchema": {"type": "object"},
             "_meta": {EFFECT: t["effect"]}} for t in TOOLS]


async def call(request_id: Any, params: dict[str, Any], running: dict[Any, tuple[str, asyncio.Task[None]]]) -> None:
    name = params.get("name")
    args = params.get("arguments") or {}
    log("start", id=request_id, tool=name, meta=params.get("_meta") or {})
    try:
        if name in ("slow_read", "slow_write"):
            await asyncio.sleep(float(args.get("seconds", 1)))
        text = f"{name} done"
        log("end", id=request_id, tool=name)
        send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": text}], "isError": False}})
    except asyncio.CancelledError:
        log("cancelled", id=request_id, tool=name)
    finally:
        running.pop(request_id, None)


async def main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=16 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    running: dict[Any, tuple[str, asyncio.Task[None]]] = {}
    while line := await reader.readline():
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": request_id, "result": {
                "protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                "serverInfo": {"name": "ops", "version": "1"}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tool_list()}})
        elif method == "tools/call":
            params = message.get("params") or {}
            running[request_id] = (str(params.get("name")), asyncio.create_task(call(request_id, params, running)))
        elif method == "notifications/cancelled":
            target = (message.get("params") or {}).get("requestId")
            log("cancel_received", id=target)
            name, task = running.get(target, ("", None))
            if task is not None and name != "slow_write":  # a write runs to its end
                task.cancel()
        elif request_id is not None:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"no {method}"}})
    for _, task in list(running.values()):
        await task


if __name__ == "__main__":
    asyncio.run(main())
