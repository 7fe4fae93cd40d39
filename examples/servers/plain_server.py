"""A "notes" MCP server that knows nothing of the Dex conventions: standard annotations only.

    python examples/servers/plain_server.py --transport stdio
    python examples/servers/plain_server.py --transport http --port 0 [--json-response] [--stateful]

Notes live in `<state dir>/notes.json`; every execution is appended to
`<state dir>/executions.jsonl` like the other example servers (state dir:
$DEX_EXAMPLE_STATE_DIR, default a new temp dir). Idempotency keys are ignored.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from example_runtime import EXECUTIONS_FILE, ExecutionLog, ToolSpec, build_parser, request_key, serve, state_dir, text_result

STRING = {"type": "string"}


class NotesServer:
    def __init__(self, directory: Path) -> None:
        self.notes_path = directory / "notes.json"
        self.lock_path = directory / "notes.json.lock"
        self.log = ExecutionLog(directory / EXECUTIONS_FILE, "notes")
        self.specs = {
            spec.name: spec
            for spec in (
                ToolSpec("list_notes", "Names of all notes.", {}, (),
                         annotations=types.ToolAnnotations(read_only_hint=True)),
                ToolSpec("read_note", "The text of a note.", {"name": STRING}, ("name",),
                         annotations=types.ToolAnnotations(read_only_hint=True)),
                ToolSpec("put_note", "Create or replace a note.", {"name": STRING, "text": STRING}, ("name", "text"),
                         annotations=types.ToolAnnotations(read_only_hint=False, idempotent_hint=True,
                                                           destructive_hint=True)),
                ToolSpec("delete_note", "Delete a note.", {"name": STRING}, ("name",),
                         annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=True)),
                # No annotations at all: a client must assume the worst.
                ToolSpec("append_log", "Append a line to the shared log note.", {"line": STRING}, ("line",)),
            )
        }
        self.actions: dict[str, Callable[[dict[str, str], dict[str, Any]], str]] = {
            "list_notes": lambda notes, a: "\n".join(sorted(notes)) or "no notes",
            "read_note": self._read,
            "put_note": self._put,
            "delete_note": self._delete,
            "append_log": self._append,
        }

    @contextmanager
    def _notes(self) -> Iterator[dict[str, str]]:
        """The notes under an exclusive lock, written back (atomically) on exit."""
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            notes: dict[str, str] = json.loads(self.notes_path.read_text()) if self.notes_path.exists() else {}
            before = dict(notes)
            yield notes
            if notes != before:
                tmp = self.notes_path.with_suffix(".tmp")
                tmp.write_text(json.dumps(notes, sort_keys=True))
                os.replace(tmp, self.notes_path)
        finally:
            os.close(fd)

    @staticmethod
    def _read(notes: dict[str, str], args: dict[str, Any]) -> str:
        name = str(args["name"])
        if name not in notes:
            raise LookupError(f"no note named {name!r}")
        return notes[name]

    @staticmethod
    def _put(notes: dict[str, str], args: dict[str, Any]) -> str:
        notes[str(args["name"])] = str(args["text"])
        return f"note {args['name']!r} saved"

    @staticmethod
    def _delete(notes: dict[str, str], args: dict[str, Any]) -> str:
        if notes.pop(str(args["name"]), None) is None:
            raise LookupError(f"no note named {args['name']!r}")
        return f"note {args['name']!r} deleted"

    @staticmethod
    def _append(notes: dict[str, str], args: dict[str, Any]) -> str:
        notes["log"] = notes.get("log", "") + str(args["line"]) + "\n"
        return f"log has {notes['log'].count(chr(10))} lines"

    async def list_tools(self, ctx: ServerRequestContext[Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[spec.to_tool() for spec in self.specs.values()])

    async def call_tool(self, ctx: ServerRequestContext[Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        spec = self.specs.get(params.name)
        if spec is None:
            raise MCPError(types.INVALID_PARAMS, f"unknown tool: {params.name}")
        args = dict(params.arguments or {})
        missing = spec.missing_arguments(args)
        if missing:
            return text_result(f"{spec.name}: missing argument(s): {', '.join(missing)}", is_error=True)
        self.log.record(spec.name, request_key(params), args)
        with self._notes() as notes:
            try:
                return text_result(self.actions[spec.name](notes, args))
            except LookupError as error:
                return text_result(str(error.args[0]), is_error=True)

    def server(self) -> Server[Any]:
        return Server("dex-example-notes", version="0.1.0", on_list_tools=self.list_tools,
                      on_call_tool=self.call_tool)


def main() -> None:
    args = build_parser("Dex example upstream: a notes server that knows no Dex conventions.").parse_args()
    serve(NotesServer(state_dir()).server(), args)


if __name__ == "__main__":
    main()
