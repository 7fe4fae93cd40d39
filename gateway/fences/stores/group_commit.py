"""Group commit: writes that become ready together share one commit.

A write that finds no commit under way is committed at once, alone (calls one at a time pay
nothing). A write that arrives while commits are under way waits one pass of the event loop;
every write submitted in that same pass (typically the finishes of calls whose answers, or whose
claims' commits, came back in one read of the sockets) joins it, and the group is committed as
one statement, one transaction, one WAL flush, without waiting for the commits under way: commits
still overlap, so the database's own flush sharing between connections keeps working. Each caller is released only when the commit carrying its write has
returned: a write is acknowledged after it is durable, exactly as if it had been committed alone.

A commit that fails with a transient error (connection lost: it may or may not have happened)
fails every write it carried with that error, and each caller settles it as its own, as it would
after a write of its own. Any other error means the database refused the statement (nothing of it
was committed): each write is then tried again alone, so a write whose data is refused fails only
its own caller.
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
        transient: tuple[type[BaseException], ...] = (),
    ) -> None:
        """`commit(items)` writes every item in one transaction and returns one result per item,
        in order. Two items with the same `key` never go in one commit (the later one goes in the
        next group), so each row is written at most once per statement. `transient`: the errors
        that say the database could not answer now (the commit may or may not have happened)."""
        self._commit = commit
        self._key = key
        self._max_items = max_items
        self._queue: list[_Waiter[I, R]] = []
        self._gathering = False
        self._transient = transient
        self._in_flight = 0  # commits sent and not yet answered

    async def submit(self, item: I) -> R:
        # Shielded: once submitted, a write is committed (or fails) whoever cancels its caller,
        # and a caller chosen to gather the next group does gather it.
        with anyio.CancelScope(shield=True):
            if not self._gathering and not self._in_flight:
                # Nothing being committed, so nothing to share a flush with: at once, alone (no
                # other write waits on it, so its errors are simply its caller's).
                self._in_flight += 1
                try:
                    return (await self._commit([item]))[0]
                finally:
                    self._in_flight -= 1
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
        self._in_flight += 1
        try:
            results = await self._commit([w.item for w in group])
        except self._transient as exc:
            # Maybe committed, maybe not (the answer was lost): every caller sees the error and
            # settles it as its own (a retry, then a read of what is there).
            self._fail(group, exc)
            return
        except Exception as exc:
            if len(group) == 1:
                self._fail(group, exc)
                return
            # The database refused the statement, so nothing of it was committed, and the fault
            # may be one write's own data: each write is tried again alone and fails only its caller.
            async with anyio.create_task_group() as tg:
                for w in group:
                    tg.start_soon(self._commit_group, [w])
            return
        except BaseException as exc:
            self._fail(group, exc)
            raise
        finally:
            self._in_flight -= 1
        for w, result in zip(group, results, strict=True):
            w.result = result
            w.done.set()

    @staticmethod
    def _fail(group: list[_Waiter[I, R]], exc: BaseException | None) -> None:
        for w in group:
            w.error = exc
            w.done.set()

    @staticmethod
    def _outcome(w: _Waiter[I, R]) -> R:
        if w.error is not None:
            raise w.error
        return w.result  # type: ignore[return-value]  # set with done when no error
