"""The host's web page: one plain HTML page with its two scripts and style sheet, no build step.

Served under `/ui/`: `/ui/sessions/{id}` is the page of one session (the live transcript,
approval cards, questions, the plan, steer and cancel, and under `dex-agent serve` a message box
and the queue of messages waiting for the turn); `/ui/` lists the sessions and starts a new one. The files hold no data; the script reads
the session through the authenticated API (the approver token is typed into the page, or given
in the URL fragment `#token=...`, which never reaches the server or its logs) and renders every
value with `textContent`, never as HTML. A strict Content-Security-Policy allows nothing but the
page's own script, style sheet and API (the gateway's `http/web_page.py`, as the console's).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.http.web_page import CONTENT_SECURITY_POLICY, WebFiles

from ..domain.session_ids import session_id_problem

__all__ = ["CONTENT_SECURITY_POLICY", "page_routes"]

_FILES = WebFiles("agent_host.api", "web", ("page.html", "app.js", "stream.js", "app.css"))


def page_routes() -> list[Route]:
    async def page(request: Request) -> Response:
        session_id = request.path_params.get("session_id")  # None: /ui/, the session list
        if session_id is not None and (problem := session_id_problem(session_id)) is not None:
            return _FILES.text(problem, 400)
        return _FILES.asset("page.html")

    async def script(request: Request) -> Response:
        return _FILES.asset(request.path_params["name"] + ".js")

    async def style(request: Request) -> Response:
        return _FILES.asset("app.css")

    async def no_icon(request: Request) -> Response:
        return _FILES.empty()

    return [
        Route("/ui/sessions/{session_id}", page, methods=["GET"]),
        Route("/ui/", page, methods=["GET"]),  # the session list (the same page, no session)
        Route("/ui/{name:str}.js", script, methods=["GET"]),
        Route("/ui/app.css", style, methods=["GET"]),
        Route("/favicon.ico", no_icon, methods=["GET"]),
    ]
