"""`dex-agent sessions list|show`, `dex-agent approvals serve|list|decide` and
`dex-agent questions list|answer`."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any

import anyio
import httpx

from ..api.approvals_api import checked_tokens
from ..api.approvals_server import ApprovalsServer, bind_loopback
from ..api.guard import api_guard_settings
from ..api.host_api import host_app
from ..domain.credentials import agent_token, approver_token
from ..domain.records import SessionRecord, ToolCallRecord, TurnRecord
from ..domain.safe_text import terminal_text
from ..gateway_client.connection import describe
from ..store.session_store import SessionStore, store_target


def sessions_list(args: argparse.Namespace) -> int:
    async def go() -> int:
        async with SessionStore(store_target(args.store)) as store:
            for session, turns, last in await store.list_sessions():
                created = datetime.fromtimestamp(session.created_at).isoformat(timespec="seconds")
                print(f"{session.id}  {created}  turns={turns}  last={last or '-'}  model={session.model}  gateway={session.gateway}")
        return 0

    return anyio.run(go)


def sessions_show(args: argparse.Namespace) -> int:
    async def go() -> int:
        async with SessionStore(store_target(args.store)) as store:
            session = await store.get_session(args.session_id)
            if session is None:
                raise ValueError(f"no session {args.session_id}")
            turns = await store.turns(session.id)
            calls = await store.tool_calls(session.id)
            if args.json:
                print(json.dumps({
                    "session": session.model_dump(mode="json"),
                    "turns": [t.model_dump(mode="json") for t in turns],
                    "messages": [m.model_dump(mode="json") for m in await store.messages(session.id)],
                    "tool_calls": [c.model_dump(mode="json") for c in calls],
                }, indent=2))
                return 0
        _print_session(session, turns, calls)
        return 0

    return anyio.run(go)


def _print_session(session: SessionRecord, turns: list[TurnRecord], calls: list[ToolCallRecord]) -> None:
    print(f"session {session.id} · model {session.model} · gateway {session.gateway}")
    for turn in turns:
        print(f"\n{turn.id} [{turn.status.value}] model calls: {turn.model_calls}")
        print(f"  user: {terminal_text(turn.user_text, 500)}")
        for call in (c for c in calls if c.turn_id == turn.id):
            print(f"  call {terminal_text(call.id, 128)} {terminal_text(call.name, 128)} "
                  f"{terminal_text(json.dumps(call.arguments, ensure_ascii=False), 500)} [{call.effect}] -> {call.status.value}"
                  f" (key {terminal_text(call.idempotency_key, 300)}, attempts {call.attempts})")
            if call.result_text:
                print(f"      {terminal_text(call.result_text.splitlines()[0], 200)}")
        if turn.final_text:
            print(f"  answer: {terminal_text(turn.final_text, 2000, keep_newlines=True)}")
        if turn.error:
            print(f"  error: {terminal_text(turn.error, 500)}")


def approvals_serve(args: argparse.Namespace) -> int:
    approvers, agents = checked_tokens([approver_token(args) or ""], [agent_token(args) or ""])
    guard = api_guard_settings(args)
    sock = bind_loopback(args.port)

    async def go() -> int:
        async with SessionStore(store_target(args.store)) as store:
            server = ApprovalsServer(host_app(store, approvers, agents, guard=guard), sock)
            print(f"approvals API on {server.url}", file=sys.stderr, flush=True)
            print(f"web page on {server.base_url}/ui/sessions/<session id>", file=sys.stderr, flush=True)
            await server.serve()
        return 0

    try:
        return anyio.run(go)
    finally:
        sock.close()


def _api(args: argparse.Namespace, method: str, path: str, body: dict[str, Any] | None = None) -> int:
    token = approver_token(args)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = args.url.rstrip("/") + path
    try:
        response = httpx.request(method, url, headers=headers, json=body, timeout=30)
    except httpx.HTTPError as exc:
        print(f"dex-agent: cannot reach the approvals API at {url}: {describe(exc)}", file=sys.stderr)
        return 1
    try:
        answer = response.json()
    except ValueError:
        print(f"dex-agent: the approvals API at {url} answered HTTP {response.status_code} without JSON", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2))
    if response.status_code >= 400:
        error = answer.get("error") if isinstance(answer, dict) else None
        print(f"dex-agent: the approvals API refused: HTTP {response.status_code}: {terminal_text(str(error), 200)}", file=sys.stderr)
        return 1
    return 0


def approvals_list(args: argparse.Namespace) -> int:
    return _api(args, "GET", "/approvals")


def approvals_decide(args: argparse.Namespace) -> int:
    return _api(args, "POST", f"/approvals/{args.approval_id}", {"decision": args.decision, "reason": args.reason})


def questions_list(args: argparse.Namespace) -> int:
    return _api(args, "GET", "/questions")


def field_values(pairs: list[str]) -> dict[str, Any]:
    """`NAME=VALUE` pairs as a form's content: a value that reads as JSON (true, 7, ["a", "b"]) is
    that value, any other is the text. ValueError naming a pair without `=`."""
    content: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--field {pair!r}: expected NAME=VALUE")
        try:
            content[name.strip()] = json.loads(raw)
        except ValueError:
            content[name.strip()] = raw
    return content


def questions_answer(args: argparse.Namespace) -> int:
    """Answer one question: `--text` (ask_user), `--field NAME=VALUE`... (an upstream's form), or
    `--decline`."""
    given = sum([args.text is not None, bool(args.field), args.decline])
    if given != 1:
        print("dex-agent: questions answer: give exactly one of --text, --field NAME=VALUE (repeatable) or --decline",
              file=sys.stderr)
        return 2
    if args.decline:
        body: dict[str, Any] = {"decline": True}
    elif args.field:
        try:
            body = {"content": field_values(args.field)}
        except ValueError as exc:
            print(f"dex-agent: questions answer: {exc}", file=sys.stderr)
            return 2
    else:
        body = {"answer": args.text}
    return _api(args, "POST", f"/questions/{args.question_id}", body)
