"""The Python binding: `module:function`, called in-process with a ConnectorRequest.

Registered through the admin API, the callable must live in a module the operator listed in
`connectors.python_modules` (checked on the string by policy.py before anything is imported,
and again here on what the import found: no detour through another module). From the
connectors directory (the operator's own files) any callable is accepted.

Whatever the callable raises (`SystemExit`, `KeyboardInterrupt`, `GeneratorExit`, its own
`CancelledError`, any other `BaseException`) is an interrupted attempt, never an error that
escapes the gateway; only the cancellation of the caller (the gateway cancelling the call)
propagates. The client sees a short text; the exception goes to the log.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
from collections.abc import Callable, Sequence
from functools import partial
from types import ModuleType
from typing import Any

import anyio
from pydantic import ValidationError

from ...conventions.outcomes import Interrupted, NotSent
from ..errors import BindingConfigError, BindingNotAllowed
from .config import PythonBindingConfig
from .policy import PYTHON_MODULES_KEY
from .protocol import ConnectorRequest, ConnectorResponse, NothingSent

log = logging.getLogger(__name__)

RAISED = "the operation raised an error before it answered (the gateway log has the details)"


def _within(module: str, prefixes: Sequence[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def import_callable(spec: str, allowed_modules: Sequence[str] | None = None) -> Callable[..., Any]:
    """Import `module:attr.attr`. With `allowed_modules` (an admin-API registration, whose
    string policy.py has checked already) every module met on the attribute path must be
    inside the list too, and a function or class must be defined there (`__module__`), so
    `my_company.connectors.billing:os.system` or a re-exported `system` is refused."""
    module_name, _, attr = spec.partition(":")
    if allowed_modules is not None and not _within(module_name, allowed_modules):
        # policy.check runs first; this keeps the import itself behind the same rule.
        raise BindingNotAllowed(f"binding.callable {spec!r}: module {module_name!r} is not in {PYTHON_MODULES_KEY}",
                                config_key=PYTHON_MODULES_KEY)
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
            if allowed_modules is not None:
                _check_reached(spec, target, allowed_modules)
    except (ImportError, AttributeError) as exc:
        raise BindingConfigError(f"cannot import the binding callable {spec!r}: {exc}") from None
    except BindingNotAllowed:
        raise
    except BaseException as exc:  # noqa: BLE001 - the module's own code failed (even sys.exit()): refuse, never crash
        log.warning("importing the binding callable %s failed", spec, exc_info=exc)
        raise BindingConfigError(f"cannot import the binding callable {spec!r}: {type(exc).__name__}: {exc}") from None
    if not callable(target):
        raise BindingConfigError(f"the binding callable {spec!r} is not callable")
    function: Callable[..., Any] = target
    return function


def _check_reached(spec: str, target: Any, allowed: Sequence[str]) -> None:
    if isinstance(target, ModuleType):
        home = target.__name__
    elif inspect.isfunction(target) or inspect.isbuiltin(target) or inspect.isclass(target) or inspect.ismethod(target):
        home = getattr(target, "__module__", None) or ""
    else:
        return  # an object the allowed module built itself (a partial, a handler instance)
    if not _within(home, allowed):
        raise BindingNotAllowed(
            f"binding.callable {spec!r} is refused: it leads to {home or 'an unknown module'!r}, which is not in "
            f"{PYTHON_MODULES_KEY}; name a callable defined in an allowed module",
            config_key=PYTHON_MODULES_KEY,
        )


def caller_cancelled(exc: BaseException) -> bool:
    """Is `exc` the cancellation of the task running the binding (the gateway cancelling the
    call, or shutting down), which must propagate? A `CancelledError` the callable raised
    itself, with no cancellation pending on the task, is the callable's failure instead."""
    if not isinstance(exc, anyio.get_cancelled_exc_class()):
        return False
    try:
        task = asyncio.current_task()
    except RuntimeError:  # not on asyncio (trio): its Cancelled is never raised by user code
        return True
    return task is None or task.cancelling() > 0


class PythonBinding:
    """Async functions are awaited; sync ones run in a worker thread so they never block the
    event loop (a timed-out sync function is abandoned, and counts as maybe applied)."""

    def __init__(
        self,
        config: PythonBindingConfig,
        function: Callable[..., Any] | None = None,
        *,
        allowed_modules: Sequence[str] | None = None,
    ) -> None:
        self.config = config
        self._function = function if function is not None else import_callable(config.callable, allowed_modules)

    async def attempt(self, request: ConnectorRequest, timeout: float) -> ConnectorResponse | NotSent | Interrupted:
        try:
            with anyio.fail_after(timeout):
                raw = await self._call(request)
        except TimeoutError:
            return Interrupted(f"no answer within the {timeout:g} s executeMethodTimeout")
        except NothingSent as exc:
            return NotSent(str(exc) or "the operation reported that it did nothing")
        except BaseException as exc:  # noqa: BLE001 - SystemExit, GeneratorExit, ...: the operation ran and did not answer
            if caller_cancelled(exc):
                raise
            log.warning("connector %s %s: the callable %s raised %s", request.connector, request.operation,
                        self.config.callable, type(exc).__name__, exc_info=exc)
            return Interrupted(RAISED)
        try:
            return raw if isinstance(raw, ConnectorResponse) else ConnectorResponse.model_validate(raw)
        except ValidationError as exc:
            log.warning("connector %s %s: unreadable answer from %s: %s", request.connector, request.operation,
                        self.config.callable, exc)
            return Interrupted(f"unreadable answer from the operation: {exc.errors()[0]['msg']}")
        except Exception as exc:  # noqa: BLE001 - an answer object whose attributes raise: unreadable too
            log.warning("connector %s %s: unreadable answer from %s", request.connector, request.operation,
                        self.config.callable, exc_info=exc)
            return Interrupted("unreadable answer from the operation")

    async def _call(self, request: ConnectorRequest) -> Any:
        if inspect.iscoroutinefunction(self._function):
            return await self._function(request)
        raw = await anyio.to_thread.run_sync(partial(self._function, request), abandon_on_cancel=True)
        if inspect.isawaitable(raw):
            raw = await raw
        return raw
