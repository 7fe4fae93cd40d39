"""The seeds' smaller rules, one test each (the texts are in agent_host/domain/texts.py)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from agent_host.domain import texts
from agent_host.domain.cards import DEFAULT_APPROVAL_TIMEOUT_SECONDS, parse_deadline
from agent_host.domain.records import TurnStatus
from agent_host.gateway_client.tools import GatewayTool, GatewayUnavailable
from agent_host.models.base import Message, ModelError, ModelRequest, ModelResponse
from agent_host.models.scripted import call
from agent_host.turn.history import IMAGE_TOKENS, message_tokens
from agent_host.turn.loop import AgentConfig
from gateway.media.references import ImageReference
from gateway.conventions.keys import Effect
from tests.agent_host.host_support import run_agent
from tests.agent_host.loop_support import Tools, host, last_user, tool


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

    async def list_tools(self) -> list[GatewayTool]:
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
