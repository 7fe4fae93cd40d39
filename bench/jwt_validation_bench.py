"""What authenticating one request with an OAuth access token costs the gateway, in isolation.

    .venv/bin/python bench/jwt_validation_bench.py [--calls 5000] [--json]

The gateway's own `Authenticator.identity` (the step `BearerAuth` runs per request: the static
token check, then the JWT) against a loopback issuer whose JWKS was fetched once (the key is
cached, as in a running gateway). Per call, p50 and p99 in milliseconds, for:

  repeated   the same token on every call (a client reuses its token until it expires): the
             verified-token cache answers, no signature is checked
  fresh      a token never seen before on every call: the full check (header, allow-list, key,
             signature, aud/iss/exp/nbf/iat, principal, scopes)

for RS256 (RSA 2048) and ES256 (P-256) tokens. The issue's goal: <= 0.05 ms p50 for a cached key.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.config.model import AuthConfig  # noqa: E402
from gateway.http.auth import Authenticator  # noqa: E402
from tests.support.jwks_issuer import JwksIssuer  # noqa: E402

RESOURCE = "https://gateway.example.com/mcp"


def _quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 4),
            "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1] * 1000, 4)}


async def _run(calls: int) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    with JwksIssuer() as idp:
        keys = {"RS256": idp.add_key("rsa-1", "RS256"), "ES256": idp.add_key("ec-1", "ES256")}
        auth = Authenticator(AuthConfig.model_validate({"oauth": {
            "resource": RESOURCE, "issuers": [{"issuer": idp.url}], "required_scopes": ["mcp"]}}))
        for alg, key in keys.items():
            def mint(n: int) -> str:
                return "Bearer " + idp.token(key, sub=f"user-{n % 50}", aud=RESOURCE, scope="mcp",  # noqa: B023
                                             groups=["finance"], jti=f"{alg}-{n}")
            repeated = mint(0)
            assert (await auth.identity(repeated)) is not None  # fetches the JWKS once
            for _ in range(500):
                await auth.identity(repeated)
            samples = []
            for _ in range(calls):
                started = time.perf_counter()
                await auth.identity(repeated)
                samples.append(time.perf_counter() - started)
            results[f"{alg} repeated"] = _quantiles(samples)
            fresh = [mint(n) for n in range(1, calls + 1)]
            samples = []
            for token in fresh:
                started = time.perf_counter()
                await auth.identity(token)
                samples.append(time.perf_counter() - started)
            results[f"{alg} fresh"] = _quantiles(samples)
        results["jwks fetches"] = {"count": float(idp.jwks_fetches)}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = asyncio.run(_run(args.calls))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name, numbers in results.items():
        print(f"{name:<14} " + "  ".join(f"{k} {v}" for k, v in numbers.items()))


if __name__ == "__main__":
    main()
