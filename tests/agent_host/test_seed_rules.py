"""The seeds' smaller rules, one test each (the texts are in agent_host/domain/texts.py)."""

from __future__ import annotations

import io
from pathlib import Path

import anyio
import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agent_host.domain import texts
from agent_host.domain.cards import DEFAULT_APPROVAL_TIMEOUT_SECONDS, parse_deadline
from agent_host.api.host_api import host_app
from agent_host.approvals.gate import ApprovalGate
from agent_host.domain.records import CallStatus, ControlKind, QuestionStatus, TurnStatus
from agent_host.domain.session_ids import check_session_id, session_id_problem
from agent_host.gateway_client.tools import CallRequest, CallResult, GatewayTool, GatewayUnavailable, OnAttempt, OnProgress
from agent_host.models.base import Message, ModelError, ModelRequest, ModelResponse
from agent_host.models.scripted import ScriptedModelClient, call
from agent_host.turn.history import IMAGE_TOKENS, message_tokens
from agent_host.store.session_store import SessionStore
from agent_host.terminal.console import Console
from agent_host.turn.builtins import Builtins
from agent_host.turn.loop import AgentConfig, TurnLoop
from agent_host.turn.tracing import Tracing
from gateway.media.references import ImageReference
from gateway.conventions.keys import Effect
from tests.agent_host.host_support import run_agent
from tests.agent_host.loop_support import Tools, eventually, host, last_user, tool


def test_approval_and_question_deadlines_are_optional_and_none_by_default(tmp_path: Path) -> None:
    assert DEFAULT_APPROVAL_TIMEOUT_SECONDS is None
    assert parse_deadline("none") is None and parse_deadline("NONE") is None and parse_deadline("2.5") == 2.5
    for bad in ("0", "-1", "soon", "inf"):
        with pytest.raises(ValueError, match="none"):
            parse_deadline(bad)
    done = run_agent("run", "--gateway", "http://127.0.0.1:9/mcp", "--store", str(tmp_path / "s.db"),
                     "--approval-timeout", "later", "hi")
    assert done.returncode == 2
    assert "argument --approval-timeout: 'later' is not a number of seconds or `none`" in done.stderr


class _DownGateway(Tools):
    """A gateway whose listing fails (`hang`: never answers)."""

    def __init__(self, hang: bool) -> None:
        super().__init__([tool("lookup", Effect.READ)])
        self.hang = hang

    async def list_tools(self, found: Sequence[GatewayTool] = ()) -> list[GatewayTool]:
        if self.hang:
            await anyio.sleep_forever()
        raise GatewayUnavailable("cannot reach the gateway at http://127.0.0.1:9/mcp: ConnectError")


@pytest.mark.anyio
@pytest.mark.parametrize("hang", [False, True])
async def test_a_failed_listing_offers_no_tools_warns_and_the_turn_answers(
    tmp_path: Path, hang: bool, caplog: pytest.LogCaptureFixture
) -> None:
    offered: list[list[str]] = []

    def script(request: ModelRequest) -> ModelResponse:
        offered.append([t.name for t in request.tools])
        return ModelResponse(text="answered without the gateway")

    config = AgentConfig(listing_timeout_seconds=0.3, control_poll_seconds=0.02)
    async with host(tmp_path, script, _DownGateway(hang), config=config) as h:
        turn = await h.loop.run_turn("s1", "hello")
    assert turn.status is TurnStatus.COMPLETED and turn.final_text == "answered without the gateway"
    assert offered and not any(name == "lookup" for name in offered[0])
    assert "ask_user" in offered[0]  # the built-in tools are still offered
    detail = texts.listing_timed_out(0.3) if hang else "cannot reach the gateway at http://127.0.0.1:9/mcp: ConnectError"
    assert texts.listing_failed(detail) in caplog.text
    assert AgentConfig().listing_timeout_seconds == 10.0


