"""What an upstream token costs a call (gateway/upstreams/credentials.py), in isolation.

    .venv/bin/python bench/upstream_token_bench.py [--calls 200]

Against the test identity provider (oidc-provider on loopback, tests/support/idp.py; `make idp`
installs it), `UpstreamCredentials.bearer(caller)` for a `token_exchange` upstream, per call, p50
and p95 in milliseconds:

  fresh    the cached token dropped before each call: one RFC 8693 exchange at the provider
  cached   the token in the cache (every later call of that principal until near its expiry)
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.auth.principals import Identity  # noqa: E402
from gateway.config.model import HttpUpstreamConfig  # noqa: E402
from gateway.upstreams.credentials import UpstreamCredentials  # noqa: E402
from tests.support.idp import EXCHANGER, Idp  # noqa: E402

_SECRET = "DEX_BENCH_IDP_SECRET"


def _quantiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    return f"p50 {statistics.median(ordered):.3f} ms  p95 {ordered[int(len(ordered) * 0.95)]:.3f} ms"


async def _measure(credentials: UpstreamCredentials, caller: Identity, calls: int) -> tuple[list[float], list[float]]:
    await credentials.bearer(caller)  # the provider's metadata, a warm connection pool
    fresh: list[float] = []
    cached: list[float] = []
    for _ in range(calls):
        credentials.forget(caller)
        started = time.perf_counter()
        await credentials.bearer(caller)
        fresh.append((time.perf_counter() - started) * 1e3)
        started = time.perf_counter()
        await credentials.bearer(caller)
        cached.append((time.perf_counter() - started) * 1e3)
    await credentials.aclose()
    return fresh, cached


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    with Idp() as idp:
        config = HttpUpstreamConfig.model_validate({
            "name": "crm", "transport": "streamable_http", "url": "http://127.0.0.1:9/mcp", "protocol": "2026-07-28",
            "auth": {"mode": "token_exchange", "issuer": idp.issuer, "client_id": EXCHANGER,
                     "client_secret_env": _SECRET}})
        credentials = UpstreamCredentials(config, environ={_SECRET: idp.client(EXCHANGER).client_secret or ""})
        token = idp.login_user_with_code("http://127.0.0.1:8080/mcp", "mcp", user="alice")["access_token"]
        fresh, cached = asyncio.run(_measure(credentials, Identity("alice", token=token), args.calls))
    print(f"fresh exchange  {_quantiles(fresh)}  ({args.calls} calls)")
    print(f"cached token    {_quantiles(cached)}")


if __name__ == "__main__":
    main()
