"""The operator console at `/console`: one plain HTML page, its scripts and style sheet, no build step.

The files hold no data. The script reads everything through the admin JSON routes with the bearer
token in the Authorization header (typed into the page, given in the URL fragment `#token=...`,
which never reaches the server or its logs, or got by signing in at the identity provider of
`auth.oauth.console`: the authorization code flow with PKCE, run in the page as a public client).
The token is kept in the tab's session storage, never in a cookie, so no other site can make the
browser send it: nothing to forge across sites. Every value is put in the page with `textContent`,
never as markup or a URL. A strict Content-Security-Policy allows the page's own script, style
sheet and API and nothing else (no inline script or style); with console sign-in, `connect-src`
adds the issuer's origin (its metadata and token endpoint), nothing more.

Routes: the page (`/console`, `/console/callback` where the identity provider sends the browser
back), its files, `/console/settings.json` (what the page needs to sign in: nothing secret) and
`GET /admin/whoami` (who the bearer is to the console: admin or approver, and the name the
records will carry).

Served by `http/web_page.py`, as the agent host's session page is (the headers, the policy, the
file list).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..config.oauth import OAuthConfig
from ..http.web_page import WebFiles

__all__ = ["CONTENT_SECURITY_POLICY", "CALLBACK_PATH", "console_routes", "content_security_policy"]

CALLBACK_PATH = "/console/callback"


def content_security_policy(issuer: str | None = None) -> str:
    """The console's policy; `issuer`: the console's sign-in issuer, whose origin the page may fetch
    (its metadata and token endpoint). Navigating to its login page needs no CSP source."""
    connect = "'self'" if issuer is None else f"'self' {_origin(issuer)}"
    return (
        f"default-src 'none'; script-src 'self'; style-src 'self'; connect-src {connect}; img-src 'self'; "
        "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


CONTENT_SECURITY_POLICY = content_security_policy()
_NAMES = ("console.html", "console.js", "console_login.js", "console.css")
Approver = Callable[[Request], Awaitable[str | None]]
Admin = Callable[[Request], Awaitable[bool]]


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def console_routes(oauth: OAuthConfig | None = None, approver: Approver | None = None,
                   admin: Admin | None = None) -> list[Route]:
    """`oauth`: the gateway's `auth.oauth` (its `console` turns sign-in on); `approver`: the name of who
    may decide held calls with the request's credentials; `admin`: whether they are the admin token."""
    issuer = oauth.console_issuer() if oauth is not None else None
    web = WebFiles("gateway.server", "console_web", _NAMES, policy=content_security_policy(issuer))
    headers = web.headers
    settings: dict[str, object] = {"oauth": None}
    if oauth is not None and oauth.console is not None and issuer is not None:
        settings["oauth"] = {"issuer": issuer, "client_id": oauth.console.client_id, "scope": oauth.console_scope(),
                             "resource": oauth.resource, "callback_path": CALLBACK_PATH}

    def asset(name: str) -> Response:
        return web.asset(name)

    async def page(request: Request) -> Response:
        return asset("console.html")

    async def named(request: Request) -> Response:
        return asset(request.path_params["name"])

    async def login_settings(request: Request) -> Response:
        return JSONResponse(settings, headers=headers)

    async def whoami(request: Request) -> Response:
        name = await approver(request) if approver is not None else None
        if name is None:
            if "authorization" not in request.headers:
                return JSONResponse({"error": "credentials required (Authorization: Bearer <token>)"}, status_code=401)
            return JSONResponse({"error": "these credentials may not use the console: it takes the admin token, an "
                                          "approver token (auth.approver_tokens), or an identity that "
                                          "auth.oauth.approvers names"}, status_code=403)
        role = "admin" if admin is not None and await admin(request) else "approver"
        return JSONResponse({"role": role, "name": name})

    return [
        Route("/console", page, methods=["GET"]),
        Route("/console/", page, methods=["GET"]),
        Route(CALLBACK_PATH, page, methods=["GET"]),
        Route("/console/settings.json", login_settings, methods=["GET"]),
        Route("/console/{name:str}", named, methods=["GET"]),
        Route("/admin/whoami", whoami, methods=["GET"]),
    ]
