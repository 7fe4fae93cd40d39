"""Images in the agent host: references in the session store, bytes loaded at each model call,
image parts on the OpenAI-compatible wire (recorded responses), the scripted model, the terminal."""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
from pathlib import Path
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
import respx

from agent_host.approvals.gate import ApprovalGate
from agent_host.turn.builtins import Builtins
from agent_host.gateway_client.tools import CallRequest, CallResult, GatewayTool, OnAttempt, OnProgress, call_result
from agent_host.gateway_client.images import ImageLibrary, image_line
from agent_host.turn.loop import AgentConfig, TurnLoop
from agent_host.models.base import ModelClient, ModelRequest, ModelResponse
from agent_host.models.openai_compat import OpenAICompatClient, OpenAIConfig
from agent_host.models.scripted import ScriptedModelClient, call
from agent_host.store.session_store import SessionStore
from gateway.conventions.answers import Answer
from gateway.conventions.keys import Effect
from gateway.media.references import ImageReference, image_blocks, media_uri
from tests.support import images

pytestmark = pytest.mark.anyio

GATEWAY = "http://127.0.0.1:18080/mcp"
MODEL_API = "http://127.0.0.1:11434/v1"
CHART = images.png(99)  # the image the gateway's tool returned (kept in the gateway's store)
CHART_SHA = hashlib.sha256(CHART).hexdigest()
PHOTO = images.gif()  # the user's image


def chart_answer() -> Answer:
    """A result as a gateway with a media store answers it."""
    ref = ImageReference(uri=media_uri(CHART_SHA), mime_type="image/png", sha256=CHART_SHA, size_bytes=len(CHART))
    return Answer(content=[{"type": "text", "text": "sales chart:"}, *image_blocks(1, ref)])


class ChartTools:
    """One read tool whose result holds an image reference (through the real `call_result`)."""

    async def list_tools(self, found: Sequence[GatewayTool] = ()) -> list[GatewayTool]:
        return [GatewayTool(name="bi__chart", effect=Effect.READ, requires_approval=False)]

    async def call(self, request: CallRequest, on_attempt: OnAttempt | None = None, on_progress: OnProgress | None = None) -> CallResult:
        if on_attempt is not None:
            await on_attempt(1)
        return call_result(request.name, chart_answer(), 1)


async def run_turn(tmp_path: Path, model: ModelClient, library: ImageLibrary) -> tuple[SessionStore, Any]:
    store = SessionStore(tmp_path / "s.db")
    await store.open()
    gate = ApprovalGate(store, "auto", timeout_seconds=5, poll_seconds=0.01)
    loop = TurnLoop(store, model, ChartTools(), gate, Builtins(store, None), AgentConfig(), images=library)
    await store.create_session(model.name, GATEWAY, "s1")
    photo_path = tmp_path / "photo.gif"
    photo_path.write_bytes(PHOTO)
    turn = await loop.run_turn("s1", "compare the chart with my photo", images=[await library.add_file(photo_path)])
    return store, turn


def sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def delta(payload: dict[str, Any]) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": payload, "finish_reason": None}]}


def data_url(mime_type: str, data: bytes) -> str:
    return f"data:{mime_type};base64,{base64.b64encode(data).decode()}"


@respx.mock
async def test_openai_client_gets_the_tool_result_image_and_the_user_image_as_image_parts(tmp_path: Path) -> None:
    media = respx.get(f"http://127.0.0.1:18080/media/sha256/{CHART_SHA}").mock(
        return_value=httpx.Response(200, content=CHART, headers={"content-type": "image/png"}))
    chat = respx.post(MODEL_API + "/chat/completions").mock(side_effect=[
        httpx.Response(200, headers={"content-type": "text/event-stream"}, content=sse(
            delta({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_c", "type": "function",
                                                        "function": {"name": "bi__chart", "arguments": "{}"}}]}))),
        httpx.Response(200, headers={"content-type": "text/event-stream"}, content=sse(delta({"content": "They match."}))),
    ])
    model = OpenAICompatClient(OpenAIConfig(model="vision-model", base_url=MODEL_API, api_key="test-key"))
    library = ImageLibrary(tmp_path / "media", GATEWAY, token="agent-token")
    store, turn = await run_turn(tmp_path, model, library)
    assert turn.status.value == "completed" and turn.final_text == "They match."

    first, second = (json.loads(c.request.content)["messages"] for c in chat.calls)
    # The user's image, on every model call, as an image part after the user's text.
    assert first[1]["content"] == [
        {"type": "text", "text": "compare the chart with my photo"},
        {"type": "image_url", "image_url": {"url": data_url("image/gif", PHOTO)}},
    ]
    # The tool result stays text; its image follows the tool messages in a user message.
    tool, images_message = second[3], second[4]
    assert tool == {"role": "tool", "tool_call_id": "call_c", "content": "sales chart:\n[image 1]"}
    assert images_message == {"role": "user", "content": [
        {"type": "text", "text": "Images from the result of bi__chart (call call_c): [image 1]"},
        {"type": "image_url", "image_url": {"url": data_url("image/png", CHART)}},
    ]}
    # Fetched from the gateway with the agent's token, once for the model call that showed it.
    assert media.call_count == 1 and media.calls.last.request.headers["authorization"] == "Bearer agent-token"

    # The session store holds references, never the bytes.
    calls = await store.tool_calls("s1")
    assert [i.sha256 for i in calls[0].images] == [CHART_SHA]
    user = (await store.messages("s1"))[0]
    assert user.images[0].uri.startswith("file://") and user.images[0].mime_type == "image/gif"
    await store.close()
    raw = (tmp_path / "s.db").read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("s.db-*"))
    assert base64.b64encode(CHART) not in raw and base64.b64encode(PHOTO) not in raw
    with sqlite3.connect(tmp_path / "s.db") as db:
        assert CHART_SHA in db.execute("SELECT images FROM tool_calls").fetchone()[0]