@pytest.mark.anyio
async def test_a_failed_turn_whose_tools_ran_leaves_a_note_not_to_repeat_them(tmp_path: Path) -> None:
    seen: list[list[str]] = []

    def script(request: ModelRequest) -> ModelResponse:
        seen.append([m.text for m in request.messages if m.role == "user"])
        if last_user(request) == "look it up" and request.model_call == 1:
            return ModelResponse(tool_calls=[call(request, 0, "lookup", text="x")])
        if last_user(request) in ("look it up", "fail at once"):
            raise ModelError("the provider is down")
        return ModelResponse(text="ok")

    async with host(tmp_path, script, Tools([tool("lookup", Effect.READ)])) as h:
        failed = await h.loop.run_turn("s1", "look it up")
        assert failed.status is TurnStatus.FAILED and failed.error == "model call failed: the provider is down"
        note = texts.turn_failed_note("model call failed: the provider is down")
        assert [m.text for m in await h.store.messages("s1", failed.id)][-1] == note
        await h.loop.run_turn("s1", "and now?")
        assert note in seen[-1]
        # A turn that failed before any tool ran has nothing to warn about.
        quiet = await h.loop.run_turn("s1", "fail at once")
        assert quiet.status is TurnStatus.FAILED
        assert note not in [m.text for m in await h.store.messages("s1", quiet.id)]


def test_each_image_counts_1600_tokens_in_compaction() -> None:
    image = ImageReference(uri="https://gw/media/sha256/" + "a" * 64, mime_type="image/png", sha256="a" * 64, size_bytes=10)
    plain = Message(role="user", text="look at these")
    shown = plain.model_copy(update={"images": [image, image]})
    assert message_tokens(shown) - message_tokens(plain) == 2 * 1600 == 2 * IMAGE_TOKENS


@pytest.mark.parametrize(("value", "problem"), [
    ("", "a session id cannot be empty"),
    ("a" * 129, "is 129 bytes long; at most 128 are allowed"),
    ("é" * 65, "is 130 bytes long"),
    ("a b", "contains whitespace"),
    ("a\tb", "contains whitespace"),
    ("a\x00b", "contains a control or invisible character (U+0000)"),
    ("a\u202eb", "contains a control or invisible character (U+202E)"),
    ("a/b", "contains '/'"), ("a?b", "contains '?'"), ("a#b", "contains '#'"),
])
def test_session_ids_follow_the_id_rule(value: str, problem: str) -> None:
    assert problem in (session_id_problem(value) or "")
    with pytest.raises(ValueError, match="session id"):
        check_session_id(value)


def test_valid_session_ids_pass() -> None:
    for value in ("s", "s-1f2e", "a" * 128, "é" * 64, "ticket:42", "Zürich.1"):
        assert check_session_id(value) == value


@pytest.mark.anyio
async def test_session_ids_are_checked_where_they_enter(tmp_path: Path) -> None:
    done = run_agent("run", "--gateway", "http://127.0.0.1:9/mcp", "--store", str(tmp_path / "s.db"), "--session", "a/b", "hi")
    assert done.returncode == 2 and "argument --session: session id 'a/b' contains '/'" in done.stderr
    async with SessionStore(tmp_path / "api.db") as store:
        with pytest.raises(ValueError, match="contains whitespace"):
            await store.create_session("scripted", "g", "has space")
        app = host_app(store, ["approver"], ["agent"])
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host") as client:
            long_id = "x" * 129
            for url in (f"/sessions/{long_id}", f"/sessions/{long_id}/steer", f"/ui/sessions/{long_id}"):
                method = client.post if url.endswith("steer") else client.get
                kwargs = {"json": {"text": "t"}} if url.endswith("steer") else {}
                answer = await method(url, headers={"Authorization": "Bearer approver"}, **kwargs)  # type: ignore[operator]
                assert answer.status_code == 400 and "is 129 bytes long" in answer.text, (url, answer.text)
            assert (await client.get("/sessions/nope", headers={"Authorization": "Bearer approver"})).status_code == 404


