"""The Python binding: `module:function`, called in-process with a ConnectorRequest."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio
from pydantic import ValidationError

from ...conventions.outcomes import Interrupted, NotSent
from ..errors import BindingConfigError
from .config import PythonBindingConfig
from .protocol import ConnectorRequest, ConnectorResponse, NothingSent


def import_callable(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise BindingConfigError(f"cannot import the binding callable {spec!r}: {exc}") from None
    if not callable(target):
        raise BindingConfigError(f"the binding callable {spec!r} is not callable")
    return target


class PythonBinding:
    """Async functions are awaited; sync ones run in a worker thread so they never block the
    event loop (a timed-out sync function is abandoned, and counts as maybe applied)."""

    def __init__(self, config: PythonBindingConfig, function: Callable[..., Any] | None = None) -> None:
        self.config = config
        self._function = function if function is not None else import_callable(config.callable)

    async def attempt(self, request: ConnectorRequest, timeout: float) -> ConnectorResponse | NotSent | Interrupted:
        try:
            with anyio.fail_after(timeout):
                if inspect.iscoroutinefunction(self._function):
                    raw = await self._function(request)
                else:
                    raw = await anyio.to_thread.run_sync(partial(self._function, request), abandon_on_cancel=True)
                    if inspect.isawaitable(raw):
                        raw = await raw
        except TimeoutError:
            return Interrupted(f"no answer within the {timeout:g} s executeMethodTimeout")
        except NothingSent as exc:
            return NotSent(str(exc) or "the operation reported that it did nothing")
        except Exception as exc:  # the operation ran and did not answer: it may have acted
            return Interrupted(f"{type(exc).__name__}: {exc}")
        try:
            return raw if isinstance(raw, ConnectorResponse) else ConnectorResponse.model_validate(raw)
        except ValidationError as exc:
            return Interrupted(f"unreadable answer from {self.config.callable}: {exc.errors()[0]['msg']}")
