"""An exception of any kind in a binding is an interrupted attempt (issue 14, item 1): never an
error that escapes to the gateway's request, except the cancellation of the caller itself."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from connector_support import load_doc, manifest_doc

from gateway.connectors.bindings import (
    ConnectorRequest,
    ContainedBinding,
    PythonBinding,
    PythonBindingConfig,
)
from gateway.connectors.bindings.python import RAISED
from gateway.connectors.tool import ConnectorTool
from gateway.conventions.keys import OUTCOME_KEY
from gateway.conventions.outcomes import Interrupted, NotSent

CONFIG = PythonBindingConfig(type="python", callable="tests.fake:fn")
REQUEST = ConnectorRequest(connector="acme", operation="getThing", input={}, call_id="c-1", idempotency_key=None, attempt=1)


class Custom(BaseException):
    """A BaseException subclass a library might raise."""


def sync_exit(request: ConnectorRequest) -> Any:
    sys.exit(3)


async def async_exit(request: ConnectorRequest) -> Any:
    sys.exit("bye")


def sync_base(request: ConnectorRequest) -> Any:
    raise Custom("not an Exception")


async def async_base(request: ConnectorRequest) -> Any:
    raise Custom("not an Exception")


async def keyboard(request: ConnectorRequest) -> Any:
    raise KeyboardInterrupt


async def generator_exit(request: ConnectorRequest) -> Any:
    raise GeneratorExit


async def own_cancel(request: ConnectorRequest) -> Any:
    """The callable raises CancelledError itself; nobody cancelled the caller."""
    raise asyncio.CancelledError("the provider's client gave up")


def sync_own_cancel(request: ConnectorRequest) -> Any:
    raise asyncio.CancelledError


async def lost_inner_task(request: ConnectorRequest) -> Any:
    """An inner task the callable awaits is cancelled (by the callable's own library)."""
    task = asyncio.ensure_future(asyncio.sleep(10))
    asyncio.get_running_loop().call_soon(task.cancel)
    return await task


class BadAnswer:
    def __getattr__(self, name: str) -> Any:
        raise Custom("an answer that explodes when read")


async def explosive_answer(request: ConnectorRequest) -> Any:
    return BadAnswer()


RAISERS: list[Callable[[ConnectorRequest], Any]] = [
    sync_exit, async_exit, sync_base, async_base, keyboard, generator_exit, own_cancel, sync_own_cancel, lost_inner_task,
]


@pytest.mark.anyio
@pytest.mark.parametrize("fn", RAISERS, ids=lambda f: f.__name__)
async def test_base_exceptions_are_interrupted_attempts(fn: Callable[[ConnectorRequest], Any]) -> None:
    result = await PythonBinding(CONFIG, fn).attempt(REQUEST, 5)
    assert result == Interrupted(RAISED)
    # The client's text names no exception class.
    for name in ("SystemExit", "Custom", "KeyboardInterrupt", "GeneratorExit", "CancelledError"):
        assert name not in result.reason


@pytest.mark.anyio
async def test_unreadable_answer_object_is_interrupted() -> None:
    result = await PythonBinding(CONFIG, explosive_answer).attempt(REQUEST, 5)
    assert isinstance(result, Interrupted) and "Custom" not in result.reason


@pytest.mark.anyio
async def test_caller_cancellation_propagates_through_an_anyio_scope() -> None:
    started = anyio.Event()

    async def slow(request: ConnectorRequest) -> Any:
        started.set()
        await anyio.sleep(10)

    results: list[Any] = []
    with anyio.move_on_after(5) as outer:
        async with anyio.create_task_group() as tg:
            async def run() -> None:
                results.append(await PythonBinding(CONFIG, slow).attempt(REQUEST, 30))

            tg.start_soon(run)
            await started.wait()
            tg.cancel_scope.cancel()
    assert not outer.cancelled_caught
    assert results == []  # cancelled, not answered "interrupted"


@pytest.mark.anyio
async def test_caller_cancellation_propagates_for_a_sync_callable() -> None:
    import threading

    release = threading.Event()

    def blocking(request: ConnectorRequest) -> Any:
        release.wait(5)
        return {"branch": "found"}

    results: list[Any] = []
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            async def run() -> None:
                results.append(await PythonBinding(CONFIG, blocking).attempt(REQUEST, 30))

            tg.start_soon(run)
            await anyio.sleep(0.1)
            scope.cancel()
    release.set()
    assert results == []


@pytest.mark.anyio
async def test_native_task_cancel_propagates() -> None:
    started = asyncio.Event()

    async def slow(request: ConnectorRequest) -> Any:
        started.set()
        await asyncio.sleep(10)

    task = asyncio.ensure_future(ContainedBinding(PythonBinding(CONFIG, slow)).attempt(REQUEST, 30))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.anyio
async def test_own_timeout_is_interrupted_not_cancelled() -> None:
    async def slow(request: ConnectorRequest) -> Any:
        await anyio.sleep(10)

    result = await PythonBinding(CONFIG, slow).attempt(REQUEST, 0.1)
    assert isinstance(result, Interrupted) and "executeMethodTimeout" in result.reason


@pytest.mark.anyio
async def test_contained_binding_turns_any_escape_into_interrupted() -> None:
    class Broken:
        async def attempt(self, request: ConnectorRequest, timeout: float) -> Any:
            raise Custom("a bug in a binding")

    class Exits:
        async def attempt(self, request: ConnectorRequest, timeout: float) -> Any:
            raise SystemExit(1)

    for inner in (Broken(), Exits()):
        result = await ContainedBinding(inner).attempt(REQUEST, 5)
        assert isinstance(result, Interrupted) and "Custom" not in result.reason and "SystemExit" not in result.reason


# -- the answers the agent gets ------------------------------------------------------------------


def _tools(fn: Callable[[ConnectorRequest], Any]) -> tuple[ConnectorTool, ConnectorTool]:
    doc = manifest_doc(
        {"name": "getThing", "kind": "query", "branches": [{"id": "found"}],
         "execution": {"retry": {"initialInterval": "10ms", "maximumAttempts": 3}},
         "agent": {"exposed": True}, "inputSchema": {"type": "object"}},
        {"name": "moveMoney", "kind": "mutation", "branches": [{"id": "moved"}],
         "agent": {"exposed": True}, "inputSchema": {"type": "object"}},
        name="acme",
    )
    manifest = load_doc(doc)
    binding = ContainedBinding(PythonBinding(CONFIG, fn))
    return (ConnectorTool.build(manifest, manifest.operation("getThing"), binding),
            ConnectorTool.build(manifest, manifest.operation("moveMoney"), binding))


@pytest.mark.anyio
@pytest.mark.parametrize("fn", [sync_exit, async_base], ids=lambda f: f.__name__)
async def test_query_fails_and_mutation_is_unknown(fn: Callable[[ConnectorRequest], Any]) -> None:
    query, mutation = _tools(fn)
    failed = await query.call({}, idempotency_key=None, fence_id=None, takeover=False)
    assert failed.is_error and OUTCOME_KEY not in (failed.meta or {})
    assert failed.text == f"acme getThing was interrupted on all 3 attempts: {RAISED}."
    unknown = await mutation.call({}, idempotency_key="k/1", fence_id="f-1", takeover=False)
    assert unknown.is_error and (unknown.meta or {})[OUTCOME_KEY] == "unknown"
    assert "interrupted after it was sent" in unknown.text and "may have taken effect" in unknown.text.lower()
    assert "SystemExit" not in failed.text + unknown.text and "Custom" not in failed.text + unknown.text


@pytest.mark.anyio
async def test_nothing_sent_still_proves_nothing_ran() -> None:
    from gateway.connectors.bindings import NothingSent

    async def declines(request: ConnectorRequest) -> Any:
        raise NothingSent("rate limited locally")

    assert await PythonBinding(CONFIG, declines).attempt(REQUEST, 5) == NotSent("rate limited locally")
