"""The operator console at `/console`: one plain HTML page, its script and style sheet, no build step.

The files hold no data. The script reads everything through the admin JSON routes with the bearer
token in the Authorization header (typed into the page, or given in the URL fragment `#token=...`,
which never reaches the server or its logs; kept in the tab's session storage, never in a cookie, so
no other site can make the browser send it: nothing to forge across sites). Every value is put in
the page with `textContent`, never as markup or a URL. A strict Content-Security-Policy allows the
page's own script, style sheet and API and nothing else (no inline script or style).

The same layout as the agent host's session page (agent_host/api/web_page.py), kept separate
because the gateway never imports the host.
"""

from __future__ import annotations

from importlib.resources import files

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["CONTENT_SECURITY_POLICY", "console_routes"]

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
_FILES = {
    "console.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}


def _asset(name: str) -> Response:
    if name not in _FILES:  # only the console's own files, never a path
        return Response("not found", status_code=404, media_type="text/plain", headers=_HEADERS)
    body = files("gateway.server").joinpath("console_web", name).read_bytes()
    return Response(body, media_type=_FILES[name], headers=_HEADERS)


def console_routes() -> list[Route]:
    async def page(request: Request) -> Response:
        return _asset("console.html")

    async def asset(request: Request) -> Response:
        return _asset(request.path_params["name"])

    return [
        Route("/console", page, methods=["GET"]),
        Route("/console/", page, methods=["GET"]),
        Route("/console/{name:str}", asset, methods=["GET"]),
    ]
