"""A plain web page served from package files (no build step): the gateway's console
(`server/console.py`) and the agent host's session page (agent_host/api/web_page.py).

Every answer carries the same headers: a strict Content-Security-Policy (the page's own script,
style sheet, images and API, nothing else: no inline script or style, no frames, no forms, no
plugins), `nosniff`, no referrer, no framing, no caching. Only the files named are served, never a
path, each with its type from its ending.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from importlib.resources import files
from pathlib import PurePosixPath

from starlette.responses import Response

__all__ = ["CONTENT_SECURITY_POLICY", "WebFiles", "page_headers"]

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_TYPES: Mapping[str, str] = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}


def page_headers(policy: str = CONTENT_SECURITY_POLICY) -> dict[str, str]:
    return {
        "Content-Security-Policy": policy,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
        "Cache-Control": "no-store",
    }


class WebFiles:
    """The files `names` of the folder `folder` in the package `package`, served with `page_headers`."""

    def __init__(self, package: str, folder: str, names: Iterable[str], *, policy: str = CONTENT_SECURITY_POLICY) -> None:
        self._package, self._folder = package, folder
        self._types = {name: _TYPES[PurePosixPath(name).suffix] for name in names}
        self.headers = page_headers(policy)

    def asset(self, name: str) -> Response:
        """The file `name`, or 404 for any name not listed."""
        if name not in self._types:  # only the page's own files, never a path
            return self.text("not found", 404)
        body = files(self._package).joinpath(self._folder, name).read_bytes()
        return Response(body, media_type=self._types[name], headers=self.headers)

    def text(self, message: str, status: int) -> Response:
        """A plain-text answer with the page's headers."""
        return Response(message, status_code=status, media_type="text/plain; charset=utf-8", headers=self.headers)

    def empty(self, status: int = 204) -> Response:
        return Response(status_code=status, headers=self.headers)
