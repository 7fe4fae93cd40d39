"""Group commit: writes that become ready together share one commit.

The first write to arrive waits one pass of the event loop; every write submitted in that same
pass (typically the finishes of calls whose answers, or whose claims' commits, came back in one
read of the sockets) joins it, and the group is committed as one statement, one transaction, one
WAL flush. A write that arrives later starts a group of its own at once, without waiting for the
commit under way: commits still overlap, so the database's own flush sharing between
connections keeps working. Each caller is released only when the commit carrying its write has
returned: a write is acknowledged after it is durable, exactly as if it had been committed alone.

A failed commit fails every write it carried with the same exception (nothing of it was
committed: one statement is one transaction); each caller handles it as its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

import anyio
import anyio.lowlevel

I = TypeVar("I")
R = TypeVar("R")


class _Waiter(Generic[I, R]):
    __slots__ = ("item", "key", "done", "lead", "result", "error")

    def __init__(self, item: I, key: Hashable) -> None:
        self.item = item
        self.key = key
        self.done = anyio.Event()
        self.lead = False  # woken to gather and commit the next group rather than with a result
        self.result: R | None = None
        self.error: BaseException | None = None


class GroupCommit(Generic[I, R]):
    def __init__(
        self,
        commit: Callable[[Sequence[I]], Awaitable[Sequence[R]]],
        *,
        key: Callable[[I], Hashable],
        max_items: int = 64,
    ) -> None:
        """`commit(items)` writes every item in one transaction and returns one result per item,
        in order. Two items with the same `key` never go in one commit (the later one goes in the
        next group), so each row is written at most once per statement."""
        self._commit = commit
        self._key = key
        self._max_items = max_items
        self._queue: list[_Waiter[I, R]] = []
        self._gathering = False

    async def submit(self, item: I) -> R:
        # Shielded: once queued, a write is committed (or fails) whoever cancels its caller, and
        # a caller chosen to gather the next group does gather it.
        with anyio.CancelScope(shield=True):
            me: _Waiter[I, R] = _Waiter(item, self._key(item))
            await self._queue_and_commit(me)
        return self._outcome(me)

    async def _queue_and_commit(self, me: _Waiter[I, R]) -> None:
        self._queue.append(me)
        if self._gathering:
            await me.done.wait()
            if not me.lead:
                return
        self._gathering = True
        await anyio.lowlevel.checkpoint()  # the writes ready in this pass of the loop join
        group = self._take()
        self._hand_over()
        await self._commit_group(group)

    def _take(self) -> list[_Waiter[I, R]]:
        group: list[_Waiter[I, R]] = []
        keys: set[Hashable] = set()
        rest: list[_Waiter[I, R]] = []
        for w in self._queue:
            if len(group) < self._max_items and w.key not in keys:
                keys.add(w.key)
                group.append(w)
            else:
                rest.append(w)
        self._queue = rest
        return group

    def _hand_over(self) -> None:
        """Writes left over (a key twice, or past `max_items`): the first one gathers the next
        group now; else the next write to arrive does."""
        if self._queue:
            nxt = self._queue[0]
            nxt.lead = True
            nxt.done.set()
        else:
            self._gathering = False

    async def _commit_group(self, group: list[_Waiter[I, R]]) -> None:
        try:
            results = await self._commit([w.item for w in group])
        except BaseException as exc:  # every write of the group fails with it
            for w in group:
                w.error = exc
                w.done.set()
            return
        for w, result in zip(group, results, strict=True):
            w.result = result
            w.done.set()

    @staticmethod
    def _outcome(w: _Waiter[I, R]) -> R:
        if w.error is not None:
            raise w.error
        return w.result  # type: ignore[return-value]  # set with done when no error
