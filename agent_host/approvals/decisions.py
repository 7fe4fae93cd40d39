"""The first decision wins: a person at the terminal, the HTTP API or web page (through the
session store), or the deadline. Shared by approvals and `ask_user` questions."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import anyio

T = TypeVar("T")


async def first_decision(
    read: Callable[[], Awaitable[T | None]],
    expire: Callable[[], Awaitable[T]],
    deadline: float | None,
    clock: Callable[[], float],
    poll_seconds: float,
    prompt: Callable[[], Coroutine[Any, Any, None]] | None = None,
) -> T:
    """Poll `read()` (the stored decision, None while pending) until there is one; `expire()` at
    the deadline. `prompt` (the terminal) runs meanwhile and records its answer in the store; it
    is cancelled as soon as a decision is there, whoever made it."""
    decided: T | None = None
    async with anyio.create_task_group() as tg:
        if prompt is not None:
            tg.start_soon(prompt)
        while decided is None:
            decided = await read()
            if decided is not None:
                break
            if deadline is not None and clock() >= deadline:
                decided = await expire()
            else:
                await anyio.sleep(poll_seconds)
        tg.cancel_scope.cancel()
    assert decided is not None  # the loop ends only with a decision
    return decided