@respx.mock
async def test_the_scripted_model_sees_the_images_and_an_unloadable_one_is_said_so(tmp_path: Path) -> None:
    respx.get(f"http://127.0.0.1:18080/media/sha256/{CHART_SHA}").mock(return_value=httpx.Response(404))
    seen: list[list[tuple[str, int, bytes | None]]] = []

    def script(request: ModelRequest) -> ModelResponse:
        seen.append([(m.role, n, data) for m, n, data in ScriptedModelClient.images(request)])
        if request.model_call == 1:
            return ModelResponse(tool_calls=[call(request, 0, "bi__chart")])
        return ModelResponse(text="done")

    library = ImageLibrary(tmp_path / "media", GATEWAY)
    store, turn = await run_turn(tmp_path, ScriptedModelClient(script), library)
    await store.close()
    assert turn.status.value == "completed"
    assert seen == [[("user", 1, PHOTO)], [("user", 1, PHOTO), ("tool", 1, None)]]  # the gateway said 404
    request = ModelRequest(instructions="", messages=[m for m in (await _messages(tmp_path))], tools=[])
    wire = OpenAICompatClient(OpenAIConfig(model="m", base_url=MODEL_API))._body(request)["messages"]
    assert {"type": "text", "text": "[image 1 (image/gif) is not available right now]"} in wire[1]["content"]


async def _messages(tmp_path: Path) -> list[Any]:
    async with SessionStore(tmp_path / "s.db") as store:
        return [m for m in await store.messages("s1") if m.role == "user"]


async def test_inline_images_of_a_gateway_without_a_store_are_kept_by_reference(tmp_path: Path) -> None:
    library = ImageLibrary(tmp_path / "media")
    answer = Answer(content=[{"type": "text", "text": "x"}, images.image_block(images.webp(), "image/png"),
                             {"type": "image", "data": images.BAD_IMAGES["truncated_png"][0], "mimeType": "image/png"}])
    kept = await library.keep_inline(answer)
    result = call_result("t", kept, 1)
    assert result.text == "x\n[image 1]\n[image 2 not kept: a truncated PNG (it does not end with the IEND chunk)]"
    assert [(i.mime_type, i.uri.startswith("file://")) for i in result.images] == [("image/webp", True)]
    assert await library.load(result.images) == {result.images[0].sha256: images.webp()}
    assert base64.b64encode(images.webp()).decode() not in result.text


async def test_a_user_file_that_is_not_an_image_is_refused_naming_the_rule(tmp_path: Path) -> None:
    library = ImageLibrary(tmp_path / "media")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match=r"--image .*notes.txt: its bytes are not a PNG, JPEG, GIF or WebP"):
        await library.add_file(tmp_path / "notes.txt")
    with pytest.raises(ValueError, match="No such file"):
        await library.add_file(tmp_path / "missing.png")


def test_the_terminal_line() -> None:
    ref = ImageReference(uri="file:///x", mime_type="image/png", sha256="1f2e" + "0" * 60, size_bytes=2100)
    assert image_line(1, ref) == "[image 1: image/png, 2.1 KB, sha256 1f2e…]"
    hostile = ref.model_copy(update={"mime_type": "image/png\x1b[2J\u202e"})
    assert "\x1b" not in image_line(2, hostile) and "\\u001b" in image_line(2, hostile)
