"""Upstream sessions for unit tests: an `UpstreamSession` over an HTTP channel (a MockTransport or a
real server) or over a stdio channel (in-memory streams and a fake process handle)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from anyio.abc import TaskGroup

from gateway.upstreams.channels.http import HttpChannel
from gateway.upstreams.session import UpstreamSession
from gateway.upstreams.transport import HttpTransport


def http_session(name: str, url: str, *, headers: Mapping[str, str], protocol: str, connect_timeout: float,
                 transport: HttpTransport | None = None, task_group: TaskGroup | None = None,
                 **session: Any) -> UpstreamSession:
    channel = HttpChannel(name, url, headers=headers, connect_timeout=connect_timeout, transport=transport)
    return UpstreamSession(name, channel, protocol=protocol, connect_timeout=connect_timeout, task_group=task_group,
                           **session)