@pytest.mark.anyio
async def test_summarized_messages_beyond_the_retained_limit_are_deleted(tmp_path: Path) -> None:
    assert SessionStore(tmp_path / "unused.db").retained_message_limit == 1000
    async with SessionStore(tmp_path / "r.db", retained_message_limit=None) as store:
        await store.create_session("scripted", "g", "s")
        turn = await store.start_turn("s", "m0")
        for n in range(1, 12):
            await store.append_message("s", turn.id, Message(role="user", text=f"m{n}"))
        seqs = [seq for seq, _, _ in await store.stored_messages("s")]
        assert len(seqs) == 12
        assert await store.apply_retention("s", 5) == 0  # nothing summarized: everything stays
        await store.record_compaction("s", turn.id, "summary", seqs[:8], [], None)
        # 10 kept: the two oldest go (both summarized).
        assert await store.apply_retention("s", 10) == 2
        assert [m.text for m in await store.messages("s")][0] == "m2"
        # 2 kept: only summarized messages go, so the four after the summary stay.
        assert await store.apply_retention("s", 2) == 6
        assert [m.text for m in await store.messages("s")] == ["m8", "m9", "m10", "m11"]


class _TaskGateway(Tools):
    """`deploy` becomes a long-running task that never ends (until cancelled); `memo` is a plain
    write that takes a moment."""

    def __init__(self) -> None:
        super().__init__([tool("deploy", Effect.IDEMPOTENT_WRITE), tool("memo", Effect.IDEMPOTENT_WRITE)])
        self.cancelled_tasks: list[str] = []

    async def call(self, request: CallRequest, on_attempt: OnAttempt | None = None,
                   on_progress: OnProgress | None = None) -> CallResult:
        if request.name != "deploy":
            return await super().call(request, on_attempt, on_progress)
        if on_attempt is not None:
            await on_attempt(1)
        self.sent.append(request.name)
        assert request.on_task is not None
        await request.on_task()
        try:
            await anyio.sleep_forever()
        finally:
            self.cancelled_tasks.append(request.key)  # where the real source sends tasks/cancel
        raise AssertionError("unreachable")


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["deploy", "memo"])
async def test_cancelling_a_turn_abandons_a_started_write_task_but_waits_for_a_plain_write(tmp_path: Path, name: str) -> None:
    def script(request: ModelRequest) -> ModelResponse:
        if request.model_call == 1:
            return ModelResponse(tool_calls=[call(request, 0, name, text="go")])
        return ModelResponse(text="done")

    gateway = _TaskGateway()
    gateway.delays["memo"] = 0.5
    async with host(tmp_path, script, gateway) as h:
        async with anyio.create_task_group() as tg:
            async def cancel_when_sent() -> None:
                await eventually(lambda: _sent(gateway, name))
                await h.store.request_control("s1", ControlKind.CANCEL, "test", None, None)

            tg.start_soon(cancel_when_sent)
            with anyio.fail_after(10):
                turn = await h.loop.run_turn("s1", "ship it")
        [record] = await h.store.tool_calls("s1", turn.id)
    assert turn.status is TurnStatus.CANCELLED
    if name == "deploy":
        assert record.status is CallStatus.OUTCOME_UNKNOWN and record.result_text == texts.TASK_ABANDONED
        assert record.cancel_reason == "turn_cancelled" and gateway.cancelled_tasks == [record.idempotency_key]
    else:
        assert record.status is CallStatus.SUCCEEDED and gateway.finished == ["memo"]


async def _sent(gateway: Tools, name: str) -> bool:
    return name in gateway.sent


