"""The fuzzed gateway: one real `dex-gateway serve` process with bearer tokens (so every request
also crosses the auth layer: one principal with everything, one limited to two read tools), the
example payments upstream, and a 64 KiB body limit (the fuzz's huge strings cross it now and then).

The upstream's stderr goes to its own file (`upstream.log`), not into the gateway's: the example
server prints a traceback when fuzzed arguments break it (`float("x")`), and the gateway's stderr
must hold only the gateway's own messages for the "no traceback" check to mean something."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.fuzz.strategies import Credentials
from tests.support.gateway import RunningGateway, start_gateway, stdio_upstream, write_config

MAX_REQUEST_BYTES = 64 * 1024
CREDENTIALS = Credentials(full="fuzz-full-token-3b1f", narrow="fuzz-narrow-token-9c2e")


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Fuzzed:
    """The running target (a plain class: hypothesis prints a failing case's fixtures, and a
    dataclass would be printed field by field, the gateway's whole environment included)."""

    def __init__(self, gateway: RunningGateway, client: httpx.Client, creds: Credentials, state: Path,
                 upstream_log: Path) -> None:
        self.gateway = gateway
        self.client = client
        self.creds = creds
        self.state = state
        self.upstream_log = upstream_log

    @property
    def url(self) -> str:
        return self.gateway.url

    def __repr__(self) -> str:
        return f"Fuzzed({self.url})"


@contextmanager
def fuzzed_gateway(root: Path) -> Iterator[Fuzzed]:
    state = root / "pay"
    state.mkdir()
    upstream_log = root / "upstream.log"
    upstream = stdio_upstream("pay", "dex_server", state_dir=state)
    # The same command, through sh so its stderr is appended to upstream.log.
    upstream["args"] = ["-c", f'exec "$0" "$@" 2>>"{upstream_log}"', upstream["command"], *upstream["args"]]
    upstream["command"] = "/bin/sh"
    config = write_config(root, {
        "server": {"max_request_bytes": MAX_REQUEST_BYTES},
        "auth": {"tokens": [
            {"principal": "fuzz-full", "token_sha256": _sha(CREDENTIALS.full)},
            {"principal": "fuzz-narrow", "token_sha256": _sha(CREDENTIALS.narrow),
             "tools": ["pay__get_*", "pay__list_payments"]},
        ]},
        "upstreams": [upstream],
    })
    with start_gateway(config) as gateway, httpx.Client() as client:
        gateway.wait_for_log(r"catalog ready", timeout=30)
        yield Fuzzed(gateway, client, CREDENTIALS, state, upstream_log)
