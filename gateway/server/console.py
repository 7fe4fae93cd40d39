"""The operator console at `/console`: one plain HTML page, its script and style sheet, no build step.

The files hold no data. The script reads everything through the admin JSON routes with the bearer
token in the Authorization header (typed into the page, or given in the URL fragment `#token=...`,
which never reaches the server or its logs; kept in the tab's session storage, never in a cookie, so
no other site can make the browser send it: nothing to forge across sites). Every value is put in
the page with `textContent`, never as markup or a URL. A strict Content-Security-Policy allows the
page's own script, style sheet and API and nothing else (no inline script or style).

Served by `http/web_page.py`, as the agent host's session page is (the headers, the policy, the
file list).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..http.web_page import CONTENT_SECURITY_POLICY, WebFiles

__all__ = ["CONTENT_SECURITY_POLICY", "console_routes"]

_FILES = WebFiles("gateway.server", "console_web", ("console.html", "console.js", "console.css"))


def _asset(name: str) -> Response:
    return _FILES.asset(name)


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