@pytest.mark.anyio
async def test_a_turn_is_traced_with_invoke_agent_chat_and_execute_tool_spans(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def script(request: ModelRequest) -> ModelResponse:
        if request.model_call == 1:
            return ModelResponse(tool_calls=[call(request, 0, "lookup", text="x"), call(request, 1, "broken", text="y")])
        return ModelResponse(text="done")

    tools = Tools([tool("lookup", Effect.READ)])
    async with SessionStore(tmp_path / "t.db") as store:
        await store.create_session("scripted", "g", "s1")
        gate = ApprovalGate(store, "auto")
        loop = TurnLoop(store, ScriptedModelClient(script), tools, gate, Builtins(store, None),
                        AgentConfig(control_poll_seconds=0.02), tracing=Tracing(provider.get_tracer("test")))
        turn = await loop.run_turn("s1", "trace me")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    root = spans["invoke_agent dex-agent"]
    assert root.attributes is not None and root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.conversation.id"] == "s1" and root.attributes["dex.turn.id"] == turn.id
    chats = [s for s in exporter.get_finished_spans() if s.name == "chat scripted"]
    assert len(chats) == 2 and all(c.parent is not None and c.parent.span_id == root.context.span_id for c in chats)
    assert chats[0].attributes is not None and chats[0].attributes["gen_ai.usage.input_tokens"] > 0
    lookup = spans["execute_tool lookup"]
    assert lookup.attributes is not None and lookup.attributes["gen_ai.tool.call.id"] == "call_1_0"
    assert lookup.parent is not None and lookup.parent.span_id == root.context.span_id
    assert lookup.status.status_code is StatusCode.UNSET
    assert root.status.status_code is StatusCode.UNSET


def test_the_host_exports_spans_when_an_exporter_is_chosen(tmp_path: Path) -> None:
    done = run_agent("run", "--gateway", "http://127.0.0.1:9/mcp", "--store", str(tmp_path / "s.db"), "hello",
                     env={"OTEL_TRACES_EXPORTER": "console"})
    assert done.returncode == 0, done.stderr
    assert '"name": "invoke_agent dex-agent"' in done.stdout and '"name": "chat scripted"' in done.stdout


class _AskingGateway(Tools):
    """`confirm` (a write) asks the user a form through the host's form asker, then answers with
    what it got."""

    FORM = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}

    def __init__(self) -> None:
        super().__init__([tool("confirm", Effect.IDEMPOTENT_WRITE)])

    async def call(self, request: CallRequest, on_attempt: OnAttempt | None = None,
                   on_progress: OnProgress | None = None) -> CallResult:
        if on_attempt is not None:
            await on_attempt(1)
        self.sent.append(request.name)
        assert request.ask_form is not None
        action, content = await request.ask_form("Go ahead?", self.FORM)
        return CallResult(status=CallStatus.SUCCEEDED, text=f"{action} {content}", attempts=1)


@pytest.mark.anyio
@pytest.mark.parametrize("control", ["steer", "cancel"])
async def test_a_steer_leaves_an_upstream_question_open_and_a_cancel_closes_it(tmp_path: Path, control: str) -> None:
    def script(request: ModelRequest) -> ModelResponse:
        if request.model_call == 1:
            return ModelResponse(tool_calls=[call(request, 0, "confirm", text="x")])
        return ModelResponse(text="done")

    async with host(tmp_path, script, _AskingGateway()) as h:
        async def act() -> None:
            [question] = await eventually(lambda: h.store.pending_questions("s1"))
            assert question.kind.value == "elicitation" and question.form == _AskingGateway.FORM
            kind = ControlKind.STEER if control == "steer" else ControlKind.CANCEL
            await h.store.request_control("s1", kind, "test", "use staging" if control == "steer" else None, None)
            await anyio.sleep(0.3)  # the running turn has seen the control
            if control == "steer":
                assert [q.id for q in await h.store.pending_questions("s1")] == [question.id]
                await h.store.answer_question(question.id, QuestionStatus.ANSWERED, '{"ok": true}', "http", 0.0)

        async with anyio.create_task_group() as tg:
            tg.start_soon(act)
            with anyio.fail_after(10):
                turn = await h.loop.run_turn("s1", "confirm it")
        [record] = await h.store.tool_calls("s1", turn.id)
    if control == "steer":
        assert record.result_text == "accept {'ok': True}"
    else:
        assert turn.status is TurnStatus.CANCELLED and record.result_text == "cancel None"


@pytest.mark.anyio
@pytest.mark.parametrize(("typed", "expected"), [("y\n", {}), ("\n", None), ("n\n", None), ("", None)])
async def test_an_empty_form_is_accepted_at_the_terminal_only_by_a_yes(typed: str, expected: object) -> None:
    """An upstream's (or the gateway's approval) form without fields is a yes/no question: Enter or
    end of input declines it, never accepts it."""
    out = io.StringIO()
    console = Console(out=out, stdin=io.StringIO(typed))
    with anyio.fail_after(5):
        answer = await console.ask_form("Allow ide-agent to run billing__refund?", {"type": "object", "properties": {}})
    assert answer == expected
    assert "send this answer (accept)? [y/N]>" in out.getvalue()
