"""The host's web page: one plain HTML page with its two scripts and style sheet, no build step.

Served under `/ui/`: `/ui/sessions/{id}` is the page of one session (the live transcript,
approval cards, questions, the plan, steer and cancel, and under `dex-agent serve` a message box
and the queue of messages waiting for the turn); `/ui/` lists the sessions and starts a new one. The files hold no data; the script reads
the session through the authenticated API (the approver token is typed into the page, or given
in the URL fragment `#token=...`, which never reaches the server or its logs) and renders every
value with `textContent`, never as HTML. A strict Content-Security-Policy allows nothing but the
page's own script, style sheet and API.
"""

from __future__ import annotations

from importlib.resources import files

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..domain.session_ids import session_id_problem

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
_FILES = {
    "page.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "stream.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}


def _asset(name: str) -> Response:
    if name not in _FILES:  # only the page's own files, never a path
        return Response("not found", status_code=404, media_type="text/plain", headers=_HEADERS)
    body = files("agent_host.api").joinpath("web", name).read_bytes()
    return Response(body, media_type=_FILES[name], headers=_HEADERS)


def page_routes() -> list[Route]:
    async def page(request: Request) -> Response:
        session_id = request.path_params.get("session_id")  # None: /ui/, the session list
        if session_id is not None and (problem := session_id_problem(session_id)) is not None:
            return Response(problem, status_code=400, media_type="text/plain; charset=utf-8", headers=_HEADERS)
        return _asset("page.html")

    async def script(request: Request) -> Response:
        return _asset(request.path_params["name"] + ".js")

    async def style(request: Request) -> Response:
        return _asset("app.css")

    async def no_icon(request: Request) -> Response:
        return Response(status_code=204, headers=_HEADERS)

    return [
        Route("/ui/sessions/{session_id}", page, methods=["GET"]),
        Route("/ui/", page, methods=["GET"]),  # the session list (the same page, no session)
        Route("/ui/{name:str}.js", script, methods=["GET"]),
        Route("/ui/app.css", style, methods=["GET"]),
        Route("/favicon.ico", no_icon, methods=["GET"]),
    ]
