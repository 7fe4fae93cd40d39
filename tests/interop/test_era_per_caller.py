"""The era per caller (issue 26 item 2, docs/interop.md "The era per caller"): with `protocol: auto`,
a caller that can be asked something -- a handshake-era caller with elicitation, sampling or roots on
its session, or a 2026-07-28 caller declaring them in its requests (its questions become
`input_required` rounds) -- reaches an upstream serving both eras on the handshake era when a tool
asks only through its session; everything else keeps 2026-07-28.

The upstream is an ordinary MCP SDK 2.x server (tests/support/asking_server.py: `MCPServer`,
`ctx.elicit`, `ctx.session.create_message`) with sessions, which serves both eras; the clients are
the SDK's own, through a real stateful `dex-gateway serve`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from gateway.conventions.keys import IDEMPOTENCY_KEY, REPLAYED_KEY
from tests.interop.support import Recorder, client, gateway_for, text_of
from tests.support.gateway import http_upstream
from tests.support.processes import spawn_listening, terminate
from tests.support.servers import REPO_ROOT, start_http_server

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120),
              pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

SERVER = REPO_ROOT / "tests" / "support" / "asking_server.py"


@contextmanager
def asking_server(*more: str) -> Iterator[str]:
    lines: list[str] = []
    argv = [sys.executable, str(SERVER), "--transport", "http", "--stateful", "--port", "0", *more]
    process, url = spawn_listening(argv, cwd=REPO_ROOT, env=dict(os.environ), name="asking", lines=lines,
                                   ready_timeout=30)
    assert url is not None, "the asking server did not start:\n" + "\n".join(lines)
    try:
        yield url
    finally:
        terminate(process)


@pytest.fixture(scope="module")
def upstream_url() -> Iterator[str]:
    with asking_server() as url:
        yield url


async def failure(session: Client, tool: str) -> str:
    """The text of a call that must fail (a failed result or a JSON-RPC error)."""
    try:
        result = await session.call_tool(tool, {})
    except MCPError as exc:
        return exc.error.message
    assert result.is_error, text_of(result)
    return text_of(result)


async def test_a_handshake_client_that_can_answer_gets_the_session_questions(tmp_path: Path, upstream_url: str) -> None:
    with gateway_for(tmp_path, http_upstream("ask", upstream_url, prefix="", keyless_writes="pass")) as gateway:
        recorder = Recorder()
        async with client(gateway.url, mode="legacy", recorder=recorder) as legacy:
            assert text_of(await legacy.call_tool("ask_name", {})) == "hello Ada"
            assert text_of(await legacy.call_tool("ask_model", {"question": "hi?"})) == "the model said: sampled"
            assert text_of(await legacy.call_tool("echo", {"text": "x"})) == "echo: x"
        assert recorder.asked == ["elicitation/create", "sampling/createMessage"]
        assert gateway.log.count("opening a handshake-era session for callers that can be asked") == 1


@pytest.mark.parametrize("stateful", [True, False], ids=["stateful", "stateless"])
async def test_a_2026_client_that_can_answer_gets_the_session_questions_as_rounds(
        tmp_path: Path, upstream_url: str, stateful: bool) -> None:
    # Its request declares elicitation and sampling: the tool says "no back-channel" on 2026-07-28,
    # so the call is sent again on the handshake era, parked, and its questions reach the SDK client
    # as input_required rounds, which it answers with its callbacks; later calls go there at once.
    with gateway_for(tmp_path, http_upstream("ask", upstream_url, prefix="", keyless_writes="pass"),
                     stateful=stateful) as gateway:
        recorder = Recorder()
        async with client(gateway.url, mode="2026-07-28", recorder=recorder) as modern:
            with anyio.fail_after(30):
                assert text_of(await modern.call_tool("ask_name", {})) == "hello Ada"
                assert text_of(await modern.call_tool("ask_model", {"question": "hi?"})) == "the model said: sampled"
                assert text_of(await modern.call_tool("ask_name", {})) == "hello Ada"
                assert text_of(await modern.call_tool("echo", {"text": "y"})) == "echo: y"
            # Another refusal (-32600, not "no back-channel") is the tool's answer: not sent again.
            assert await failure(modern, "refuse") == "MCP error -32600: not today"
        assert recorder.asked == ["elicitation/create", "sampling/createMessage", "elicitation/create"]
        assert gateway.log.count("opening a handshake-era session for callers that can be asked") == 1
        assert gateway.log.count("asks only through a session") == 2  # learnt once per tool
        assert "tool refuse asks" not in gateway.log


async def test_a_2026_client_that_cannot_answer_keeps_2026_07_28(tmp_path: Path, upstream_url: str) -> None:
    # No elicitation or sampling in its requests: the faster 2026-07-28 path, where such a tool
    # cannot ask; the client gets the server's own error, as it does directly (an upstream's JSON-RPC
    # error to a tool call reaches the client as a failed result, "MCP error <code>: <message>").
    async with client(upstream_url, mode="2026-07-28", answers=False) as direct:
        expected = await failure(direct, "ask_name")
    assert "back-channel" in expected
    with gateway_for(tmp_path, http_upstream("ask", upstream_url, prefix="", keyless_writes="pass")) as gateway:
        async with client(gateway.url, mode="2026-07-28", answers=False) as modern:
            assert text_of(await modern.call_tool("echo", {"text": "y"})) == "echo: y"
            assert await failure(modern, "ask_name") == f"MCP error -32600: {expected}"
        assert "opening a handshake-era session" not in gateway.log


@pytest.mark.parametrize("stateful", [True, False], ids=["stateful", "stateless"])
async def test_a_keyed_write_that_asks_runs_once(tmp_path: Path, upstream_url: str, stateful: bool) -> None:
    # sign_guestbook (non-idempotent write) asks, then writes. Its first call on 2026-07-28 stops at
    # the question ("no back-channel"): the gateway learns the tool but never sends that call again
    # (what a write did before its question may not run twice): the client gets the server's error.
    # Its next call (a new key) goes on the handshake era, is answered through rounds and fenced by
    # its key -- the same key again replays the stored result (not asked, not run again); a new key runs.
    with gateway_for(tmp_path, http_upstream("ask", upstream_url, prefix="", keyless_writes="reject"),
                     stateful=stateful) as gateway:
        recorder = Recorder()
        async with client(gateway.url, mode="2026-07-28", recorder=recorder) as modern:
            with anyio.fail_after(30):
                refused = await modern.call_tool("sign_guestbook", {}, meta={IDEMPOTENCY_KEY: "sign-0"})
                assert refused.is_error and "back-channel" in text_of(refused), text_of(refused)
                assert recorder.asked == []
                first = await modern.call_tool("sign_guestbook", {}, meta={IDEMPOTENCY_KEY: "sign-1"})
                signed = text_of(first)
                assert signed.startswith("signed by Ada (entry "), signed
                again = await modern.call_tool("sign_guestbook", {}, meta={IDEMPOTENCY_KEY: "sign-1"})
                assert text_of(again) == signed
                assert (again.meta or {}).get(REPLAYED_KEY), again.meta
                other = await modern.call_tool("sign_guestbook", {}, meta={IDEMPOTENCY_KEY: "sign-2"})
        assert recorder.asked == ["elicitation/create", "elicitation/create"]
        number = int(signed.rstrip(")").rsplit(" ", 1)[1])
        assert text_of(other) == f"signed by Ada (entry {number + 1})"  # the replay did not write


async def test_an_unclassified_tool_that_asks_is_not_sent_twice(tmp_path: Path, upstream_url: str) -> None:
    # Unclassified: what it did before its question may not run twice, so its first call from a 2026
    # client is not sent again on the handshake era (the server's own error is the answer); the
    # gateway learnt the tool: the next call goes there at once and its question is answered.
    with gateway_for(tmp_path, http_upstream("ask", upstream_url, prefix="", keyless_writes="pass")) as gateway:
        recorder = Recorder()
        async with client(gateway.url, mode="2026-07-28", recorder=recorder) as modern:
            with anyio.fail_after(30):
                first = await modern.call_tool("ask_city", {})
                assert first.is_error and "back-channel" in text_of(first), text_of(first)
                assert recorder.asked == []
                assert text_of(await modern.call_tool("ask_city", {})) == "a city for Ada"
        assert recorder.asked == ["elicitation/create"]


async def test_protocol_set_by_the_operator_overrides_the_choice(tmp_path: Path, upstream_url: str) -> None:
    with gateway_for(tmp_path, http_upstream("ask", upstream_url, prefix="", keyless_writes="pass", protocol="2026-07-28")) as gateway:
        recorder = Recorder()
        async with client(gateway.url, mode="legacy", recorder=recorder) as legacy:
            assert text_of(await legacy.call_tool("echo", {"text": "z"})) == "echo: z"
            assert "back-channel" in await failure(legacy, "ask_name")
        assert recorder.asked == []


async def test_an_upstream_that_refuses_the_handshake_era_keeps_every_caller_on_2026(tmp_path: Path) -> None:
    with asking_server("--modern-only") as url, \
            gateway_for(tmp_path, http_upstream("ask", url, prefix="", keyless_writes="pass")) as gateway:
        recorder = Recorder()
        async with client(gateway.url, mode="legacy", recorder=recorder) as legacy:
            assert text_of(await legacy.call_tool("echo", {"text": "1"})) == "echo: 1"  # not lost to the refusal
            assert text_of(await legacy.call_tool("echo", {"text": "2"})) == "echo: 2"
        assert gateway.log.count("no handshake era") == 1  # asked once, then not again for a while


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_tool_the_upstream_runs_as_a_task_keeps_2026_and_asks_inside_the_task(tmp_path: Path, mode: str) -> None:
    # examples/servers/tasks_server.py asks only inside a task (input_required): its tools declare
    # execution.taskSupport on the handshake era, so an askable caller of either era stays on
    # 2026-07-28, where the gateway follows the task. A handshake-era caller is asked on its session;
    # a plain 2026-07-28 caller in input_required rounds of its call (the call is parked).
    with start_http_server("tasks_server", state_dir=tmp_path / "up") as server, \
            gateway_for(tmp_path, http_upstream("t", server.url, prefix="", keyless_writes="pass")) as gateway:
        recorder = Recorder()
        async with client(gateway.url, mode=mode, recorder=recorder) as caller:
            with anyio.fail_after(30):
                result = await caller.call_tool("confirm_delete", {"filename": "a.txt"})
        assert text_of(result) == "deleted a.txt", text_of(result)
        assert recorder.asked == ["elicitation/create"]
        assert "asks only through a session" not in gateway.log
