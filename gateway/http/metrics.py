"""`GET /metrics`: the Prometheus text, for the admin token or the scrape token.

Which token: metrics name every upstream and every tool that was called, across all principals,
while a principal's scope hides what it may not reach (docs/security.md); so an agent's token is
refused. The admin token is accepted, and so is `telemetry.metrics_token_sha256`, a token that
can read metrics and nothing else -- what a Prometheus server should hold instead of the admin
token, which can register connectors. Without auth the endpoint is open, behind the same
Host/Origin guard as `/mcp` (the gateway then binds to loopback only).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable

from mcp_types import INVALID_REQUEST
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import UNAUTHORIZED
from .asgi import header, refuse
from .auth import Authenticator
from .hosts import HostOriginGuard, HostOriginPolicy
from ..telemetry.metrics import CONTENT_TYPE, GatewayMetrics

__all__ = ["MetricsEndpoint", "metrics_endpoint"]



class MetricsEndpoint:
    def __init__(self, metrics: Callable[[], GatewayMetrics | None], authenticator: Authenticator, token_sha256: str | None) -> None:
        self._metrics = metrics
        self._auth = authenticator
        self._token = token_sha256.lower() if token_sha256 else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] not in ("GET", "HEAD"):
            await refuse(send, 405, INVALID_REQUEST, "/metrics answers GET", extra_headers=[(b"allow", b"GET")])
            return
        if self._auth.enabled and not self._allowed(header(scope, b"authorization")):
            await refuse(
                send, 401, UNAUTHORIZED, "/metrics needs the admin token or the metrics token (telemetry.metrics_token_sha256)",
                extra_headers=[(b"www-authenticate", b'Bearer realm="dex-gateway metrics"')],
            )
            return
        metrics = self._metrics()
        if metrics is None:
            await refuse(send, 404, INVALID_REQUEST, "metrics are off (telemetry.metrics: false)")
            return
        body = metrics.exposition()
        await send({
            "type": "http.response.start", "status": 200,
            "headers": [(b"content-type", CONTENT_TYPE.encode()), (b"content-length", str(len(body)).encode())],
        })
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})

    def _allowed(self, authorization: bytes | None) -> bool:
        value = authorization.decode("latin-1") if authorization is not None else None
        if self._auth.is_admin(value):
            return True
        if self._token is None or not value:
            return False
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return False
        return hmac.compare_digest(hashlib.sha256(token.strip().encode()).hexdigest(), self._token)


def metrics_endpoint(
    metrics: Callable[[], GatewayMetrics | None],
    authenticator: Authenticator,
    token_sha256: str | None,
    policy: HostOriginPolicy,
) -> ASGIApp:
    endpoint = MetricsEndpoint(metrics, authenticator, token_sha256)
    # With auth on the token is the protection (a scraper reaches the pod by its address, which
    # no Host list names); without auth, the DNS-rebinding guard keeps browsers out.
    return endpoint if authenticator.enabled else HostOriginGuard(endpoint, policy)
